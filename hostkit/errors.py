"""The one hostkit error tree.

Every failure hostkit raises on purpose is a ``HostkitError``. Errors from
sqlite, httpx and SDKs are mapped at the boundary where they happen and raised
``from`` the original, with a bounded, redacted message::

    HostkitError
    ├── UserError                  misuse by the caller; fix the call, do not retry
    │   ├── ConfigError            a bad configuration value (names the key)
    │   │   ├── MissingDependency  a feature's optional package is missing (names the extra)
    │   │   ├── EffectCollision    (hostkit.effects) two tools, one name: names both sources
    │   │   └── ToolChanged        (hostkit.effects) a tool module changed since discovery
    │   ├── InvalidValue           a contract value failed validation
    │   ├── ScopeError             forged, foreign, revoked or under-specified authority
    │   ├── PolicyRefusal          a Host check refused an effect mid-invocation (denied)
    │   │   └── TerminalRunLimit   (hostkit.store) a session already has its most live runs
    │   ├── ApprovalRefused        a second, stale or superseded answer to an approval
    │   ├── PromotionRefused       a core promotion refused: a gate failed, a review token is stale
    │   └── ChannelRefused         a channel transport refused an inbound request (status, code)
    ├── NotFoundOrUnauthorized     the one external answer for "missing" and "not yours"
    │   └── UnboundToken           a turn token no running turn holds (fails closed)
    ├── TurnRejected               validation/authority failure before turn.started
    │   ├── InvalidTurnRequest     a TurnRequest failed validation (also an InvalidValue)
    │   ├── RequestConflict        a request id reused for a different request
    │   └── AttachmentRefused      the turn's provider does not accept an attachment's type
    ├── TurnInProgress             a repeated request whose first turn is still running
    ├── DeliveryInProgress         an answer of the session is being sent now (erase waits)
    ├── ApprovalClosed             the Host shut down while an approval was pending
    ├── StateConflict              an authored state set whose expected version is not current
    └── RuntimeFailure             the runtime could not do its job
        ├── StoreError             the database failed (``retryable`` says if a retry may help)
        │   ├── StoreClosed
        │   ├── StoreOutcomeUnknown a COMMIT whose answer was lost: it may have landed
        │   ├── DatabaseReplaced   the database file was deleted or replaced while open
        │   ├── ClockSkew          this machine's clock and the database server's disagree
        │   └── MigrationError     names the database, the backup and the restore action
        ├── LeaseLost              a write carried a fencing token its lease no longer has
        ├── InboxFull              the inbox refused a new inbound: backlog or disk reserve reached
        ├── DeliveryRefused        an outbound channel refused or failed one delivery attempt
        ├── PollError              a polled platform (getUpdates) failed (status, retryable)
        ├── ProviderError          a model provider call failed (status, retryable, retry_after)
        │   └── ContextOverflow    the provider refused the request as too long for its window
        └── TurnInfrastructureError  no trustworthy terminal record (outcome "indeterminate")

Retryability is an attribute (``error.retryable``), not a subclass, so callers
branch on one flag whatever the concrete error is.
"""

from __future__ import annotations

import json
import math
import re
import urllib.parse
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

__all__ = [
    "MAX_RETRY_AFTER_S",
    "ApprovalClosed",
    "ApprovalRefused",
    "AttachmentRefused",
    "ChannelRefused",
    "ClockSkew",
    "ConfigError",
    "ContextOverflow",
    "DatabaseReplaced",
    "DeliveryInProgress",
    "DeliveryRefused",
    "HostkitError",
    "InboxFull",
    "InvalidTurnRequest",
    "InvalidValue",
    "LeaseLost",
    "MigrationError",
    "MissingDependency",
    "NotFoundOrUnauthorized",
    "PolicyRefusal",
    "PollError",
    "PromotionRefused",
    "ProviderError",
    "RequestConflict",
    "RuntimeFailure",
    "ScopeError",
    "StaleClaim",
    "StateConflict",
    "StoreClosed",
    "StoreError",
    "StoreOutcomeUnknown",
    "TurnInProgress",
    "TurnInfrastructureError",
    "TurnRejected",
    "UnboundToken",
    "UserError",
    "bounded",
    "bounded_hides",
    "redact_credentials",
    "scrub_secret",
    "type_name",
    "unbounded_message",
]

