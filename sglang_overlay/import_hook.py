"""Start-up trigger, imported by ``sglang_overlay.pth`` in every interpreter.

It costs one string comparison per import until the first ``import sglang``; only then does it
load wrapt and register the post-import hook that patches the workspace module. A process that
never imports sglang never imports wrapt, torch or sglang because of us (wrapt alone costs
15-60 ms to import, far over the start-up budget).
"""

import sys


class _SglangImportTrigger:
    """A meta-path finder that never finds anything: it only notices ``import sglang``."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname != "sglang":
            return None
        _uninstall()
        try:
            from sglang_overlay import activation

            activation.activate()
        except Exception as exc:  # never break the user's import of sglang
            from sglang_overlay import config

            if config.strict():
                raise
            import warnings

            warnings.warn(f"sglang-overlay: activation failed: {exc!r}", stacklevel=2)
        return None


_TRIGGER = _SglangImportTrigger()


def _uninstall():
    try:
        sys.meta_path.remove(_TRIGGER)
    except ValueError:
        pass


def install():
    if "sglang" in sys.modules:
        from sglang_overlay import activation

        activation.activate()
    elif _TRIGGER not in sys.meta_path:
        sys.meta_path.insert(0, _TRIGGER)


install()
