"""ConsoleApprover: answer ``ask`` effects on the terminal the command runs in.

The approver shows only what the ``ApprovalRequest.view`` holds (the effect,
its field-name-redacted arguments, the names of secrets it would bind), each
value cut short, with secret-looking assignments redacted once more and
control characters escaped, so an argument chosen by the model can neither
leak a secret nor repaint the terminal to fake a different request.
"""

from __future__ import annotations

import contextlib
import sys
import threading
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import anyio
import anyio.from_thread
import anyio.lowlevel
from rich.console import Console
from rich.text import Text

from hostkit.cli._render import command_line
from hostkit.effects import DIFF_KEY, ApprovalDecision, ApprovalRequest, PendingApproval
from hostkit.inspect import HIDDEN_NOTE, one_line, one_line_hides
from hostkit.types import PARTIAL_KEY

__all__ = ["ANSWERS", "ConsoleApprover", "interrupted_line", "render_approval", "render_request"]

# What a person may type; anything else is asked again.
ANSWERS: Mapping[str, ApprovalDecision] = {
    "o": "approve_once",
    "once": "approve_once",
    "s": "approve_session",
    "session": "approve_session",
    "d": "deny",
    "deny": "deny",
    "n": "deny",
    "no": "deny",
}
_SAID: Mapping[ApprovalDecision, str] = {
    "approve_once": "approved once",
    "approve_session": "approved for this session",
    "deny": "denied",
}
PROMPT = "[o]nce / [s]ession / [d]eny? "
# A multi-line argument shows at most this many lines (a diff three times as many).
MAX_BLOCK_LINES = 20


def render_request(
    console: Console,
    request: ApprovalRequest,
    *,
    max_arguments: int = 16,
    max_value_chars: int = 200,
    max_lines: int = MAX_BLOCK_LINES,
) -> None:
    """Print what the approver is asked: the effect, its redacted arguments and diff, bounded.

    A multi-line value is printed as its lines (each escaped and cut, at
    most ``max_lines``), a file overwrite's diff line by line in red and green.
    """
    _render(
        console,
        "approval needed",
        request.effect,
        request.view,
        request.secret_names,
        request.warning,
        max_arguments=max_arguments,
        max_value_chars=max_value_chars,
        max_lines=max_lines,
    )


def render_approval(console: Console, approval: PendingApproval) -> None:
    """Print a stored approval as the prompt that asked it did (``render_request``).

    ``hostkit approvals approve`` and ``deny`` print it before they record
    the answer: the operator sees the call they answer as a terminal prompt
    would have shown it, its warning, secrets and hidden parts included. Its
    heading says an answer is being given (``answering apr_…``), not asked
    for: the store may still refuse it (stale, already answered) in the
    ``error:`` line that follows.
    """
    warning = approval.view.get("warning")
    _render(
        console,
        f"answering {one_line(approval.approval_id, 80)}",
        approval.effect,
        approval.view,
        approval.secret_names,
        str(warning) if warning else None,
    )


