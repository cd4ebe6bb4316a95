"""gpuckpt's start-up hook for Python programs under `gpuckpt run`, which puts
this directory first on PYTHONPATH (`gpuckpt run --no-framework-hook` leaves
it out). It starts the framework hook (_gpuckpt_framework_hook.py), then
runs the sitecustomize it shadows, if there is one, as Python would have."""
import importlib
import os
import sys

_here = os.path.dirname(os.path.abspath(__file__))

try:
    import _gpuckpt_framework_hook

    _gpuckpt_framework_hook.start()
except Exception as e:  # never stop the user's program
    print(f"gpuckpt: framework hook not started: {e}", file=sys.stderr)


def _run_shadowed():
    saved = sys.path[:]
    ours = sys.modules.pop("sitecustomize", None)
    try:
        sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _here]
        importlib.import_module("sitecustomize")
    except ModuleNotFoundError as e:
        if e.name != "sitecustomize":
            raise
        if ours is not None:
            sys.modules["sitecustomize"] = ours
    finally:
        sys.path[:] = saved


_run_shadowed()
