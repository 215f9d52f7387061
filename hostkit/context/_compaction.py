"""Session compaction: a durable per-session lease, one summarizer, an atomic summary commit.

The contract's ``prepare()`` step 6: when history no longer fits, one worker
takes the session's compaction lease, revalidates its snapshot, summarizes,
and commits the summary together with its cutoff. Every other worker waits a
bounded time and rereads; none starts a second summarizer.

The store's context group keeps one committed summary per session
(everything at or before its cutoff is represented by it) and the session's
lease (lease id, owner, expiry; none when free) with the cooldown. The lease
id is the fencing token: ``commit_summary`` succeeds only while the lease
still carries the id that was taken.

Lease lifetime: the lease is taken for ``max(lease_ttl_s, summarize_timeout_s
+ COMMIT_MARGIN_S)`` and not renewed. The summarizer runs under
``summarize_timeout_s`` and the fallback is immediate, so the lease outlives
the whole compaction without a renewal task. A crash on this machine frees it
at once (the owner's pid and start time prove it dead); a holder on another
machine loses it on expiry.
"""

from __future__ import annotations

import contextlib
import logging
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import anyio

from hostkit._cancellation import uninterrupted
from hostkit.context._estimate import CharEstimator
from hostkit.context._summarizer import (
    DEFAULT_SUMMARY_INSTRUCTIONS,
    ProviderSummarizer,
    Summarizer,
    SummaryCall,
    fallback_summary,
)
from hostkit.errors import HostkitError, InvalidValue
from hostkit.store import CommittedSummary, LeaseOwner, LeaseTake, RuntimeStore, owner_is_dead
from hostkit.types import (
    MAX_DECISION_TEXT,
    CompactionKind,
    ContextDecision,
    ContextEvents,
    ModelMessage,
    Usage,
    UsageObservation,
    is_count,
    is_seconds,
    new_id,
    storable,
)

__all__ = [
    "COMMIT_MARGIN_S",
    "DEFAULT_SUMMARY_INSTRUCTIONS",
    "CommittedSummary",
    "CompactionKind",
    "CompactionOutcome",
    "CompactionTrigger",
    "ProviderSummarizer",
    "SessionCompactor",
    "Summarizer",
    "fallback_summary",
]

_log = logging.getLogger("hostkit.context")

# Time the lease outlives the summarizer's deadline: the fallback plus one store
# write, which may queue behind other writers (the store's lock timeout is 30 s).
COMMIT_MARGIN_S = 30.0


@dataclass(frozen=True, slots=True)
class CompactionOutcome:
    """What ``SessionCompactor.compact`` did.

    - ``committed``: this call committed ``summary``.
    - ``reread``: the committed cutoff is not the caller's (another worker
      committed); ``summary`` is the current one.
    - ``busy``: another live worker holds the lease and nothing new was
      committed within the wait; ``summary`` is the current one (may be None).
    - ``cooldown``: the session compacted recently; nothing was done.
    - ``stale``: nothing to compact, or the lease was lost before the commit.

    ``usage`` is what this call's summarizer provider call cost, committed or
    not (None: no provider call answered).
    """

    kind: CompactionKind
    summary: CommittedSummary | None
    used_fallback: bool = False
    detail: str = ""
    usage: Usage | None = None


@dataclass(frozen=True, slots=True)
class CompactionTrigger:
    """The turn step a compaction is made for.

    A ``ProviderSummarizer``'s call is recorded against it (a ``summary``
    decision with its usage, never a step of the turn's loop) and reported
    live to ``on_event``. ``max_tokens`` caps the summary below
    ``summary_max_tokens``: the ContextManager passes a third of the agent's
    hard input budget, so a summary leaves the window room for history.
    """

    turn_id: str
    step_id: int
    max_tokens: int | None = None
    on_event: ContextEvents | None = None


@dataclass(frozen=True, slots=True)
class _Summary:
    text: str
    summarizer: str
    failure: str | None  # why the fallback was used; None when it was not
    usage: Usage | None