def _render(
    console: Console,
    heading: str,
    effect_name: str,
    view: Mapping[str, Any],
    secret_names: tuple[str, ...],
    warning: str | None,
    *,
    max_arguments: int = 16,
    max_value_chars: int = 200,
    max_lines: int = MAX_BLOCK_LINES,
) -> None:
    effect = one_line(view.get("effect", effect_name), 80)
    console.print(
        Text.assemble((heading, "bold yellow"), ": the agent wants to run ", (effect, "bold"))
    )
    arguments = view.get("arguments")
    hidden = bool(view.get(PARTIAL_KEY))
    if isinstance(arguments, Mapping):
        items = list(arguments.items())
        for name, value in items[:max_arguments]:
            label = one_line(name, 60)
            if isinstance(value, str) and "\n" in value.rstrip("\n"):
                console.print(Text.assemble("  ", (label, "bold"), ":"))
                _print_block(console, value, "    │ ", max_lines, max_value_chars, "")
                lines = value.rstrip("\n").split("\n")
                hidden = hidden or len(lines) > max_lines
                hidden = hidden or any(one_line_hides(line, max_value_chars) for line in lines)
                continue
            console.print(
                Text.assemble("  ", (label, "bold"), ": ", one_line(value, max_value_chars))
            )
            hidden = hidden or one_line_hides(value, max_value_chars)
        if len(items) > max_arguments:
            console.print(f"  … {len(items) - max_arguments} more arguments not shown")
            hidden = True
    elif arguments is not None:
        console.print(Text.assemble("  arguments: ", one_line(arguments, max_value_chars)))
        hidden = hidden or one_line_hides(arguments, max_value_chars)
    if hidden:
        # A model can shape its arguments so the part that matters is what gets cut or
        # masked: the approver must know what is shown is not the whole call.
        console.print(Text(f"  ! {HIDDEN_NOTE}", style="bold yellow"))
    target = view.get("target")
    if isinstance(target, Mapping):
        # What the Host checked before asking (web: the origin and its addresses; a file
        # write: whether it creates or replaces a file), one line per fact.
        facts = list(target.items())
        if len(facts) > max_arguments:
            console.print(f"  … {len(facts) - max_arguments} more target facts not shown")
        for name, value in facts[:max_arguments]:
            label = one_line(name, 60)
            console.print(
                Text.assemble(f"  target {label}: ", (one_line(value, max_value_chars), "bold"))
            )
    elif target is not None:
        console.print(Text.assemble("  target: ", (one_line(target, max_value_chars), "bold")))
    diff = view.get(DIFF_KEY)
    if isinstance(diff, str):
        if diff:
            console.print("  the file exists; this write replaces it:", highlight=False)
            _print_block(console, diff, "    ", max_lines * 3, max_value_chars, "diff")
        else:
            console.print("  no change: the new content is the file's current content")
    if secret_names:
        names = ", ".join(one_line(name, 60) for name in secret_names[:max_arguments])
        console.print(Text.assemble("  binds secrets: ", (names, "bold")))
    if warning:
        console.print(Text.assemble("  warning: ", (one_line(warning, 300), "bold red")))


def _print_block(
    console: Console, text: str, indent: str, max_lines: int, max_chars: int, kind: str
) -> None:
    """``text`` line by line, each escaped and cut; a diff's added/removed lines coloured."""
    lines = text.rstrip("\n").split("\n")
    for line in lines[:max_lines]:
        style = ""
        if kind == "diff" and not line.startswith(("+++", "---")):
            style = "green" if line.startswith("+") else "red" if line.startswith("-") else ""
        console.print(Text.assemble(indent, (one_line(line, max_chars), style)), soft_wrap=True)
    if len(lines) > max_lines:
        console.print(f"{indent}… {len(lines) - max_lines} more lines not shown", highlight=False)


def interrupted_line(
    approval_id: str, *, config: Path | None = None, agent: str | None = None
) -> str:
    """What a prompt left unanswered prints (Ctrl-C, no answer in time): it stays pending.

    True because the approval was recorded pending before the prompt, and the
    turn pauses on it; printed unwrapped so the command can be copied.
    """
    approve, deny = (
        command_line("approvals", verb, approval_id, config=config, agent=agent)
        for verb in ("approve", "deny")
    )
    return (
        f"(no answer here: approval {approval_id} stays pending; "
        f"answer it with `{approve}` or `{deny}`)"
    )


