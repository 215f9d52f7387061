"""Clause: the concrete MCP client (``hostkit.builtins.mcp``) on real servers.

Stdio servers run in the agent's bubblewrap sandbox (own PID namespace, Host
state masked, no network unless declared, exactly the allowlisted environment
plus the declared one), messages are bounded, every outcome is typed, and no
process outlives ``aclose`` or a cancelled connect. HTTP servers are reached
only through the shared URL policy.
"""

from __future__ import annotations

import contextlib
import gzip
import http.server
import io
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any, ClassVar

import anyio
import httpcore
import psutil
import pytest

from hostkit.builtins.mcp import (
    MAX_MCP_MESSAGE_BYTES,
    McpClientConnector,
    McpCommandNotFound,
    McpConnectFailed,
)
from hostkit.builtins.process import SandboxPolicy, SandboxUnavailable, probe_bubblewrap
from hostkit.builtins.web import PinnedConnections, UrlDenied, UrlPolicy
from hostkit.effects import McpConnection, McpServerDeclaration
from hostkit.errors import UserError
from tests.parts import missing
from tests.support import git_repository, peak_allocation_growth, peak_rss_growth

pytestmark = pytest.mark.anyio

SERVER = Path(__file__).parent.parent / "mcp_servers" / "bad_server.py"
VENV_BIN = str(Path(sys.executable).parent)
HOST_ENV = {
    "PATH": f"{VENV_BIN}:/usr/local/bin:/usr/bin:/bin",
    "LANG": "C.UTF-8",
    "HOME": "/nonexistent-home",
    "HOSTKIT_HOST_ONLY": "must-not-leak",
    "AWS_SECRET_ACCESS_KEY": "must-not-leak-either",
}


def _descendants() -> set[int]:
    return {p.pid for p in psutil.Process().children(recursive=True)}


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    shutil.copy(SERVER, root / "bad_server.py")
    return root


@pytest.fixture
def state_file(workspace: Path) -> Path:
    """Host state an operator placed inside the workspace (a database)."""
    path = workspace / "hostkit.db"
    path.write_text("HOST-STATE-SECRET")
    return path


@pytest.fixture
def connector(workspace: Path, state_file: Path) -> McpClientConnector:
    if not (probe := probe_bubblewrap()).ok:
        missing("sandbox", probe.reason)
    return McpClientConnector(
        workspace=workspace,
        sandbox=SandboxPolicy(),
        url_policy=UrlPolicy(),
        environ=HOST_ENV,
        hidden=(state_file,),
    )


@pytest.fixture
def no_leftovers() -> Iterator[None]:
    before = _descendants()
    yield
    deadline = time.monotonic() + 5
    while _descendants() - before and time.monotonic() < deadline:
        time.sleep(0.05)
    left = []
    for pid in _descendants() - before:
        with contextlib.suppress(psutil.Error):
            process = psutil.Process(pid)
            left.append((pid, process.name(), process.status()))  # a zombie counts: unreaped
    assert left == []


def bad(mode: str = "serve", *extra: str, **kwargs: Any) -> McpServerDeclaration:
    return McpServerDeclaration(
        name="bad",
        transport="stdio",
        command=(sys.executable, "bad_server.py", mode, *extra),
        **kwargs,
    )


@pytest.fixture
async def served(connector: McpClientConnector, no_leftovers: None) -> AsyncIterator[McpConnection]:
    connection = await connector.connect(bad(env={"MCP_TOKEN": "tok-declared-1234"}))
    try:
        yield connection
    finally:
        await connection.aclose()


async def test_lists_and_calls_a_sandboxed_venv_server(served: McpConnection) -> None:
    tools = {tool.name: tool for tool in await served.list_tools()}
    assert {"add", "echo_env", "whoami", "crash", "huge", "fail", "sleep"} <= set(tools)
    assert tools["add"].input_schema["type"] == "object"
    assert set(tools["add"].input_schema["properties"]) == {"a", "b"}
    outcome = await served.call_tool("add", {"a": 2, "b": 40})
    assert outcome.status == "succeeded"
    assert outcome.output == {"result": 42}
    assert outcome.audit == {"server": "bad", "tool": "add", "transport": "stdio"}
    assert served.alive


