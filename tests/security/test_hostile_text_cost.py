"""Hostile text costs what ordinary text does: redaction, error messages and edits.

A tool error, a fetched page's title, a model's arguments: text an attacker
shapes reaches the redactors on the event loop. Each must take time linear
in what it reads and read a bounded amount, or one message stalls every
session of the Host. The family this file pins: credential patterns that
backtracked quadratically ("a_a_a_…", "a.a.a.…", "_token_token…"),
``bounded()`` redacting a whole megabyte to show 500 characters, a
secret-named argument of a megabyte spelled two hundred ways before it was
refused, and ``files.edit`` building gigabytes before its size check.
"""

from __future__ import annotations

import subprocess
import sys
import tracemalloc
from pathlib import Path

import pytest

import hostkit.errors as errors
from hostkit import ToolContext, tool
from hostkit.builtins.files import WorkspaceError, WorkspaceScope
from hostkit.cores._redact import redact_text, safe_argv
from hostkit.effects._redaction import (
    MAX_DERIVED_SECRET_CHARS,
    RedactionLimit,
    derived_secrets,
)
from hostkit.errors import bounded, redact_credentials
from hostkit.testing import CallTools, Reply, ScriptedModel
from tests.hosts import open_host, request

# Each shape once made one of the credential patterns quadratic.
SHAPES = ("a_", "a-", "a.", "a+", "sk-", "token_", "_token", "a://", "a://b:", "1:")

_LINEAR_CHECK = """
import sys
from hostkit.cores._redact import redact_text, safe_argv
from hostkit.errors import redact_credentials
for shape in sys.argv[1:]:
    text = shape * (100_000 // len(shape))
    redact_credentials(text)
    redact_text(text, ())
    safe_argv([text, "--x=" + text], ())
print("done")
"""


def test_the_credential_patterns_read_hostile_text_in_linear_time() -> None:
    """100 KB of each shape: milliseconds when linear; before, minutes for one of them.

    A child process, so a regression fails at the deadline instead of hanging the
    suite (the deadline is a hang guard, a hundred times what linear text takes).
    """
    done = subprocess.run(
        [sys.executable, "-c", _LINEAR_CHECK, *SHAPES],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert (done.returncode, done.stdout.strip()) == (0, "done"), done.stderr[-2000:]


@pytest.mark.parametrize(
    ("text", "kept", "gone"),
    [
        # A name with more parts than the pattern's prefix still has its value masked.
        ("a_" * 40 + "token=abc123456 next", "[redacted] next", "abc123456"),
        ("my_db_password: hunter2222", "my_db_password: [redacted]", "hunter2222"),
        # A scheme preceded by more letters than any scheme has.
        ("x" * 60 + "https://user:pa55word@h.example/", ":[redacted]@h.example", "pa55word"),
        ("see postgresql+psycopg://app:s3cr3t@db/x", "app:[redacted]@db", "s3cr3t"),
    ],
)
def test_bounding_the_patterns_masks_what_they_masked_before(
    text: str, kept: str, gone: str
) -> None:
    redacted = redact_credentials(text)
    assert kept in redacted
    assert gone not in redacted


def test_a_core_views_url_query_and_credential_words_stay_masked() -> None:
    shown = redact_text("https://u:pw1234@h.example/x?key=abc#frag and http://a/b?c=1", ())
    assert shown == "https://[redacted]@h.example/x?[redacted]#frag and http://a/b?[redacted]"
    words = safe_argv(["--api-key=abc123456", "PASSWORD:xyzw1", "_token" * 500 + "=v1v2v3"], ())
    assert words[:2] == ["--api-key=[redacted]", "PASSWORD:[redacted]"]
    assert words[2].endswith("…")
    assert "v1v2v3" not in words[2]
    assert safe_argv(["a:b", "keyless", "x=1"], ()) == ["a:b", "keyless", "x=1"]


def test_bounded_redacts_a_bounded_head_of_a_long_text(monkeypatch: pytest.MonkeyPatch) -> None:
    """Showing 200 characters of a megabyte redacts kilobytes, not the megabyte."""
    seen: list[int] = []

    def recording(text: str) -> str:
        seen.append(len(text))
        return redact_credentials(text)

    monkeypatch.setattr(errors, "redact_credentials", recording)
    shown = bounded("token=abc123456 " + "a_" * 50_000, 200)
    assert seen
    assert max(seen) <= 200 * 4 + 16_384
    assert len(shown) == 200
    assert shown.endswith("…")
    assert shown.startswith("token=[redacted] a_a_")
    # A text within the head is redacted whole, as before.
    assert bounded("x " * 100 + "password=hunter2222", 1000).endswith("password=[redacted]")


def test_secret_named_values_past_the_size_caps_fail_closed() -> None:
    at_cap = "k" * MAX_DERIVED_SECRET_CHARS
    assert derived_secrets({"token": at_cap}) == [at_cap]
    with pytest.raises(RedactionLimit, match="longer than"):
        derived_secrets({"token": at_cap + "k"})
    # Each one short enough, all of them together too long.
    many = {"tokens": [f"{i:02d}" + "v" * (MAX_DERIVED_SECRET_CHARS - 2) for i in range(3)]}
    with pytest.raises(RedactionLimit, match="in all"):
        derived_secrets(many)


@pytest.mark.anyio
async def test_a_megabyte_under_a_secret_named_argument_is_refused_before_redaction(
    tmp_path: Path,
) -> None:
    """The call is ``invalid`` without running, its value nowhere, and the session goes on."""
    ran: list[str] = []

    @tool("probe.echo")
    async def echo(ctx: ToolContext, text: str) -> str:
        """Echoes."""
        ran.append(text)
        return text

    flood = "\n".join(f"line {i:06d} " + "s3cr3t" * 10 for i in range(15_000))
    model = ScriptedModel(
        [
            CallTools(("probe_echo", {"text": "hi", "token": flood})),
            Reply("refused, fine"),
            Reply("next"),
        ]
    )
    async with open_host(tmp_path, model, tools=[echo]) as host:
        first = await host.turns.run(request("call it"))
        second = await host.turns.run(request("again"))
    assert ran == []
    assert [e.status for e in first.effects] == ["invalid"]
    assert "too long secret-named values" in first.effects[0].summary
    told = [m.content for m in model.requests[1].messages if m.role == "tool"]
    assert len(told) == 1
    assert "s3cr3t" not in told[0]
    assert "line 0000" not in told[0]
    assert (second.outcome, second.text) == ("completed", "next")


@pytest.mark.anyio
async def test_an_edit_over_the_size_limit_is_refused_before_it_is_built(tmp_path: Path) -> None:
    """A million one-byte matches, each to become 256 bytes: refused with the size it would
    have, the file untouched, and nothing near that size ever built."""
    scope = WorkspaceScope(tmp_path)
    await scope.write("a.txt", "a" * scope.max_write_bytes)
    tracemalloc.start()
    try:
        with pytest.raises(WorkspaceError, match="268435456 bytes is over"):
            await scope.edit("a.txt", "a", "x" * 256, count=scope.max_write_bytes)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 32 * 1024 * 1024
    assert (tmp_path / "a.txt").read_text() == "a" * scope.max_write_bytes
    # Within the limit, the same edit works (a shrinking one, counted exactly).
    edited = await scope.edit("a.txt", "a" * 1024, "b", count=1024)
    assert edited.size == 1024
