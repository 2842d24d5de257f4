# Two commands do all the set-up:  `make demo` (the A/B on the real class) and `make test`.
# Both build a project-local .venv: torch resolved by pip with its own dependencies (the build
# for this machine), the pinned import closure of sglang's DSV4 workspace module --no-deps, a
# pinned sglang release from PyPI --no-deps, and this project installed for real.
# `make USE_SYSTEM_TORCH=1 demo` reuses the torch of $(PYTHON) (a GPU machine's CUDA build)
# through a venv with --system-site-packages instead of installing one.

PYTHON ?= python3
SGLANG_VERSION ?= 0.5.23
USE_SYSTEM_TORCH ?= 0
VENV := .venv
BIN := $(VENV)/bin
PY := $(BIN)/python
PIP := $(PY) -m pip --disable-pip-version-check -q
TORCH_FROM := $(if $(filter 1,$(USE_SYSTEM_TORCH)),system,pip)
SYSTEM_SITE := $(if $(filter system,$(TORCH_FROM)),true,false)
SITE_READY := $(VENV)/.ready-sglang-$(SGLANG_VERSION)-torch-$(TORCH_FROM)
OVERLAY_SOURCES := $(shell find sglang_overlay -type f -not -name '*.pyc') pyproject.toml
# GitHub's own REST description, from the npm registry: the bot's requests are checked against it.
OCTOKIT_OPENAPI_VERSION := 23.0.2
OCTOKIT_OPENAPI := .cache/octokit-openapi-$(OCTOKIT_OPENAPI_VERSION)/api.github.com.deref.json

.PHONY: venv install demo test lint compat bench dist clean

$(SITE_READY): requirements/torch.txt requirements/cpu-closure.txt requirements/dev.txt
	@# A venv made the other way (with or without the system's site-packages) is made anew.
	@grep -qs '^include-system-site-packages = $(SYSTEM_SITE)$$' $(VENV)/pyvenv.cfg || rm -rf $(VENV)
	@test -x $(PY) || $(PYTHON) -m venv $(if $(filter true,$(SYSTEM_SITE)),--system-site-packages) $(VENV)
	@echo "set-up 1/2: test tools"
	@$(PIP) install -c requirements/cpu-closure.txt -c requirements/torch.txt -r requirements/dev.txt
	@# torch's step and the --no-deps step share no package (tests/test_install_plan.py), so they
	@# run at once: one mostly unpacks torch's libraries, the other mostly byte-compiles. Both
	@# come after the test tools, whose resolving install would list sglang's unmet pins.
ifeq ($(TORCH_FROM),system)
	@$(PY) -c 'import torch' || { echo 'USE_SYSTEM_TORCH=1: $(PYTHON) cannot import torch' >&2; exit 2; }
	@echo "set-up 2/2: the import closure of sglang's DSV4 module and its test utilities; sglang $(SGLANG_VERSION)"
	@$(PIP) install --no-deps -r requirements/cpu-closure.txt sglang==$(SGLANG_VERSION)
else
	@echo "set-up 2/2, at once: torch and torchvision with their dependencies (the longest step: minutes); the import closure of sglang's DSV4 module and its test utilities; sglang $(SGLANG_VERSION)"
	@$(PIP) install -c requirements/cpu-closure.txt -r requirements/torch.txt & torch=$$!; \
	$(PIP) install --no-deps -r requirements/cpu-closure.txt sglang==$(SGLANG_VERSION); rest=$$?; \
	wait $$torch && exit $$rest
endif
	@rm -f $(VENV)/.ready-sglang-* $(VENV)/.installed
	@touch $@

venv: $(SITE_READY)

# A real (non-editable) install: the .pth start-up hook must sit in site-packages.
$(VENV)/.installed: $(SITE_READY) $(OVERLAY_SOURCES)
	@echo "install: this project into $(VENV) (non-editable: the .pth start-up hook sits in site-packages)"
	@$(PIP) install --no-deps --no-build-isolation --force-reinstall .
	@touch $@

install: $(VENV)/.installed

# The A/B on the real class, unmodified (SGLANG_OVERLAY_DISABLE=1) and with the change, as
# sglang's CI runs each file: the registered tests for this machine's backend (CUDA on a GPU, the
# CPU companions without one); what the bot would post; each fix's own tests on the series' base
# and on the base + that fix alone, with its PR description (tools/series/ab.py: demo); the verdict.
demo: install
	@$(PY) -m tools.series.ab out/demo

lint: install
	$(BIN)/pre-commit run --all-files --show-diff-on-failure

# Without npm the description is not fetched and that one test skips with its reason.
$(OCTOKIT_OPENAPI):
	@command -v npm >/dev/null || { echo "npm not found: the GitHub REST description check will skip"; exit 0; }; \
	mkdir -p $(@D) && cd $(@D) && npm pack -q @octokit/openapi@$(OCTOKIT_OPENAPI_VERSION) >/dev/null && \
	tar xzf octokit-openapi-$(OCTOKIT_OPENAPI_VERSION).tgz --strip-components=2 package/generated/$(@F) && \
	rm octokit-openapi-$(OCTOKIT_OPENAPI_VERSION).tgz

# Two pytest-xdist workers, a module (or a group of modules sharing a process, tests/conftest.py)
# each: measured on a 2-core VM, 263 s against 296-352 s in one process. PYTEST_WORKERS=0: one.
PYTEST_WORKERS ?= 2
test: install lint $(OCTOKIT_OPENAPI)
	OCTOKIT_OPENAPI=$(CURDIR)/$(OCTOKIT_OPENAPI) $(PY) -m pytest -q -n $(PYTEST_WORKERS) --dist loadfile

compat: install
	@$(PY) -m tools.releases watch --versions 0.5.21 0.5.22 0.5.23 --out out/compat

bench: install
	@$(PY) -m tools.benchmark

# The release files as the release workflow builds them (the wheel from the sdist), checked,
# from a small venv of their own (build, twine, hatchling at dev.txt's pins), not the torch one.
DIST_VENV := .venv-dist
$(DIST_VENV)/.ready: requirements/dev.txt
	@echo "dist: a venv of its own with build, twine and hatchling (.venv-dist)"
	@test -x $(DIST_VENV)/bin/python || $(PYTHON) -m venv $(DIST_VENV)
	@$(DIST_VENV)/bin/python -m pip --disable-pip-version-check -q install -c requirements/dev.txt build twine hatchling
	@touch $@

dist: $(DIST_VENV)/.ready
	@rm -rf dist
	@echo "dist: the sdist, and the wheel built from it, in dist/"
	@$(DIST_VENV)/bin/python -m build --no-isolation --outdir dist . > $(DIST_VENV)/build.log 2>&1 \
	  || { tail -n 20 $(DIST_VENV)/build.log; exit 1; }
	@$(DIST_VENV)/bin/python -m twine check --strict dist/*

clean:
	rm -rf $(VENV) $(DIST_VENV)