async def test_environment_is_exactly_the_allowlist_plus_declared(served: McpConnection) -> None:
    outcome = await served.call_tool(
        "echo_env", {"names": ["MCP_TOKEN", "PATH", "HOSTKIT_HOST_ONLY"]}
    )
    assert outcome.status == "succeeded", outcome.error
    names = set(outcome.output["names"])
    # bwrap sets PWD (the working directory) itself; nothing else is added.
    assert names == {"PATH", "LANG", "HOME", "MCP_TOKEN", "PWD"}
    values = outcome.output["values"]
    assert values["MCP_TOKEN"] == "tok-declared-1234"
    assert values["PATH"] == HOST_ENV["PATH"]
    assert values["HOSTKIT_HOST_ONLY"] is None


async def test_sandbox_has_its_own_pids_no_host_state_and_no_network(
    served: McpConnection, state_file: Path
) -> None:
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]
        outcome = await served.call_tool(
            "whoami", {"path": str(state_file), "host": "127.0.0.1", "port": port}
        )
    assert outcome.status == "succeeded", outcome.error
    seen = outcome.output
    assert seen["pid"] < 10
    assert max(seen["pids"]) < 100
    assert os.getpid() not in seen["pids"]
    assert seen["content"] in ("", None)
    assert seen["connected"] is False


async def test_declared_network_reaches_the_network(
    connector: McpClientConnector, no_leftovers: None
) -> None:
    connection = await connector.connect(bad(network=True))
    try:
        with socket.create_server(("127.0.0.1", 0)) as listener:
            port = listener.getsockname()[1]
            outcome = await connection.call_tool(
                "whoami", {"path": "/etc/hostname", "host": "127.0.0.1", "port": port}
            )
        assert outcome.output["connected"] is True
    finally:
        await connection.aclose()


async def test_tool_error_is_failed_with_a_bounded_reason(served: McpConnection) -> None:
    outcome = await served.call_tool("fail", {"reason": "no such branch " + "z" * 5000})
    assert outcome.status == "failed"
    assert outcome.error is not None
    assert "no such branch" in outcome.error
    assert len(outcome.error) <= 500
    assert served.alive


async def test_unknown_tool_is_failed_and_the_session_survives(served: McpConnection) -> None:
    outcome = await served.call_tool("no_such_tool", {})
    assert outcome.status == "failed"
    assert (await served.call_tool("add", {"a": 1, "b": 1})).status == "succeeded"


async def test_a_cancelled_call_does_not_wedge_the_session(served: McpConnection) -> None:
    with pytest.raises(TimeoutError):
        with anyio.fail_after(0.5):
            await served.call_tool("sleep", {"seconds": 30})
    assert (await served.call_tool("add", {"a": 3, "b": 4})).output == {"result": 7}


@pytest.mark.slow
async def test_crash_mid_call_is_indeterminate_and_not_alive(
    connector: McpClientConnector, no_leftovers: None
) -> None:
    connection = await connector.connect(bad())
    try:
        outcome = await connection.call_tool("crash", {})
        assert outcome.status == "indeterminate"
        assert outcome.error is not None
        assert len(outcome.error) <= 500
        assert outcome.audit == {"server": "bad", "tool": "crash", "transport": "stdio"}
        assert not connection.alive
        again = await connection.call_tool("add", {"a": 1, "b": 2})
        assert again.status == "failed"
        assert "closed" in (again.error or "")
    finally:
        await connection.aclose()