MESSAGE_LIMIT = 500
# The longest delay a ``ProviderError.retry_after`` asks for: what a ``RetryPolicy`` may honour
# at most (``max_retry_after_s``). A server asking for longer is asking for this.
MAX_RETRY_AFTER_S = 3_600.0

# Field names whose values never belong in an error message.
# A secret-named key (also with a prefix: access_token, client_secret, db_password; also
# quoted, as in JSON) followed by = or : and its value. The prefix's parts are bounded in
# number and length, so each place the scan starts costs at most a few hundred steps: an
# unbounded ``(?:[a-z0-9]+[_-])*`` made text like "a_a_a_…" quadratic (minutes for a
# 100 KB tool error). A longer prefix still has its value masked: the match then starts
# at a later part of the name.
_SECRET_ASSIGNMENT = re.compile(
    r"(?i)(?<![a-z0-9])((?:[a-z0-9]{1,32}[_-]){0,8}"
    r"(?:api[_-]?key|token|secret|password|passwd|authorization|cookie|proof|credentials?))"
    r"([\"']?\s*[=:]\s*)(\"[^\"]*\"|'[^']*'|\S+)"
)
# Credentials recognisable by their shape alone (OpenAI/Anthropic, Slack, GitHub, AWS keys;
# Telegram bot tokens "<bot id>:<35 characters>", also inside a "/bot<token>/" URL path,
# where no word boundary precedes the digits).
_TOKEN_SHAPES = re.compile(
    r"\b(?:sk-[A-Za-z0-9_-]{16,}|xox[abposr]-[A-Za-z0-9-]{10,}|gh[pousr]_[A-Za-z0-9]{20,}"
    r"|github_pat_[A-Za-z0-9_]{20,}|AKIA[0-9A-Z]{16})"
    r"|(?<![0-9])[0-9]{6,12}(?::|%3[Aa])[A-Za-z0-9_-]{30,}"
)
# How much more of a long text than it shows ``bounded()`` redacts (see there).
_REDACT_SPAN = 16_384
_BEARER = re.compile(r"(?i)\bbearer\s+[A-Za-z0-9._~+/=-]+")
# A URL scheme is short (git+ssh, postgresql+psycopg): bounded, or "a.a.a.…" is quadratic.
# Not anchored at a word start, so a longer run of letters before "://" still has the
# password masked (the match starts at a later letter).
_URL_CREDENTIALS = re.compile(r"([a-z][a-z0-9+.-]{0,31}://)([^/\s:@]+):([^/\s@]+)@", re.IGNORECASE)
# Control characters a bounded message shows as their escape (C0 but tab and the line breaks
# it flattens, DEL, C1): a NUL is refused by PostgreSQL's text and JSON types, an ESC or a CSI
# repaints a terminal, and a message reaches stores, logs and terminals alike.
_CONTROLS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def scrub_secret(text: str, secret: str, *, shortest: int = 8) -> str:
    """``text`` without ``secret`` in any spelling a server echoing a request gives it:
    as is, percent-encoded (a URL path or query), JSON-escaped, or in a repr. A token of
    the ``<id>:<secret>`` shape loses its secret half on its own too. A secret shorter
    than ``shortest`` is left alone (masking it would mask ordinary words)."""
    if len(secret) < shortest:
        return text
    forms = {
        secret,
        urllib.parse.quote(secret, safe=""),
        urllib.parse.quote_plus(secret),
        json.dumps(secret)[1:-1],
        repr(secret)[1:-1],
    }
    _, colon, half = secret.partition(":")
    if colon and len(half) >= shortest:
        forms.add(half)
    for form in sorted(forms, key=len, reverse=True):
        text = text.replace(form, "[redacted]")
    return text


