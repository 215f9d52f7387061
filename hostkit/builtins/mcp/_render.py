"""What the Host takes from a server's answers: bounded tool specs, checked results, text.

Output schemas are applied by the Host, never by the SDK. The ``mcp`` SDK
validates each successful result's ``structuredContent`` against the tool's
``outputSchema`` with jsonschema and Python's ``re``, synchronously on the
event loop inside ``call_tool``: ``"pattern": "^(a+)+$"`` (or an ``anyOf`` of
``$ref`` chains) and a result of ``"aaa…!"`` stall every session past any
deadline, and its ``RuntimeError`` would mark the connection stale. Schema
and result both come from the server, so ``without_sdk_validation`` switches
that check off per session, and ``check_outputs`` gives each declared schema
the checks input schemas get (``hostkit.effects.schema_problem``: an object
schema, same-document references, bounded expansion, patterns the
linear-time engine compiles). A result is validated with the effects seam's
bounded validator (``SchemaTool``, Rust regex) on a worker thread; a tool
whose schema fails the checks is listed with the reason
(``McpToolSpec.refusal``), left out of the catalog, and never called
(``OutputSchema.refusal``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from mcp.client.session import ClientSession
from mcp_types import (
    AudioContent,
    CallToolResult,
    EmbeddedResource,
    ImageContent,
    ResourceLink,
    TextContent,
    TextResourceContents,
    Tool,
)

from hostkit.builtins.mcp._errors import (
    MAX_OUTPUT_CHARS,
    MAX_SCHEMA_BYTES,
    MAX_TOOL_DESCRIPTION_CHARS,
    MAX_TOOL_NAME_CHARS,
    McpConnectFailed,
)
from hostkit.effects import McpToolSpec, SchemaTool, schema_problem, schema_refusal
from hostkit.errors import InvalidValue, bounded
from hostkit.freeze import freeze
from hostkit.types import is_encodable

__all__ = [
    "OutputSchema",
    "check_outputs",
    "refused_spec",
    "render_result",
    "tool_problem",
    "tool_spec",
    "without_sdk_validation",
]

_ELLIPSIS = "…"
# The name the bounded validator (an effect class) carries; it never runs as an effect.
_CHECKER = "mcp.output_schema"
_CHECKER_PREFIX = f"invalid arguments for {_CHECKER}: "
# A refused tool's stand-in input schema: its own is never shown or used.
_ANY_OBJECT = freeze({"type": "object"})


def tool_spec(tool: Tool) -> McpToolSpec:
    """The listed tool as a frozen spec; one the Host cannot use carries the reason.

    The description is cut to ``MAX_TOOL_DESCRIPTION_CHARS``. A name, input or
    output schema failing ``tool_problem`` makes a refused spec (the catalog
    leaves it out, naming the reason) instead of failing the server's listing:
    the listing filter (``_listing``) already took such entries out, so this
    only holds the line should one reach here.
    """
    problem = tool_problem(tool.name, tool.input_schema, tool.output_schema)
    if problem is not None:
        return refused_spec(tool.name, problem)
    description = _cut(tool.description or "", MAX_TOOL_DESCRIPTION_CHARS)
    return McpToolSpec(
        name=tool.name, description=description, input_schema=freeze(tool.input_schema)
    )


def refused_spec(name: str, refusal: str) -> McpToolSpec:
    """A listed tool the Host will not offer or call, named (cut, not masked) with why."""
    return McpToolSpec(
        name=_cut(name, MAX_TOOL_NAME_CHARS),
        description="",
        input_schema=_ANY_OBJECT,
        refusal=refusal,
    )


def tool_problem(name: str, input_schema: Any, output_schema: Any) -> str | None:
    """Why the Host will not use a listed tool, judged on its own, or None.

    A name of at most ``MAX_TOOL_NAME_CHARS``; an input schema that is a JSON
    object schema (``"type": "object"``) of at most ``MAX_SCHEMA_BYTES``, all of
    it valid text (no lone surrogate); an output schema, when there is one,
    with an object root (as ``schema_problem`` takes it; its other checks run
    on a worker thread, ``check_outputs``).
    Cheap: it runs on the event loop, once per listed tool.
    """
    if len(name) > MAX_TOOL_NAME_CHARS:
        return f"its name is over {MAX_TOOL_NAME_CHARS} characters"
    if not isinstance(input_schema, dict) or input_schema.get("type") != "object":
        return "its input schema is not a JSON object schema"
    if len(json.dumps(input_schema, default=str)) > MAX_SCHEMA_BYTES:
        return f"its input schema is over {MAX_SCHEMA_BYTES // 1024} KiB"
    if not is_encodable(json.dumps(input_schema, default=str, ensure_ascii=False)):
        # Sent with every request of the turn: a lone surrogate would fail each one.
        return "its input schema holds text that is not valid (a lone surrogate)"
    if output_schema is not None and (
        not isinstance(output_schema, dict) or output_schema.get("type", "object") != "object"
    ):
        return "its output schema is not a JSON object schema"
    return None


def render_result(result: CallToolResult) -> tuple[Any, str]:
    """``(output, text)``: the structured content when there is one, else the joined text.

    Text parts are joined with newlines; images, audio and resources become
    short stand-ins (their bytes never reach the model). ``text`` is the
    joined text alone, for an error's reason.
    """
    text = _cut("\n".join(_part(block) for block in result.content), MAX_OUTPUT_CHARS)
    if result.structured_content is not None:
        return freeze(result.structured_content), text
    return text, text


def _part(block: object) -> str:
    if isinstance(block, TextContent):
        return block.text
    if isinstance(block, ImageContent | AudioContent):
        kind = "image" if isinstance(block, ImageContent) else "audio"
        size = len(block.data) * 3 // 4
        return f"[{kind} {bounded(block.mime_type, 60)}, about {size} bytes]"
    if isinstance(block, ResourceLink):
        return f"[resource link {bounded(str(block.uri), 200)}]"
    if isinstance(block, EmbeddedResource):
        resource = block.resource
        if isinstance(resource, TextResourceContents):
            return f"[resource {bounded(str(resource.uri), 200)}]\n{resource.text}"
        return f"[binary resource {bounded(str(resource.uri), 200)}]"
    return "[content the Host does not render]"


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + _ELLIPSIS


@dataclass(frozen=True, slots=True)
class OutputSchema:
    """One tool's declared output schema as the Host applies it.

    ``checker`` validates results; ``refusal`` (when the schema failed the
    Host's checks; ``checker`` is then None) says why no call is sent.
    """

    checker: SchemaTool | None = None
    refusal: str | None = None

    def mismatch(self, result: CallToolResult) -> str | None:
        """Why ``result`` does not fit the schema, or None (blocking: a worker thread).

        The reason names where and which rule, never the value.
        """
        if self.checker is None:
            return self.refusal
        if result.structured_content is None and "structured_content" not in (
            result.model_fields_set
        ):
            return "the tool declares an output schema but returned no structured content"
        try:
            self.checker.validate(result.structured_content)
        except InvalidValue as exc:
            return _reworded(exc.message)
        return None


def check_outputs(schemas: Mapping[str, Any]) -> dict[str, OutputSchema]:
    """Each listed tool's output schema, checked (blocking: a worker thread).

    A schema that fails is kept as a refusal: the tool's spec carries it (the
    catalog leaves the tool out, naming the reason) and a direct call is
    refused before anything is sent instead of being validated with unbounded
    work.
    An output schema must be an object schema, as an input schema must: one
    that is not (protocol 2026-07-28 allows it) is refused too.
    """
    checked: dict[str, OutputSchema] = {}
    for name, schema in schemas.items():
        if len(json.dumps(schema, default=str)) > MAX_SCHEMA_BYTES:
            problem: str | None = f"its output schema is over {MAX_SCHEMA_BYTES // 1024} KiB"
        else:
            problem = schema_problem(schema)
        if problem is None:
            checker = SchemaTool(
                _CHECKER, _never_called, description="", parameters=schema, timeout_s=1.0
            )
            checked[name] = OutputSchema(checker=checker)
        else:
            checked[name] = OutputSchema(refusal=schema_refusal(problem, "output"))
    return checked


def _reworded(message: str) -> str:
    """A ``SchemaTool`` refusal as said of a result: its root is not "arguments"."""
    problems = message.removeprefix(_CHECKER_PREFIX).replace("parameter schema", "output schema")
    return "; ".join(
        "the structured content" + part.removeprefix("arguments")
        if part.startswith("arguments:")
        else part
        for part in problems.split("; ")
    )


async def _never_called(*_: Any, **__: Any) -> None:
    """The checker's call: it only ever validates."""


def without_sdk_validation(session: ClientSession) -> None:
    """Stop ``session`` validating results itself; the Host does (``check_outputs``).

    SDK 2.x has no option for this (modelcontextprotocol/python-sdk#2626). Both
    of its call paths (a plain result, a claimed one) await
    ``ClientSession.validate_tool_result``, so shadowing it on this instance
    switches the check off for this session alone, and with it the extra
    ``tools/list`` it sends for a tool it has not seen. An SDK without that
    method may validate some other way: the connect fails closed.
    """
    if not callable(getattr(type(session), "validate_tool_result", None)):
        raise McpConnectFailed(
            "the installed mcp SDK has no ClientSession.validate_tool_result: the Host "
            "cannot stop it validating results with unbounded work"
        )
    session.validate_tool_result = _not_here  # type: ignore[method-assign]


async def _not_here(name: str, result: CallToolResult) -> None:
    """The SDK's result check, replaced: ``ClientConnection.call_tool`` validates off the loop."""
