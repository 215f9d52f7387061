"""System parts some tests need, and whether their absence is a skip or a failure.

A part is something outside the venv a test cannot run without: PostgreSQL's
server binaries (the store matrix's postgres leg), a working bubblewrap (the
process sandbox), the embedded local model's GGUF, the oldest supported
ipykernel's kernel spec. Every test that finds one missing calls ``missing``
(or carries the ``needs`` mark), never ``pytest.skip`` itself, so this module
alone decides:

* ``HOSTKIT_REQUIRE`` (comma-separated part names, or ``installed``) names the
  parts that must be there: a missing one fails the test, saying what is
  missing and how to install it. ``installed`` stands for every part whose
  make target installed it or found it present (``installed_parts``); ``make
  test`` sets ``HOSTKIT_REQUIRE=oldest-kernel,installed``.
  ``HOSTKIT_REQUIRE_OLDEST_KERNEL=1`` (the older switch) still means
  ``oldest-kernel``.
* Otherwise the test skips with a reason starting ``missing <part>: ``; the
  conftest folds those skips into one line a part and ends the run with a
  summary of the skipped legs (``skipped_summary``).
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

import pytest

from hostkit._extras import missing_packages
from hostkit.adapters.local_llama import local_model_available
from tests.postgres import find_bindir

__all__ = [
    "PARTS",
    "REQUIRE",
    "Part",
    "installed_parts",
    "local_model_missing",
    "missing",
    "needs",
    "part_of_skip",
    "required_parts",
    "skipped_summary",
]

REQUIRE = "HOSTKIT_REQUIRE"
# The first switch of its kind (tests/kernel); kept working as an alias of oldest-kernel.
REQUIRE_OLDEST_KERNEL = "HOSTKIT_REQUIRE_OLDEST_KERNEL"
INSTALLED = "installed"
# The mark ``needs`` puts on a test whose part is missing; tests/conftest.py acts on it.
MARK = "part_missing"
# Where `make kernel-oldest` registers it (tests/kernel/frontend.py reads it from there).
_OLDEST_KERNEL_SPEC = (
    Path(__file__).resolve().parents[1] / ".jupyter-kernels/share/jupyter/kernels/hostkit-oldest"
)


@dataclass(frozen=True)
class Part:
    """A system part: what it is and how this project installs it."""

    name: str
    what: str
    install: str


PARTS = {
    part.name: part
    for part in (
        Part(
            "postgres",
            "PostgreSQL's server binaries, for the postgres leg of the store matrix",
            "`make postgresql` as root with apt-get installs Debian's postgresql package "
            "(or put initdb and pg_ctl on PATH; as root a `postgres` user must exist)",
        ),
        Part(
            "sandbox",
            "a working bubblewrap, the process sandbox",
            "`make bubblewrap` as root with apt-get installs bubblewrap; it needs "
            "unprivileged user namespaces and util-linux's prlimit",
        ),
        Part(
            "local-model",
            "the embedded local model: the xllamacpp wheel and the SmolLM2 GGUF",
            "`pip install -e '.[local]' && hostkit model pull` (make install does both; "
            "the pull needs the network once)",
        ),
        Part(
            "oldest-kernel",
            "the kernel spec hostkit-oldest, the oldest supported ipykernel",
            "`make kernel-oldest`",
        ),
    )
}
_SKIP = re.compile(r"^(?:Skipped: )?missing ([a-z-]+): ")


def installed_parts() -> frozenset[str]:
    """The parts a make target installed or found present: what ``installed`` requires.

    Present as make's targets see it (the server binaries, the bwrap program,
    the local extra, the kernel spec), not as the tests probe it: bubblewrap
    there but unable to create namespaces, or the GGUF deleted from the cache
    after ``make install`` pulled it, is a failure under ``installed``.
    """
    found = {
        "postgres": find_bindir() is not None,
        "sandbox": shutil.which("bwrap") is not None,
        "local-model": not missing_packages("local"),
        "oldest-kernel": (_OLDEST_KERNEL_SPEC / "kernel.json").is_file(),
    }
    return frozenset(name for name, there in found.items() if there)


def local_model_missing(*, tokenizer: bool = False) -> str | None:
    """Why ``LocalModel.start()`` (``tokenizer``: the GGUF tokenizer too) cannot run offline
    here, or ``None``. Looks only (nothing imported, nothing fetched)."""
    absent = missing_packages("local")
    if absent:
        return f"the local extra is not installed (no {', '.join(absent)})"
    if tokenizer and any(importlib.util.find_spec(name) is None for name in ("gguf", "tokenizers")):
        return "the GGUF tokenizer needs gguf and tokenizers (the local extra)"
    if not local_model_available():
        return "the embedded GGUF is not in the model cache (`hostkit model pull` fetches it)"
    return None


def required_parts(environ: dict[str, str] | None = None) -> frozenset[str]:
    """The parts this run requires (``HOSTKIT_REQUIRE``); an unknown name is a usage error."""
    env = os.environ if environ is None else environ
    names = {name.strip() for name in env.get(REQUIRE, "").split(",") if name.strip()}
    if env.get(REQUIRE_OLDEST_KERNEL):
        names.add("oldest-kernel")
    unknown = names - set(PARTS) - {INSTALLED}
    if unknown:
        raise pytest.UsageError(
            f"{REQUIRE}: unknown part {sorted(unknown)[0]!r}; "
            f"known: {', '.join(PARTS)}, or {INSTALLED}"
        )
    if INSTALLED in names:
        names = (names - {INSTALLED}) | installed_parts()
    return frozenset(names)


def missing(part: str, reason: str) -> NoReturn:
    """Fail when this run requires ``part``, else skip: ``reason`` says what is missing here.

    Raised ``from None``: called while handling the error that found the part missing,
    the report is this one message, not that error's traceback as well.
    """
    about = PARTS[part]
    if part in required_parts():
        said = [
            f"{name}={os.environ[name]}"
            for name in (REQUIRE, REQUIRE_OLDEST_KERNEL)
            if os.environ.get(name)
        ]
        raise pytest.fail.Exception(
            f"{part} is required ({', '.join(said)}) but missing: "
            f"{reason}\n  Needed: {about.what}. Install: {about.install}.",
            pytrace=False,
        ) from None
    raise pytest.skip.Exception(f"missing {part}: {reason}") from None


def needs(part: str, reason: str | None) -> pytest.MarkDecorator:
    """A mark for a test that needs ``part``: ``reason`` is why it is missing, ``None`` if
    it is there. A missing part skips or fails the test in its setup (``missing``)."""
    if part not in PARTS:
        raise ValueError(f"unknown part {part!r}")
    return getattr(pytest.mark, MARK)(part, reason)


def part_of_skip(reason: str) -> str | None:
    """The part a skip reason says is missing, if it is one of ``missing``'s."""
    found = _SKIP.match(reason)
    return found.group(1) if found and found.group(1) in PARTS else None


def skipped_summary(reasons: Iterable[str]) -> list[str]:
    """One line a missing part: how many tests skipped, why, how to install it, and how to
    make its absence fail instead."""
    by_part: dict[str, list[str]] = {}
    for reason in reasons:
        part = part_of_skip(reason)
        if part is not None:
            by_part.setdefault(part, []).append(_SKIP.sub("", reason))
    lines = []
    for part, why in sorted(by_part.items()):
        about = PARTS[part]
        lines.append(
            f"{part} ({about.what}): {len(why)} tests skipped: {sorted(set(why))[0]}. "
            f"Install: {about.install}. {REQUIRE}={part} fails them instead."
        )
    return lines
