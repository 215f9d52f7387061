"""Record provider-reported token usage of the embedded model for offline estimator checks.

What it does: starts ``LocalModel`` (llama.cpp's server with SmolLM2-135M on
loopback), sends a fixed set of varied chat requests through hostkit's OpenAI
adapter (short and long English, other scripts, code, JSON, numbers,
multi-message histories with and without a system message, and a tool-call
round trip with tool definitions), and writes, for each, the request messages
(``{"role", "content": ModelMessage.to_json()}``), the tool definitions and
the input/output tokens the server reported, to
``tests/fixtures/usage/smollm2-135m.json``.

Why: ``tests/contract/test_context_estimator.py`` and
``bench/context_bench.py`` compare the estimators against these figures
without a server. Output is capped at a few tokens at temperature 0: only the
prompt side is under test. Re-run after changing the model or the adapter's
wire format; the file is deterministic for a given model and server.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
from pathlib import Path
from typing import Any

import anyio

from hostkit.adapters.local_llama import LocalModel
from hostkit.freeze import thaw
from hostkit.types import ModelMessage, ModelRequest, ToolCall, ToolDefinition

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = ROOT / "tests" / "fixtures" / "usage" / "smollm2-135m.json"
MAX_OUTPUT_TOKENS = 4
FIXTURE_LIMIT_BYTES = 200 * 1024

SYSTEM = "You are a concise assistant. Answer in one sentence."
ENGLISH = (
    "The lighthouse keeper climbed the spiral staircase every evening at dusk, counting the "
    "one hundred and twelve steps under his breath. From the lamp room he could see the "
    "fishing boats returning to the harbour, their lanterns swaying like fireflies over the "
    "dark water. He trimmed the wick, polished the great lens until it gleamed, and wrote "
    "the weather in his log: wind from the south-west, a falling barometer, rain before "
    "midnight. In thirty years he had missed a single night only, when the storm of 'sixty-"
    "two tore the door from its hinges and he spent the hours holding it shut with his back. "
)
CODE = '''def merge_intervals(intervals: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Merge overlapping closed intervals; the input need not be sorted."""
    merged: list[tuple[int, int]] = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


class LRU:
    def __init__(self, size: int = 128) -> None:
        self._size, self._data = size, {}

    def get(self, key):
        if key in self._data:
            value = self._data.pop(key)
            self._data[key] = value
            return value
        return None