@pytest.mark.parametrize("answer", ["malformed", "deep"])
async def test_an_answer_that_is_no_json_rpc_fails_the_call_at_once(
    connector: McpClientConnector, no_leftovers: None, answer: str
) -> None:
    """The SDK drops a reply it cannot read, and the call waited for its whole deadline
    (60 s by default): a server answering with a malformed message breaks the link now.
    So does one nested past any parser's depth: not ``timed_out`` at the deadline, with a
    cancellation sent for a request that had finished."""
    connection = await connector.connect(bad("raw_answers", answer, call_timeout_s=60))
    try:
        with anyio.fail_after(10):
            outcome = await connection.call_tool("garble", {})
        assert outcome.status == "failed"
        assert "not valid JSON-RPC" in (outcome.error or "")
        assert not connection.alive
    finally:
        await connection.aclose()


async def test_a_servers_own_error_with_code_32000_fails_the_call_and_keeps_the_session(
    connector: McpClientConnector, no_leftovers: None
) -> None:
    """-32000 is the first JSON-RPC server error code, and also what the SDK reports when
    a connection closed: a server's own error must not read as a call that may have run."""
    connection = await connector.connect(bad("raw_answers", "server_error"))
    try:
        outcome = await connection.call_tool("garble", {})
        assert outcome.status == "failed"
        assert "rate limit exceeded" in (outcome.error or "")
        assert connection.alive
    finally:
        await connection.aclose()


@pytest.mark.slow
async def test_an_oversized_result_fails_bounded_without_buffering_it(
    connector: McpClientConnector, no_leftovers: None
) -> None:
    connection = await connector.connect(bad())
    try:
        outcome, growth = await peak_allocation_growth(
            lambda: connection.call_tool("huge", {"megabytes": 30})
        )
        assert outcome.status == "failed"
        assert "exceeded 4 MiB" in (outcome.error or "")
        assert not connection.alive
        # The bound's worth of one line, and the pipe's read buffers; the server sent 30 MiB.
        assert growth < 1.5 * MAX_MCP_MESSAGE_BYTES, f"{growth / 2**20:.2f} MiB"
    finally:
        await connection.aclose()


@pytest.mark.slow
async def test_a_result_under_the_bound_arrives_whole(served: McpConnection) -> None:
    outcome = await served.call_tool("huge", {"megabytes": 1})
    assert outcome.status == "succeeded"
    assert outcome.output == {"result": "x" * 1_000_000}


@pytest.mark.slow
async def test_a_hung_tool_list_times_out_and_leaves_no_process(
    connector: McpClientConnector, no_leftovers: None
) -> None:
    connection = await connector.connect(bad("hang_list_tools"))
    try:
        with pytest.raises(TimeoutError):
            with anyio.fail_after(1.0):
                await connection.list_tools()
    finally:
        await connection.aclose()
    assert not connection.alive
    await connection.aclose()  # idempotent


async def test_exit_at_start_raises_with_the_redacted_stderr_tail(
    connector: McpClientConnector, no_leftovers: None
) -> None:
    declaration = bad("exit_at_start", env={"MCP_TOKEN": "tok-secret-9876"})
    with pytest.raises(McpConnectFailed) as raised:
        with anyio.fail_after(30):
            await connector.connect(declaration)
    message = raised.value.message
    assert "cannot start" in message
    assert "exit code 3" in message
    assert "tok-secret-9876" not in message
    assert "[redacted]" in message


@pytest.mark.slow
async def test_cancelling_a_slow_connect_leaves_no_process(
    connector: McpClientConnector, no_leftovers: None
) -> None:
    with pytest.raises(TimeoutError):
        with anyio.fail_after(1.0):
            await connector.connect(bad("slow_start", "30"))


async def test_no_bubblewrap_fails_closed_before_anything_starts(
    workspace: Path, no_leftovers: None
) -> None:
    connector = McpClientConnector(
        workspace=workspace,
        sandbox=SandboxPolicy(),
        url_policy=UrlPolicy(),
        environ=HOST_ENV,
        bwrap="no-such-bwrap-binary",
    )
    with pytest.raises(SandboxUnavailable, match="bubblewrap is not installed"):
        await connector.connect(bad())


async def test_a_missing_command_is_a_typed_refusal(connector: McpClientConnector) -> None:
    missing = McpServerDeclaration(
        name="ghost", transport="stdio", command=("no-such-mcp-server-xyz",)
    )
    with pytest.raises(McpCommandNotFound, match="no-such-mcp-server-xyz"):
        await connector.connect(missing)


