"""How the Host answers an inbound: the turn runner and command runner an InboxWorker is given.

``hostkit.inbox`` knows no turn machinery; the Host hands its workers these
callables. ``InboundTurns.run`` adds the two things only the Host can do
around ``TurnExecution.run``: end a turn whose Host died (so an attempt after
a crash gets that turn's record instead of waiting for it forever), and say
that a refusal because this Host is closing is worth retrying elsewhere.
``InboundCommands.run`` answers a channel user's ``approve CODE`` /
``deny CODE`` with exactly the authority of every other answer, and tells the
person who pressed an approval button (``metadata["press"]``) its outcome
privately. ``reply_route`` is the route a channel's turns capture for their
answers.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from hostkit.authority import AuthorityResolver, conversation_principal
from hostkit.channels import sender_allowed
from hostkit.effects import ApprovalDecision, ApprovalFilter, PendingApproval
from hostkit.errors import (
    ApprovalRefused,
    NotFoundOrUnauthorized,
    ScopeError,
    TurnRejected,
    bounded,
)
from hostkit.freeze import thaw
from hostkit.host._approvals import MAX_LIST, HostApprovals
from hostkit.host._config_channels import ChannelConfig
from hostkit.store import RuntimeStore
from hostkit.turns import TurnExecution
from hostkit.types import (
    ClaimedInbound,
    ConversationFacts,
    InboundEnvelope,
    InboundResult,
    PrincipalScope,
    TurnRequest,
    TurnResult,
    approval_code,
)

__all__ = ["DROPPED_NOTICE", "UNREAD_NOTICE", "InboundCommands", "InboundTurns", "reply_route"]

# "approve K7QX2M" / "deny K7QX2M": the word in any case, the code in base32 (shown upper case).
_COMMAND = re.compile(r"\s*(approve|deny)\s+([A-Za-z2-7]{6})\s*", re.IGNORECASE)
_DECISIONS: dict[str, ApprovalDecision] = {"approve": "approve_once", "deny": "deny"}
# One result for an unknown code and for another principal's approval: nothing leaks.
_NOT_FOUND = InboundResult(
    "command", outcome="not_found", detail="no pending approval of yours has this code"
)
_UNKNOWN = InboundResult(
    "command", outcome="unknown_command", detail="expected approve CODE or deny CODE"
)
# What the sender of a command that ran no turn is told: in the words of a chat, without
# the internal ids the inbound's record keeps.
_NOT_FOUND_REPLY = (
    "No pending approval of yours has this code: check the code in the approval prompt "
    "(six letters and digits), e.g. approve K7QX2M."
)
_UNKNOWN_REPLY = "Reply approve CODE or deny CODE, with the code from the approval prompt."
# What the sender of a message the channel accepted without its text is told (a dead
# letter: nothing will answer it). Never the reason, which quotes the platform's event.
UNREAD_NOTICE = (
    "I could not read your last message (it was too long, or held characters I cannot "
    "take), so it got no answer. Please send it again, shorter or as plain text."
)
# Said when a message is dead-lettered after its last transient failure: no turn ran it
# to the end that anyone knows of (a busy session, a store or service that never came
# back), and one may have started before it stopped, so it is not "send it again".
DROPPED_NOTICE = (
    "Something went wrong on my side and I could not take your last message, so it will "
    "not be answered. If it asked me to do something, check whether it was done before "
    "you send it again."
)
# What the person who pressed a button for an approval they may not answer is told, alone
# (the button carries the right code: the advice to check it would be wrong).
_NOT_FOUND_PRESS = (
    "No pending approval of yours has this code: only the person it asks can answer it, "
    "while it is pending."
)
_DONE = {"approve_once": "approved", "approve_session": "approved", "deny": "denied"}
_REFUSED_REPLIES = {
    "answered": "it was answered already; nothing more runs.",
    "stale": "it no longer applies (what the agent asked to do changed since); nothing ran.",
    "superseded": "a newer request replaced it; nothing ran.",
    "indeterminate": "its call may have run and will not run again; ask an operator.",
    "unavailable": "this service cannot run that agent now; it stays pending, try again later.",
}


def reply_route(
    channels: Mapping[str, ChannelConfig], envelope: InboundEnvelope
) -> Mapping[str, Any] | None:
    """Where a configured channel's answer goes: its instance, conversation and reply target.

    Built from the authenticated channel instance and conversation key plus
    the reply target the transport put in ``metadata["reply"]``; it only says
    where to deliver and grants no authority. Unconfigured channels (the CLI,
    the notebook, tests) and channels that only receive (a webhook without
    ``deliver_url``) get None: their turns write no outbox intent, which
    could only be dead-lettered.
    """
    channel = envelope.channel_instance_id
    if channel not in channels or not channels[channel].delivers:
        return None
    reply = envelope.metadata.get("reply")
    return {
        "channel": channel,
        "conversation": envelope.conversation_key,
        "reply": thaw(reply) if isinstance(reply, Mapping) else {},
    }


Channels = Callable[[], Mapping[str, ChannelConfig]]


def check_sender(channels: Mapping[str, ChannelConfig], channel: str, principal_key: str) -> None:
    """``ScopeError`` when ``channel`` is configured and its allow list, as it is now, does
    not let ``principal_key`` in.

    The transport checked the list when the message arrived, but a reload may have
    revoked the sender since (a message queued before it, or taken in by a poller that
    keeps the list it started with): the message is refused when it is handled, as the
    next one would be on arrival.
    """
    configured = channels.get(channel)
    if configured is not None and not sender_allowed(configured, principal_key):
        raise ScopeError(
            f"sender {bounded(principal_key, 60)!r} is not in channel {channel!r}'s allow list"
        )


class InboundTurns:
    """``run(request)`` and ``find(request)`` for the Host's inbox workers."""

    def __init__(
        self,
        turns: TurnExecution,
        store: RuntimeStore,
        *,
        closed: Callable[[], bool],
        channels: Channels | None = None,
    ) -> None:
        self._turns = turns
        self._store = store
        self._closed = closed
        self._channels = channels

    async def run(self, request: TurnRequest) -> TurnResult:
        """The turn of an inbound's request id: run now, or the one an earlier attempt ran.

        An earlier attempt's turn whose holder is gone (its lease expired, its
        owner provably dead) is ended by the repeat's admission, which answers
        with that record; ``TurnInProgress`` means its holder is alive (another
        process still runs it): the worker defers the message, its attempt not spent.
        """
        if self._channels is not None and isinstance(request.principal, ConversationFacts):
            facts = request.principal
            check_sender(self._channels(), facts.channel, facts.principal_key)
        try:
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


