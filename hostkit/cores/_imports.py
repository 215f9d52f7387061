"""Import a module's parent packages from given roots, never from ``sys.path``.

A core's revision is materialized under a package name unique to it
(``hkcore_<id>_<sha12>``); its slots and authored tools are imported from
that directory without adding it to ``sys.path``, so two revisions'
same-named modules never meet and nothing else on the path can shadow them.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import sys
import threading
from collections import Counter
from collections.abc import Sequence

__all__ = ["hold_package", "import_parents", "release_package"]


def import_parents(module_name: str, search: Sequence[str]) -> None:
    """Worker thread: import ``module_name``'s parent packages, the top one from
    ``search`` (not ``sys.path``), each further one from its parent's ``__path__``."""
    parts = module_name.split(".")[:-1]
    for depth in range(1, len(parts) + 1):
        name = ".".join(parts[:depth])
        if name in sys.modules:
            continue
        where = list(search) if depth == 1 else sys.modules[".".join(parts[: depth - 1])].__path__
        spec = importlib.machinery.PathFinder.find_spec(name, where)
        if spec is None or spec.loader is None:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        package = importlib.util.module_from_spec(spec)
        sys.modules[name] = package
        try:
            spec.loader.exec_module(package)
        except BaseException:
            sys.modules.pop(name, None)
            raise
        if depth > 1:
            setattr(sys.modules[".".join(parts[: depth - 1])], parts[depth - 1], package)


# Open generations, of every Host in this process, running each revision's package.
# sys.modules is process-wide: a package leaves it only when the last of them closes.
_holders: Counter[str] = Counter()
_HOLDERS_LOCK = threading.Lock()


def hold_package(package: str) -> None:
    """A generation runs ``package``: it stays imported until ``release_package``."""
    with _HOLDERS_LOCK:
        _holders[package] += 1


def release_package(package: str) -> bool:
    """A generation running ``package`` closed; True when it was the last one.

    The last one drops the package and its submodules from ``sys.modules``.
    Each revision is imported under its own name, so without this a Host that
    is promoted and reloaded for weeks keeps every revision's modules, and all
    their globals, for good. Whoever still holds one of the modules keeps it;
    it is freed once nobody does. A revision loaded again is imported afresh.
    """
    with _HOLDERS_LOCK:
        if _holders[package] > 1:
            _holders[package] -= 1
            return False
        _holders.pop(package, None)
        prefix = f"{package}."
        for name in [n for n in list(sys.modules) if n == package or n.startswith(prefix)]:
            sys.modules.pop(name, None)
        return True
