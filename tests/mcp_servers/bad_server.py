"""A real MCP server (the SDK's MCPServer) that misbehaves on request.

``python bad_server.py MODE [ARG]``; the tests copy it into the agent's
workspace and run it with the venv's interpreter, in the sandbox. Modes:

- ``serve``: behave (the tools below are the probes);
- ``hang_list_tools``: never answer ``tools/list``;
- ``exit_at_start``: write a line naming ``MCP_TOKEN``'s value to stderr and exit 3;
- ``slow_start ARG``: sleep ARG seconds before serving;
- ``spawn_helper HOW [THEN]``: start a helper that sleeps for ten minutes and write its
  pid to ``helper.pid`` in the working directory, then serve (THEN ``exit``: exit 3;
  ``hang``: never answer). HOW ``child``: a plain child in the server's group;
  ``setsid``: a grandchild in its own session whose parent exits at once, so it is
  nobody's descendant in the tree any more;
- ``http ARG``: serve streamable HTTP on 127.0.0.1, port ARG (run on the Host, unsandboxed).

Tools: ``echo_env``, ``whoami``, ``crash`` (exits mid-call), ``huge`` (a result
of N MB), ``fail`` (a tool error), ``server_error`` (a JSON-RPC -32000 error), ``sleep``,
``add``.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from typing import Any

import anyio
from mcp import MCPError
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

app = MCPServer("bad")


@app.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@app.tool()
def echo_env(names: list[str]) -> dict[str, Any]:
    """Every environment variable's name, and the values of ``names``."""
    return {"names": sorted(os.environ), "values": {n: os.environ.get(n) for n in names}}


@app.tool()
def whoami(path: str, host: str, port: int) -> dict[str, Any]:
    """Its pid, the pids /proc shows, what ``path`` reads, whether host:port connects."""
    pids = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
    try:
        with open(path, "rb") as handle:
            content: str | None = handle.read(200).decode("utf-8", "replace")
    except OSError as exc:
        content = None
        error = type(exc).__name__
    else:
        error = None
    try:
        with socket.create_connection((host, port), timeout=2):
            connected = True
    except OSError:
        connected = False
    return {
        "pid": os.getpid(),
        "pids": pids,
        "content": content,
        "read_error": error,
        "connected": connected,
    }


@app.tool()
def crash() -> str:
    """Exit the whole server in the middle of the call."""
    sys.stderr.write("crashing now\n")
    sys.stderr.flush()
    os._exit(7)


@app.tool()
def huge(megabytes: int) -> str:
    """A text result of ``megabytes`` MB."""
    return "x" * (megabytes * 1_000_000)


@app.tool()
def fail(reason: str) -> str:
    """Report a tool error (its message reaches the client)."""
    raise ToolError(reason)


@app.tool()
def server_error(message: str) -> str:
    """Answer with a JSON-RPC error of code -32000 (the first server error code, which the
    SDK also uses for a connection that closed)."""
    raise MCPError(code=-32000, message=message)


@app.tool()
async def sleep(seconds: float) -> str:
    """Sleep, then answer."""
    await anyio.sleep(seconds)
    return "slept"


HELPER = "import time; time.sleep(600)"
# Its parent writes helper.pid as write_pid does, whole or not at all.
DETACHED = (
    "import os, subprocess, sys\n"
    "os.setsid()\n"
    f"p = subprocess.Popen([sys.executable, '-c', {HELPER!r}])\n"
    "with open('helper.pid.part', 'w') as handle:\n"
    "    handle.write(str(p.pid))\n"
    "os.replace('helper.pid.part', 'helper.pid')\n"
    "os._exit(0)\n"
)


def write_pid(pid: int) -> None:
    """``helper.pid``, written whole or not at all (renamed over from a temporary file): a
    test polling for it never reads half a pid."""
    with open("helper.pid.part", "w") as handle:
        handle.write(str(pid))
    os.replace("helper.pid.part", "helper.pid")


def spawn_helper(how: str) -> None:
    """A helper the server starts; its pid lands in ``helper.pid`` before this returns."""
    if how == "setsid":
        subprocess.run([sys.executable, "-c", DETACHED], check=True)
        return
    helper = subprocess.Popen([sys.executable, "-c", HELPER])
    write_pid(helper.pid)


def raw_answers(call: str) -> None:
    """A hand-written stdio server whose answer to each tool call is ``call``: "malformed"
    (a JSON-RPC message no client can read, its result not an object), "deep" (a result
    nested 3,000 levels deep: more than any JSON parser here follows) or "server_error"
    (a JSON-RPC error with code -32000, the first server error code); everything else it
    answers properly."""
    for line in sys.stdin:
        request = json.loads(line)
        if "id" not in request:
            continue  # a notification
        method, answer = request.get("method"), None
        if method == "initialize":
            answer = {
                "protocolVersion": request["params"]["protocolVersion"],
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "malformed", "version": "1"},
            }
        elif method == "tools/list":
            answer = {"tools": [{"name": "garble", "inputSchema": {"type": "object"}}]}
        elif method == "tools/call" and call == "malformed":
            answer = "done"
        reply: dict[str, Any] = {"jsonrpc": "2.0", "id": request["id"], "result": answer}
        if method == "tools/call" and call == "server_error":
            del reply["result"]
            reply["error"] = {"code": -32000, "message": "rate limit exceeded, retry in 10s"}
        elif answer is None:
            del reply["result"]
            reply["error"] = {"code": -32601, "message": f"no method {method}"}
        text = json.dumps(reply)
        if method == "tools/call" and call == "deep":
            nested = '{"a": ' * 3000 + "1" + "}" * 3000
            text = f'{{"jsonrpc": "2.0", "id": {json.dumps(request["id"])}, "result": {nested}}}'
        sys.stdout.write(text)
        sys.stdout.write("\n")
        sys.stdout.flush()


def main() -> None:
    mode = sys.argv[1] if len(sys.argv) > 1 else "serve"
    if mode == "raw_answers":
        raw_answers(sys.argv[2])
        return
    if mode == "exit_at_start":
        sys.stderr.write(f"cannot start: token {os.environ.get('MCP_TOKEN')} was rejected\n")
        sys.stderr.flush()
        sys.exit(3)
    if mode == "spawn_helper":
        spawn_helper(sys.argv[2])
        then = sys.argv[3] if len(sys.argv) > 3 else "serve"
        if then == "exit":
            sys.exit(3)
        if then == "hang":
            time.sleep(600)
    if mode == "slow_start":
        time.sleep(float(sys.argv[2]))
    if mode == "hang_list_tools":

        async def hang() -> list[Any]:
            await anyio.sleep_forever()
            return []

        app.list_tools = hang  # type: ignore[method-assign]
    if mode == "http":
        app.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
        return
    app.run()


if __name__ == "__main__":
    main()
