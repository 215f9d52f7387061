"""Clause: a request the provider refuses as too long is prepared again, smaller, once.

The ContextManager's estimate can run low: a tokenizer denser than the
estimate on this session's text, or calibration learned from text unlike
what followed. The provider then refuses the request (``ContextOverflow``)
before generating anything. The turn used to end ``failed`` and, since a
refused request reports no usage, the calibration never moved: every later
turn of the session assembled the same history by the same estimate and was
refused again. Now the refusal raises the session's calibration at once
(durably, with the refused decision) and the step is prepared once more.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from hostkit.errors import ContextOverflow
from hostkit.host import Host, HostConfig, parse_config
from hostkit.testing import Reply, ScriptedModel, capabilities
from hostkit.types import ModelRequest, StreamEvent
from tests.hosts import request

pytestmark = pytest.mark.anyio

WINDOW = 8_192
PROSE = "The quick brown fox jumps over the lazy dog near the riverbank. " * 64


def denser_than_estimated(refusals: list[int], answered: list[int]) -> object:
    """A provider whose tokenizer counts one token per two characters and that refuses a
    request whose input and output reservation do not fit its window, as vLLM does."""

    def decide(req: ModelRequest) -> Reply:
        tokens = sum(len(m.content) for m in req.messages) // 2
        if tokens + req.max_output_tokens > WINDOW:
            refusals.append(tokens)
            raise ContextOverflow(
                f"HTTP 400: {tokens} input tokens + {req.max_output_tokens} > {WINDOW}",
                provider="scripted",
                status=400,
            )
        answered.append(tokens)
        return Reply("noted")  # its usage: a quarter of the characters (ScriptedModel's)

    return decide


def config(tmp_path: Path) -> HostConfig:
    return parse_config(
        {
            "host": {"database": str(tmp_path / "hostkit.db"), "workspace": str(tmp_path)},
            "providers": {"test": {"kind": "scripted"}},
            "agents": {"assistant": {"provider": "test", "memory": False}},
        },
        base_dir=tmp_path,
    )


async def test_a_refused_request_is_prepared_again_smaller_and_the_session_goes_on(
    tmp_path: Path,
) -> None:
    refusals: list[int] = []
    answered: list[int] = []
    model = ScriptedModel([denser_than_estimated(refusals, answered)], repeat_last=True)
    settings = config(tmp_path)
    async with Host.open(settings, capabilities=capabilities(model, config=settings)) as host:
        results = [await host.turns.run(request(f"{n}: {PROSE}")) for n in range(10)]
        state = await host.store.context.read_state(
            session_id=results[-1].session_id, turn_id="none", window=1
        )
    assert [r.outcome for r in results] == ["completed"] * 10, [r.error for r in results]
    # The history outgrew what the estimate thought fits: refused, then answered smaller
    # (the answered requests include the summarizer's, when the retry compacts).
    assert refusals
    assert len(answered) >= 10
    assert all(tokens + 1_024 <= WINDOW for tokens in answered)
    # Learned durably: this provider reports half of what it counts, which pulls the
    # ratio back down a twentieth at a time, so it refuses again now and then, not each turn.
    assert len(refusals) <= 3
    assert state.calibration is not None
    assert state.calibration.ratio > 1.0


async def test_a_second_refusal_of_the_same_step_fails_the_turn(tmp_path: Path) -> None:
    """One more try, not a loop: a provider that refuses whatever it is sent costs the
    turn two requests, and the turn ends ``failed`` with the provider's words."""
    attempts: list[int] = []

    def refuse(req: ModelRequest) -> Reply:
        attempts.append(len(req.messages))
        raise ContextOverflow("HTTP 400: prompt is too long", provider="scripted", status=400)

    model = ScriptedModel([refuse], repeat_last=True)
    settings = config(tmp_path)
    async with Host.open(settings, capabilities=capabilities(model, config=settings)) as host:
        result = await host.turns.run(request("hello"))
    assert result.outcome == "failed"
    assert result.error == "provider failed: scripted: HTTP 400: prompt is too long"
    assert len(attempts) == 2


class RefusesAfterText(ScriptedModel):
    """Streams a word, then refuses the request as too long (a provider an embedder wrote)."""

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        self.requests.append(request)
        yield StreamEvent(kind="text", text="PARTIAL ")
        raise ContextOverflow("HTTP 400: too long", provider="scripted", status=400)


async def test_a_refusal_after_streamed_text_is_not_sent_again(tmp_path: Path) -> None:
    """Only a refusal before any text means nothing was generated: after text, the request
    is never sent again (the live view would join a dropped answer to the next one)."""
    model = RefusesAfterText([Reply("never")])
    settings = config(tmp_path)
    async with Host.open(settings, capabilities=capabilities(model, config=settings)) as host:
        result = await host.turns.run(request("hello"))
    assert result.outcome == "failed"
    assert result.error == "provider failed: scripted: HTTP 400: too long"
    assert len(model.requests) == 1