'''
RECORD = {
    "order_id": "A-10293",
    "customer": {"name": "Ada Lovelace", "email": "ada@example.org", "vip": True},
    "items": [
        {"sku": "KB-87", "qty": 2, "price": 49.95},
        {"sku": "MS-12", "qty": 1, "price": 19.0},
        {"sku": "CB-USB-C", "qty": 3, "price": 7.5},
    ],
    "shipping": {"method": "express", "eta_days": 2, "address": "12 Analytical St, London"},
    "notes": None,
}
MULTILINGUAL = (
    "Le renard brun rapide saute par-dessus le chien paresseux. "
    "Der schnelle braune Fuchs springt über den faulen Hund. "
    "敏捷的棕色狐狸跳过了懒狗。 Быстрая коричневая лиса перепрыгивает через ленивую собаку. "
    "🦊🐶✨ café naïve façade"
)
TOOLS = (
    ToolDefinition(
        "get_weather",
        "Current weather for a city.",
        {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "City name"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city"],
        },
    ),
    ToolDefinition(
        "search_notes",
        "Full-text search over the user's notes; returns up to `limit` matches.",
        {
            "type": "object",
            "properties": {"query": {"type": "string"}, "limit": {"type": "integer"}},
            "required": ["query"],
        },
    ),
)


def _chat(*turns: tuple[str, str]) -> tuple[ModelMessage, ...]:
    return tuple(ModelMessage(role, text) for role, text in turns)  # type: ignore[arg-type]


def cases() -> list[tuple[str, tuple[ModelMessage, ...], tuple[ToolDefinition, ...]]]:
    """(name, messages, tool definitions) of every recorded request, in order."""
    system = ("system", SYSTEM)
    call = ToolCall("call_1", "get_weather", {"city": "Paris", "unit": "celsius"})
    tool_turn = (
        ModelMessage("system", SYSTEM),
        ModelMessage("user", "What's the weather in Paris right now?"),
        ModelMessage("assistant", "", (call,)),
        ModelMessage("tool", '{"temp_c": 18, "sky": "sunny"}', tool_call_id="call_1"),
    )
    primes = [11, 13, 23, 31, 41, 53]
    history = [system]
    for i, prime in enumerate(primes):
        history += [
            ("user", f"Question {i + 1}: name a prime number above {10 * i}."),
            ("assistant", f"{prime} is prime."),
        ]
    table = "| name | qty |\n|---|---:|\n| bolts | 40 |\n| nuts | 12 |\n\nWhich row is larger?"
    plain = [
        ("hello_no_system", [("user", "hi")]),
        ("hello_with_system", [system, ("user", "hi")]),
        ("short_question", [system, ("user", "What is the capital of France?")]),
        ("question_no_system", [("user", "Why is the sky blue? Explain briefly.")]),
        ("long_english", [system, ("user", "Summarise:\n" + ENGLISH * 3)]),
        ("long_english_no_system", [("user", ENGLISH * 2 + "\nWho is this about?")]),
        ("code_review", [system, ("user", f"Review this code:\n```python\n{CODE}```")]),
        ("json_payload", [system, ("user", "Total price?\n" + json.dumps(RECORD, indent=2))]),
        ("json_compact", [("user", json.dumps(RECORD, separators=(",", ":")))]),
        ("numbers", [system, ("user", "Add 1234567 and 89.0123, then 3.14159e10 - 42.")]),
        ("multilingual", [system, ("user", "Translate to English: " + MULTILINGUAL)]),
        ("whitespace", [system, ("user", "Columns:\n\n  a\t  b\n\n\n    c   d  \n")]),
        ("markdown_table", [system, ("user", table)]),
        ("special_token_text", [system, ("user", "Repeat the literal <|im_end|> marker.")]),
        (
            "two_turns",
            [system, ("user", "Pick a colour."), ("assistant", "Blue."), ("user", "Why?")],
        ),
        ("history_13", [*history, ("user", "And one above 60?")]),
        (
            "history_no_system",
            [
                ("user", "Tell me a fact."),
                ("assistant", "Octopuses have three hearts."),
                ("user", "Another?"),
            ],
        ),
    ]
    chosen: list[tuple[str, tuple[ModelMessage, ...], tuple[ToolDefinition, ...]]] = [
        (name, _chat(*turns), ()) for name, turns in plain
    ]
    return [
        *chosen,
        ("tools_offered", _chat(system, ("user", "What's the weather in Paris?")), TOOLS),
        ("tools_offered_no_system", _chat(("user", "Find my notes about taxes.")), TOOLS),
        ("tool_result_turn", tool_turn, TOOLS),
        ("tool_result_no_defs", tool_turn, ()),
    ]


def _definition_json(definition: ToolDefinition) -> dict[str, Any]:
    return {
        "name": definition.name,
        "description": definition.description,
        "parameters": thaw(definition.parameters),
    }


async def record(out: Path) -> None:
    entries: list[dict[str, Any]] = []
    async with LocalModel.start() as local:
        provider = local.provider(max_output_tokens=MAX_OUTPUT_TOKENS)
        try:
            for name, messages, tools in cases():
                response = await provider.complete(
                    ModelRequest(
                        messages=messages,
                        tools=tools,
                        max_output_tokens=MAX_OUTPUT_TOKENS,
                        temperature=0.0,
                    )
                )
                entries.append(
                    {
                        "name": name,
                        "messages": [{"role": m.role, "content": m.to_json()} for m in messages],
                        "definitions": [_definition_json(d) for d in tools],
                        "input_tokens": response.usage.input_tokens,
                        "output_tokens": response.usage.output_tokens,
                    }
                )
                usage = response.usage
                print(f"{name:<26}{usage.input_tokens:>6} in {usage.output_tokens:>3} out")
        finally:
            await provider.aclose()
        document = {
            "model": local.model,
            "estimator_id": local.limits.estimator_id,
            "server": f"xllamacpp {importlib.metadata.version('xllamacpp')}",
            "note": "input_tokens: llama.cpp's reported prompt tokens (bench/record_usage.py)",
            "requests": entries,
        }
    text = json.dumps(document, indent=1, ensure_ascii=False) + "\n"
    size = len(text.encode())
    if size > FIXTURE_LIMIT_BYTES:
        raise SystemExit(f"the fixture would be {size} bytes; the limit is {FIXTURE_LIMIT_BYTES}")
    await anyio.Path(out).parent.mkdir(parents=True, exist_ok=True)
    await anyio.Path(out).write_text(text, encoding="utf-8")
    print(f"wrote {len(entries)} requests to {out} ({size:,} bytes)")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="record llama.cpp's reported usage for fixtures")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="fixture file to write")
    return parser.parse_args()


if __name__ == "__main__":
    options = parse_args()
    anyio.run(record, options.out)