def bounded(text: object, limit: int = MESSAGE_LIMIT) -> str:
    """Return ``text`` as a single-line, secret-redacted string of at most ``limit`` chars,
    each control character (but tab) written as its ``\\xNN`` escape.

    Messages end up in logs, widgets, HTTP responses and the store; an
    unbounded message (a whole SQL row, a provider body) is both a leak and a
    denial of service, and a raw NUL or ESC in one fails a PostgreSQL write or
    drives a terminal.
    """
    raw = str(text)
    # A longer text is cut before it is redacted, so a hostile megabyte costs what 20 KB
    # does. A credential the cut splits is still masked when its pattern matches what is
    # left; only masks of more than the span itself, before it, could bring the cut into
    # the view.
    cut = len(raw) > limit * 4 + _REDACT_SPAN
    if cut:
        raw = raw[: limit * 4 + _REDACT_SPAN]
    # Escaped after redaction, which reads a vertical tab or a form feed as a space.
    value = _escaped(redact_credentials(raw.replace("\r", " ").replace("\n", " ")))
    if cut or len(value) > limit:
        value = value[: max(0, limit - 1)] + "…"
    return value


def bounded_hides(text: object, limit: int = MESSAGE_LIMIT) -> bool:
    """Whether ``bounded(text, limit)`` leaves part of ``text`` out: cut, or masked as a
    credential. For views a person decides on, which must say when they are partial."""
    flat = str(text).replace("\r", " ").replace("\n", " ")
    if len(flat) > limit:
        return True
    shown = redact_credentials(flat)
    return shown != flat or len(_escaped(shown)) > limit


def _escaped(text: str) -> str:
    """``text`` with each control character of ``_CONTROLS`` as its escape (``\\x00``)."""
    if not _CONTROLS.search(text):
        return text
    return _CONTROLS.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def redact_credentials(text: str) -> str:
    """``text`` with what ``bounded()`` masks: bearer values, URL passwords,
    secret-named assignments and token-shaped strings (lines and length kept).

    The one set of credential patterns: other operator views (a core's
    security diff and patch) use it rather than a copy that drifts.
    """
    # Bearer first: otherwise "Authorization: Bearer x" would redact only the word "Bearer".
    value = _BEARER.sub("Bearer [redacted]", text)
    value = _URL_CREDENTIALS.sub(r"\1\2:[redacted]@", value)
    value = _SECRET_ASSIGNMENT.sub(lambda m: f"{m.group(1)}{m.group(2)}[redacted]", value)
    return _TOKEN_SHAPES.sub("[redacted]", value)


def type_name(value: object, limit: int = 80) -> str:
    """What ``value`` is, for an error naming it: its type's name, bounded, never its
    repr (an embedder's object: its repr may be huge, raise, or recurse without end)."""
    return bounded(type(value).__name__, limit)


def unbounded_message(exc: object) -> str:
    """An exception's text before ``bounded()`` flattened and cut it (a ``HostkitError``'s).

    For redactors only: secrets are masked in this text, and then it is bounded.
    Any other exception (or value: a tool's reported error) gives ``str(exc)``, or
    its type name when that fails.
    """
    kept = getattr(exc, "_unbounded", None)
    if isinstance(kept, str):
        return kept
    try:
        return str(exc)
    except Exception:
        return type(exc).__name__


