"""A hand-written stdio MCP server whose tool listings are hostile to the Host's filter.

``python listing_server.py ERA MODE``; the tests copy it into the agent's workspace. ERA
``legacy`` answers only the ``initialize`` handshake; ``modern`` answers
``server/discover`` too, so the client speaks protocol 2026-07-28. Every listing
holds ``good`` (an object schema, ``{"n": integer}``), which ``tools/call`` answers.
MODE:

- ``wide``: 16 pages of 64 entries whose input schemas hold 3,000 properties each,
  every one refused by older protocols' schema (``5``, not a schema), 1.9 MB a page; the
  same names on every page, so the 128-tool cap never trips;
- ``dense``: 4 pages, each with one entry of a million icons that are no icon (2 MB),
  the same name on every page;
- ``strid``: each ``tools/list`` answer echoes its integer request id as a string (the
  SDK matches ``"7"`` to 7), next to ``shaped``, an input schema ``{"type": "string"}``;
- ``sdk``: ``tasky``, ``"execution": {"taskSupport": "bogus"}``, and ``timed``,
  ``"execution": 5``: 2026-07-28's schema ignores the field, the SDK's version-free
  ``Tool`` refuses it; ``headed``, an ``x-mcp-header`` on an object property (2026-07-28
  clients drop such a tool);
- ``bulk``: each listing page and call result also holds ``bulk``, a field no client
  reads, of 1.9 million numbers (3.6 MiB, under the 4 MiB a message may have);
- ``late``: the first listing is answered only when the second asks, just before its
  first page; that late answer refuses ``ghost`` and ``twin``, which the second listing
  lists as a usable tool on its second page;
- ``clock NAME``: a well-behaved server for the connection pool's clauses
  (``tests/contract/test_clause_mcp_connections.py``), whose one tool ``get_time``
  ({"zone": string}) answers ``NAME:get_time:ZONE``, after a second for zone ``slow`` and
  never for ``hang`` (other requests are still answered). Files in its working directory
  steer it, so one declaration can fail and later come up: ``fail`` (exit 3 at start with
  the file's text on stderr), ``delay`` (sleep that many seconds before serving),
  ``hang_list`` (never answer ``tools/list``), ``linger`` (sleep that many seconds after
  stdin ends). Each start appends NAME to ``starts``, failing or not.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path
from typing import Any

ERA = sys.argv[1] if len(sys.argv) > 1 else "legacy"
MODE = sys.argv[2] if len(sys.argv) > 2 else ""
PAGES = {"wide": 16, "dense": 4}
GOOD = {
    "name": "good",
    "inputSchema": {"type": "object", "properties": {"n": {"type": "integer"}}},
}
NOT_AN_OBJECT = {"type": "string"}
BULK = [5] * 1_900_000 if MODE == "bulk" else []


def wide_page() -> list[dict[str, Any]]:
    properties = {f"p{j}": 5 for j in range(3_000)}
    schema = {"type": "object", "properties": properties}
    return [{"name": f"t{i}", "inputSchema": schema} for i in range(64)] + [GOOD]


def dense_page() -> list[dict[str, Any]]:
    return [{"name": "dense", "inputSchema": {"type": "object"}, "icons": [5] * 1_000_000}, GOOD]


def sdk_page() -> list[dict[str, Any]]:
    bare = {"type": "object"}
    header = {"type": "object", "properties": {"a": {"type": "object", "x-mcp-header": "A"}}}
    return [
        GOOD,
        {"name": "tasky", "inputSchema": bare, "execution": {"taskSupport": "bogus"}},
        {"name": "timed", "inputSchema": bare, "execution": 5},
        {"name": "headed", "inputSchema": header},
    ]


class Lister:
    """The answers to ``tools/list``: ``answer`` gives the replies to write, in order."""

    def __init__(self) -> None:
        self.listings = 0
        self.held: dict[str, Any] | None = None
        self.wide = wide_page() if MODE == "wide" else []
        self.dense = dense_page() if MODE == "dense" else []

    def answer(self, reply: dict[str, Any], cursor: str | None) -> list[dict[str, Any]]:
        if cursor is None:
            self.listings += 1
        page = int(cursor or 0)
        if MODE in ("wide", "dense"):
            reply["result"] = {"tools": self.wide or self.dense}
            if page < PAGES[MODE] - 1:
                reply["result"]["nextCursor"] = str(page + 1)
        elif MODE == "strid":
            reply["result"] = {"tools": [GOOD, {"name": "shaped", "inputSchema": NOT_AN_OBJECT}]}
            reply["id"] = str(reply["id"])
        elif MODE == "sdk":
            reply["result"] = {"tools": sdk_page()}
        elif MODE == "late":
            return self.late(reply, page)
        elif MODE == "bulk":
            reply["result"] = {"tools": [GOOD], "bulk": BULK}
        else:
            reply["result"] = {"tools": [GOOD]}
        return [reply]

    def late(self, reply: dict[str, Any], page: int) -> list[dict[str, Any]]:
        if self.listings == 1:
            ghost = {"name": "ghost", "inputSchema": NOT_AN_OBJECT}
            twin = {"name": "twin", "inputSchema": NOT_AN_OBJECT}
            reply["result"] = {"tools": [GOOD, ghost, twin]}
            self.held = reply
            return []
        if page == 0:
            reply["result"] = {"tools": [GOOD], "nextCursor": "1"}
            held, self.held = self.held, None
            return [held, reply] if held is not None else [reply]
        reply["result"] = {"tools": [{"name": "twin", "inputSchema": {"type": "object"}}]}
        return [reply]


ZONE = {"type": "object", "properties": {"zone": {"type": "string"}}, "required": ["zone"]}


def clock(name: str) -> None:
    """``clock NAME``: see the module docstring."""
    with open("starts", "a") as handle:
        handle.write(f"{name}\n")
    if Path("fail").exists():
        sys.stderr.write(Path("fail").read_text())
        sys.stderr.flush()
        sys.exit(3)
    if Path("delay").exists():
        time.sleep(float(Path("delay").read_text()))
    lock = threading.Lock()

    def write(reply: dict[str, Any]) -> None:
        with lock:
            sys.stdout.write(json.dumps(reply, separators=(",", ":")) + "\n")
            sys.stdout.flush()

    def answer_later(reply: dict[str, Any], seconds: float) -> None:
        time.sleep(seconds)
        write(reply)

    for line in sys.stdin:
        request = json.loads(line)
        if "id" not in request:
            continue
        method, params = request.get("method"), request.get("params") or {}
        reply: dict[str, Any] = {"jsonrpc": "2.0", "id": request["id"]}
        if method == "initialize":
            reply["result"] = {
                "protocolVersion": params["protocolVersion"],
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "clock", "version": "1"},
            }
        elif method == "tools/list":
            if Path("hang_list").exists():
                continue
            reply["result"] = {"tools": [{"name": "get_time", "inputSchema": ZONE}]}
        elif method == "tools/call":
            zone = str((params.get("arguments") or {}).get("zone"))
            text = f"{name}:{params['name']}:{zone}"
            reply["result"] = {"content": [{"type": "text", "text": text}]}
            if zone == "hang":
                continue
            if zone == "slow":
                threading.Thread(target=answer_later, args=(reply, 1.0), daemon=True).start()
                continue
        else:
            reply["error"] = {"code": -32601, "message": f"no method {method}"}
        write(reply)
    if Path("linger").exists():
        time.sleep(float(Path("linger").read_text()))


def main() -> None:
    if MODE == "clock":
        clock(sys.argv[3])
        return
    lister = Lister()
    for line in sys.stdin:
        request = json.loads(line)
        if "id" not in request:
            continue  # a notification (a cancelled request among them)
        method, params = request.get("method"), request.get("params") or {}
        reply: dict[str, Any] = {"jsonrpc": "2.0", "id": request["id"]}
        replies = [reply]
        if method == "initialize":
            reply["result"] = {
                "protocolVersion": params["protocolVersion"],
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "listing", "version": "1"},
            }
        elif method == "server/discover" and ERA == "modern":
            reply["result"] = {
                "supportedVersions": ["2026-07-28"],
                "capabilities": {"tools": {}},
                "resultType": "complete",
            }
        elif method == "tools/list":
            replies = lister.answer(reply, params.get("cursor"))
        elif method == "tools/call":
            text = f"called {params['name']}"
            reply["result"] = {"content": [{"type": "text", "text": text}]}
            if MODE == "bulk":
                reply["result"]["bulk"] = BULK
        else:
            reply["error"] = {"code": -32601, "message": f"no method {method}"}
        for each in replies:
            if ERA == "modern" and "result" in each:
                each["result"].setdefault("resultType", "complete")
                if method == "tools/list":
                    each["result"].update(ttlMs=0, cacheScope="private")
            sys.stdout.write(json.dumps(each, separators=(",", ":")) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
