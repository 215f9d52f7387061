"""The optional extras of hostkit, the packages each installs, and the check a feature runs.

One table, so every feature that needs an optional package says the same
thing when it is missing: one line naming the package and the
``pip install "hostkit[<extra>]"`` that fixes it, raised as a
``MissingDependency`` when the feature is configured or imported, never as a
failed turn.

The check uses ``importlib.util.find_spec``: it asks the import system where a
module would be loaded from and loads nothing (the ``local`` extra's native
library alone is 100 MB). That is a metadata lookup with no hostkit state,
database, network or process behind it, so this module sits beside
``hostkit.errors`` at the bottom of the layers and every user may import it.
It is blocking file-system work all the same: the Host runs it off the event
loop.

Distributions are named as ``pyproject.toml`` names them, with the module
hostkit imports from each; a test holds the table to pyproject's extras.
``mcp-servers``, ``bench``, ``test`` and ``browser`` are for notebooks,
benchmarks and contributors: hostkit itself imports none of their packages.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from hostkit.errors import MissingDependency

__all__ = [
    "EXTRAS",
    "Package",
    "install_command",
    "missing_dependency",
    "missing_packages",
    "require_extra",
]


@dataclass(frozen=True, slots=True)
class Package:
    """One requirement of an extra: what pip installs, and the module hostkit imports from it."""

    distribution: str
    module: str


EXTRAS: Mapping[str, tuple[Package, ...]] = MappingProxyType(
    {
        # hostkit.notebook: widgets on the kernel's loop, answers rendered from Markdown.
        "notebook": (
            Package("ipykernel", "ipykernel"),
            Package("ipywidgets", "ipywidgets"),
            Package("markdown-it-py", "markdown_it"),
        ),
        # [providers.<name>] kind = "openai" / "anthropic": the vendor SDK the adapter wraps.
        "openai": (Package("openai", "openai"),),
        "anthropic": (Package("anthropic", "anthropic"),),
        # kind = "local": llama.cpp's server, the GGUF tokenizer's reader and BPE, and the
        # OpenAI adapter the server is reached through.
        "local": (
            Package("xllamacpp", "xllamacpp"),
            Package("gguf", "gguf"),
            Package("tokenizers", "tokenizers"),
            Package("openai", "openai"),
        ),
        # [store] url = "postgresql://...": psycopg's async connections and their pool.
        "postgres": (
            Package("psycopg", "psycopg"),
            Package("psycopg-pool", "psycopg_pool"),
        ),
        # [host.telemetry] traces = "console" | "otlp".
        "otel": (
            Package("opentelemetry-api", "opentelemetry.trace"),
            Package("opentelemetry-sdk", "opentelemetry.sdk"),
            Package(
                "opentelemetry-exporter-otlp-proto-http", "opentelemetry.exporter.otlp.proto.http"
            ),
        ),
    }
)


def install_command(extra: str) -> str:
    """The command that installs ``extra`` (quoted: the brackets are a glob in most shells)."""
    return f'pip install "hostkit[{extra}]"'


def missing_packages(extra: str) -> tuple[str, ...]:
    """The distributions of ``extra`` whose module cannot be found, in the table's order."""
    return tuple(
        package.distribution for package in EXTRAS[extra] if not _importable(package.module)
    )


def require_extra(extra: str, *, feature: str, key: str | None = None) -> None:
    """Raise ``MissingDependency`` if a package of ``extra`` is not installed.

    ``feature`` says in words what needs it (``provider 'assistant' (kind
    local)``); ``key`` is the configuration key that asked for it, if any.
    Imports nothing (``find_spec`` only); blocking file-system lookups, so an
    async caller runs it in a worker thread.
    """
    missing = missing_packages(extra)
    if missing:
        raise MissingDependency(feature, extra=extra, packages=missing, key=key)


def missing_dependency(
    extra: str, error: ImportError, *, feature: str, key: str | None = None
) -> MissingDependency:
    """The ``MissingDependency`` for an import of ``extra``'s feature that failed anyway.

    ``require_extra`` finds a package that is absent; an installed package can
    still fail to import (one of its own dependencies removed). The module
    that failed names the package: one of the extra's own when it is inside
    one, else the module's top-level name (reinstalling the extra brings it).
    """
    name = error.name or ""
    package = next(
        (
            p.distribution
            for p in EXTRAS[extra]
            if name == p.module
            or name.startswith(f"{p.module}.")
            or p.module.startswith(f"{name}.")
        ),
        name.partition(".")[0] or EXTRAS[extra][0].distribution,
    )
    return MissingDependency(feature, extra=extra, packages=(package,), key=key)


def _importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ImportError:
        # A parent package is missing (or blocked with ``sys.modules[name] = None``).
        return False
    except ValueError:
        # Already imported without a ``__spec__`` (a module set up by hand): it is there.
        return True
