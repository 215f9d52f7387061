"""The Host's own stdio transport: a sandboxed child, bounded lines, a tree that always ends.

The SDK's ``stdio_client`` merges its own default environment into the
child's and buffers a line of any length; this one starts exactly the planned
launch (``_launch``) and never holds more than ``MAX_MCP_MESSAGE_BYTES`` of
one JSON-RPC line: a longer line breaks the connection (``broken`` says why)
and the server is stopped at close. stderr keeps only a bounded tail, for the
error a server that exits at start is reported with (declared env values of
at least ``MIN_SECRET_CHARS`` characters redacted, as in results). Closing
follows the MCP shutdown order (close stdin, a short grace, then TERM and
KILL) and always ends the whole tree, whether or not the server already
exited: the server is an owned process tree
(``hostkit.builtins.process.owned_process``, as ``terminal.run``'s): its own
session and process group under a subreaper init that kills what is left
when the server exits, and every process ever seen in it (snapshots while it
runs, before stdin closes and after the grace) is ended by pid, one that
called ``setsid`` too; bubblewrap's PID namespace ends everything inside it
besides. It runs shielded, so a cancelled caller (a connect that timed out)
leaves no process behind.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager, suppress

import anyio
import mcp_types
from anyio.abc import ByteReceiveStream, Process
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.client._transport import TransportStreams
from mcp.shared.message import SessionMessage
from pydantic_core import from_json

from hostkit.builtins.mcp._errors import MAX_MCP_MESSAGE_BYTES, STDERR_TAIL_BYTES
from hostkit.builtins.mcp._launch import Launch
from hostkit.builtins.process import OwnedProcess, owned_process
from hostkit.effects import MIN_SECRET_CHARS

__all__ = ["StdioLink"]

_READ_CHUNK = 64 * 1024
_CLOSE_GRACE_S = 1.0  # after stdin closes, for the server to exit on its own
_TERM_GRACE_S = 1.0  # between TERM and KILL
_KILL_WAIT_S = 3.0
_SNAPSHOT_S = 1.0  # the tree's periodic snapshots while the server runs
_POLL_S = 0.02
_MIB = MAX_MCP_MESSAGE_BYTES // (1024 * 1024)
_MALFORMED = "the server answered a request with a message that is not valid JSON-RPC"
_PIPE_ERRORS = (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError)


class StdioLink:
    """One stdio server process and the state the connection reads: ended, broken, stderr."""

    transport = "stdio"

    def __init__(self, launch: Launch, *, secrets: Sequence[str] = ()) -> None:
        self._launch = launch
        # The threshold every result's redaction has: a shorter value would mask ordinary
        # words, and the tail must not hide what a result shows (docs/effects.md).
        self._secrets = sorted(
            (s for s in secrets if len(s) >= MIN_SECRET_CHARS), key=len, reverse=True
        )
        self._tail = bytearray()
        self._ended = False
        self._broken: str | None = None
        self.pid: int | None = None
        self.returncode: int | None = None

    @property
    def ended(self) -> bool:
        return self._ended

    @property
    def broken(self) -> str | None:
        return self._broken

    def diagnostics(self) -> str:
        """The exit code and stderr tail, the declaration's secret values redacted."""
        tail = self._tail.decode("utf-8", "replace").strip()
        for secret in self._secrets:
            tail = tail.replace(secret, "[redacted]")
        code = "" if self.returncode is None else f" (exit code {self.returncode})"
        return f"{code}: {tail}" if tail else code

    def closed_by(self, message: str) -> bool:
        """The link knows whether the server's output ended; the message is the server's."""
        return self._ended

    @asynccontextmanager
    async def streams(self) -> AsyncIterator[TransportStreams]:
        async with owned_process(
            self._launch.argv,
            cwd=self._launch.cwd,
            env=self._launch.env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            grace_s=_TERM_GRACE_S,
            confirm_s=_KILL_WAIT_S,
            sandboxed=self._launch.sandboxed,
        ) as owned:
            process = owned.process
            self.pid = process.pid
            read_send, read_receive = anyio.create_memory_object_stream[SessionMessage | Exception](
                0
            )
            write_send, write_receive = anyio.create_memory_object_stream[SessionMessage](0)
            try:
                async with anyio.create_task_group() as group:
                    group.start_soon(self._read_stdout, process, read_send)
                    group.start_soon(self._write_stdin, process, write_receive, read_send)
                    group.start_soon(self._read_stderr, process)
                    group.start_soon(owned.watch, _SNAPSHOT_S)
                    try:
                        yield read_receive, write_send
                    finally:
                        group.cancel_scope.cancel()
            finally:
                self._ended = True
                with anyio.CancelScope(shield=True):
                    await _stop(owned)
                    self.returncode = process.returncode
                    for stream in (read_send, read_receive, write_send, write_receive):
                        await stream.aclose()

    async def _read_stdout(
        self, process: Process, send: MemoryObjectSendStream[SessionMessage | Exception]
    ) -> None:
        """Pass the server's messages on until its output ends or breaks the link."""
        try:
            async with send:
                try:
                    await self._read_lines(process, send)
                finally:
                    # Before the stream closes: the requests it wakes (CONNECTION_CLOSED)
                    # see that the link ended, not a server's own -32000 error.
                    self._ended = True
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            return

    async def _read_lines(
        self, process: Process, send: MemoryObjectSendStream[SessionMessage | Exception]
    ) -> None:
        """One message per line, never more than the bound of one line in memory.

        A line's pieces are kept as they came and joined once, when its end
        arrives, rather than copied into a buffer reallocated as it grows.
        """
        assert process.stdout is not None
        pieces: list[bytes] = []
        held = 0
        while True:
            try:
                chunk = await process.stdout.receive(_READ_CHUNK)
            except (anyio.EndOfStream, *_PIPE_ERRORS):
                return
            start = 0
            while (newline := chunk.find(b"\n", start)) >= 0:
                held += newline - start
                if held > MAX_MCP_MESSAGE_BYTES:
                    break
                pieces.append(chunk[start:newline])
                line = b"".join(pieces)
                pieces.clear()
                held = 0
                start = newline + 1
                if line and not line.isspace():  # not strip(): a copy of MiBs
                    message = _parse(line)
                    if isinstance(message, Exception) and _answers_a_request(line):
                        # The SDK drops what it cannot read, and the request this
                        # answered would wait for its deadline: the link is broken.
                        self._broken = _MALFORMED
                        return
                    await send.send(message)
            else:
                pieces.append(chunk[start:])
                held += len(chunk) - start
            if held > MAX_MCP_MESSAGE_BYTES:
                self._broken = f"a message from the server exceeded {_MIB} MiB"
                return

    async def _write_stdin(
        self,
        process: Process,
        receive: MemoryObjectReceiveStream[SessionMessage],
        read_send: MemoryObjectSendStream[SessionMessage | Exception],
    ) -> None:
        assert process.stdin is not None
        try:
            async with receive:
                async for message in receive:
                    data = message.message.model_dump_json(by_alias=True, exclude_unset=True)
                    await process.stdin.send(data.encode("utf-8") + b"\n")
        except _PIPE_ERRORS:
            # The server stopped reading: end the session's read side too, so a
            # request waiting for its answer sees the connection close.
            self._ended = True
            await read_send.aclose()

    async def _read_stderr(self, process: Process) -> None:
        stderr: ByteReceiveStream | None = process.stderr
        assert stderr is not None
        with suppress(anyio.EndOfStream, *_PIPE_ERRORS):
            while True:
                self._tail += await stderr.receive(_READ_CHUNK)
                del self._tail[:-STDERR_TAIL_BYTES]