class InboundCommands:
    """``run(claimed)``: a command inbound answers one pending approval of its sender.

    The replier's scope comes from the authority resolver and the
    envelope's authenticated fields (never its payload); the code is
    matched only among the approvals that scope may answer
    (``host.approvals.list``), so an unknown code and someone else's
    approval give the same ``not_found`` and nothing is answered. The
    answer runs through ``HostApprovals.answer``: the continuation turn runs
    the approved call once, and a repeat of the same command (a crash after
    the answer, a platform retry) resumes or reports that continuation
    instead of running anything twice. A continuation still running
    (elsewhere, or in a Host that died) is ``TurnInProgress``: the worker
    retries the command later instead of recording a refusal.
    """

    def __init__(
        self,
        approvals: HostApprovals,
        authority: AuthorityResolver,
        store: RuntimeStore,
        *,
        route: Callable[[InboundEnvelope], Mapping[str, Any] | None] | None = None,
        channels: Channels | None = None,
    ) -> None:
        self._approvals = approvals
        self._authority = authority
        self._store = store
        self._route = route
        self._channels = channels

    async def tell_unread(self, claimed: ClaimedInbound) -> None:
        """Tell the sender of an inbound the channel accepted without its text (too long, a
        NUL) that it could not be read: it is dead-lettered, and no turn will answer it."""
        await self._reply(claimed, await self._sender(claimed), UNREAD_NOTICE, alert=True)

    async def tell_dropped(self, claimed: ClaimedInbound) -> None:
        """Tell the sender of an inbound dead-lettered after its last transient failure that
        it will not be answered (``DROPPED_NOTICE``)."""
        await self._reply(claimed, await self._sender(claimed), DROPPED_NOTICE, alert=True)

    async def run(self, claimed: ClaimedInbound) -> InboundResult:
        """The command's result; one that ran no turn is also said to its sender.

        A typed command whose code matched nothing, a refused answer and text
        that is no command get a reply on the command's route (one per
        inbound: a repeat writes none), so the person who typed it is not left
        waiting for an answer that will not come. An answer that ran a
        continuation is answered by that turn.

        A button press (``metadata["press"]``) is always answered, and to the
        person who pressed alone, never the conversation: a refusal as an
        alert, an answer that counted (told before its continuation runs) or
        one that changed nothing as a notification. A platform shows the press
        as pending until it is answered, and someone else's refusal posted to
        a group would read, under the asker's own prompt, as if her approval
        were gone.
        """
        if self._channels is not None:
            # A sender revoked since the command arrived answers nothing any more.
            envelope = claimed.envelope
            check_sender(self._channels(), envelope.channel_instance_id, envelope.principal_key)
        scope = await self._sender(claimed)

        async def write(text: str, alert: bool) -> None:
            await self._reply(claimed, scope, text, alert=alert)

        said = _Said(press=_press(claimed.envelope) is not None, write=write)
        return await self._answered(claimed.envelope, scope, said)

    async def _sender(self, claimed: ClaimedInbound) -> PrincipalScope:
        """The scope of the inbound's conversation, from its authenticated fields only."""
        envelope = claimed.envelope
        return await self._authority.for_conversation(
            ConversationFacts(
                channel=envelope.channel_instance_id,
                conversation_key=envelope.conversation_key,
                principal_key=envelope.principal_key,
            )
        )

    async def _reply(
        self, claimed: ClaimedInbound, scope: PrincipalScope, text: str, *, alert: bool = False
    ) -> None:
        """Write the inbound's one reply: on its route, or to the presser alone for a press."""
        route = None if self._route is None else self._route(claimed.envelope)
        if route is None or scope.session_id is None:
            return  # a channel with no delivery (the CLI, a notebook, tests)
        press = _press(claimed.envelope)
        if press is not None:
            # The reply target becomes the presser (their query id, their user id).
            reply = route.get("reply")
            target = {**(reply if isinstance(reply, Mapping) else {}), **press}
            await self._store.delivery.reply(
                inbound_id=claimed.inbound_id,
                session_id=scope.session_id,
                route={**route, "reply": target},
                text=text,
                press=True,
                alert=alert,
            )
            return
        await self._store.delivery.reply(
            inbound_id=claimed.inbound_id, session_id=scope.session_id, route=route, text=text
        )

    async def _answered(
        self, envelope: InboundEnvelope, scope: PrincipalScope, said: _Said
    ) -> InboundResult:
        """The command's result, after telling its sender what they must be told."""
        match = _COMMAND.fullmatch(envelope.payload)
        if match is None:
            await said.refusal(_UNKNOWN_REPLY)
            return _UNKNOWN
        decision = _DECISIONS[match.group(1).lower()]
        code = match.group(2).upper()
        approval = await self._find(scope, code)
        if approval is None:
            await said.refusal(_NOT_FOUND_PRESS if said.press else _NOT_FOUND_REPLY)
            return _NOT_FOUND
        try:
            # The same answer again resumes or reports its continuation (answered before:
            # an earlier attempt, another reply, another process). One whose Host died is
            # ended there (the lease rule), its record this answer; one still held is
            # TurnInProgress at once (no worker slot held waiting), and the worker retries
            # this command at its holder's lease expiry.
            result = await self._approvals.answer(
                approval.approval_id,
                decision,
                by=scope,
                wait_s=0,
                recorded=lambda: said.notice(f"Approval {code}: {_DONE[decision]}."),
            )
        except NotFoundOrUnauthorized:
            await said.refusal(_NOT_FOUND_PRESS if said.press else _NOT_FOUND_REPLY)
            return _NOT_FOUND
        except ApprovalRefused as exc:
            reason = _REFUSED_REPLIES.get(exc.reason, "it cannot be answered now; nothing ran.")
            await said.refusal(f"Approval {code}: {reason}")
            return InboundResult("command", outcome="refused", detail=exc.message)
        # Unless told when its answer was recorded, this press found the answer recorded
        # before (pressed again, or an earlier attempt's): nothing new runs.
        await said.notice(f"Approval {code}: already {_DONE[decision]}; nothing new runs.")
        return InboundResult("command", result.turn_id, result.outcome, result.error or "")

    async def _find(self, scope: PrincipalScope, code: str) -> PendingApproval | None:
        """The approval of ``code`` among those ``scope`` may answer: pending first, then
        answered and not run yet (a repeated command resumes it, however many newer ones
        were closed since), then any (a repeated command reports its continuation)."""
        statuses: tuple[ApprovalFilter | None, ...] = ("pending", "open", None)
        for status in statuses:
            listed = await self._approvals.list(scope, status=status, limit=MAX_LIST)
            found = next((a for a in listed if approval_code(a.approval_id) == code), None)
            if found is not None:
                return found
        return None


def _press(envelope: InboundEnvelope) -> dict[str, Any] | None:
    """Who pressed the button this inbound is (the transport's ``metadata["press"]``), or
    None for a typed command."""
    press = envelope.metadata.get("press")
    return dict(thaw(press)) if isinstance(press, Mapping) and press else None


@dataclass
class _Said:
    """What one command inbound tells its sender: at most one reply (``write`` writes it).

    A typed command hears only a refusal (an answer that counted is answered
    by its continuation); a press hears every outcome, privately.
    """

    press: bool
    write: Callable[[str, bool], Awaitable[None]]
    told: bool = False

    async def refusal(self, text: str) -> None:
        await self._say(text, alert=True)

    async def notice(self, text: str) -> None:
        if self.press:
            await self._say(text, alert=False)

    async def _say(self, text: str, *, alert: bool) -> None:
        if not self.told:
            self.told = True
            await self.write(text, alert)