class HostkitError(Exception):
    """Root of every error hostkit raises on purpose."""

    retryable: bool = False
    message_limit: int = MESSAGE_LIMIT
    # What an effect did before it failed with this error (a tool's audit view: the hops a
    # fetch validated and connected to), for the runtime to persist with the call.
    audit: Mapping[str, Any] | None = None

    def __init__(self, message: str, *, retryable: bool | None = None) -> None:
        self.message = bounded(message, self.message_limit)
        # Kept for redactors only (unbounded_message): bounding flattens and cuts a
        # secret before they could find it, leaving part of it behind.
        self._unbounded = str(message)
        if retryable is not None:
            self.retryable = retryable
        super().__init__(self.message)

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled and copied as it is, fields and all, without running ``__init__`` again:
        subclasses take other arguments, and some build their message from them (a process
        pool sends errors back pickled)."""
        return (_rebuilt, (type(self), self.args, dict(self.__dict__)))


def _rebuilt(cls: type[HostkitError], args: tuple[Any, ...], state: dict[str, Any]) -> HostkitError:
    error = cls.__new__(cls)
    Exception.__init__(error, *args)
    error.__dict__.update(state)
    return error


class UserError(HostkitError):
    """The caller misused an interface; retrying the same call cannot help."""


class ConfigError(UserError):
    """A configuration value is invalid; the message names the offending key."""

    def __init__(self, message: str, *, key: str | None = None) -> None:
        self.key = key
        super().__init__(f"{key}: {message}" if key else message)


class MissingDependency(ConfigError, ImportError):
    """A configured or imported feature needs an optional package that is not installed.

    ``extra`` is the hostkit extra that installs it (``pip install "hostkit[<extra>]"``,
    which the one-line message ends with), ``packages`` the missing distributions
    (``package`` the first). Raised at configuration time (``Host.open``, a reload,
    ``import hostkit.notebook``), never as a failed turn. A ``ConfigError``, so
    every front end prints it as one (exit status 2 in the CLI); also an
    ``ImportError``, so code that guards an optional import with ``except
    ImportError`` keeps working when the import is ``hostkit.notebook``.
    """

    # The feature is quoted from configuration (a provider name): bounded, so the fix
    # at the end of the message always survives the message limit.
    feature_limit = 200

    def __init__(
        self, feature: str, *, extra: str, packages: Sequence[str], key: str | None = None
    ) -> None:
        self.extra = extra
        self.packages = tuple(packages)
        self.package = self.packages[0]
        names = ", ".join(repr(name) for name in self.packages)
        which = (
            "the package {}, which is" if len(self.packages) == 1 else "the packages {}, which are"
        )
        # The feature names the setting in words; ConfigError's "key: " prefix would repeat it.
        UserError.__init__(
            self,
            f"{bounded(feature, self.feature_limit)} needs {which.format(names)} not installed: "
            f'pip install "hostkit[{extra}]"',
        )
        self.key = key


class InvalidValue(UserError):
    """A contract value failed validation (bad shape, out of bounds, disagreeing bindings)."""


class ScopeError(UserError):
    """A PrincipalScope was forged, issued by another store, revoked, or under-specified."""


class NotFoundOrUnauthorized(HostkitError):
    """The single external answer for "does not exist" and "is not yours".

    The real reason is recorded in the Host-only audit, never in this message,
    so the answer does not leak whether another owner's object exists.
    """

    def __init__(self, kind: str = "object") -> None:
        self.kind = bounded(kind, 40)
        super().__init__(f"{self.kind} not found")


class UnboundToken(NotFoundOrUnauthorized):
    """A turn token that names no running turn of this Host: it ended, or was never issued.

    Whoever holds a token captured by a turn (a delivery, a prompt, a task it
    started) acts through it only while that turn runs; afterwards the token
    fails closed, with the same answer as a missing object.
    """

    def __init__(self, kind: str = "turn token") -> None:
        super().__init__(kind)


class TurnRejected(HostkitError):
    """A turn request failed validation, authentication or admission before turn.started."""

    def __init__(self, reason: str) -> None:
        self.reason = bounded(reason)
        super().__init__(f"turn rejected: {self.reason}")


class InvalidTurnRequest(TurnRejected, InvalidValue):
    """A ``TurnRequest`` that fails validation: the turn is rejected before admission.

    Both a ``TurnRejected`` (what every refused turn is) and an ``InvalidValue``
    (what every bad value is), so a caller may catch either.
    """

    def __init__(self, reason: str) -> None:
        TurnRejected.__init__(self, reason)


class RequestConflict(TurnRejected):
    """A request id (idempotency key) reused with a different request.

    The first request's turn stands; the second is refused, never answered with
    the first one's result (as payment APIs treat a reused idempotency key).
    """

    def __init__(self, request_id: str) -> None:
        self.request_id = bounded(request_id, 128)
        super().__init__(f"request id {self.request_id!r} was used before for a different request")


class AttachmentRefused(TurnRejected):
    """The provider a turn is pinned to does not accept one of its attachments.

    Raised before ``turn.started``: the attachment is refused explicitly,
    never dropped. ``provider`` and ``media_type`` name what refused what.
    """

    def __init__(self, provider: str, media_type: str, reason: str) -> None:
        self.provider = provider
        self.media_type = media_type
        super().__init__(reason)


class TurnInProgress(HostkitError):
    """The same request (idempotency key) already started a turn that is still running.

    Retryable: ask again later for its terminal result; never run it twice.
    ``running_since`` (when it was admitted) and ``retry_at`` (when its
    holder's lease runs out unless renewed: asking again before then only
    hears "still running") are wall-clock seconds, None when not known.
    """

    retryable = True

    def __init__(
        self, turn_id: str, *, running_since: float | None = None, retry_at: float | None = None
    ) -> None:
        self.turn_id = turn_id
        self.running_since = running_since
        self.retry_at = retry_at
        super().__init__(f"turn {bounded(turn_id, 80)} for this request is still running")


class DeliveryInProgress(HostkitError):
    """An answer of the session is being sent right now: an erase waits for the send.

    Retryable: a send ends within its claim's lease (seconds); erase again then.
    Erasing it mid-send would record as never sent what the platform received.
    """

    retryable = True

    def __init__(self, intent_id: str) -> None:
        self.intent_id = intent_id
        super().__init__(
            f"delivery intent {bounded(intent_id, 80)} of this session is being sent now; "
            "erase again in a few seconds"
        )


class ApprovalClosed(HostkitError):
    """The Host shut down while a decision was pending; the effect must not run."""

    def __init__(self) -> None:
        super().__init__("approvals are closed (the Host is shutting down)")


class PolicyRefusal(UserError):
    """A Host check refused an effect from inside its adapter, before any side effect.

    Some checks can only run while the effect runs (a symlink out of the
    workspace met during the walk, a private address in a DNS answer or a
    redirect). The EffectRuntime reports these as ``denied``, like the checks
    that run before invocation, never as a failure of the effect.
    """


class ApprovalRefused(UserError):
    """An answer to a durable approval cannot be taken; ``reason`` says why.

    ``answered``: it was answered before (a second answer never runs anything);
    ``stale``: the agent's policy, revision, capabilities or the effect changed
    since it was asked, or the conversation moved to another session;
    ``superseded``: a newer turn ran in the session (or the asking turn was
    cancelled), so the paused call is void; ``indeterminate``: its continuation
    stopped after claiming the call, which may have run and never runs again;
    ``pending``: there is no answer to resume yet; ``unavailable``: the answering
    Host cannot run the agent that asked (not configured there, or its provider is
    out), and nothing was recorded.
    """

    def __init__(self, approval_id: str, reason: str, detail: str) -> None:
        self.approval_id = approval_id
        self.reason = reason
        super().__init__(bounded(f"approval {approval_id}: {detail}", 300))


class PromotionRefused(UserError):
    """A core promotion (or rollback) that did not move the Host-owned ref.

    ``gates`` holds each gate's verdict (``GateOutcome`` values); ``review``
    is the content-bound ``mcp-review:<sha256>`` token the operator must pass
    back when the MCP declarations changed, ``dependency_review`` the
    ``deps-review:<sha256>`` one when dependencies changed (None when no
    review is needed).
    """

    def __init__(
        self,
        message: str,
        *,
        gates: tuple[object, ...] = (),
        review: str | None = None,
        dependency_review: str | None = None,
    ):
        self.gates = gates
        self.review = review
        self.dependency_review = dependency_review
        super().__init__(message)


class ChannelRefused(UserError):
    """A channel transport refused an inbound request; nothing of it was accepted.

    ``status`` is the HTTP status a webhook answers (400 unparsable, 401 bad or
    stale signature, 403 sender not allowed, 413 too large); ``code`` a short
    machine-readable reason. The message never holds the body or a secret.
    """

    message_limit = 200

    def __init__(self, message: str, *, status: int, code: str) -> None:
        self.status = status
        self.code = bounded(code, 40)
        super().__init__(message)


class StateConflict(HostkitError):
    """``ctx.state.set(..., expected=N)`` found another version: someone wrote in between.

    Authored ``get()`` and ``set()`` are separate steps, not one transaction:
    read again and decide. ``actual`` is the current version (None: absent).
    """

    def __init__(self, key: str, *, expected: int | None, actual: int | None) -> None:
        self.key = key
        self.expected = expected
        self.actual = actual
        super().__init__(
            bounded(f"state {key!r} is at version {actual}, not the expected {expected}", 300)
        )


class RuntimeFailure(HostkitError):
    """The runtime could not complete an operation that was valid."""


class RefLocked(RuntimeFailure):
    """A core's Host-owned ref stayed locked (Git's ``<ref>.lock``) for the whole bounded
    wait: another promotion is moving it, or a crashed one left the lock file behind."""

    def __init__(self, ref: str, lock: str) -> None:
        self.ref = ref
        self.lock = lock
        super().__init__(
            bounded(
                f"the ref {ref} is locked ({lock}): another promotion is running, "
                "or a stale lock file (remove it if no promotion is running)",
                600,
            )
        )


class StoreError(RuntimeFailure):
    """The runtime store failed; ``retryable`` says whether the same call may succeed later."""


class StoreClosed(StoreError):
    """The store was used after ``aclose()``."""

    def __init__(self) -> None:
        super().__init__("runtime store is closed")


class StoreOutcomeUnknown(StoreError):
    """A write's COMMIT was sent and its answer lost (the connection broke): it may or may
    not have landed. Read the state again before retrying; a write keyed by a request id
    or fenced by a token may be run again to find out."""

    def __init__(self, message: str) -> None:
        super().__init__(message, retryable=False)


class DatabaseReplaced(StoreError):
    """The database file, or its ``-wal`` or ``-shm`` file, was deleted or replaced while the
    store had it open.

    SQLite would go on writing to the open (deleted) file, and everything
    accepted after that would be gone at the next start, or written apart from
    another process that opened the database meanwhile: no write is taken.
    ``file`` is the path that changed (the database's own path by default).
    """

    def __init__(self, database: str, file: str | None = None) -> None:
        if file is None or file == database:
            what = f"the database file {database[-200:]}"
            todo = "restart the Host on the right file"
        else:
            what = f"the file {file[-200:]} beside the database"
            todo = "stop every process using the database, then start the Host again"
        super().__init__(
            f"{what} was deleted or replaced while this Host had it open: nothing more is "
            f"written to it ({todo})",
            retryable=False,
        )
        self.file = database if file is None else file


class ClockSkew(StoreError):
    """This machine's clock and the database server's disagree by more than ``max_clock_skew_s``.

    Leases, claims and due times follow the server's clock (``RuntimeStore.now``),
    whatever this machine's says; but a machine clock that far off is wrong
    about every time the Host shows, logs and stamps, so a Host whose clock is
    off by more than ``max_clock_skew_s`` when it opens the store does not
    start (found off later, it logs a warning). ``skew_s`` is positive when
    this machine's clock is ahead.
    """

    def __init__(self, *, skew_s: float, max_skew_s: float, database: str) -> None:
        self.skew_s = skew_s
        self.max_skew_s = max_skew_s
        side = "ahead of" if skew_s > 0 else "behind"
        super().__init__(
            bounded(
                f"this machine's clock is {abs(skew_s):.1f} s {side} the clock of the database "
                f"server {database}; Hosts sharing a database need clocks within "
                f"{max_skew_s:g} s of it (the times they show and log): synchronise this "
                "machine's clock (NTP), or raise [store] max_clock_skew_s",
                600,
            ),
            retryable=False,
        )


class MigrationError(StoreError):
    """A schema upgrade did not happen; the old database is untouched.

    ``database`` and ``backup`` are absolute paths (``backup`` may be None when
    no backup was taken yet) and ``restore`` is the exact action to restore.
    """

    # Room for three absolute paths after a bounded cause.
    message_limit = 4 * MESSAGE_LIMIT

    def __init__(
        self,
        message: str,
        *,
        database: str,
        backup: str | None = None,
        restore: str | None = None,
    ) -> None:
        self.database = database
        self.backup = backup
        self.restore = restore
        parts = [bounded(message), f"database: {database}"]
        if backup:
            parts.append(f"backup: {backup}")
        if restore:
            parts.append(f"restore: {restore}")
        super().__init__("; ".join(parts))


class LeaseLost(RuntimeFailure):
    """A write carried a fencing token its lease no longer has; nothing of it was written.

    Another Host took the lease over (it had expired, or its holder was found
    dead), or the lease had already ended. The stale holder must stop: whoever
    holds the lease now records the outcome of the work it abandoned.
    """

    def __init__(self, lease: str = "lease") -> None:
        self.lease = bounded(lease, 60)
        super().__init__(f"the {self.lease} is no longer held by this writer; write refused")


class InboxFull(RuntimeFailure):
    """The inbox refused a new inbound, nothing of the call stored: the queued backlog
    reached its limit (``reason`` "backlog"), or the database's disk is down to the free
    space the Host keeps ("disk"). Retryable: the transport does not acknowledge, and the
    platform resends after ``retry_after`` seconds, when workers may have made room. A
    duplicate of an inbound already stored is never refused (its answer needs no room).
    """

    def __init__(self, reason: str, *, retry_after: float) -> None:
        self.reason = bounded(reason, 20)
        self.retry_after = retry_after
        what = (
            "its queued backlog reached the limit ([serve] inbox_max_queued)"
            if reason == "backlog"
            else "the database's disk is down to the space it keeps ([serve] inbox_disk_reserve_mb)"
        )
        super().__init__(f"the inbox refused a new inbound: {what}", retryable=True)


class PollError(RuntimeFailure):
    """A polled platform API (Telegram ``getUpdates``) failed; its cursor did not move.

    ``retryable`` is False when the platform refused the credentials (401):
    polling again with the same token cannot help, so the poller stops.
    ``status`` is the HTTP status when there was one.
    """

    def __init__(self, message: str, *, status: int | None = None, retryable: bool = True) -> None:
        self.status = status
        super().__init__(message, retryable=retryable)


class StaleClaim(RuntimeFailure):
    """An inbox or delivery claim is no longer current: its lease was taken over or it ended.

    The holder must stop working on the inbound (or outbox intent): the current
    claimant (or the terminal record) owns its outcome now. ``inbound_id`` is
    the claimed row's id whatever ``subject`` names.
    """

    def __init__(self, inbound_id: str, *, subject: str = "inbound") -> None:
        self.inbound_id = bounded(inbound_id, 80)
        self.subject = bounded(subject, 40)
        super().__init__(f"the claim on {self.subject} {self.inbound_id} is no longer current")


class _Failure(Protocol):
    """What ``DeliveryRefused`` carries: a ``hostkit.types.DeliveryFailure`` (no import here)."""

    @property
    def kind(self) -> str: ...

    @property
    def code(self) -> str: ...

    @property
    def retry_after_s(self) -> float | None: ...

    def text(self) -> str: ...


class DeliveryRefused(RuntimeFailure):
    """One delivery attempt failed, classified: ``failure`` says transient or permanent, and why.

    Raised by outbound channel adapters (``hostkit.delivery``); the
    ``DeliveryRuntime`` records the failure on the intent and retries a
    transient one with backoff (at least ``failure.retry_after_s`` later).
    The message is the failure's redacted, bounded text: never a token,
    never the payload.
    """

    def __init__(self, failure: _Failure) -> None:
        self.failure = failure
        super().__init__(
            f"delivery {failure.kind}ly refused: {failure.text()}",
            retryable=failure.kind == "transient",
        )


class ProviderError(RuntimeFailure):
    """A model provider call failed after hostkit's own bounded retries.

    ``status`` is the HTTP status when there was one; ``retry_after`` the
    provider's requested delay in seconds (None, or a finite number from 0 to
    ``MAX_RETRY_AFTER_S``, whatever the adapter passed: safe to sleep on);
    ``provider`` names the adapter.
    """

    def __init__(
        self,
        message: str,
        *,
        provider: str,
        status: int | None = None,
        retryable: bool = False,
        retry_after: float | None = None,
    ) -> None:
        self.provider = provider
        self.status = status
        self.retry_after = _delay(retry_after)
        super().__init__(f"{provider}: {message}", retryable=retryable)


def _delay(seconds: float | None) -> float | None:
    """``seconds`` held to ``[0, MAX_RETRY_AFTER_S]``; None for no finite non-negative number."""
    if isinstance(seconds, bool) or not isinstance(seconds, int | float):
        return None
    if (isinstance(seconds, float) and not math.isfinite(seconds)) or seconds < 0:
        return None
    return float(min(seconds, MAX_RETRY_AFTER_S))  # an int of any size compares exactly


class ContextOverflow(ProviderError):
    """The provider said the request does not fit its context window; never retried as is."""

    def __init__(self, message: str, *, provider: str, status: int | None = None) -> None:
        super().__init__(message, provider=provider, status=status, retryable=False)


class TurnInfrastructureError(RuntimeFailure):
    """No trustworthy terminal record could be written for a turn.

    Callers must not infer success or retry non-idempotent work from it.
    """

    outcome = "indeterminate"

    def __init__(self, request_id: str, *, durable_result_ref: str | None = None) -> None:
        self.request_id = request_id
        self.durable_result_ref = durable_result_ref
        super().__init__(f"turn {bounded(request_id, 80)} has no trustworthy terminal record")