async def test_a_command_the_sandbox_cannot_show_is_refused(
    connector: McpClientConnector, tmp_path: Path
) -> None:
    outside = tmp_path / "bin" / "server"
    outside.parent.mkdir()
    outside.write_text("#!/bin/sh\nexit 0\n")
    outside.chmod(0o755)
    declaration = McpServerDeclaration(name="outside", transport="stdio", command=(str(outside),))
    with pytest.raises(McpCommandNotFound, match="outside what the sandbox shows"):
        await connector.connect(declaration)


def test_unsandboxed_connector_warns_and_sandboxed_does_not(workspace: Path) -> None:
    def make(mode: str) -> McpClientConnector:
        return McpClientConnector(
            workspace=workspace,
            sandbox=SandboxPolicy(mode=mode),
            url_policy=UrlPolicy(),  # type: ignore[arg-type]
        )

    assert make("bubblewrap").approval_warning is None
    warning = make("none").approval_warning
    assert warning is not None
    assert "UNSANDBOXED" in warning


async def test_unsandboxed_server_runs_and_its_tree_ends_at_close(
    workspace: Path, no_leftovers: None
) -> None:
    connector = McpClientConnector(
        workspace=workspace,
        sandbox=SandboxPolicy(mode="none"),
        url_policy=UrlPolicy(),
        environ=HOST_ENV,
    )
    connection = await connector.connect(bad())
    outcome = await connection.call_tool("echo_env", {"names": []})
    assert set(outcome.output["names"]) == {"PATH", "LANG", "HOME"}
    await connection.aclose()
    assert not connection.alive


@pytest.fixture
def unsandboxed(workspace: Path) -> McpClientConnector:
    return McpClientConnector(
        workspace=workspace,
        sandbox=SandboxPolicy(mode="none"),
        url_policy=UrlPolicy(),
        environ=HOST_ENV,
    )


def _helper(workspace: Path) -> int:
    """The pid the server wrote for its helper (a Host pid: the server is unsandboxed)."""
    return int((workspace / "helper.pid").read_text())


def _helper_running(pid: int) -> bool:
    try:
        proc = psutil.Process(pid)
        return proc.status() != psutil.STATUS_ZOMBIE and "time.sleep(600)" in " ".join(
            proc.cmdline()
        )
    except psutil.Error:
        return False


