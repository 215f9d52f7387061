"""``hostkit demo``: a real multi-step turn, then a real local model, on embedded SQLite."""

from __future__ import annotations

import os
from pathlib import Path

from rich.console import Console

from hostkit.cli._render import print_result
from hostkit.cli._turn import stream_turn
from hostkit.host import Host, parse_config

__all__ = ["run_demo"]

DEMO_QUESTION = "What does hostkit record for every turn? Check the welcome note."
LOCAL_QUESTION = "In one short sentence: what is a database?"


def demo_config(directory: Path, *, environ: dict[str, str]) -> dict[str, object]:
    """Two agents: a scripted one with the example note tools, and a real model.

    The real model is the embedded llama.cpp SmolLM2 (no network), or the
    OpenAI-compatible server named by ``OPENAI_BASE_URL`` when it is set.
    """
    if environ.get("OPENAI_BASE_URL"):
        real = {
            "kind": "openai",
            "base_url": environ["OPENAI_BASE_URL"],
            "model": environ.get("OPENAI_MODEL", "gpt-4o-mini"),
            "api_key_env": "OPENAI_API_KEY",
        }
    else:
        real = {"kind": "local", "context_window": 2048, "max_output_tokens": 96}
    return {
        "host": {"database": str(directory / "hostkit.db"), "workspace": str(directory)},
        "providers": {
            "scripted": {
                "kind": "scripted",
                "script": [
                    {"tool": "notes.list"},
                    {"tool": "notes.read", "arguments": {"name": "welcome.md"}},
                    {
                        "reply": "Every turn is admitted, pinned to one configuration "
                        "generation, recorded in SQLite, and ends with exactly one terminal "
                        "record: completed, needs_user, failed, cancelled, lost or indeterminate."
                    },
                ],
            },
            "real": real,
        },
        "agents": {
            "notes": {
                "provider": "scripted",
                "tool_modules": ["hostkit.examples.tools"],
                "policy": {"allow": ["notes.*"]},
            },
            "assistant": {
                "provider": "real",
                "memory": False,
                "instructions": "You are a concise assistant. Answer in one sentence.",
            },
        },
    }


async def run_demo(directory: Path, console: Console) -> int:
    config = parse_config(demo_config(directory, environ=dict(os.environ)), base_dir=directory)
    async with Host.open(config) as host:
        database = str(config.database_path)
        console.rule("1. a scripted agent reads a shipped note with an authored tool")
        console.print(f"[bold]you[/]: {DEMO_QUESTION}", highlight=False)
        first = await stream_turn(host, DEMO_QUESTION, agent="notes", conversation="demo-notes")
        print_result(console, first, database=database)
        real = config.providers["real"]
        label = (
            f"OpenAI-compatible server at {real.base_url}"
            if real.kind == "openai"
            else ("the embedded local model (llama.cpp, SmolLM2-135M, no network)")
        )
        console.rule(f"2. a real model: {label}")
        console.print(f"[bold]you[/]: {LOCAL_QUESTION}", highlight=False)
        second = await stream_turn(
            host, LOCAL_QUESTION, agent="assistant", conversation="demo-real"
        )
        print_result(console, second, database=database)
    ok = first.outcome == "completed" and second.outcome == "completed"
    return 0 if ok else 1
