"""Property: a bound secret never appears in any view, raw or escaped, whatever the tool does.

A tool that echoes the secret (alone, repeated, embedded, at the model view's
cut, inside a structure or JSON text, in an exception message long enough to
be cut, in a repr, in a refusal, with other line endings, flattened, in a
``SystemExit``) is run through the real pipeline with the secret bound after
approval; all five views are searched for the raw, JSON- and repr-escaped value.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hostkit.authority import AuthorityResolver
from hostkit.effects import (
    MAX_MODEL_VIEW_CHARS,
    MIN_SECRET_CHARS,
    ApprovalRequest,
    ApprovalRuntime,
    AuthoredTool,
    EffectPolicy,
    EffectRuntime,
    ToolContext,
    ToolOutcome,
    Toolset,
    secret_grant,
)
from hostkit.errors import PolicyRefusal
from hostkit.store import RuntimeStore
from hostkit.types import EffectRequest, EffectResult, TurnExecutionContext
from tests.contract.test_context_basic import context_for
from tests.support import facts

# The Host's own words in the views (keys, statuses, the effect's name) are not tool
# text: a "secret" spelled like one of them is found there without any leak.
HOST_WORDS = [
    *("effect", "status", "started", "summary", "output_chars", "truncated", "error"),
    *("leak.echo", "succeeded", "failed", "denied"),
]
SECRETS = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"),
    min_size=MIN_SECRET_CHARS,
    max_size=40,
).filter(lambda s: s.strip() == s and len(set(s)) > 2 and not any(s in word for word in HOST_WORDS))
SHAPES = st.sampled_from(
    [
        "alone",
        "repeated",
        "embedded",
        "at_cut",
        "json",
        "raise",
        "error",
        "json_text",
        "raise_repr",
        "raise_long",
        "refusal_long",
        "crlf",
        "flattened",
        "base_exception",
    ]
)


class Always:
    async def decide(self, request: ApprovalRequest) -> str:
        return "approve_once"


def leaking_tool(shape: str, padding: str) -> AuthoredTool:
    async def leak(ctx: ToolContext, secrets: list[str]) -> Any:
        value = ctx.secrets["HK_SECRET"]
        if shape == "alone":
            return value
        if shape == "repeated":
            return (value + padding) * 5
        if shape == "embedded":
            return f"{padding}token={value};{padding}"
        if shape == "at_cut":
            return "x" * (MAX_MODEL_VIEW_CHARS - len(value) // 2) + value + "tail"
        if shape == "json":
            return {"nested": [{"v": value}], value: padding}
        if shape == "raise":
            raise RuntimeError(f"failed with {value}")
        if shape == "json_text":
            return json.dumps({"v": [value], "w": padding})
        if shape == "raise_repr":
            raise ValueError(f"{padding} bad value {value!r}")
        if shape == "raise_long":
            raise RuntimeError("x" * 280 + value + padding)
        if shape == "refusal_long":
            raise PolicyRefusal("r" * 490 + value)
        if shape == "crlf":
            return value.replace("\r\n", "\n").replace("\n", "\r\n")
        if shape == "flattened":
            return value.replace("\r", " ").replace("\n", " ")
        if shape == "base_exception":
            raise SystemExit(value)

        return ToolOutcome("failed", {"out": value}, f"exit: {value}")

    return AuthoredTool("leak.echo", leak, description="Leaks.", secrets_argument="secrets")


def all_text(result: EffectResult) -> str:
    views = result.views
    parts: list[str] = [views.model, result.error or ""]
    for audience in (views.operator, views.event, views.durable, views.debug):
        parts.append(repr(audience))
        parts.extend(_strings(audience))
    return "\n".join(parts)


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if hasattr(value, "items"):
        return [s for k, v in value.items() for s in (str(k), *_strings(v))]
    if isinstance(value, list | tuple):
        return [s for item in value for s in _strings(item)]
    return []


async def scenario(root: Path, secret: str, shape: str, padding: str) -> EffectResult:
    async with (
        await RuntimeStore.open(root / "secrets.db") as store,
        AuthorityResolver.bind(store) as authority,
    ):
        scope = await authority.for_conversation(facts("secrets"))
        base = context_for(scope)
        context = TurnExecutionContext(
            **{
                name: getattr(base, name)
                for name in base.__dataclass_fields__
                if name != "capability_snapshot"
            },
            capability_snapshot={
                "effects": ("leak.echo",),
                "secrets": (secret_grant("HK_SECRET"),),
            },
        )
        leak = leaking_tool(shape, padding)

        class Tools:
            async def toolset(self, context: TurnExecutionContext) -> Toolset:
                return Toolset(((leak, "test"),), EffectPolicy(), root)

        runtime = EffectRuntime(
            toolsets=Tools(),
            approvals=ApprovalRuntime(provider=Always()),  # type: ignore[arg-type]
            environ={"HK_SECRET": secret},
        )
        catalog = await runtime.prepare_catalog(context)
        ref = catalog.resolve("leak_echo")
        assert ref is not None
        return await runtime.execute(EffectRequest("c1", ref, {"secrets": ["HK_SECRET"]}), context)


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(secret=SECRETS, shape=SHAPES, padding=st.text(max_size=20))
def test_no_view_ever_contains_a_bound_secret(
    tmp_path: Path, secret: str, shape: str, padding: str
) -> None:
    result = anyio.run(scenario, tmp_path, secret, shape, padding)
    assert result.started
    text = all_text(result)
    for form in escaped_forms(secret):
        assert form not in text
    assert result.status in ("succeeded", "failed", "denied")


def escaped_forms(secret: str) -> set[str]:
    """The value raw, JSON-escaped and repr-escaped (the forms views and rows hold)."""
    return {
        secret,
        json.dumps(secret)[1:-1],
        json.dumps(secret, ensure_ascii=False)[1:-1],
        repr(secret)[1:-1],
    }
