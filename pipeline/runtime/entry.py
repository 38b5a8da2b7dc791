"""Finding a pipeline's entry function from its dotted path (``--main``), for the workers, the Ray launcher and
``rlpipe describe``."""
from __future__ import annotations

import importlib
from typing import Callable

__all__ = ["load_main"]


def load_main(path: str) -> Callable[[], object]:
    """``"pkg.module.func"`` -> the function; ``"pkg.module"`` -> its ``main``."""
    module_name, _, attr = path.rpartition(".")
    errors = []
    if module_name:
        try:
            fn = getattr(importlib.import_module(module_name), attr)
            if callable(fn):
                return fn
            errors.append(f"{module_name}.{attr} is not callable")
        except ModuleNotFoundError as e:
            if e.name and not module_name.startswith(e.name) and not (e.name or "").startswith(module_name):
                raise  # the module exists but imports something missing: show that error
            errors.append(str(e))
        except AttributeError:
            errors.append(f"module {module_name} has no attribute {attr!r}")
    try:
        mod = importlib.import_module(path)
    except ModuleNotFoundError as e:
        if e.name and not path.startswith(e.name):
            raise
        errors.append(str(e))
    else:
        fn = getattr(mod, "main", None)
        if callable(fn):
            return fn
        errors.append(f"module {path} has no main()")
    raise SystemExit(f"--main {path!r}: cannot find the function to run ({'; '.join(errors)}); give "
                     "'package.module.function' importable from --package")
