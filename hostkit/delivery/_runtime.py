"""DeliveryRuntime: drains the outbox through outbound channels, the owner of delivery policy.

Per claimed intent: look its channel up by the route's alias *now* (the
current generation's adapter; none is a permanent ``no_channel`` failure,
failing closed; ``ChannelsClosing``, its Host closing, releases the claim
unspent and stops the runtime), send the captured route and payload with the intent id as
idempotency key while a keeper renews the lease every third of it, then
record the outcome fenced by the claim token: ``delivered``, or a failure
with the next attempt time from the ``DeliveryPolicy`` (None dead-letters).
A holder whose lease was taken over records nothing (``StaleClaim``): the
current holder owns the intent. Delivery is at least once; the idempotency
key lets a receiver drop the repeat a crash between send and record causes.

Shutdown never sends one intent twice: a send already under way when it is
cut spends its attempt (a transient ``cut_off`` failure, retried after the
backoff, by this process's successor or a peer), only a claim whose send never
started is released with its attempt refunded (also one a claim under way at
``stop()`` brings back afterwards), and the ``drain()`` a daemon
runs after ``stop()`` skips every intent this runtime attempted while stopping.

The runtime never reads inbox state: an inbound is completed when its turn
ran, whatever happens to the answer here.
"""

from __future__ import annotations

import logging
import random
from collections import Counter
from collections.abc import Callable

import anyio
import anyio.lowlevel
from anyio.abc import TaskGroup, TaskStatus

from hostkit._background import Background
from hostkit._cancellation import is_cancellation
from hostkit._dead_claims import DEAD_CLAIMS_EVERY_S, expire_dead_claims
from hostkit._failed_claims import FailedClaims, claim_failure
from hostkit._renewal import RenewalPace
from hostkit._store_health import StoreHealth
from hostkit._streaks import FailureStreak
from hostkit.delivery._channel import ChannelLookup, ChannelsClosing
from hostkit.delivery._policy import DeliveryPolicy
from hostkit.errors import (
    DeliveryRefused,
    HostkitError,
    InvalidValue,
    StaleClaim,
    StoreError,
    bounded,
)
from hostkit.store import MAX_DELIVERY_CLAIM, DeliveryStore, LeaseOwner
from hostkit.types import (
    ClaimedDelivery,
    DeliveryFailure,
    DeliveryIntent,
    is_seconds,
    new_id,
    plural,
)

__all__ = ["DeliveryRuntime"]

_log = logging.getLogger("hostkit.delivery")

Clock = Callable[[], float]
# Recording an outcome is tried this often when the store fails; after that the
# lease's expiry brings the intent back (and the receiver's dedup drops the repeat).
_SETTLE_TRIES = 3
# A channel alias in a log line is cut here: the route is the turn's, captured long ago.
_NAME_CHARS = 80


def _seconds(name: str, value: object, high: float, *, zero: bool = False) -> None:
    # is_seconds, not math.isfinite: that raises OverflowError for an int like 10**400.
    if not is_seconds(value, high=high, zero=zero):
        raise InvalidValue(f"{name} must be a finite number of seconds from 0 to {high:g}")


def _failure(kind: str, code: str, message: str = "") -> DeliveryFailure:
    return DeliveryFailure("transient" if kind == "transient" else "permanent", code, message)


# A send cut off by a shutdown may have reached the platform: the attempt is spent, and
# the next one waits the backoff (the receiver's dedup drops a repeat).
_CUT_OFF = _failure("transient", "cut_off", "the send was cut off by a shutdown")


