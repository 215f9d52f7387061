"""Package attributes loaded on first use (PEP 562), so a heavy stack only some commands
use (uvicorn, Starlette, httpx, dulwich) is imported only by a process that uses it: a
command line that runs a turn starts without the serving and fetching code it never
calls."""

import importlib
from collections.abc import Callable, Mapping

__all__ = ["attributes"]


def attributes(package: str, names: Mapping[str, str]) -> Callable[[str], object]:
    """A module ``__getattr__`` for ``package`` giving each of ``names`` from its module."""

    def __getattr__(name: str) -> object:
        module = names.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(module), name)

    return __getattr__
