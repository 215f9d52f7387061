"""How the Host answers an inbound with a turn: the runner an InboxWorker is given.

``hostkit.inbox`` knows no turn machinery; the Host hands its workers these
two callables. ``run`` adds the two things only the Host can do around
``TurnExecution.run``: end a turn whose Host died (so an attempt after a
crash gets that turn's record instead of waiting for it forever), and say
that a refusal because this Host is closing is worth retrying elsewhere.
"""

from __future__ import annotations

from collections.abc import Callable

from hostkit.authority import conversation_principal
from hostkit.errors import TurnInProgress, TurnRejected
from hostkit.store import RuntimeStore
from hostkit.turns import TurnExecution
from hostkit.types import ConversationFacts, TurnRequest, TurnResult

__all__ = ["InboundTurns"]


class InboundTurns:
    """``run(request)`` and ``find(request)`` for the Host's inbox workers."""

    def __init__(
        self, turns: TurnExecution, store: RuntimeStore, *, closed: Callable[[], bool]
    ) -> None:
        self._turns = turns
        self._store = store
        self._closed = closed

    async def run(self, request: TurnRequest) -> TurnResult:
        """The turn of an inbound's request id: run now, or the one an earlier attempt ran.

        ``TurnInProgress`` once more means the earlier turn's holder is alive
        (another process still runs it): the worker retries later.
        """
        try:
            try:
                return await self._turns.run(request)
            except TurnInProgress:
                # The attempt that started it may have died with its Host: end such
                # turns now (the lease rule: expired, or owner provably dead), then ask
                # again; the request id then answers with that turn's record.
                await self._turns.recover()
                return await self._turns.run(request)
        except TurnRejected as exc:
            if exc.retryable or not self._closed():
                raise
            # This Host is closing, not the request wrong: another Host (or this one,
            # reopened) may take it.
            closing = TurnRejected(exc.reason)
            closing.retryable = True
            raise closing from exc

    async def find(self, request: TurnRequest) -> str | None:
        """The turn an earlier attempt started for ``request``'s id, if any."""
        if not isinstance(request.principal, ConversationFacts):
            return None
        found = await self._store.turns.find(
            conversation_principal(request.principal), request.request_id
        )
        return None if found is None else found.turn_id