class DeliveryRuntime(Background):
    """Claims due outbox intents and sends each through its channel, with retries.

    ``run()`` serves until cancelled or ``stop()``; ``drain()`` delivers what
    is due now and returns (``StoreError`` when its claims keep failing:
    ``FailedClaims``); ``async with runtime:`` runs ``run()`` in the
    background. Up to ``concurrency`` sends are in flight, at most
    ``per_channel`` (half of them, rounded up) through one channel alias, so a
    platform that hangs until ``send_timeout_s`` cannot hold every slot while
    other channels' answers wait; idle, the runtime looks for due intents every
    ``idle_poll_s`` (``wake()`` looks at once).
    Every send is bounded by ``send_timeout_s``, every store call by
    ``op_timeout_s``. Shutdown stops claiming, gives sends in flight
    ``grace_s`` (less when ``stop(within_s=...)`` leaves less), cuts off the
    rest (each such attempt is spent: ``cut_off``, retried after the backoff)
    and releases the claims whose send never started (pending again, attempt
    not spent). ``clock`` gives the times passed to the store (leases, next
    attempts): by default the store's own (``DeliveryStore.now``), the one new
    intents are due by and every Host sharing the store reads (on PostgreSQL
    the server's). A claim never takes back an intent this runtime is still
    sending, whatever that clock does meanwhile: it renews its own claims.
    ``store_health`` hears of each claim's outcome (a serve's readiness reads it).

    Each claim names this runtime's owner (its process), and each serve starts
    by taking over the claims of provably dead owners, then again every
    ``DEAD_CLAIMS_EVERY_S``: the intents a killed Host was sending are sent
    again then, not when their leases run out (the receiver's idempotency key
    drops a repeat of a send that had reached it).

    Live figures of this runtime since it was made (status lines): ``in_flight``
    (sends now), ``delivered`` (intents it delivered), ``failed`` (intents it
    dead-lettered), ``retried`` (failed attempts it scheduled again).
    """

    def __init__(
        self,
        store: DeliveryStore,
        channels: ChannelLookup,
        *,
        policy: DeliveryPolicy | None = None,
        concurrency: int = 8,
        idle_poll_s: float = 1.0,
        send_timeout_s: float = 30.0,
        op_timeout_s: float = 30.0,
        grace_s: float = 10.0,
        clock: Clock | None = None,
        rand: Callable[[], float] = random.random,
        store_health: StoreHealth | None = None,
    ) -> None:
        if not isinstance(store, DeliveryStore):
            raise InvalidValue("DeliveryRuntime needs the store's DeliveryStore (store.delivery)")
        if not callable(channels):
            raise InvalidValue("channels must be a callable from alias to channel")
        if isinstance(concurrency, bool) or not isinstance(concurrency, int):
            raise InvalidValue("concurrency must be an integer")
        if not 1 <= concurrency <= MAX_DELIVERY_CLAIM:
            raise InvalidValue(f"concurrency must be between 1 and {MAX_DELIVERY_CLAIM}")
        _seconds("idle_poll_s", idle_poll_s, 3_600.0)
        _seconds("send_timeout_s", send_timeout_s, 3_600.0)
        _seconds("op_timeout_s", op_timeout_s, 3_600.0)
        _seconds("grace_s", grace_s, 3_600.0, zero=True)
        if policy is not None and not isinstance(policy, DeliveryPolicy):
            raise InvalidValue("DeliveryRuntime policy must be a DeliveryPolicy")
        self.store = store
        self.policy = policy or DeliveryPolicy()
        self._channels = channels
        self._concurrency = concurrency
        self._per_channel = -(-concurrency // 2)
        self._idle_poll_s = float(idle_poll_s)
        self._send_timeout_s = float(send_timeout_s)
        self._op_timeout_s = float(op_timeout_s)
        # Claims failing at every poll (the store unusable) are logged once per streak.
        self._claims_failing = FailureStreak(_log, "delivery claim")
        self._recovery_failing = FailureStreak(_log, "recovering dead owners' delivery claims")
        self._store_health = StoreHealth() if store_health is None else store_health
        # The current serve's failed claims in a row: a drain never takes one for "idle".
        self._failed_claims = FailedClaims(self._op_timeout_s)
        self._grace_s = float(grace_s)
        self._clock = store.now if clock is None else clock
        self._rand = rand
        # intent id -> the latest claim this runtime holds (released on shutdown)
        self._claims: dict[str, ClaimedDelivery] = {}
        # This runtime's LeaseOwner text (its process), made once: the owner of its claims
        self._owner: str | None = None
        # intent id -> the shielded cancel scope of its send (cut off after the grace)
        self._inflight: dict[str, anyio.CancelScope] = {}
        # intent id -> the channel alias of its send in flight (the claim's per-channel bound)
        self._inflight_alias: dict[str, str] = {}
        # intents whose channel.send began under the claim held in _claims (a cut spends it)
        self._sending: set[str] = set()
        # intents attempted while stopping: the drain() after stop() never sends them again
        self._stopping_attempted: set[str] = set()
        # A channel's KeyboardInterrupt or SystemExit, its attempt recorded: the serve that
        # met it stops and raises it as itself, not in a group
        self._escaped: BaseException | None = None
        # anyio.current_time() by which a requested wind-down must be over (stop(within_s))
        self._wind_by: float | None = None
        self._nudge = anyio.Event()
        self._idle = anyio.Event()
        self._idle.set()
        self._stop = anyio.Event()
        self._stopped = anyio.Event()
        self._stopped.set()
        self._running = False
        self._settled = 0
        self._delivered = 0
        self._failed = 0
        self._retried = 0

    # -- observation ------------------------------------------------------------------

    @property
    def in_flight(self) -> int:
        """Sends in progress now."""
        return len(self._inflight)

    @property
    def delivered(self) -> int:
        """Intents this runtime delivered since it was made."""
        return self._delivered

    @property
    def failed(self) -> int:
        """Intents this runtime dead-lettered since it was made."""
        return self._failed

    @property
    def retried(self) -> int:
        """Failed attempts this runtime scheduled for another try."""
        return self._retried

    @property
    def per_channel(self) -> int:
        """Sends one channel alias may have in flight: half of ``concurrency``, rounded up."""
        return self._per_channel

    @property
    def running(self) -> bool:
        return self._running

    # -- serving ----------------------------------------------------------------------

    def wake(self) -> None:
        """Look for due intents now (a turn just finished) instead of at the next poll."""
        self._nudge.set()

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Serve until cancelled or ``stop()``; then wind down (grace, release)."""
        self._stopping_attempted.clear()
        self._wind_by = None
        await self._serve(until_idle=False, task_status=task_status)

    async def drain(self) -> int:
        """Deliver what is due now; how many attempts were settled (delivered, rescheduled
        or dead-lettered). An intent rescheduled for later is not waited for.

        A claim that failed proves nothing: claims that keep failing (``FailedClaims``) end
        the drain with a ``StoreError`` instead, every intent still stored and due.
        """
        before = self._settled
        await self._serve(until_idle=True, task_status=anyio.TASK_STATUS_IGNORED)
        return self._settled - before

    def stop(self, *, within_s: float | None = None) -> None:
        """Ask the runtime to wind down; ``aclose()`` also waits for it.

        ``within_s``: the wind-down (and a ``drain()`` that follows it) must
        be over that many seconds from now (what is left of a supervisor's
        deadline): sends in flight get ``min(grace_s, within_s)``.
        """
        if within_s is not None:
            _seconds("within_s", within_s, 86_400.0, zero=True)
            self._wind_by = anyio.current_time() + float(within_s)
        self._stop.set()
        self._nudge.set()

    async def aclose(self) -> None:
        """Stop and wait (bounded) until every held claim is released; idempotent."""
        self.stop()
        await anyio.lowlevel.checkpoint()
        bound = self._grace_s + self._op_timeout_s * (2 + len(self._claims))
        with anyio.move_on_after(bound, shield=True):
            await self._stopped.wait()

    def _end_background(self) -> None:
        self.stop()

    async def _serve(self, *, until_idle: bool, task_status: TaskStatus[None]) -> None:
        if self._running:
            raise InvalidValue("this delivery runtime is already running")
        self._running = True
        self._stopped = anyio.Event()
        self._failed_claims = FailedClaims(self._op_timeout_s)
        gave_up: StoreError | None = None
        try:
            async with anyio.create_task_group() as work:
                task_status.started()
                try:
                    gave_up = await self._claim_loop(work, until_idle=until_idle)
                finally:
                    with anyio.CancelScope(shield=True):
                        await self._wind_down()
        finally:
            self._running = False
            self._stop = anyio.Event()
            self._stopped.set()
        escaped, self._escaped = self._escaped, None
        if escaped is not None:
            raise escaped
        if gave_up is not None:
            # Raised here, not in the task group: the caller sees the error itself.
            raise gave_up

    async def _claim_loop(self, work: TaskGroup, *, until_idle: bool) -> StoreError | None:
        """Claim and start sends until stopped, or (``until_idle``) until a claim begun with
        no send in flight starts none, or a ``stop(within_s)`` deadline passes; the error a
        drain whose claims kept failing ends with (None: it ended otherwise)."""
        next_sweep = anyio.current_time()
        while not self._stop.is_set():
            if until_idle and self._wind_by is not None and anyio.current_time() >= self._wind_by:
                return None
            if anyio.current_time() >= next_sweep:
                await self._recover_dead_claims()
                next_sweep = anyio.current_time() + DEAD_CLAIMS_EVERY_S
            free = self._concurrency - len(self._inflight)
            claimed: tuple[ClaimedDelivery, ...] = ()
            started = 0
            if free > 0:
                # Only a claim begun with nothing in flight can prove the outbox idle: one
                # that ran while a send was settled may have read the rows before that
                # settle committed (a session's next intent still behind its claimed one).
                settled = not self._inflight
                claimed = await self._claim(free)
                for item in claimed:
                    if self._stop.is_set() or item.intent.intent_id in self._stopping_attempted:
                        # A claim that came back after stop() (the Host closing meanwhile),
                        # or one attempted while stopping: never started, handed back.
                        await self._release(item)
                        continue
                    self._start(work, item)
                    started += 1
                if until_idle and settled and not started:
                    # A claim that failed found nothing out: claim again, within a bound.
                    if not self._failed_claims.count:
                        return None
                    if self._failed_claims.exhausted():
                        return self._failed_claims.error("the delivery", "the due intents")
                if started and len(claimed) == free:
                    continue
            await self._pause()
        return None

    async def _recover_dead_claims(self) -> None:
        """A killed Host's claims are due now, not at lease expiry (a failure: they wait)."""
        try:
            with anyio.fail_after(self._op_timeout_s):
                recovered = await expire_dead_claims(self.store, now=self._clock())
        except (HostkitError, TimeoutError) as exc:
            self._recovery_failing.failed(claim_failure(exc, self._op_timeout_s))
            self._store_health.failed(exc)
            return
        self._recovery_failing.succeeded()
        if recovered:
            _log.info("made %s of dead owners due now", plural(recovered, "delivery claim"))

    async def _owner_text(self) -> str:
        if self._owner is None:
            owner = await anyio.to_thread.run_sync(LeaseOwner.current, new_id("delivery"))
            self._owner = owner.encode()
        return self._owner

    async def _claim(self, limit: int) -> tuple[ClaimedDelivery, ...]:
        """Up to ``limit`` due intents; none when the claim failed (``_failed_claims``
        then counts it, so a drain does not take it for an empty outbox)."""
        began = anyio.current_time()
        try:
            with anyio.fail_after(self._op_timeout_s):
                claimed = await self.store.claim(
                    owner=await self._owner_text(),
                    limit=limit,
                    lease_s=self.policy.lease_s,
                    max_attempts=self.policy.max_attempts,
                    now=self._clock(),
                    per_channel=self._per_channel,
                    sending=Counter(self._inflight_alias.values()),
                    holding=tuple(self._inflight),
                )
        except (HostkitError, TimeoutError) as exc:
            # Nothing was handed out (a claim that committed late expires and is reclaimed).
            text = claim_failure(exc, self._op_timeout_s)
            self._claims_failing.failed(text)
            self._failed_claims.failed(exc, text, began=began)
            self._store_health.failed(exc)
            return ()
        self._claims_failing.succeeded()
        self._failed_claims.succeeded()
        self._store_health.worked()
        return claimed

    async def _pause(self) -> None:
        with anyio.move_on_after(self._idle_poll_s):
            await self._nudge.wait()
        self._nudge = anyio.Event()

    def _start(self, work: TaskGroup, claimed: ClaimedDelivery) -> None:
        intent_id = claimed.intent.intent_id
        if intent_id in self._inflight:
            # Its send is under way here (a store that handed out an intent the claim said
            # this runtime holds): never a second send. The newer claim is the one the store
            # holds now, so the send under way renews and records its outcome with it.
            self._claims[intent_id] = claimed
            return
        scope = anyio.CancelScope(shield=True)
        self._claims[intent_id] = claimed
        self._inflight[intent_id] = scope
        alias = claimed.intent.channel
        if alias is not None:
            self._inflight_alias[intent_id] = alias
        self._idle = anyio.Event()
        work.start_soon(self._handle, claimed, scope)

    async def _handle(self, claimed: ClaimedDelivery, scope: anyio.CancelScope) -> None:
        intent_id = claimed.intent.intent_id
        try:
            with scope:
                try:
                    await self._attempt(claimed)
                except Exception as exc:
                    # A bug must not end the runtime: the claim's lease brings the intent back.
                    _log.error("intent %s: delivery failed unexpectedly: %s", intent_id, _text(exc))
                except BaseException as exc:
                    if is_cancellation(exc):
                        raise
                    # A channel's KeyboardInterrupt or SystemExit (its attempt recorded):
                    # the runtime winds down, and its serve raises it once that is over.
                    self._escaped = self._escaped or exc
                    self.stop()
        finally:
            if self._stop.is_set() or self._wind_by is not None:
                self._stopping_attempted.add(intent_id)
            self._inflight.pop(intent_id, None)
            self._inflight_alias.pop(intent_id, None)
            self._nudge.set()
            if not self._inflight:
                self._idle.set()

    def _grace_left(self) -> float:
        """The grace sends in flight get now: ``grace_s``, less if the wind-down is due sooner."""
        if self._wind_by is None:
            return self._grace_s
        return max(0.0, min(self._grace_s, self._wind_by - anyio.current_time()))

    async def _wind_down(self) -> None:
        """Grace for sends in flight, then cut them off: a started send spends its attempt
        (``cut_off``), a claim whose send never started is released."""
        with anyio.move_on_after(self._grace_left()):
            await self._idle.wait()
        for scope in list(self._inflight.values()):
            scope.cancel()
        with anyio.move_on_after(self._op_timeout_s):
            await self._idle.wait()
        released = cut = 0
        for claimed in list(self._claims.values()):
            intent_id = claimed.intent.intent_id
            self._stopping_attempted.add(intent_id)
            if intent_id in self._sending:
                await self._settle(intent_id, _CUT_OFF)
                cut += 1
            else:
                released += await self._release(claimed)
            self._forget(intent_id)
        if released or cut:
            _log.info(
                "delivery at shutdown: %d sends cut off (retried later), %d claims released",
                cut,
                released,
            )

    async def _release(self, claimed: ClaimedDelivery) -> int:
        """Hand an unsent claim back (due at once, attempt refunded); 1 if it was."""
        try:
            with anyio.fail_after(self._op_timeout_s):
                await self.store.release(claimed, now=self._clock())
            return 1
        except (HostkitError, TimeoutError) as exc:
            _log.warning("intent %s: release failed: %s", claimed.intent.intent_id, _text(exc))
            return 0

    def _forget(self, intent_id: str) -> None:
        self._claims.pop(intent_id, None)
        self._sending.discard(intent_id)

    # -- one intent -------------------------------------------------------------------

    async def _attempt(self, claimed: ClaimedDelivery) -> None:
        intent_id = claimed.intent.intent_id
        lost = anyio.Event()
        failure: DeliveryFailure | None = None
        sent = False
        closing = False
        escaped: BaseException | None = None
        async with anyio.create_task_group() as keeper:
            keeper.start_soon(self._keep, intent_id, lost, keeper.cancel_scope)
            try:
                failure = await self._send(claimed)
            except ChannelsClosing:
                closing = True
            except BaseException as exc:
                # The channel's own BaseException (a KeyboardInterrupt, a SystemExit, a
                # CancelledError of its own) is this attempt's failure, recorded as one and
                # not as a shutdown's cut; real cancellation goes on as itself.
                if is_cancellation(exc):
                    raise
                _log.warning(
                    "intent %s: channel %r raised %s",
                    intent_id,
                    claimed.intent.channel,
                    type(exc).__name__,
                )
                failure = _failure("transient", "channel_error", type(exc).__name__)
                escaped = exc
            sent = True
            keeper.cancel_scope.cancel()
        if lost.is_set() or not sent:
            self._forget(intent_id)
            _log.info("intent %s: the claim was taken over while sending", intent_id)
        elif closing:
            # Nothing was sent: not an attempt. The channels go with their owner, so
            # this runtime stops too (a claim loop would only take the intent back).
            self.stop()
            await self._release(self._claims.get(intent_id, claimed))
            self._forget(intent_id)
        else:
            await self._settle(intent_id, failure)
        # Raised as itself once recorded (outside this group: not hidden in an
        # ExceptionGroup); a CancelledError of the channel's own was only its failure.
        if escaped is not None and not isinstance(escaped, anyio.get_cancelled_exc_class()):
            raise escaped

    async def _send(self, claimed: ClaimedDelivery) -> DeliveryFailure | None:
        """One attempt through the channel the route's alias names now; its failure, if any.

        ``ChannelsClosing`` (from the lookup or the send) passes: nothing was sent.
        """
        intent = claimed.intent
        alias = intent.channel
        if alias is None:
            return _failure("permanent", "bad_route", "the route names no channel")
        try:
            channel = self._channels(alias)
        except ChannelsClosing:
            raise
        except Exception as exc:
            return _failure("permanent", "no_channel", f"channel lookup failed: {_text(exc)}")
        if channel is None:
            return _failure("permanent", "no_channel", f"no channel {alias!r} is configured")
        try:
            self._sending.add(intent.intent_id)
            with anyio.fail_after(self._send_timeout_s):
                await channel.send(
                    intent.route, intent.payload, idempotency_key=claimed.idempotency_key
                )
        except ChannelsClosing:
            self._sending.discard(intent.intent_id)
            raise
        except DeliveryRefused as exc:
            return _as_failure(exc.failure)
        except TimeoutError:
            return _failure("transient", "timeout", f"no answer within {self._send_timeout_s:g}s")
        except Exception as exc:
            # Only the type: an adapter's own message may carry what it was sending.
            _log.warning(
                "intent %s: channel %r raised %s", intent.intent_id, alias, type(exc).__name__
            )
            return _failure("transient", "channel_error", type(exc).__name__)
        return None

    async def _keep(self, intent_id: str, lost: anyio.Event, scope: anyio.CancelScope) -> None:
        """Renew the lease every third of it; a lost claim cuts the send off (someone else's).

        A renewal that fails is retried promptly, each try bounded by a third
        of the lease still left, so no try starts at the lease's expiry
        (``RenewalPace``, as the session lease and the inbox claim).
        """
        lease_s = self.policy.lease_s
        claimed = self._claims.get(intent_id)
        if claimed is None:
            return
        pace = RenewalPace(
            lease_s, claimed.lease_expires_at - self._clock(), min(self._op_timeout_s, lease_s / 3)
        )
        pause = lease_s / 3
        while True:
            await anyio.sleep(pause)
            claimed = self._claims.get(intent_id)
            if claimed is None:
                return
            start = anyio.current_time()
            try:
                with anyio.fail_after(pace.limit(start)):
                    self._claims[intent_id] = await self.store.extend(
                        claimed, lease_s=lease_s, now=self._clock()
                    )
            except StaleClaim:
                lost.set()
                scope.cancel()
                return
            except (HostkitError, TimeoutError) as exc:
                _log.warning("intent %s: lease renewal failed: %s", intent_id, _text(exc))
                pause = pace.failed(exc)
            else:
                pace.renewed(start)
                pause = lease_s / 3

    async def _settle(self, intent_id: str, failure: DeliveryFailure | None) -> None:
        """Record the attempt's outcome, fenced by the claim (a few tries if the store fails)."""
        try:
            for attempt in range(1, _SETTLE_TRIES + 1):
                claimed = self._claims[intent_id]
                try:
                    with anyio.fail_after(self._op_timeout_s):
                        await self._record(claimed, failure)
                    self._settled += 1
                    return
                except StaleClaim:
                    _log.info("intent %s: the claim was taken over before recording", intent_id)
                    return
                except (HostkitError, TimeoutError) as exc:
                    _log.warning(
                        "intent %s: recording the attempt failed (%d/%d): %s",
                        intent_id,
                        attempt,
                        _SETTLE_TRIES,
                        _text(exc),
                    )
                    await anyio.sleep(min(1.0, self._op_timeout_s / 10) * attempt)
        finally:
            self._forget(intent_id)

    async def _record(self, claimed: ClaimedDelivery, failure: DeliveryFailure | None) -> None:
        now = self._clock()
        if failure is None:
            await self.store.delivered(claimed, now=now)
            self._delivered += 1
            return
        retry_at = self.policy.retry_at(claimed.attempt, failure, now=now, rand=self._rand())
        row = await self.store.failed(claimed, failure, retry_at=retry_at, now=now)
        if row.status == "dead_lettered":
            self._failed += 1
            _log.warning(
                "intent %s (%s) dead-lettered after %s: %s",
                row.intent_id,
                _whose(row),
                plural(claimed.attempt, "attempt"),
                failure.text(),
            )
        else:
            self._retried += 1


def _whose(intent: DeliveryIntent) -> str:
    """Whose answer ``intent`` carries and where it was going, in an operator's words:
    a command answer has no turn, and a broken route may name no channel."""
    whose = (
        f"turn {intent.turn_id}"
        if intent.turn_id is not None
        else f"command answer to {intent.inbound_id}"
    )
    channel = intent.channel
    where = "no channel" if channel is None else f"channel {bounded(channel, _NAME_CHARS)}"
    return f"{whose}, {where}"


def _as_failure(value: object) -> DeliveryFailure:
    if isinstance(value, DeliveryFailure):
        return value
    return _failure("transient", "channel_error", "the channel refused without a classification")


def _text(exc: BaseException) -> str:
    if isinstance(exc, HostkitError):
        return exc.message
    return bounded(type(exc).__name__)
