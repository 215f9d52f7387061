"""A secret never leaves, whatever shape it travels in: scanned after a real Host turn.

Each case runs one real turn: the scripted model calls an authored tool that
leaks a secret in one shape (a dict with quotes, backslashes, line breaks and
non-ASCII; a ToolOutcome; an exception long enough that ``bounded()`` would
cut it; a ``repr``; a PEM key with CRLF line endings, printed whole and line
by line; a ``SystemExit``; a HostkitError, whose own message is bounded; a
secret-named argument; a secret-named output field; a URL with the value
percent-encoded, as HTTP clients print a failed request; JSON as Go writes
it). Afterwards every provider request, observed event, approval request,
operator view, every row of every SQLite table (opened read-only once the
Host closed) and every byte of every file under the Host's directory is
searched for the secret in raw and in its JSON- and repr-escaped forms (once
and twice escaped), percent-encoded and HTML-safe JSON-escaped.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import json
import re
import types
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote, quote_plus, urlencode

import anyio
import pytest
from pydantic import BaseModel

from hostkit.effects import (
    MIN_SECRET_CHARS,
    ApprovalDecision,
    ApprovalRequest,
    AuthoredTool,
    ToolContext,
    ToolOutcome,
)
from hostkit.effects._views import REDACTION_FAILED
from hostkit.errors import InvalidValue, PolicyRefusal
from hostkit.host import Host, parse_config
from hostkit.inspect import context_view, session_rows
from hostkit.testing import CallTools, Reply, ScriptedModel, capabilities
from hostkit.turns import TurnEvent
from hostkit.types import TurnResult
from tests.hosts import request
from tests.support import table_rows

pytestmark = pytest.mark.anyio

# Quotes, a backslash, a line break, a tab and non-ASCII: every escaper changes it.
AWKWARD = 'q"uo\\te\nsécret-Ω-line2\tend'
PEM = "\n".join(
    [
        "-----BEGIN PRIVATE KEY-----",
        "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7VJTUt9Us8cKj",
        "MzEfYyjiWA4R4/M2bS1GB4t7NXp98C3SC6dVMvDuictGeurT8jNbvJZHtCSuYEvu",
        "NMoSfm76oqFvAp8Gy0iz5sxjZmSnXyCdPEovGhLa0VzMaQ8s+CLOyS56YyCFGeJZ",
        "-----END PRIVATE KEY-----",
    ]
)
ARGUMENT_SECRET = "arg-secret-'\"-7c1f9e"
OUTPUT_SECRET = "out-secret-\\-91d2a4"
NON_ASCII = "pässwörd-geheim-ΩΩΩ-12345"
# What URL and HTML-safe JSON encoders change, never 8 characters apart: no raw run of
# either encoding is a fragment the redactor knew before.
URL_SECRET = "q7R+k2&Zp/9L<m w3>T8=Yb&Hc4/sE>ä"
Creds = collections.namedtuple("Creds", "user token")


class Login(BaseModel):
    user: str
    password: str


@dataclass
class Account:
    name: str
    api_key: str


class Holder:
    """A plain object: its secret-named attribute is found through ``__dict__``."""

    def __init__(self, secret: str) -> None:
        self.client_secret = secret

    def __repr__(self) -> str:
        return f"Holder({self.client_secret})"


def _nested(depth: int, leaf: Any) -> Any:
    return functools.reduce(lambda inner, _: {"x": inner}, range(depth), leaf)


@dataclass(frozen=True)
class Case:
    """One leak shape: the secret, how the tool leaks it and what the model sends."""

    secret: str
    leak: Callable[[ToolContext, dict[str, Any]], Any]
    bound: bool = True
    arguments: tuple[tuple[str, Any], ...] = ()


def _bound(ctx: ToolContext) -> str:
    return ctx.secrets["HK_SECRET"]


async def _raise(exc: BaseException) -> Any:
    raise exc


def _emitted(ctx: ToolContext, data: dict[Any, Any]) -> dict[str, bool]:
    ctx.emit("progress", data)
    return {"emitted": True}


def _go_json(value: Any) -> str:
    """``value`` as Go's encoding/json writes it: & < > as \\u0026 \\u003c \\u003e."""
    text = json.dumps(value, ensure_ascii=False)
    return text.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")


def _pem_lines(value: str) -> dict[str, Any]:
    lines = value.splitlines()
    return {
        "crlf": value.replace("\n", "\r\n"),
        "lines": lines,
        "printed": " | ".join(lines),
        "indented": "\n".join("    " + line for line in lines),
    }


