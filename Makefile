# Two commands do all the set-up:  `make demo` (the A/B on the real class) and `make test`.
# Both build a project-local .venv: a pinned sglang release from PyPI installed --no-deps, the
# pinned CPU import closure of its DSV4 workspace module, and this project installed for real.

PYTHON ?= python3
SGLANG_VERSION ?= 0.5.23
VENV := .venv
BIN := $(VENV)/bin
PY := $(BIN)/python
PIP := $(PY) -m pip --disable-pip-version-check -q
SITE_READY := $(VENV)/.ready-sglang-$(SGLANG_VERSION)
OVERLAY_SOURCES := $(shell find sglang_overlay sglang_overlay_startup -type f -not -name '*.pyc') pyproject.toml

.PHONY: venv install demo test lint compat bench clean

$(SITE_READY): requirements/cpu-closure.txt requirements/dev.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install --no-deps -r requirements/cpu-closure.txt
	$(PIP) install -c requirements/cpu-closure.txt -r requirements/dev.txt
	$(PIP) install --no-deps sglang==$(SGLANG_VERSION)
	rm -f $(VENV)/.ready-sglang-* $(VENV)/.installed
	touch $@

venv: $(SITE_READY)

# A real (non-editable) install: the .pth start-up hook must sit in site-packages.
$(VENV)/.installed: $(SITE_READY) $(OVERLAY_SOURCES)
	$(PIP) install --no-deps --no-build-isolation --force-reinstall .
	touch $@

install: $(VENV)/.installed

# The A/B on the real class: every registered case in a fresh capped process, unmodified
# (SGLANG_OVERLAY_DISABLE=1) and with the change, then the evidence as the bot would post it.
demo: install
	$(PY) -m ci run --out out/demo --backend $$($(PY) -c "import torch; print('cuda' if torch.cuda.is_available() else 'cpu')")
	$(PY) -m ci report --results out/demo

lint: install
	$(BIN)/pre-commit run --all-files --show-diff-on-failure

test: install lint
	$(PY) -m pytest -q

compat: install
	$(PY) -m tools.compat

bench: install
	$(PY) -m benchmark

clean:
	rm -rf $(VENV)