# How summarizer requests are estimated (its tokenizer is not known here: errs high).
_ESTIMATE = CharEstimator()
# Sessions whose cooldown one compactor remembers (the most recent ones).
_COOLDOWNS = 1024


def cutoff_of(summary: CommittedSummary | None) -> int | None:
    """The seq a summary covers up to; None when there is no summary."""
    return summary.cutoff_seq if summary is not None else None


def _checked(
    messages: Sequence[tuple[int, ModelMessage]], expected_cutoff: int | None
) -> tuple[tuple[int, ModelMessage], ...]:
    pairs = tuple(messages)
    last = expected_cutoff if expected_cutoff is not None else 0
    for seq, message in pairs:
        if not isinstance(seq, int) or not isinstance(message, ModelMessage):
            raise InvalidValue("messages are (seq, ModelMessage) pairs")
        if seq <= last:
            raise InvalidValue("message seqs must increase and follow the expected cutoff")
        last = seq
    return pairs


class SessionCompactor:
    """Compacts a session's old messages into its committed summary, one worker at a time.

    ``owner`` identifies this Host process in the durable lease (take it with
    ``LeaseOwner.current`` off the event loop). ``clock`` gives epoch seconds
    for lease expiry and cooldown: the store's (``RuntimeStore.now``) by
    default. All waits are bounded: ``wait_s`` for another worker's commit,
    ``summarize_timeout_s`` for the summarizer, ``release_timeout_s`` for
    releasing the lease after a failure. The lease
    is taken for ``max(lease_ttl_s, summarize_timeout_s + COMMIT_MARGIN_S)``
    and never renewed (see the module docstring).
    """

    def __init__(
        self,
        store: RuntimeStore,
        *,
        owner: LeaseOwner,
        lease_ttl_s: float = 120.0,
        wait_s: float = 10.0,
        poll_s: float = 0.05,
        cooldown_s: float = 30.0,
        summarize_timeout_s: float = 60.0,
        summary_max_tokens: int = 512,
        summary_max_chars: int = 4000,
        release_timeout_s: float = 10.0,
        clock: Callable[[], float] | None = None,
    ) -> None:
        # Checked whole: NaN passes "<= 0", and fails (or bounds nothing) only at compaction.
        for name, seconds, zero in (
            ("lease_ttl_s", lease_ttl_s, False),
            ("poll_s", poll_s, False),
            ("summarize_timeout_s", summarize_timeout_s, False),
            ("release_timeout_s", release_timeout_s, False),
            ("wait_s", wait_s, True),
            ("cooldown_s", cooldown_s, True),
        ):
            if not is_seconds(seconds, high=86_400.0, zero=zero):
                raise InvalidValue(f"SessionCompactor {name} must be a finite number of seconds")
        for name, count in (
            ("summary_max_tokens", summary_max_tokens),
            ("summary_max_chars", summary_max_chars),
        ):
            if not is_count(count):
                raise InvalidValue(f"SessionCompactor {name} must be a positive integer")
        self._store = store
        self._owner = owner.encode()
        self._hold_s = max(lease_ttl_s, summarize_timeout_s + COMMIT_MARGIN_S)
        self._wait_s = wait_s
        self._poll_s = poll_s
        self._cooldown_s = cooldown_s
        self._summarize_timeout_s = summarize_timeout_s
        self._max_tokens = summary_max_tokens
        self._max_chars = summary_max_chars
        self._release_timeout_s = release_timeout_s
        self._clock = store.now if clock is None else clock
        # Each session's cooldown end as this compactor's commit or a refusal told it, and
        # the summary it was for, least recently told first: a step over the window during
        # a cooldown learns it here instead of in a write transaction.
        self._cooldowns: OrderedDict[str, tuple[float, CommittedSummary | None]] = OrderedDict()

    async def committed(self, session_id: str) -> CommittedSummary | None:
        """The session's committed summary (one read), or None."""
        return await self._store.context.summary(session_id)

    async def compact(
        self,
        session_id: str,
        *,
        messages: Sequence[tuple[int, ModelMessage]],
        expected_cutoff: int | None,
        summarizer: Summarizer | None,
        force: bool = False,
        trigger: CompactionTrigger | None = None,
    ) -> CompactionOutcome:
        """Fold ``messages`` ((seq, message), oldest first, all after ``expected_cutoff``).

        The new cutoff is the last seq. Order: take the lease and revalidate
        the cutoff in one transaction; summarize under the timeout (any failure
        or a None ``summarizer`` -> ``fallback_summary``); commit summary,
        cutoff, lease release and cooldown in one transaction. With a
        ``trigger``, a ``ProviderSummarizer``'s call is recorded as soon as the
        provider answered, whether or not its summary is then committed. If
        another live worker holds the lease, poll for at most ``wait_s`` and return
        ``reread`` or ``busy``. Cancellation releases the lease (shielded),
        commits nothing and re-raises; other errors release it and re-raise.
        Raises ``InvalidValue`` for out-of-order seqs and ``StoreError`` when
        the store fails. A cooldown this compactor knows of (for the caller's
        cutoff) answers ``cooldown`` after one read instead of a write
        transaction, and ``reread`` when another Host moved the cutoff meanwhile.
        """
        pairs = _checked(messages, expected_cutoff)
        if not pairs:
            return CompactionOutcome(
                "stale", await self.committed(session_id), detail="nothing to compact"
            )
        cooling = None if force else self._cooling(session_id, expected_cutoff)
        if cooling is not None:
            # One read, no write transaction: another Host may have moved the cutoff
            # since, and the caller's later steps read nothing again before they send.
            committed = await self.committed(session_id)
            if cutoff_of(committed) == expected_cutoff:
                return cooling
            self._cooldowns.pop(session_id, None)
            return CompactionOutcome("reread", committed, detail="the cutoff moved")
        lease_id = new_id("clease")
        try:
            take = await self._take(session_id, expected_cutoff, lease_id, force, dead_lease=None)
            if take.kind == "held" and await anyio.to_thread.run_sync(
                owner_is_dead, take.holder_owner
            ):
                take = await self._take(
                    session_id, expected_cutoff, lease_id, force, dead_lease=take.holder_lease
                )
        except BaseException:
            # A write cancelled after the writer took it may still have committed the lease.
            await self._release(session_id, lease_id)
            raise
        if take.kind == "reread":
            return CompactionOutcome("reread", take.summary, detail="the cutoff moved")
        if take.kind == "cooldown":
            if take.cooldown_until is not None:
                self._cool(session_id, take.cooldown_until, take.summary)
            return CompactionOutcome("cooldown", take.summary, detail="compacted recently")
        if take.kind == "held":
            return await self._wait(session_id, expected_cutoff, take.holder_lease)
        try:
            return await self._summarize_and_commit(
                session_id, lease_id, take.summary, pairs, summarizer, trigger
            )
        except BaseException:
            await self._release(session_id, lease_id)
            raise

    def _cooling(self, session_id: str, expected_cutoff: int | None) -> CompactionOutcome | None:
        """The ``cooldown`` the store would answer, when a known cooldown still runs for
        ``expected_cutoff``; None: ask the store."""
        known = self._cooldowns.get(session_id)
        if known is None:
            return None
        until, summary = known
        if until <= self._clock():
            del self._cooldowns[session_id]
            return None
        if cutoff_of(summary) != expected_cutoff:
            return None
        return CompactionOutcome("cooldown", summary, detail="compacted recently")

    def _cool(self, session_id: str, until: float, summary: CommittedSummary | None) -> None:
        self._cooldowns[session_id] = (until, summary)
        self._cooldowns.move_to_end(session_id)
        if len(self._cooldowns) > _COOLDOWNS:
            self._cooldowns.popitem(last=False)

    async def _take(
        self,
        session_id: str,
        expected_cutoff: int | None,
        lease_id: str,
        force: bool,
        *,
        dead_lease: str | None,
    ) -> LeaseTake:
        at = self._clock()
        return await self._store.context.take_compaction_lease(
            session_id,
            expected_cutoff=expected_cutoff,
            lease_id=lease_id,
            owner=self._owner,
            now=at,
            expires_at=at + self._hold_s,
            force=force,
            dead_lease=dead_lease,
        )

    async def _wait(
        self, session_id: str, expected_cutoff: int | None, holder_lease: str | None
    ) -> CompactionOutcome:
        with anyio.move_on_after(self._wait_s):
            while True:
                state = await self._store.context.compaction_state(session_id)
                if cutoff_of(state.summary) != expected_cutoff:
                    return CompactionOutcome(
                        "reread", state.summary, detail="another worker committed"
                    )
                if state.lease_id != holder_lease:
                    break  # the holder let go without committing: stop waiting
                await anyio.sleep(self._poll_s)
        summary = await self.committed(session_id)
        if cutoff_of(summary) != expected_cutoff:
            return CompactionOutcome("reread", summary, detail="another worker committed")
        return CompactionOutcome(
            "busy", summary, detail="another worker holds the compaction lease"
        )

    async def _summarize_and_commit(
        self,
        session_id: str,
        lease_id: str,
        previous: CommittedSummary | None,
        pairs: tuple[tuple[int, ModelMessage], ...],
        summarizer: Summarizer | None,
        trigger: CompactionTrigger | None,
    ) -> CompactionOutcome:
        made = await self._summarize(
            session_id,
            previous.summary if previous else None,
            [m for _, m in pairs],
            summarizer,
            trigger,
        )
        cooldown_until = self._clock() + self._cooldown_s
        committed = await self._store.context.commit_summary(
            session_id,
            lease_id=lease_id,
            text=made.text,
            cutoff_seq=pairs[-1][0],
            added=len(pairs),
            summarizer=made.summarizer,
            cooldown_until=cooldown_until,
        )
        fallback = made.failure is not None
        if committed is None:
            return CompactionOutcome(
                "stale",
                await self.committed(session_id),
                used_fallback=fallback,
                detail="the compaction lease was lost before the commit",
                usage=made.usage,
            )
        self._cool(session_id, cooldown_until, committed)
        return CompactionOutcome(
            "committed",
            committed,
            used_fallback=fallback,
            detail=made.failure or "",
            usage=made.usage,
        )

    async def _summarize(
        self,
        session_id: str,
        previous: str | None,
        messages: list[ModelMessage],
        summarizer: Summarizer | None,
        trigger: CompactionTrigger | None,
    ) -> _Summary:
        """The summary to commit: the summarizer's, else the fallback (saying why)."""
        failure = "no summarizer configured"
        usage: Usage | None = None
        if summarizer is not None:
            max_tokens = self._max_tokens
            if trigger is not None and trigger.max_tokens is not None:
                max_tokens = max(1, min(max_tokens, trigger.max_tokens))
            try:
                if isinstance(summarizer, ProviderSummarizer):
                    call = await self._call(
                        session_id, summarizer, previous, messages, max_tokens, trigger
                    )
                    text: object = call.text
                    usage = call.response.usage
                else:
                    with anyio.fail_after(self._summarize_timeout_s):
                        text = await summarizer.summarize(previous, messages, max_tokens=max_tokens)
                if isinstance(text, str) and text.strip():
                    name = storable(str(summarizer.name)[:200])
                    return _Summary(storable(text.strip()[: self._max_chars]), name, None, usage)
                failure = "the summarizer returned no text"
            except TimeoutError:
                failure = f"the summarizer timed out after {self._summarize_timeout_s:g}s"
            except Exception as exc:  # any summarizer failure falls back
                # The type only: a provider's message may quote the transcript.
                failure = f"the summarizer failed ({type(exc).__name__})"
            _log.warning("context compaction used the fallback summary: %s", failure)
        text = fallback_summary(previous, messages, max_chars=self._max_chars)
        return _Summary(storable(text), "fallback", failure, usage)

    async def _call(
        self,
        session_id: str,
        summarizer: ProviderSummarizer,
        previous: str | None,
        messages: list[ModelMessage],
        max_tokens: int,
        trigger: CompactionTrigger | None,
    ) -> SummaryCall:
        """One summarizer provider call, reported live as a model call is and recorded
        the moment the provider answered (so a summary never committed is paid for too)."""
        provider = summarizer.provider
        step = trigger.step_id if trigger is not None else 0
        events = trigger.on_event if trigger is not None else None
        started = {
            "step": step,
            "summary": True,
            "provider": provider.name,
            "model": provider.model,
            "max_tokens": max(1, min(max_tokens, provider.limits.max_output_tokens)),
        }
        _tell(events, "provider.started", started)
        try:
            with anyio.fail_after(self._summarize_timeout_s):
                call = await summarizer.call(previous, messages, max_tokens=max_tokens)
        except Exception as exc:
            status = getattr(exc, "status", None)
            kind = str(status) if isinstance(status, int) else type(exc).__name__
            _tell(events, "provider.failed", {"step": step, "summary": True, "error_type": kind})
            raise
        decision_id = None
        if trigger is not None:
            decision_id = await self._record(session_id, trigger, summarizer, call)
        reported = {**call.response.reported(step), "summary": True, "decision_id": decision_id}
        _tell(events, "provider.responded", reported)
        return call

    async def _record(
        self,
        session_id: str,
        trigger: CompactionTrigger,
        summarizer: ProviderSummarizer,
        call: SummaryCall,
    ) -> str | None:
        """Write the call as a ``summary`` decision with its usage (one transaction).

        Shielded and bounded: the tokens were spent, so a cancelled compaction
        still records them. A failed write is logged, never a failed compaction.
        """
        request, response = call.request, call.response
        limits = summarizer.provider.limits
        decision = ContextDecision(
            decision_id=new_id("ctx"),
            session_id=session_id,
            turn_id=trigger.turn_id,
            step_id=trigger.step_id,
            kind="summary",
            estimated_input_tokens=_ESTIMATE.request(request.messages, ()),
            hard_budget=(
                limits.context_window - request.max_output_tokens - limits.safety_margin_tokens
            ),
            output_budget=request.max_output_tokens,
            context_window=limits.context_window,
            estimator=_ESTIMATE.estimator_id,
            provider=_decision_text(summarizer.provider.name),
            model=_decision_text(summarizer.provider.model),
        )
        observation = UsageObservation(
            decision_id=decision.decision_id,
            session_id=session_id,
            turn_id=trigger.turn_id,
            step_id=trigger.step_id,
            provider=response.provider,
            model=response.model,
            usage=response.usage,
            finish_reason=response.finish_reason,
            provider_request_id=response.provider_request_id,
        )
        with anyio.move_on_after(self._release_timeout_s, shield=True):
            try:
                await self._store.context.record_step(decision, observation)
                return decision.decision_id
            except HostkitError as exc:
                _log.warning("a summarizer call's usage was not recorded: %s", exc.message)
        return None

    async def _release(self, session_id: str, lease_id: str) -> None:
        # Uninterrupted and bounded: a cancelled caller still frees the lease, and a store
        # that cannot answer leaves it to the expiry (or to the dead-owner check).
        await uninterrupted(self._released(session_id, lease_id))

    async def _released(self, session_id: str, lease_id: str) -> None:
        with anyio.move_on_after(self._release_timeout_s):
            with contextlib.suppress(HostkitError):
                await self._store.context.release_compaction_lease(session_id, lease_id)


def _decision_text(value: str) -> str | None:
    return value[:MAX_DECISION_TEXT] or None


def _tell(events: ContextEvents | None, kind: str, data: dict[str, object]) -> None:
    """Report to ``events``; a listener's failure is never the compaction's."""
    if events is None:
        return
    try:
        events(kind, data)
    except Exception as exc:
        _log.debug("a context event listener failed: %s", type(exc).__name__)
