"""Package attributes loaded on first use (PEP 562), so a heavy stack only some commands
use (uvicorn, Starlette, httpx, dulwich) is imported only by a process that uses it: a
command line that runs a turn starts without the serving and fetching code it never
calls."""

import importlib
import sys
from collections.abc import Callable, Mapping

__all__ = ["attributes"]


def attributes(
    package: str, names: Mapping[str, str]
) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """A module ``__getattr__`` for ``package`` giving each of ``names`` from its module,
    and its ``__dir__``, which lists them before they load (``dir()``, ``help()`` and a
    notebook's tab completion see the whole package). A name is looked up in its module
    at every use, not kept on the package: the module's is the one binding."""

    def __getattr__(name: str) -> object:
        module = names.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(module), name)

    def __dir__() -> list[str]:
        return sorted({*vars(sys.modules[package]), *names})

    return __getattr__, __dir__