class ConsoleApprover:
    """An ``ApprovalProvider`` that asks ``[o]nce / [s]ession / [d]eny`` on a terminal.

    ``decide`` prints the request (``render_request``), then reads a line
    from ``stdin`` without blocking the event loop. Unknown answers are asked
    again up to ``max_attempts`` times, then denied; end of input is denied.
    The runtime bounds the wait (``host.approval_timeout_s``) by cancelling
    ``decide``: the turn then pauses ``needs_user``. Prompts never interleave:
    one prompt holds the terminal until it is answered or cancelled.
    A prompt cancelled without an answer (Ctrl-C, no answer in time) says in
    one line that the approval stays pending and how to answer it; one the
    runtime withdrew (``withdrawn``: answered elsewhere, the Host closing)
    says why instead. ``config`` is named in the commands it prints.
    ``console`` and ``stdin`` are injectable (tests, other terminals).
    """

    def __init__(
        self,
        *,
        console: Console | None = None,
        stdin: TextIO | None = None,
        max_attempts: int = 3,
        max_answer_chars: int = 256,
        max_arguments: int = 16,
        max_value_chars: int = 200,
        config: Path | None = None,
        agent: str | None = None,
    ) -> None:
        self._console = console or Console(stderr=True)
        self._config = config
        self._agent = agent
        # Why the runtime withdrew the prompt open now (told before it is cancelled).
        self._told: dict[str, str] = {}
        self._asking: str | None = None
        # Prompts answered here, for a late "answered elsewhere first" (bounded).
        self._answered: deque[str] = deque(maxlen=64)
        self._lines = _TerminalLines(stdin or sys.stdin, max_chars=max_answer_chars)
        self._max_attempts = max(1, max_attempts)
        self._max_arguments = max_arguments
        self._max_value_chars = max_value_chars
        self._terminal = anyio.Lock()
        # Called before a prompt is drawn: a progress line (a spinner) on the same
        # terminal would redraw itself over the prompt's question.
        self.before_prompt: Callable[[], None] = _nothing

    async def decide(self, request: ApprovalRequest) -> ApprovalDecision:
        """The person's answer; ``deny`` after ``max_attempts`` unknown answers or at EOF."""
        async with self._terminal:
            self.before_prompt()
            render_request(
                self._console,
                request,
                max_arguments=self._max_arguments,
                max_value_chars=self._max_value_chars,
            )
            self._asking = request.approval_id
            try:
                decision = await self._ask()
            except anyio.get_cancelled_exc_class():
                told = self._told.pop(request.approval_id, None)
                line = (
                    f"(no answer here: {told})"
                    if told is not None
                    else interrupted_line(
                        request.approval_id, config=self._config, agent=self._agent
                    )
                )
                self._console.print("\n" + line, highlight=False, markup=False, soft_wrap=True)
                raise
            finally:
                self._asking = None
                self._told.pop(request.approval_id, None)
            self._console.print(f"  {_SAID[decision]}", style="bold", highlight=False)
            self._answered.append(request.approval_id)
            return decision

    def withdrawn(self, request: ApprovalRequest, reason: str) -> None:
        """The runtime took the question back: say why, once, where it is still news."""
        approval_id = request.approval_id
        if approval_id == self._asking:
            self._told[approval_id] = one_line(reason, 300)  # the cancelled prompt prints it
        elif approval_id in self._answered:
            self._answered.remove(approval_id)
            self._console.print(
                f"  not used: {one_line(reason, 300)}", highlight=False, markup=False
            )

    async def _ask(self) -> ApprovalDecision:
        for _ in range(self._max_attempts):
            self._console.print(PROMPT, end="", markup=False, highlight=False)
            line = await self._lines.readline()
            if not line:
                self._console.print("\n  end of input", highlight=False)
                return "deny"
            decision = ANSWERS.get(line.strip().lower())
            if decision is not None:
                return decision
            self._console.print("  please answer o, s or d", highlight=False)
        self._console.print(f"  no valid answer after {self._max_attempts} tries", highlight=False)
        return "deny"


@dataclass
class _Read:
    wake: anyio.Event = field(default_factory=anyio.Event)
    line: str = ""
    finished: bool = False


class _TerminalLines:
    """Lines from a blocking text stream, each read in a daemon thread; for one event loop.

    Not ``anyio.to_thread.run_sync(stream.readline, abandon_on_cancel=True)``:
    an abandoned AnyIO worker thread is not a daemon, so after a prompt timed
    out the process could not exit until someone pressed Enter. A read
    outlives its cancelled prompt and serves the next prompt, so two threads
    never race for one line; a line that arrived while no prompt was waiting
    answered a prompt that is gone, and is dropped.
    """

    def __init__(self, stream: TextIO, *, max_chars: int) -> None:
        self._stream = stream
        self._max_chars = max_chars
        self._read: _Read | None = None

    async def readline(self) -> str:
        """The next line ("" at end of input or when the stream fails); cancellable."""
        read = self._read
        if read is None or read.finished:
            read = self._read = _Read()
            token = anyio.lowlevel.current_token()
            threading.Thread(
                target=self._fill,
                args=(read, token),
                name="hostkit-console-approver",
                daemon=True,
            ).start()
        await read.wake.wait()
        self._read = None
        return read.line

    def _fill(self, read: _Read, token: Any) -> None:
        try:
            read.line = self._stream.readline(self._max_chars)
        except (OSError, ValueError):  # a closed or broken stream reads as end of input
            read.line = ""
        read.finished = True
        # The event loop may have ended while this thread waited: nobody is left to wake.
        with contextlib.suppress(RuntimeError):
            anyio.from_thread.run_sync(read.wake.set, token=token)


def _nothing() -> None:
    """No progress line to put away."""
