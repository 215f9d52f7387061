"""What a provider hands a turn, and what it raises, ends the turn as the provider's doing.

A provider an embedder wrote from docs/providers.md may return any async
iterator from ``stream``, keep it open after its ``done`` event, build values
of the wrong type or raise anything: the turn either completes with the
answer, or ends ``failed`` with a ``ProviderError`` naming the provider,
never an internal error, a hang or a non-``str`` answer. A ``BaseException``
(``KeyboardInterrupt``) ends the turn with a record saying so before it is
raised, and the session is free for the next turn at once.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from hostkit.errors import InvalidValue, TurnRejected
from hostkit.testing import Reply, ScriptedModel, capabilities
from hostkit.turns import TurnEvent
from hostkit.types import ModelLimits, ModelRequest, ModelResponse, StreamEvent, ToolCall, Usage
from tests.hosts import open_host, request, turn_rows

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.sqlite_only("what a provider hands the turn is checked before any store write"),
]

NAME = "custom"


def answer(text: Any = "hello", **fields: Any) -> ModelResponse:
    values: dict[str, Any] = {
        "text": text,
        "tool_calls": (),
        "usage": Usage(3, 2),
        "finish_reason": "stop",
        "provider": NAME,
        "model": "m1",
    }
    return ModelResponse(**{**values, **fields})


class Custom:
    """A provider as an embedder writes one: ``events`` is what its ``stream`` returns."""

    model = "m1"
    limits = ModelLimits(8_000, 512)

    def __init__(self, events: Callable[[], object]) -> None:
        self._events = events
        self.named = True

    @property
    def name(self) -> str:
        if not self.named:
            raise RuntimeError("the provider's client is gone")
        return NAME

    async def complete(self, request: ModelRequest) -> ModelResponse:
        return answer()

    def stream(self, request: ModelRequest) -> Any:
        return self._events()

    async def aclose(self) -> None:
        return None


def events(*made: Callable[[], object]) -> Callable[[], AsyncIterator[object]]:
    """An async generator yielding what each of ``made`` builds (or raising it)."""

    async def stream() -> AsyncIterator[object]:
        for make in made:
            yield make()

    return stream


def raising(exc: BaseException) -> Callable[[], object]:
    def make() -> object:
        raise exc

    return make


async def only_turn(tmp_path: Path, provider: Any) -> tuple[str, str | None, object]:
    async with open_host(tmp_path, provider) as host:
        with anyio.fail_after(10):
            result = await host.turns.run(request())
        assert [status for _, status in await turn_rows(host)] == [result.outcome]
    return result.outcome, result.error, result.text


class NoAclose:
    """The documented ``AsyncIterator``: ``__aiter__`` and ``__anext__``, no ``aclose``."""

    def __init__(self) -> None:
        self.sent = False

    def __aiter__(self) -> NoAclose:
        return self

    async def __anext__(self) -> StreamEvent:
        if self.sent:
            raise StopAsyncIteration
        self.sent = True
        return StreamEvent("done", response=answer("from an iterator"))


async def test_an_async_iterator_without_aclose_is_read_to_its_answer(tmp_path: Path) -> None:
    outcome, error, text = await only_turn(tmp_path, Custom(NoAclose))
    assert (outcome, error, text) == ("completed", None, "from an iterator")


async def _returns_a_list() -> list[StreamEvent]:
    return [StreamEvent("done", response=answer())]


def _sync_generator() -> Iterator[StreamEvent]:
    yield StreamEvent("done", response=answer())


@pytest.mark.parametrize(
    ("made", "kind"),
    [(_returns_a_list, "coroutine"), (_sync_generator, "generator")],
    ids=["coroutine", "sync-generator"],
)
async def test_a_stream_that_is_no_async_iterator_fails_the_turn_naming_the_provider(
    tmp_path: Path, made: Callable[[], object], kind: str
) -> None:
    outcome, error, _ = await only_turn(tmp_path, Custom(made))
    assert outcome == "failed"
    assert error == f"provider failed: {NAME}: stream() returned {kind}, not an async iterator"


async def test_a_stream_kept_open_after_done_completes_the_turn_and_is_closed(
    tmp_path: Path,
) -> None:
    closed: list[bool] = []

    async def stream() -> AsyncIterator[StreamEvent]:
        try:
            yield StreamEvent("text", text="hello")
            yield StreamEvent("done", response=answer("hello"))
            await anyio.sleep_forever()  # a proxy that never closes the connection
        finally:
            closed.append(True)

    outcome, error, text = await only_turn(tmp_path, Custom(stream))
    assert (outcome, error, text) == ("completed", None, "hello")
    assert closed == [True]


WRONG_TYPES: dict[str, tuple[Callable[[], object], str]] = {
    "text-int": (lambda: StreamEvent("done", response=answer(123)), "text must be a str"),
    "text-none": (lambda: StreamEvent("done", response=answer(None)), "text must be a str"),
    "dict-response": (
        lambda: StreamEvent("done", response={"text": "x"}),  # type: ignore[arg-type]
        "a done event carries its ModelResponse",
    ),
    "usage-dict": (
        lambda: StreamEvent("done", response=answer(usage={"input_tokens": 1})),
        "usage must be a Usage",
    ),
    "finish-bogus": (
        lambda: StreamEvent("done", response=answer(finish_reason="bogus")),
        "finish_reason must be one of",
    ),
    "provider-int": (
        lambda: StreamEvent("done", response=answer(provider=7, model=None)),
        "provider and model must be str",
    ),
    "call-name-int": (
        lambda: StreamEvent(
            "done",
            response=answer("", tool_calls=(ToolCall("c1", 5, {}),)),  # type: ignore[arg-type]
        ),
        "name and call_id must be str",
    ),
    "call-dict": (
        lambda: StreamEvent("done", response=answer("", tool_calls=({"call_id": "c1"},))),
        "tool_calls must be a tuple of ToolCall",
    ),
    "kind-bogus": (lambda: StreamEvent("weird", text="x"), "kind must be"),  # type: ignore[arg-type]
    "event-text-int": (lambda: StreamEvent("text", text=5), "text must be a str"),  # type: ignore[arg-type]
    "no-event": (lambda: "hello", "stream() gave str, not a StreamEvent"),
}


@pytest.mark.parametrize("case", list(WRONG_TYPES))
async def test_a_provider_value_of_the_wrong_type_fails_the_turn_as_the_provider_s(
    tmp_path: Path, case: str
) -> None:
    made, said = WRONG_TYPES[case]
    outcome, error, text = await only_turn(tmp_path, Custom(events(made)))
    assert outcome == "failed"
    assert error is not None
    assert error.startswith(f"provider failed: {NAME}: "), error
    assert said in error
    assert text == ""


class Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("str failed")


@pytest.mark.parametrize(
    ("raised", "said"),
    [
        (ValueError("bad state " + "Y" * 10_000_000), "ValueError: bad state YYY"),
        (Unprintable(), "Unprintable: Unprintable"),
        (LookupError("token=hkSecretValue123"), "LookupError: token=[redacted]"),
    ],
    ids=["huge", "str-raises", "secret"],
)
async def test_an_exception_from_a_provider_fails_the_turn_naming_the_provider(
    tmp_path: Path, raised: Exception, said: str
) -> None:
    outcome, error, _ = await only_turn(tmp_path, Custom(events(raising(raised))))
    assert outcome == "failed"
    assert error is not None
    assert error.startswith(f"provider failed: {NAME}: {said}"), error
    assert len(error) <= 300
    assert "hkSecretValue123" not in error


@pytest.mark.parametrize("raised", [KeyboardInterrupt, SystemExit, GeneratorExit])
async def test_a_base_exception_from_a_provider_is_recorded_then_raised(
    tmp_path: Path, raised: type[BaseException]
) -> None:
    provider = Custom(events(raising(raised())))
    async with open_host(tmp_path, provider) as host:
        with anyio.fail_after(10), pytest.raises(raised):
            await host.turns.run(request("first"))
        ((status, error),) = await host.store.read(
            lambda c: c.execute("SELECT status, result FROM turns").fetchall()
        )
        assert status == "failed"
        assert json.loads(error)["error"] == f"the turn was interrupted by {raised.__name__}"
        provider._events = events(lambda: StreamEvent("done", response=answer("next")))
        with anyio.fail_after(10):  # the session is free at once: no wait for its lease
            assert (await host.turns.run(request("second"))).text == "next"


class Interrupting:
    """An observer whose ``notify`` raises ``KeyboardInterrupt`` on one kind of event."""

    def __init__(self, kind: str) -> None:
        self.kind = kind

    def notify(self, event: TurnEvent) -> None:
        if event.kind == self.kind:
            self.kind = ""
            raise KeyboardInterrupt


async def test_an_observer_interrupting_turn_started_ends_the_turn_and_frees_its_session(
    tmp_path: Path,
) -> None:
    model = ScriptedModel([Reply("next")])
    caps = capabilities(model, observer=Interrupting("turn.started"))
    async with open_host(tmp_path, model, caps=caps) as host:
        with anyio.fail_after(10), pytest.raises(KeyboardInterrupt):
            await host.turns.run(request("first"))
        assert [status for _, status in await turn_rows(host)] == ["failed"]
        with anyio.fail_after(10):
            assert (await host.turns.run(request("second"))).text == "next"


async def test_a_provider_that_cannot_be_read_is_refused_before_admission(
    tmp_path: Path,
) -> None:
    provider = Custom(events(lambda: StreamEvent("done", response=answer())))
    async with open_host(tmp_path, provider) as host:
        provider.named = False
        with anyio.fail_after(10), pytest.raises(TurnRejected, match="unreadable"):
            await host.turns.run(request())
        assert await turn_rows(host) == []
        provider.named = True
        with anyio.fail_after(10):
            assert (await host.turns.run(request())).outcome == "completed"


def test_a_response_and_an_event_refuse_fields_of_the_wrong_type() -> None:
    for fields in (
        {"text": b"x"},
        {"tool_calls": None},
        {"usage": None},
        {"finish_reason": "done"},
        {"model": 5},
        {"provider_request_id": 5},
    ):
        with pytest.raises(InvalidValue):
            answer(**fields)
    with pytest.raises(InvalidValue):
        StreamEvent("done")
    with pytest.raises(InvalidValue):
        StreamEvent("text", text="x", response=answer())
    assert StreamEvent("done", response=answer()).response == answer()