CASES = {
    "dict": Case(
        AWKWARD,
        lambda ctx, a: {
            "value": _bound(ctx),
            "nested": [{"k": _bound(ctx)}],
            _bound(ctx): "as a key",
            "text": f"prefix {_bound(ctx)} suffix",
        },
    ),
    "tool_outcome": Case(
        AWKWARD,
        lambda ctx, a: ToolOutcome(
            "failed",
            {"out": _bound(ctx), "lines": _bound(ctx).splitlines()},
            f"exit {_bound(ctx)!r}",
        ),
    ),
    "long_exception": Case(
        AWKWARD, lambda ctx, a: _raise(RuntimeError("x" * 270 + _bound(ctx) + " tail"))
    ),
    "repr_exception": Case(
        AWKWARD, lambda ctx, a: _raise(RuntimeError(f"{'y' * 270}{_bound(ctx)!r}"))
    ),
    "key_error": Case(AWKWARD, lambda ctx, a: _raise(KeyError(_bound(ctx)))),
    # A HostkitError bounds its own message at 500 characters, cutting the secret.
    "policy_refusal": Case(AWKWARD, lambda ctx, a: _raise(PolicyRefusal("r" * 480 + _bound(ctx)))),
    "invalid_value": Case(
        AWKWARD, lambda ctx, a: _raise(InvalidValue(f"{'v' * 250} bad {_bound(ctx)!r}"))
    ),
    "system_exit": Case(AWKWARD, lambda ctx, a: _raise(SystemExit(_bound(ctx)))),
    "pem_crlf": Case(PEM, lambda ctx, a: _pem_lines(_bound(ctx))),
    "pem_in_exception": Case(
        PEM, lambda ctx, a: _raise(ValueError(_bound(ctx).replace("\n", "\r\n")))
    ),
    "secret_named_argument": Case(
        ARGUMENT_SECRET,
        lambda ctx, a: _raise(RuntimeError(f"login with key {a['api_key']!r} failed")),
        bound=False,
        arguments=(("api_key", ARGUMENT_SECRET),),
    ),
    "secret_named_output_field": Case(
        OUTPUT_SECRET,
        lambda ctx, a: {"token": OUTPUT_SECRET, "note": f"use {json.dumps(OUTPUT_SECRET)} next"},
        bound=False,
    ),
    # Bytes are decoded as UTF-8 before redaction: their repr would show \xc3\xa4.
    "bytes_non_ascii": Case(
        NON_ASCII,
        lambda ctx, a: {
            "raw": _bound(ctx).encode(),
            "array": [bytearray(_bound(ctx).encode())],
            "view": memoryview(b"\xff" + _bound(ctx).encode()),
        },
    ),
    "bytes_top_level": Case(NON_ASCII, lambda ctx, a: _bound(ctx).encode()),
    # As requests, httpx and urllib print a failed call, and as Go's encoding/json writes
    # (under names that say nothing: a secret-named "token=" is masked for its name).
    "url_encoded_http_error": Case(
        URL_SECRET,
        lambda ctx, a: _raise(
            RuntimeError(
                "401 Client Error: Unauthorized for url: https://api.example.com/v1/items?"
                + urlencode({"sig": _bound(ctx)})
            )
        ),
    ),
    "url_encoded_output": Case(
        URL_SECRET,
        lambda ctx, a: {
            "stdout": f"GET /login?pw={quote(_bound(ctx), safe='')} 401\n",
            "path": f"/s/{quote(_bound(ctx))}/mcp",
        },
    ),
    "go_json_output": Case(
        URL_SECRET, lambda ctx, a: {"stdout": _go_json({"dsn": _bound(ctx)}) + "\n"}
    ),
    "bytes_in_exception": Case(NON_ASCII, lambda ctx, a: _raise(KeyError(_bound(ctx).encode()))),
    # Secret-named fields in every shape a tool may return them in.
    "namedtuple_field": Case(
        OUTPUT_SECRET,
        lambda ctx, a: {"creds": Creds("bob", OUTPUT_SECRET), "note": OUTPUT_SECRET},
        bound=False,
    ),
    "namespace_field": Case(
        OUTPUT_SECRET,
        lambda ctx, a: [types.SimpleNamespace(password=OUTPUT_SECRET), OUTPUT_SECRET],
        bound=False,
    ),
    "pydantic_field": Case(
        OUTPUT_SECRET,
        lambda ctx, a: {"login": Login(user="bob", password=OUTPUT_SECRET), "n": OUTPUT_SECRET},
        bound=False,
    ),
    "dataclass_field": Case(
        OUTPUT_SECRET,
        lambda ctx, a: (Account("bob", OUTPUT_SECRET), f"key={OUTPUT_SECRET}"),
        bound=False,
    ),
    "object_field": Case(OUTPUT_SECRET, lambda ctx, a: {"h": Holder(OUTPUT_SECRET)}, bound=False),
    # A tool's events carry what it read, in the shapes it read it: masked like its result.
    "emitted_bytes_keys_objects": Case(
        NON_ASCII,
        lambda ctx, a: _emitted(
            ctx,
            {
                "chunk": b"deploying with " + _bound(ctx).encode() + b"\n",
                _bound(ctx): "as a key",
                "record": Holder(_bound(ctx)),
                "lines": (bytearray(_bound(ctx).encode()),),
            },
        ),
    ),
    # Past the search's limits the result fails closed instead of going unsearched.
    "derived_past_the_cap": Case(
        OUTPUT_SECRET,
        lambda ctx, a: {
            **{f"token{i}": f"decoy-value-{i:04d}" for i in range(64)},
            "token_real": OUTPUT_SECRET,
        },
        bound=False,
    ),
    "derived_too_deep": Case(
        OUTPUT_SECRET,
        lambda ctx, a: {"note": OUTPUT_SECRET, "d": _nested(40, {"token": OUTPUT_SECRET})},
        bound=False,
    ),
}
FAILS_CLOSED = ("derived_past_the_cap", "derived_too_deep")


