"""A hand-written stdio MCP server whose tools declare output schemas the Host must bound.

``python output_server.py ERA [N [SHAPE]]``; the tests copy it into the agent's
workspace. ERA ``legacy`` answers only the ``initialize`` handshake; ``modern`` answers
``server/discover`` too, so the client speaks protocol 2026-07-28. Each
``tools/call`` appends the tool's name to ``calls.log`` in the working directory first,
so a test can tell a call the Host refused from one it sent. Tools:

- ``redos``: output schema ``{"s": {"pattern": "^(a+)+$"}}`` and a result of N ``a``
  then ``!`` (default 25): Python's ``re`` takes seconds, doubling per character;
- ``chain``: an ``anyOf`` of two ``$ref`` to the next definition, twelve deep (4,096
  paths, no regex), and a result no path accepts;
- ``lookahead``: a pattern with look-ahead, which the linear-time engine refuses;
- ``deep``: an object schema nested 81 levels deep (the Host takes 64);
- ``huge``: an object schema of over 64 KiB (a long description);
- ``invalid``: an object schema whose property has ``"type": 5``;
- ``remote``: a ``$ref`` to another document (nothing is ever retrieved);
- ``listed``: an array schema (2026-07-28 allows it; the SDK's schema of older protocols
  refuses the entry);
- ``typed``: ``{"n": integer}`` required, echoing its argument ``n`` as the result;
- ``bare``: the same schema, and a result with no ``structuredContent``;
- ``empty``: the same schema, and ``{}`` as the result;
- ``input_forever``: answers every call with an ``input_required`` result (which only a
  modern client reads).

And entries the SDK would refuse as a page, or the Host would, each on its own:

- ``shaped``: an input schema ``{"type": "string"}``;
- ``wide``: an object input schema of over 64 KiB (a long description);
- ``garbled``: ``"annotations": "read-only"`` (an object in every protocol).

SHAPE ``entries`` lists only ``typed``, those three, a tool named with 129 ``n`` (the
Host takes 128 characters) and an entry with no name; ``many`` lists 129 tools (the Host
takes 128); ``unlisted`` answers ``tools/list`` with an object for its tool array.
"""

from __future__ import annotations

import json
import sys
from typing import Any

ERA = sys.argv[1] if len(sys.argv) > 1 else "legacy"
N = int(sys.argv[2]) if len(sys.argv) > 2 else 25
SHAPE = sys.argv[3] if len(sys.argv) > 3 else ""
CHAIN = 12
TYPED = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}


def chain_schema() -> dict[str, Any]:
    defs: dict[str, Any] = {f"d{CHAIN}": {"type": "string"}}
    for level in range(CHAIN):
        step = {"$ref": f"#/$defs/d{level + 1}"}
        defs[f"d{level}"] = {"anyOf": [step, dict(step)]}
    return {"type": "object", "properties": {"v": {"$ref": "#/$defs/d0"}}, "$defs": defs}


def deep_schema() -> dict[str, Any]:
    node: dict[str, Any] = {"type": "string"}
    for _ in range(40):
        node = {"type": "object", "properties": {"d": node}}
    return node


def tool(
    name: str, output: dict[str, Any] | None, given: Any = None, **entry: Any
) -> dict[str, Any]:
    listed: dict[str, Any] = {"name": name, "inputSchema": given or {"type": "object"}, **entry}
    if output is not None:
        listed["outputSchema"] = output
    return listed


TOOLS = [
    tool(
        "redos",
        {"type": "object", "properties": {"s": {"type": "string", "pattern": "^(a+)+$"}}},
    ),
    tool("chain", chain_schema()),
    tool(
        "lookahead",
        {"type": "object", "properties": {"s": {"type": "string", "pattern": "^(?=a)a+$"}}},
    ),
    tool("deep", deep_schema()),
    tool("huge", {"type": "object", "description": "x" * 70_000}),
    tool("invalid", {"type": "object", "properties": {"s": {"type": 5}}}),
    tool(
        "remote",
        {"type": "object", "properties": {"s": {"$ref": "https://example.com/s.json"}}},
    ),
    tool("typed", TYPED),
    tool("bare", TYPED),
    tool("empty", TYPED),
    tool("input_forever", None),
    tool("listed", {"type": "array", "items": {"type": "string"}}),
]
ENTRIES = [
    tool("shaped", None, {"type": "string"}),
    tool("wide", None, {"type": "object", "description": "x" * 70_000}),
    tool("garbled", None, annotations="read-only"),
]
if SHAPE == "entries":
    TOOLS = [
        tool("typed", TYPED),
        *ENTRIES,
        tool("n" * 129, None),
        {"inputSchema": {"type": "object"}},
    ]
elif SHAPE == "many":
    TOOLS = [tool(f"t{n}", None) for n in range(129)]
else:
    TOOLS += ENTRIES


def call(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    with open("calls.log", "a") as log:
        log.write(name + "\n")
    text = [{"type": "text", "text": name}]
    if name == "redos":
        return {"content": text, "structuredContent": {"s": "a" * N + "!"}}
    if name == "chain":
        return {"content": text, "structuredContent": {"v": 5}}
    if name == "lookahead":
        return {"content": text, "structuredContent": {"s": "aaa"}}
    if name == "listed":
        return {"content": text, "structuredContent": ["a"]}
    if name == "typed":
        return {"content": text, "structuredContent": {"n": arguments.get("n")}}
    if name == "empty":
        return {"content": text, "structuredContent": {}}
    if name == "input_forever":
        return {"resultType": "input_required", "requestState": "again"}
    return {"content": text}


def main() -> None:
    for line in sys.stdin:
        request = json.loads(line)
        if "id" not in request:
            continue  # a notification
        method, params = request.get("method"), request.get("params") or {}
        reply: dict[str, Any] = {"jsonrpc": "2.0", "id": request["id"]}
        if method == "initialize":
            reply["result"] = {
                "protocolVersion": params["protocolVersion"],
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "output", "version": "1"},
            }
        elif method == "server/discover" and ERA == "modern":
            reply["result"] = {
                "supportedVersions": ["2026-07-28"],
                "capabilities": {"tools": {}},
                "resultType": "complete",
            }
        elif method == "tools/list":
            reply["result"] = {"tools": {"typed": TOOLS[0]} if SHAPE == "unlisted" else TOOLS}
            if ERA == "modern":
                reply["result"].update(ttlMs=0, cacheScope="private")
        elif method == "tools/call":
            reply["result"] = call(params["name"], params.get("arguments") or {})
        else:
            reply["error"] = {"code": -32601, "message": f"no method {method}"}
        if ERA == "modern" and "result" in reply:
            reply["result"].setdefault("resultType", "complete")
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