def _helper_gone(pid: int) -> bool:
    """Polled by pid: ``no_leftovers`` sees only the Host's descendants, and an escaped
    helper is not one."""
    deadline = time.monotonic() + 5
    while _helper_running(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    gone = not _helper_running(pid)
    if not gone:
        # Cleanup only: the helper may end meanwhile, and the answer stays "not gone".
        with contextlib.suppress(psutil.Error):
            psutil.Process(pid).kill()
    return gone


@pytest.mark.parametrize("how", ["child", "setsid"])
async def test_unsandboxed_server_helpers_end_with_aclose(
    unsandboxed: McpClientConnector, workspace: Path, how: str, no_leftovers: None
) -> None:
    # The server exits at once when stdin closes; its helper (in its group, or detached
    # into its own session with its parent gone) must not outlive the connection.
    connection = await unsandboxed.connect(bad("spawn_helper", how))
    try:
        pid = _helper(workspace)
        assert _helper_running(pid)
        outcome = await connection.call_tool("add", {"a": 1, "b": 2})
        assert outcome.status == "succeeded"
    finally:
        await connection.aclose()
    assert _helper_gone(pid)


@pytest.mark.parametrize("how", ["child", "setsid"])
async def test_unsandboxed_failed_connect_ends_the_helpers(
    unsandboxed: McpClientConnector, workspace: Path, how: str, no_leftovers: None
) -> None:
    with pytest.raises(McpConnectFailed, match="exit code 3"):
        with anyio.fail_after(30):
            await unsandboxed.connect(bad("spawn_helper", how, "exit"))
    assert _helper_gone(_helper(workspace))


async def _helper_started(workspace: Path) -> int:
    """The helper's pid, once the server has written it (polled: starting a Python server
    on a loaded machine takes seconds)."""
    pid_file = anyio.Path(workspace / "helper.pid")
    with anyio.fail_after(30):
        while not await pid_file.exists():  # noqa: ASYNC110 (another process writes it)
            await anyio.sleep(0.05)
    return _helper(workspace)


@pytest.mark.parametrize("how", ["child", "setsid"])
async def test_unsandboxed_cancelled_connect_ends_the_helpers(
    unsandboxed: McpClientConnector, workspace: Path, how: str, no_leftovers: None
) -> None:
    connected: list[McpConnection] = []

    async def connect() -> None:
        connected.append(await unsandboxed.connect(bad("spawn_helper", how, "hang")))

    async with anyio.create_task_group() as group:
        group.start_soon(connect)
        # The server started its helper and hangs without answering: the connect is cancelled.
        pid = await _helper_started(workspace)
        group.cancel_scope.cancel()
    assert connected == []
    assert _helper_gone(pid)


@pytest.mark.slow
async def test_real_time_server_found_on_path_answers_in_utc(
    connector: McpClientConnector, no_leftovers: None
) -> None:
    declaration = McpServerDeclaration(
        name="time", transport="stdio", command=("mcp-server-time", "--local-timezone", "UTC")
    )
    connection = await connector.connect(declaration)
    try:
        tools = {tool.name: tool for tool in await connection.list_tools()}
        assert "get_current_time" in tools
        assert tools["get_current_time"].description
        outcome = await connection.call_tool("get_current_time", {"timezone": "UTC"})
        assert outcome.status == "succeeded", outcome.error
        assert outcome.output["timezone"] == "UTC"
        assert outcome.output["datetime"].startswith(time.strftime("%Y-", time.gmtime()))
    finally:
        await connection.aclose()


@pytest.fixture
def repository(workspace: Path) -> Path:
    repo = git_repository(
        workspace / "repo", message="first commit from the test", files={"README.md": "hello\n"}
    )
    (repo / "untracked.txt").write_text("new\n")
    return repo


@pytest.mark.slow
async def test_real_git_server_reads_a_repository_in_the_workspace(
    connector: McpClientConnector, repository: Path, no_leftovers: None
) -> None:
    declaration = McpServerDeclaration(
        name="git",
        transport="stdio",
        command=("mcp-server-git", "--repository", str(repository)),
    )
    connection = await connector.connect(declaration)
    try:
        names = {tool.name for tool in await connection.list_tools()}
        assert {"git_status", "git_log"} <= names
        status = await connection.call_tool("git_status", {"repo_path": str(repository)})
        assert status.status == "succeeded", status.error
        assert "untracked.txt" in str(status.output)
        log = await connection.call_tool("git_log", {"repo_path": str(repository)})
        assert log.status == "succeeded", log.error
        assert "first commit from the test" in str(log.output)
    finally:
        await connection.aclose()


def _free_port() -> int:
    with socket.create_server(("127.0.0.1", 0)) as probe:
        return int(probe.getsockname()[1])


def _listens(pid: int, port: int) -> bool:
    """Whether process ``pid`` itself listens on ``port`` (not another that took it)."""
    try:
        found = psutil.Process(pid).net_connections(kind="tcp")
    except psutil.Error:
        return False
    return any(c.status == psutil.CONN_LISTEN and c.laddr.port == port for c in found)


def _serving(port: int) -> subprocess.Popen[bytes] | None:
    """bad_server.py listening on ``port``; None if it exited first (the port was taken
    between finding it free and the server binding it)."""
    process = subprocess.Popen(
        [sys.executable, str(SERVER), "http", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 20
    while True:
        if _listens(process.pid, port):
            return process
        if process.poll() is not None:
            return None
        if time.monotonic() >= deadline:
            process.kill()
            process.wait(10)
            raise AssertionError("bad_server.py was not listening after 20 s")
        time.sleep(0.05)


@pytest.fixture
def http_server(tmp_path: Path) -> Iterator[str]:
    """bad_server.py serving streamable HTTP on loopback, in a subprocess on the Host."""
    for _ in range(5):
        port = _free_port()
        process = _serving(port)
        if process is not None:
            break
    else:
        raise AssertionError("bad_server.py exited at start on 5 ports in a row")
    try:
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.terminate()
        process.wait(10)


@pytest.mark.slow
async def test_http_server_is_reached_through_the_url_policy(
    workspace: Path, http_server: str
) -> None:
    connector = McpClientConnector(
        workspace=workspace,
        sandbox=SandboxPolicy(),
        url_policy=UrlPolicy(allow_private=frozenset({"127.0.0.1"})),
        environ=HOST_ENV,
    )
    declaration = McpServerDeclaration(name="web", transport="http", url=http_server)
    connection = await connector.connect(declaration)
    try:
        assert "add" in {tool.name for tool in await connection.list_tools()}
        outcome = await connection.call_tool("add", {"a": 20, "b": 22})
        assert outcome.status == "succeeded", outcome.error
        assert outcome.output == {"result": 42}
        assert outcome.audit == {"server": "web", "tool": "add", "transport": "http"}
        failed = await connection.call_tool("fail", {"reason": "over http"})
        assert failed.status == "failed"
        assert "over http" in (failed.error or "")
    finally:
        await connection.aclose()
    assert not connection.alive


@pytest.mark.slow
async def test_http_oversized_response_fails_bounded(workspace: Path, http_server: str) -> None:
    connector = McpClientConnector(
        workspace=workspace,
        sandbox=SandboxPolicy(),
        url_policy=UrlPolicy(allow_private=frozenset({"127.0.0.1"})),
    )
    connection = await connector.connect(
        McpServerDeclaration(name="web", transport="http", url=http_server)
    )
    try:
        outcome = await connection.call_tool("huge", {"megabytes": 10})
        assert outcome.status == "failed"
        assert "exceeded 4 MiB" in (outcome.error or "")
        assert not connection.alive
    finally:
        await connection.aclose()


class _GzipBomb(http.server.BaseHTTPRequestHandler):
    """Answers every POST with a 200 MB JSON body gzipped to about 200 KB."""

    body = b""
    asked: ClassVar[list[str]] = []

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length", 0)))
        self.asked.append(self.headers.get("accept-encoding", ""))
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-encoding", "gzip")
        self.send_header("content-length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


def _gzip_bomb(inflated_mb: int) -> bytes:
    buffer = io.BytesIO()
    with gzip.GzipFile(fileobj=buffer, mode="wb", compresslevel=9) as out:
        out.write(b'{"jsonrpc":"2.0","id":0,"result":{"x":"')
        for _ in range(inflated_mb):
            out.write(b"A" * (1 << 20))
        out.write(b'"}}')
    return buffer.getvalue()


@pytest.mark.slow
async def test_http_servers_own_32000_error_fails_the_call_and_a_crash_is_indeterminate(
    workspace: Path, http_server: str
) -> None:
    """Over HTTP the SDK makes up a -32000 error when a response stream breaks; a server's
    own -32000 error, answered in its response, is a refusal, not a connection that ended."""
    connector = McpClientConnector(
        workspace=workspace,
        sandbox=SandboxPolicy(),
        url_policy=UrlPolicy(allow_private=frozenset({"127.0.0.1"})),
    )
    connection = await connector.connect(
        McpServerDeclaration(name="web", transport="http", url=http_server)
    )
    try:
        refused = await connection.call_tool("server_error", {"message": "rate limit exceeded"})
        assert refused.status == "failed"
        assert "rate limit exceeded" in (refused.error or "")
        assert connection.alive
        assert (await connection.call_tool("add", {"a": 1, "b": 2})).status == "succeeded"
        crashed = await connection.call_tool("crash", {})
        assert crashed.status == "indeterminate"
        assert "ended while the call ran" in (crashed.error or "")
        assert not connection.alive
    finally:
        await connection.aclose()


async def test_http_compressed_body_is_decoded_only_to_the_cap(workspace: Path) -> None:
    """A gzip body far under the message cap would inflate past it in one read by httpx.
    Bodies are asked for uncompressed; one compressed anyway is decoded from its raw bytes
    a bounded step at a time, and the cap counts decoded bytes: the bomb stops at 4 MiB."""
    _GzipBomb.body = await anyio.to_thread.run_sync(_gzip_bomb, 200)
    assert len(_GzipBomb.body) < MAX_MCP_MESSAGE_BYTES // 4
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _GzipBomb)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    connector = McpClientConnector(
        workspace=workspace,
        sandbox=SandboxPolicy(),
        url_policy=UrlPolicy(allow_private=frozenset({"127.0.0.1"})),
    )
    url = f"http://127.0.0.1:{server.server_port}/mcp"
    declaration = McpServerDeclaration(name="bomb", transport="http", url=url)
    try:

        async def connect() -> BaseException | None:
            try:
                with anyio.fail_after(30):
                    connection = await connector.connect(declaration)
            except Exception as exc:
                return exc
            await connection.aclose()
            return None

        failure, growth = await peak_rss_growth(connect)
    finally:
        server.shutdown()
        server.server_close()
    assert isinstance(failure, McpConnectFailed)
    assert "exceeded 4 MiB" in failure.message
    assert _GzipBomb.asked
    assert set(_GzipBomb.asked) == {"identity"}
    assert growth < 50 * 1024 * 1024  # the first connect imports the SDK's client side too


async def test_http_server_that_is_not_there_fails_to_connect(workspace: Path) -> None:
    connector = McpClientConnector(
        workspace=workspace,
        sandbox=SandboxPolicy(),
        url_policy=UrlPolicy(allow_private=frozenset({"127.0.0.1"})),
    )
    # Held bound and never listened on: refused, and no other process can take the port.
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        port = held.getsockname()[1]
        declaration = McpServerDeclaration(
            name="web", transport="http", url=f"http://127.0.0.1:{port}/mcp"
        )
        with pytest.raises(McpConnectFailed, match=f"127.0.0.1:{port}"):
            with anyio.fail_after(30):
                await connector.connect(declaration)


async def test_http_refused_by_the_url_policy_connects_nothing(workspace: Path) -> None:
    connector = McpClientConnector(
        workspace=workspace, sandbox=SandboxPolicy(), url_policy=UrlPolicy()
    )
    with socket.create_server(("127.0.0.1", 0)) as listener:
        listener.settimeout(0.2)
        port = listener.getsockname()[1]
        declaration = McpServerDeclaration(
            name="web", transport="http", url=f"http://127.0.0.1:{port}/mcp"
        )
        with pytest.raises(UrlDenied) as raised:
            await connector.connect(declaration)
        assert isinstance(raised.value, UserError)
        assert raised.value.reason == "loopback"
        with pytest.raises(TimeoutError):
            listener.accept()


async def test_pinned_connections_admit_per_policy_and_send_only_to_admitted_hosts() -> None:
    with socket.create_server(("127.0.0.1", 0)) as listener:
        listener.settimeout(0.2)
        port = listener.getsockname()[1]
        strict = await PinnedConnections.open(UrlPolicy())
        try:
            with pytest.raises(UrlDenied):
                await strict.admit(f"http://127.0.0.1:{port}/mcp")
            request = httpcore.Request("GET", f"http://127.0.0.1:{port}/mcp")
            with pytest.raises(httpcore.ConnectError, match="not validated"):
                await strict.handle(request)
        finally:
            await strict.aclose()
        with pytest.raises(TimeoutError):
            listener.accept()
        loose = await PinnedConnections.open(UrlPolicy(allow_private=frozenset({"127.0.0.1"})))
        try:
            target = await loose.admit(f"http://127.0.0.1:{port}/mcp")
            assert target.addresses == ("127.0.0.1",)
            assert [t.origin for t in loose.targets] == [f"http://127.0.0.1:{port}"]
        finally:
            await loose.aclose()
