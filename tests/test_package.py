"""Each package exports exactly its interface; helpers stay private."""

from __future__ import annotations

import importlib
import pkgutil

import pytest

import hostkit

SEAMS = [
    "hostkit.types",
    "hostkit.store",
    "hostkit.authority",
    "hostkit.providers",
    "hostkit.context",
    "hostkit.effects",
    "hostkit.turns",
    "hostkit.host",
    "hostkit.inspect",
    "hostkit.testing",
    "hostkit.cli",
]
PACKAGES = ["hostkit", *SEAMS]


@pytest.mark.parametrize("name", PACKAGES)
def test_package_all_names_exist_and_are_public(name: str) -> None:
    module = importlib.import_module(name)
    exported = module.__all__
    assert len(exported) == len(set(exported)), "duplicate names in __all__"
    for attr in exported:
        assert hasattr(module, attr), f"{name}.__all__ names missing {attr}"
        assert not attr.startswith("_") or attr == "__version__", f"{name} exports private {attr}"


@pytest.mark.parametrize("name", PACKAGES)
def test_package_public_namespace_is_its_all(name: str) -> None:
    module = importlib.import_module(name)
    public = {
        attr
        for attr, value in vars(module).items()
        if not attr.startswith("_") and not isinstance(value, type(importlib))
    }
    assert public <= set(module.__all__), f"{name} leaks {sorted(public - set(module.__all__))}"


def test_helper_modules_are_private() -> None:
    for package in SEAMS:
        module = importlib.import_module(package)
        for info in pkgutil.iter_modules(module.__path__):
            assert info.name.startswith("_"), f"{package}.{info.name} should be a private module"


def test_version_is_exposed() -> None:
    assert hostkit.__version__.count(".") == 2