def _answers_a_request(line: bytes) -> bool:
    """Whether a line the SDK could not read is still an answer to a request (a JSON object
    with an id and a result or an error); any other line (a log line) is let through.

    An object nested too deeply to parse counts when it names an id and a result or an
    error: no log line is built like that, and the request it answered must not wait.
    """
    try:
        value = json.loads(line)
    except RecursionError:
        return (
            line.lstrip().startswith(b"{")
            and b'"id"' in line
            and (b'"result"' in line or b'"error"' in line)
        )
    except ValueError:
        return False
    return (
        isinstance(value, dict)
        and value.get("id") is not None
        and ("result" in value or "error" in value)
    )


def _parse(line: bytes) -> SessionMessage | Exception:
    """A parse error travels as a value; the session decides what it means.

    The line is read as JSON once (``from_json``, the parser ``validate_json``
    uses) and the envelope validated from that: ``validate_json`` builds a
    result's values anew for each member of the message union it tries, three
    to six times the work on a message of MiBs, all of it on the event loop.
    pydantic-core holds the GIL for a whole parse, so a worker thread would
    stall the loop as long: only less work spares it.
    """
    try:
        value = from_json(line)
        return SessionMessage(
            mcp_types.jsonrpc_message_adapter.validate_python(value, by_name=False)
        )
    except ValueError as exc:
        return exc


async def _stop(owned: OwnedProcess) -> None:
    """Close stdin, a short grace, then end the whole tree whatever the leader did (shielded).

    The tree is snapshotted before stdin closes, so a helper that detaches
    while the server shuts down is already known; ``end`` snapshots again
    and ends the group and every process ever seen, even when the leader
    has already exited.
    """
    process = owned.process
    assert process.stdin is not None
    assert process.stdout is not None
    await owned.snapshot()
    with suppress(*_PIPE_ERRORS):
        await process.stdin.aclose()
    await _exited(process, _CLOSE_GRACE_S)
    await owned.end()
    await _exited(process, _KILL_WAIT_S)
    for stream in (process.stdout, process.stderr):
        if stream is not None:
            with suppress(*_PIPE_ERRORS):
                await stream.aclose()
    if process.returncode is not None:
        # Releases the subprocess transport; bounded, a surviving holder of a pipe cannot hang it.
        with anyio.move_on_after(_CLOSE_GRACE_S), suppress(*_PIPE_ERRORS):
            await process.aclose()


async def _exited(process: Process, timeout_s: float) -> bool:
    """Poll the return code: ``wait()`` would also wait for pipes a descendant holds open."""
    with anyio.move_on_after(timeout_s):
        while process.returncode is None:  # noqa: ASYNC110 - nothing signals a child's exit
            await anyio.sleep(_POLL_S)
    return process.returncode is not None
