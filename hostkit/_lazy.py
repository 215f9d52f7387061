"""Package attributes loaded on first use (PEP 562), so a heavy stack only some commands
use (uvicorn, Starlette, httpx, dulwich) is imported only by a process that uses it: a
command line that runs a turn starts without the serving and fetching code it never
calls. ``load_off_loop`` imports such a stack where async code first needs it, on a
worker thread: a first import reads and runs files for tens to hundreds of milliseconds,
which on the event loop (a notebook kernel's, ``hostkit serve``'s) stalls every session."""

import importlib
import sys
from collections.abc import Callable, Mapping

import anyio.to_thread

__all__ = ["attributes", "load_off_loop"]


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


async def load_off_loop(*modules: str) -> None:
    """Import ``modules`` on a worker thread, in order; once they are loaded, at no cost
    (no thread): callers then import them on the loop from ``sys.modules``. An
    ``ImportError`` propagates as the import's own."""
    if not all(_loaded(module) for module in modules):
        await anyio.to_thread.run_sync(_import_all, modules)


def _loaded(module: str) -> bool:
    """Whether ``module`` finished loading: one is in ``sys.modules`` from the start of its
    import, and importing it then (on the loop) would wait for another thread's import."""
    found = sys.modules.get(module)
    return found is not None and not getattr(
        getattr(found, "__spec__", None), "_initializing", False
    )


def _import_all(modules: tuple[str, ...]) -> None:
    for module in modules:
        importlib.import_module(module)