def _escapes(unit: str) -> set[str]:
    return {
        unit,
        json.dumps(unit)[1:-1],
        json.dumps(unit, ensure_ascii=False)[1:-1],
        repr(unit)[1:-1],
        ascii(unit)[1:-1],
        repr(unit.encode("utf-8", "surrogateescape"))[2:-1],
    }


def _encoded(secret: str) -> set[str]:
    """The secret percent-encoded (either case of hex) and in HTML-safe JSON."""
    urls = {quote(secret, safe=""), quote(secret), quote_plus(secret)}
    urls |= {re.sub("%[0-9A-F]{2}", lambda hit: hit.group().lower(), url) for url in urls}
    return urls | {_go_json(secret)[1:-1]}


def forms(secret: str) -> set[str]:
    """The secret raw and escaped once or twice (JSON, repr), and each long-enough line;
    and the secret percent-encoded or HTML-safe JSON-escaped, as is and escaped once."""
    units = {secret} | {line for line in secret.splitlines() if len(line) >= MIN_SECRET_CHARS}
    once = {form for unit in units for form in _escapes(unit)} | _encoded(secret)
    return {form for one in once for form in _escapes(one)}


def strings(value: Any) -> Iterator[str]:
    """Every string inside ``value`` as it is held (plus its repr, escaped)."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, bytes):
        yield value.decode("utf-8", "replace")
    elif isinstance(value, Mapping):
        for key, item in value.items():
            yield from strings(key)
            yield from strings(item)
    elif isinstance(value, list | tuple | set | frozenset):
        for item in value:
            yield from strings(item)
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        for field in dataclasses.fields(value):
            yield from strings(getattr(value, field.name))
        yield repr(value)


def count(texts: list[str], secret: str) -> int:
    return sum(text.count(form) for text in texts for form in forms(secret))


def count_bytes(blobs: list[bytes], secret: str) -> int:
    return sum(blob.count(form.encode()) for blob in blobs for form in forms(secret))


def leak_tool(case: Case) -> AuthoredTool:
    async def leak(ctx: ToolContext, secrets: list[str], user: str = "", api_key: str = "") -> Any:
        produced = case.leak(ctx, {"user": user, "api_key": api_key})
        return await produced if hasattr(produced, "__await__") else produced

    return AuthoredTool("leak.shape", leak, description="Leaks.", secrets_argument="secrets")


class Approver:
    def __init__(self) -> None:
        self.seen: list[ApprovalRequest] = []

    async def decide(self, req: ApprovalRequest) -> ApprovalDecision:
        self.seen.append(req)
        return "approve_once"


class Events:
    def __init__(self) -> None:
        self.seen: list[TurnEvent] = []

    def notify(self, event: TurnEvent) -> None:
        self.seen.append(event)


@dataclass
class Scan:
    """Everything one turn left behind, gathered for the search."""

    model_requests: list[str]
    # The model's own tool calls, as replayed to it and as kept in its transcript rows.
    own_calls: list[str]
    own_call_rows: list[str]
    events: list[str]
    approvals: list[str]
    operator: list[str]
    result: list[str]
    rows: list[str]
    files: list[bytes]


def read_files(root: Path) -> list[bytes]:
    """Every file the Host left: database, journal, artifacts (the Host is closed)."""
    return [path.read_bytes() for path in sorted(root.rglob("*")) if path.is_file()]


def _is_call_row(cell: str) -> bool:
    """A stored assistant message that asks for tool calls (the model's own words)."""
    return cell.startswith('{"text":') and '"tool_calls":[{' in cell


async def run_case(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, case: Case) -> Scan:
    monkeypatch.setenv("HK_SECRET", case.secret if case.bound else "unused-secret-value")
    arguments = {"secrets": ["HK_SECRET"] if case.bound else [], **dict(case.arguments)}
    model = ScriptedModel([CallTools(("leak_shape", arguments)), Reply("done")])
    events, approver = Events(), Approver()
    config = parse_config(
        {
            "host": {"database": str(tmp_path / "hostkit.db"), "workspace": str(tmp_path)},
            "providers": {"test": {"kind": "scripted"}},
            "agents": {
                "assistant": {
                    "provider": "test",
                    "memory": False,
                    "policy": {"allow": ["*"]},
                    "secrets": ["HK_SECRET"],
                }
            },
        },
        base_dir=tmp_path,
    )
    caps = capabilities(model, tools=[leak_tool(case)], observer=events)
    async with Host.open(config, capabilities=caps, approver=approver) as host:
        result: TurnResult = await host.turns.run(request("leak it"))
        assert result.outcome == "completed", result.error
        operator = await host.operator("ops", reason="scan every view for the secret")
        views = [
            await context_view(host, operator, turn_id=result.turn_id),
            await session_rows(host, operator),
            await host.approvals.list(operator),
        ]
    # The next model step saw the tool's (redacted) result.
    tool_messages = [m.content for m in model.requests[-1].messages if m.role == "tool"]
    assert len(tool_messages) == 1
    assert tool_messages[0].startswith(("{", "[", '"'))  # JSON, or "[failed] …"

    rows = await anyio.to_thread.run_sync(lambda: list(table_rows(tmp_path / "hostkit.db")))
    messages = [m for r in model.requests for m in r.messages]
    return Scan(
        model_requests=[*strings([(m.role, m.content, m.name, m.tool_call_id) for m in messages])],
        own_calls=[*strings([m.tool_calls for m in messages])],
        own_call_rows=[row for row in rows if _is_call_row(row)],
        events=[*strings(events.seen)] + [json.dumps(dict(e.data)) for e in events.seen],
        approvals=[*strings(approver.seen)],
        operator=[*strings(views)],
        result=[*strings(result)],
        rows=[row for row in rows if not _is_call_row(row)],
        files=await anyio.to_thread.run_sync(read_files, tmp_path),
    )


@pytest.mark.parametrize("shape", sorted(CASES))
async def test_a_secret_in_any_shape_is_found_nowhere_after_the_turn(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, shape: str
) -> None:
    case = CASES[shape]
    scan = await run_case(tmp_path, monkeypatch, case)
    found = {
        "model requests": count(scan.model_requests, case.secret),
        "events": count(scan.events, case.secret),
        "approval requests": count(scan.approvals, case.secret),
        "operator views": count(scan.operator, case.secret),
        "turn result": count(scan.result, case.secret),
        "database rows": count(scan.rows, case.secret),
        "files (database, journal, artifacts)": count_bytes(scan.files, case.secret),
    }
    assert found == dict.fromkeys(found, 0)
    assert scan.rows
    assert scan.events
    if shape.startswith("emitted"):
        assert "tool.progress" in scan.events
    assert scan.files
    assert count(scan.own_calls + scan.own_call_rows, case.secret) == 0


async def test_the_call_runs_with_a_secret_named_argument_the_transcript_keeps_redacted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The model's own call is kept and replayed with ``[redacted]`` in secret-named
    arguments; the tool itself received the value the model sent."""
    case = Case(
        ARGUMENT_SECRET,
        lambda ctx, a: {"matched": a["api_key"] == ARGUMENT_SECRET},
        bound=False,
        arguments=(("api_key", ARGUMENT_SECRET),),
    )
    scan = await run_case(tmp_path, monkeypatch, case)
    assert '{"matched": true}' in scan.model_requests
    assert count(scan.own_calls + scan.own_call_rows, ARGUMENT_SECRET) == 0
    assert any("[redacted]" in row for row in scan.own_call_rows)


@pytest.mark.parametrize("shape", FAILS_CLOSED)
async def test_past_the_search_limits_the_result_is_the_fixed_failed_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, shape: str
) -> None:
    scan = await run_case(tmp_path, monkeypatch, CASES[shape])
    assert f"[failed] {REDACTION_FAILED}" in scan.model_requests
    assert not any("decoy-value" in text for text in scan.model_requests + scan.rows)
