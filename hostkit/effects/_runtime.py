"""EffectRuntime: the one pipeline every effect invocation follows."""

from __future__ import annotations

import dataclasses
import os
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import anyio

from hostkit._cancellation import is_cancellation
from hostkit.effects._approvals import ApprovalKey, ApprovalRequest, ApprovalRuntime
from hostkit.effects._authored import (
    AuthoredTool,
    AuthorHandles,
    Prepared,
    ToolChanged,
    ToolContext,
    ToolOutcome,
)
from hostkit.effects._catalog import CatalogEntry, PreparedEffectCatalog, provider_name
from hostkit.effects._diff import DIFF_KEY, bound_diff
from hostkit.effects._fingerprint import approval_fingerprint
from hostkit.effects._mcp import McpServer
from hostkit.effects._mcp_catalog import mcp_entries
from hostkit.effects._mcp_pool import McpConnections, McpDiscovery
from hostkit.effects._pending import ApprovalLedger, AskedCall, ClaimedApproval, DurableAsk
from hostkit.effects._policy import EffectPolicy
from hostkit.effects._redaction import (
    MIN_SECRET_CHARS,
    HeldSpellings,
    RedactionLimit,
    Redactor,
    derived_secrets,
    safe_text,
)
from hostkit.effects._views import REDACTION_FAILED, failed_safely, render_output, result
from hostkit.errors import (
    ApprovalClosed,
    ApprovalRefused,
    HostkitError,
    InvalidValue,
    PolicyRefusal,
    UserError,
    bounded,
    unbounded_message,
)
from hostkit.freeze import FrozenMap
from hostkit.store import RuntimeStore
from hostkit.types import (
    PARTIAL_KEY,
    PARTIAL_NOTE,
    EffectRequest,
    EffectResult,
    EffectStatus,
    MalformedArguments,
    OversizedArguments,
    TurnExecutionContext,
    bounded_metadata,
    is_cut,
    is_secret_field,
    new_id,
)

__all__ = [
    "DEFAULT_ENV_ALLOWLIST",
    "DEFAULT_SECRET_TTL_S",
    "ENV_NAME_PATTERN",
    "EffectRuntime",
    "Toolset",
    "ToolsetProvider",
    "secret_grant",
]

DEFAULT_SECRET_TTL_S = 300.0
# How much of an exception's text is read (and redacted) before it is bounded.
_MAX_EXCEPTION_READ = 16_000
_MAX_ERROR_SUMMARY = 300
# Characters of one string an approval view keeps.
_VIEW_STRING = 300
# What a secret's (or any bound variable's) name may be: a secret is the Host
# environment variable of that name. hostkit.toml and terminal.run validate with it.
ENV_NAME_PATTERN = r"[A-Za-z_][A-Za-z0-9_]{0,127}"
_ENV_NAME = re.compile(ENV_NAME_PATTERN)
# What every process the Host starts for an agent or a core (terminal runs, MCP stdio
# servers, tool discovery, a core's test gate) inherits of the Host's environment: what
# a process needs to run, nothing that names a credential.
DEFAULT_ENV_ALLOWLIST = (
    "PATH",
    "HOME",
    "LANG",
    "LC_ALL",
    "LC_CTYPE",
    "TZ",
    "TERM",
    "TMPDIR",
    "USER",
    "LOGNAME",
)
_SECRET_GRANT = "secret.bind:"
# Why a continuation ran nothing: its tool's check found another target than was approved.
_TARGET_CHANGED = (
    "the approval is stale: what the call acts on changed since it was approved "
    "(the file's content, say); nothing ran"
)
# What the model reads for arguments that were no JSON object (``MalformedArguments``).
_MALFORMED = (
    "the arguments were not one JSON object: they {reason}. Malformed, truncated, "
    "non-finite or too deeply nested JSON is refused and nothing ran; "
    "send the call again with its arguments as one complete JSON object"
)
# What the model reads for arguments the context window could not keep (``OversizedArguments``).
_OVERSIZED = (
    "the arguments {reason}; nothing ran: send a smaller call, e.g. write long content "
    "in parts (one call each), or fewer calls at once"
)
_TOO_DEEP_TO_REDACT = (
    "the arguments are nested too deeply, or hold too many or too long secret-named values, "
    "to be redacted safely"
)


def secret_grant(name: str) -> str:
    """The capability that lets a call bind the Host environment variable ``name``."""
    return f"{_SECRET_GRANT}{name}"


@dataclass(frozen=True, slots=True)
class Toolset:
    """The effects one turn may see, already filtered by the agent's resolved policy."""

    tools: tuple[tuple[AuthoredTool, str], ...]
    policy: EffectPolicy
    workspace: Path
    secret_ttl_s: float = DEFAULT_SECRET_TTL_S
    # Declared MCP servers, each with the connector bound to the agent; their tools
    # are discovered per session (``McpConnections``), after the connect gate.
    mcp_servers: tuple[McpServer, ...] = ()
    # Every secret some agent of this Host may hold (environment names): masked in this
    # turn's results too, held by this agent or not. Agents share workspaces and
    # sessions' files: a value one agent's run left in a file is no other agent's to read.
    masked_secrets: tuple[str, ...] = ()


class ToolsetProvider(Protocol):
    """Supplies a turn's toolset from the generation pinned in its context."""

    async def toolset(self, context: TurnExecutionContext) -> Toolset: ...


@dataclass(frozen=True, slots=True)
class _Checked:
    """A request that passed every check up to (not including) approval."""

    call_id: str
    entry: CatalogEntry
    toolset: Toolset
    arguments: dict[str, Any]
    raw_arguments: Mapping[str, Any]
    secret_names: tuple[str, ...]
    # Every secret the agent holds a grant for in this turn (name -> value), and a
    # redactor for them plus the call's secret-named argument values.
    held: Mapping[str, str]
    redactor: Redactor
    # What the tool's ``prepare`` check found: the approver's view of the target, and
    # the value the invocation receives (``ToolContext.prepared``).
    target: Mapping[str, Any] | None = None
    prepared: Any = None
    # ``Prepared.digest``: what the check found, as a durable approval keeps it.
    target_digest: str | None = None
    # ``Prepared.diff``: makes the change from the read ``target_digest`` fingerprints.
    diff: Callable[[], str | None] | None = None


def _call_redactor(checked: _Checked, secrets: Mapping[str, str], held: HeldSpellings) -> Redactor:
    """The call's secret set: every held value (the bound ones among them, labelled alike)
    plus secret-named argument values (``_check`` derived them once already)."""
    return Redactor.of(
        {**checked.held, **secrets},
        _argument_secrets(checked.entry.tool, checked.raw_arguments),
        held=held,
    )


def _refused(
    call_id: str,
    effect: str,
    status: EffectStatus,
    error: str,
    redactor: Redactor | None = None,
) -> EffectResult:
    # Every refusal happens before invocation: started=False, nothing for the model.
    return result(
        call_id=call_id,
        effect=effect,
        status=status,
        started=False,
        model_text="",
        error=error,
        redactor=redactor,
    )


def _error_text(exc: BaseException, redactor: Redactor, *, named: bool = True) -> str:
    """Bounded text of ``exc``, redacted before anything flattens or cuts it."""
    message = unbounded_message(exc)
    if named:
        message = f"{type(exc).__name__}: {message}" if message else type(exc).__name__
    return bounded(redactor.text(message, limit=_MAX_EXCEPTION_READ), _MAX_ERROR_SUMMARY)


class EffectRuntime:
    """``execute(EffectRequest, TurnExecutionContext) -> EffectResult`` plus the catalog seam.

    Order for every invocation (contract, EffectRuntime): validate the request
    and its catalog binding; check the turn owns the catalog; require the
    effect (and every ``secret.bind:<NAME>`` it asks for) in the pinned
    capability snapshot; refuse arguments that were no JSON object
    (``MalformedArguments``); validate arguments and run the pure Host checks
    (preflight); apply policy; run the tool's ``prepare`` check (a URL's
    form, never its DNS), so a refused target never reaches an approver
    and the prompt shows the checked one; resolve approval; bind only the approved
    secrets; invoke under a deadline; build bounded, redacted views. Nothing is
    imported, spawned, written or fetched before those checks pass.
    Cancellation of the caller propagates (the turn records it).

    With a ``store``, an ``ask`` is a durable pending approval from the moment
    it is asked, before any provider sees it; an inline answer is recorded on
    that row (once: an answer from another process wins). An ``ask`` not
    answered inline pauses the turn on it; ``execute_approved`` runs it once
    in a continuation turn. With a ``store``, an invoked call's audit view
    (the tool's ``ToolOutcome.audit`` plus the target its ``prepare`` check
    validated) is redacted and written to the audit log as ``effect.<name>``
    before the result is returned (``InspectQueries.effect_audits`` reads it
    back).
    """

    def __init__(
        self,
        *,
        toolsets: ToolsetProvider,
        approvals: ApprovalRuntime | None = None,
        store: RuntimeStore | None = None,
        environ: Mapping[str, str] | None = None,
        mcp: McpConnections | None = None,
    ) -> None:
        self._toolsets = toolsets
        self._mcp = mcp
        self._approvals = approvals or ApprovalRuntime()
        self._ledger = None if store is None else ApprovalLedger(store)
        self._store = store
        self._environ = os.environ if environ is None else environ
        self._catalogs: dict[str, tuple[PreparedEffectCatalog, Toolset]] = {}
        # turn id -> ids of the calls whose tool was invoked (until the turn's catalog closes)
        self._invoked: dict[str, set[str]] = {}
        # The held secrets' spellings, kept for this runtime's calls only (one generation's):
        # dropped by ``close``, never shared with another runtime or Host.
        self.held_spellings = HeldSpellings()

    def close(self) -> None:
        """Forget every held secret's spellings (the generation that owns this runtime closed)."""
        self.held_spellings.close()

    async def prepare_catalog(
        self, context: TurnExecutionContext, *, window_tokens: int | None = None
    ) -> PreparedEffectCatalog:
        """Freeze this turn's definitions and references.

        Declared MCP servers pass the ``mcp.connect:<server>`` gate and are
        discovered here (reusing the session's connections); a server that
        gives nothing is in ``catalog.discoveries`` with the reason. With the
        model's ``window_tokens``, discovered tools past a server's share of
        that window are left out (named in its discovery).
        """
        toolset = await self._toolsets.toolset(context)
        entries = [
            CatalogEntry(new_id("eff"), tool.name, provider_name(tool.name), tool, source)
            for tool, source in toolset.tools
            if tool.name in context.capability_snapshot.get("effects", ())
        ]
        discoveries: tuple[McpDiscovery, ...] = ()
        if self._mcp is not None or toolset.mcp_servers:
            # Also with no server declared: a declaration removed since the session's
            # last turn closes its connection here.
            if self._mcp is None:
                raise InvalidValue("MCP servers are declared but this runtime has no connections")
            found, discoveries = await mcp_entries(
                pool=self._mcp,
                approvals=self._approvals,
                context=context,
                policy=toolset.policy,
                servers=toolset.mcp_servers,
                taken={entry.provider_name for entry in entries},
                window_tokens=window_tokens,
            )
            entries += found
        catalog = PreparedEffectCatalog(
            turn_id=context.turn_id,
            session_id=context.session_id,
            entries=tuple(entries),
            discoveries=discoveries,
        )
        if self._mcp is not None:
            connected = [d.server for d in discoveries if d.state == "connected"]
            self._mcp.hold(catalog.catalog_id, context.session_id, connected)
        self._catalogs[catalog.catalog_id] = (catalog, toolset)
        if context.principal.conversation_key is not None:
            self._approvals.observe_binding(
                context.principal.principal_id,
                context.principal.conversation_key,
                context.session_id,
            )
            if context.principal.channel is not None:
                # Keyed by channel too: the same key on two channels is two conversations.
                self._approvals.observe_conversation(
                    context.principal.channel,
                    context.principal.conversation_key,
                    context.session_id,
                )
        return catalog

    def turn_redactor(
        self, context: TurnExecutionContext, catalog: PreparedEffectCatalog
    ) -> Redactor:
        """What every result of the turn is masked with: each secret the agent holds, each
        another agent may hold, and each a tool of ``catalog`` is configured with.

        For what the turn keeps or reports that no tool produced (a provider's call id,
        a name the model typed): prompt injection can put a secret there too.
        """
        bound = self._catalogs.get(catalog.catalog_id)
        held = self._held_secrets(context, bound[1] if bound is not None else None)
        for entry in catalog.entries:
            for name, value in entry.tool.secret_values.items():
                if len(value) >= MIN_SECRET_CHARS:
                    held.setdefault(name, value)
        return Redactor.of(held, held=self.held_spellings)

    async def supersede_pending(self, context: TurnExecutionContext) -> int:
        """A new ordinary turn starts in the session: its unanswered approvals become void.

        The paused call was answered with a stub the moment the user moved on;
        running it later would put its result after newer messages.
        """
        if self._ledger is None:
            return 0
        return await self._ledger.supersede(context)

    async def close_catalog(self, catalog: PreparedEffectCatalog) -> None:
        self._catalogs.pop(catalog.catalog_id, None)
        if self._mcp is not None:
            await self._mcp.release(catalog.catalog_id)
        self._invoked.pop(catalog.turn_id, None)
        await catalog.close()

    def invoked(self, turn_id: str) -> frozenset[str]:
        """Ids of the calls of ``turn_id`` whose tool was invoked: a turn cancelled during
        ``execute`` tells an effect that may have happened (its tool ran) from one refused
        or still waiting for approval (nothing ran)."""
        return frozenset(self._invoked.get(turn_id, ()))

    async def execute(
        self,
        request: EffectRequest,
        context: TurnExecutionContext,
        *,
        author: AuthorHandles | None = None,
    ) -> EffectResult:
        """Run one effect through the pipeline; returns a typed result, never adapter errors.

        ``author``: the running turn's authored state and events, lent to the
        tool in its ``ToolContext`` (``state``, ``core_state``, ``emit``).
        """
        checked = self._check(request, context)
        if isinstance(checked, EffectResult):
            return checked
        effect = checked.entry.effect
        decision = checked.toolset.policy.decide_call(effect, checked.entry.capability)
        if decision == "deny":
            return _refused(
                request.call_id, effect, "denied", "denied by the agent's effect policy"
            )
        prepared = await self._prepare(checked)
        if isinstance(prepared, EffectResult):
            return prepared
        checked = prepared
        if decision == "ask" or checked.secret_names:
            refusal = await self._approve(checked, context)
            if refusal is not None:
                return refusal
        return await self._bind_and_invoke(checked, context, author)

    async def execute_approved(
        self,
        approval_id: str,
        catalog: PreparedEffectCatalog,
        context: TurnExecutionContext,
        *,
        author: AuthorHandles | None = None,
    ) -> tuple[str, str, EffectResult]:
        """Run the answered approval ``approval_id`` once; returns (call id, tool name, result).

        The claim is durable before anything runs, so a crash never runs it
        twice. The policy fingerprint is rechecked against this turn's catalog;
        a mismatch marks the approval stale and nothing runs. A denial yields a
        ``denied`` result for the model. Raises ``ApprovalRefused`` when there is
        nothing to claim in this session.
        """
        ledger = self._require_ledger()
        claimed = await ledger.claim(approval_id, context)
        if claimed is None:
            raise ApprovalRefused(approval_id, "answered", "there is no answered call to run")
        approval = claimed.approval
        result = await self._run_approved(claimed, catalog, context, author)
        return approval.call_id, provider_name(approval.effect), result

    async def _run_approved(
        self,
        claimed: ClaimedApproval,
        catalog: PreparedEffectCatalog,
        context: TurnExecutionContext,
        author: AuthorHandles | None,
    ) -> EffectResult:
        approval = claimed.approval
        call_id, effect = approval.call_id, approval.effect
        ref = catalog.resolve(provider_name(effect))
        entry = catalog.entry(ref) if ref is not None else None
        if (
            ref is None
            or entry is None
            or approval_fingerprint(context, entry) != approval.policy_fingerprint
        ):
            await self._require_ledger().mark_stale(
                approval.approval_id, claimed_by=context.turn_id
            )
            stale = "the approval is stale: the agent's policy or capabilities changed"
            return _refused(call_id, effect, "denied", stale)
        if approval.status == "denied":
            return _refused(call_id, effect, "denied", "the approver denied this call")
        checked = self._check(EffectRequest(call_id, ref, claimed.arguments, "model"), context)
        if isinstance(checked, EffectResult):
            return checked
        if checked.toolset.policy.decide_call(effect, checked.entry.capability) == "deny":
            return _refused(call_id, effect, "denied", "denied by the agent's effect policy")
        # The target is checked again now: the policy may have changed since it was asked.
        prepared = await self._prepare(checked)
        if isinstance(prepared, EffectResult):
            return prepared
        if approval.target_digest is not None and prepared.target_digest != approval.target_digest:
            # What the approver saw (a file's content under a diff) is not what the call
            # would act on now: nothing runs, and the model may ask again.
            await self._require_ledger().mark_stale(
                approval.approval_id, claimed_by=context.turn_id
            )
            return _refused(call_id, effect, "denied", _TARGET_CHANGED)
        return await self._bind_and_invoke(prepared, context, author)

    # -- the checks before approval ------------------------------------------------------

    def _check(
        self, request: EffectRequest, context: TurnExecutionContext
    ) -> _Checked | EffectResult:
        call_id, effect = request.call_id, request.ref.effect
        bound = self._catalogs.get(request.ref.catalog_id)
        entry = bound[0].entry(request.ref) if bound else None
        if bound is None or entry is None:
            return _refused(call_id, effect, "not_found", "no such effect in this turn's catalog")
        catalog, toolset = bound
        if (catalog.turn_id, catalog.session_id) != (context.turn_id, context.session_id):
            return _refused(call_id, effect, "denied", "the catalog belongs to another turn")
        snapshot = context.capability_snapshot
        if (entry.capability or effect) not in snapshot.get("effects", ()):
            return _refused(
                call_id, effect, "denied", "the effect is not in the turn's capability snapshot"
            )
        # Every secret the agent holds, and every one another agent of this Host may
        # hold, is masked in every result of the turn, bound to this call or not: a value
        # one call wrote to a file, the next (or another agent's) may read back.
        held = self._held_secrets(context, toolset)
        # And the values the tool's own configuration holds (an MCP server's declared env).
        for name, value in entry.tool.secret_values.items():
            if len(value) >= MIN_SECRET_CHARS:
                held.setdefault(name, value)
        if isinstance(request.arguments, MalformedArguments):
            # A fact about the call, not arguments: no tool validates it (a schema that
            # takes any property would run the tool on its defaults), no approver reads it.
            template = (
                _OVERSIZED if isinstance(request.arguments, OversizedArguments) else _MALFORMED
            )
            reason = template.format(reason=request.arguments.reason)
            return _refused(
                call_id, effect, "invalid", reason, Redactor.of(held, held=self.held_spellings)
            )
        # Values of secret-named arguments are secrets too, in every view of this call.
        try:
            argument_secrets = Redactor.of(
                held, _argument_secrets(entry.tool, request.arguments), held=self.held_spellings
            )
        except RedactionLimit:
            refusal = Redactor.of(held, held=self.held_spellings)
            return _refused(call_id, effect, "invalid", _TOO_DEEP_TO_REDACT, refusal)
        try:
            arguments = entry.tool.validate(request.arguments)
        except InvalidValue as exc:
            reason = _error_text(exc, argument_secrets, named=False)
            return _refused(call_id, effect, "invalid", reason, argument_secrets)
        secret_names = _requested_secrets(entry.tool, arguments)
        grants = snapshot.get("secrets", ())
        missing = [name for name in secret_names if secret_grant(name) not in grants]
        if missing:
            return _refused(
                call_id,
                effect,
                "denied",
                f"no {secret_grant(missing[0])} capability for this agent",
                argument_secrets,
            )
        if entry.tool.preflight is not None:
            try:
                entry.tool.preflight(arguments)
            except UserError as exc:
                reason = _error_text(exc, argument_secrets, named=False)
                return _refused(call_id, effect, "denied", reason, argument_secrets)
        return _Checked(
            call_id,
            entry,
            toolset,
            arguments,
            request.arguments,
            secret_names,
            held,
            argument_secrets,
        )

    async def _prepare(self, checked: _Checked) -> _Checked | EffectResult:
        """Run the tool's pre-approval ``prepare`` check; nothing has started yet.

        A ``UserError`` (a refused URL or address) is ``denied``, a deadline
        ``timed_out`` and any other failure (a name that does not resolve)
        ``failed``, all with ``started=False``. Cancellation propagates.
        """
        tool, call_id, effect = checked.entry.tool, checked.call_id, checked.entry.effect
        if tool.prepare is None:
            return checked
        redactor = checked.redactor
        try:
            with anyio.fail_after(tool.timeout_s):
                prepared = await tool.prepare(checked.arguments)
            if not isinstance(prepared, Prepared):
                raise TypeError("prepare must return a Prepared")
        except UserError as exc:
            return _refused(
                call_id, effect, "denied", _error_text(exc, redactor, named=False), redactor
            )
        except TimeoutError:
            error = f"checking the target timed out after {tool.timeout_s:g}s"
            return _refused(call_id, effect, "timed_out", error, redactor)
        except BaseException as exc:
            # As for invocation: only real cancellation propagates, never a tool's own.
            if is_cancellation(exc):
                raise
            return _refused(call_id, effect, "failed", _error_text(exc, redactor), redactor)
        return dataclasses.replace(
            checked,
            target=prepared.view,
            prepared=prepared.value,
            target_digest=prepared.digest,
            diff=prepared.diff,
        )

    async def _preview_diff(self, checked: _Checked) -> str | None:
        """The tool's diff of what the call would change, for the approver; None without one.

        The diff of the state ``prepare`` fingerprinted comes first, else the
        tool's ``preview_diff``. Best effort under the tool's deadline: a diff
        that cannot be made is left out of the prompt, never a reason to refuse
        the call.
        """
        preview = checked.entry.tool.preview_diff
        made = checked.diff
        if made is None and preview is None:
            return None
        try:
            with anyio.fail_after(checked.entry.tool.timeout_s):
                if made is not None:
                    diff = await anyio.to_thread.run_sync(made, abandon_on_cancel=True)
                else:
                    assert preview is not None
                    diff = await preview(checked.arguments)
        except BaseException as exc:
            if is_cancellation(exc):
                raise
            return None
        return diff if isinstance(diff, str) else None

    def _held_secrets(
        self, context: TurnExecutionContext, toolset: Toolset | None
    ) -> dict[str, str]:
        """name -> value for every ``secret.bind:<NAME>`` grant in the turn's snapshot, and
        every secret another agent of the Host may hold (``Toolset.masked_secrets``).

        Read from the runtime's environment; an unset or too-short value is skipped
        here (binding one is refused with a reason).
        """
        held: dict[str, str] = {}
        granted = [
            grant.removeprefix(_SECRET_GRANT)
            for grant in context.capability_snapshot.get("secrets", ())
            if isinstance(grant, str) and grant.startswith(_SECRET_GRANT)
        ]
        masked = toolset.masked_secrets if toolset is not None else ()
        for name in (*granted, *masked):
            value = self._environ.get(name) if _ENV_NAME.fullmatch(name) else None
            if value is not None and len(value) >= MIN_SECRET_CHARS:
                held[name] = value
        return held

    # -- approval ------------------------------------------------------------------------

    async def _approve(
        self, checked: _Checked, context: TurnExecutionContext
    ) -> EffectResult | None:
        """None when approved; otherwise the result to return (denied, or paused)."""
        entry, call_id = checked.entry, checked.call_id
        fingerprint = approval_fingerprint(context, entry)
        key = ApprovalKey(
            principal_id=context.principal.principal_id,
            session_id=context.session_id,
            policy_fingerprint=fingerprint,
            rule_key=checked.toolset.policy.rule_key(entry.effect),
            core_id=context.core_id,
        )
        warning = entry.tool.approval_warning
        view = approval_view(
            entry.effect,
            checked.raw_arguments,
            checked.secret_names,
            warning,
            held=checked.held,
            held_spellings=self.held_spellings,
            target=checked.target,
            diff=await self._preview_diff(checked),
        )
        # One id from the first prompt to the durable row an unanswered ask leaves.
        approval_id = new_id("apr")

        def ask() -> ApprovalRequest:
            return ApprovalRequest(
                approval_id,
                key,
                entry.effect,
                context.turn_id,
                view,
                checked.secret_names,
                warning=warning,
            )

        record = None
        if self._ledger is not None:
            asked = AskedCall(
                entry.effect,
                call_id,
                checked.raw_arguments,
                view,
                fingerprint,
                key.rule_key,
                checked.target_digest,
            )
            record = DurableAsk(
                self._ledger, approval_id, context, asked, secret_names=checked.secret_names
            )
        try:
            outcome = await self._approvals.resolve(
                key,
                ask,
                self._approvals.provider,
                cacheable=not checked.secret_names,
                record=record,
            )
        except ApprovalClosed as exc:
            if record is None or not record.recorded:
                return _refused(call_id, entry.effect, "denied", exc.message, checked.redactor)
            outcome = "unanswered"  # the Host closed while a person decided: still pending
        if outcome == "approved":
            return None
        if outcome == "denied":
            return _refused(call_id, entry.effect, "denied", "the approver denied this call")
        if outcome == "void" and record is not None:
            # Stored void as it was asked (the conversation moved to another session):
            # nobody was asked and nobody can answer, so the turn does not pause on it.
            why = record.void_reason or "nobody can answer it"
            return _refused(
                call_id, entry.effect, "denied", f"approval {approval_id} is void: {why}"
            )
        if record is None:
            return _refused(
                call_id, entry.effect, "denied", "nobody answered and no approval can be kept"
            )
        # Unanswered here: the durable approval stays open (or was answered from another
        # process, whose continuation runs the call); the turn pauses on it.
        paused = _refused(call_id, entry.effect, "denied", f"waiting for approval {approval_id}")
        return dataclasses.replace(paused, pending_approval=approval_id)

    # -- binding and invocation ----------------------------------------------------------

    async def _bind_and_invoke(
        self, checked: _Checked, context: TurnExecutionContext, author: AuthorHandles | None
    ) -> EffectResult:
        secrets: dict[str, str] = {}
        for name in checked.secret_names:
            value = self._environ.get(name)
            if value is None or len(value) < MIN_SECRET_CHARS:
                problem = "is not set" if value is None else "is too short to redact safely"
                return _refused(
                    checked.call_id,
                    checked.entry.effect,
                    "failed",
                    f"secret {name} {problem} in the Host environment",
                    checked.redactor,
                )
            secrets[name] = value
        expires_at = time.time() + checked.toolset.secret_ttl_s if secrets else None
        # Masks what the call's result is masked with: every held value (the bound ones
        # among them) and the call's secret-named argument values.
        call_redactor = _call_redactor(checked, secrets, self.held_spellings)
        # The bound values alone, for the tool's own masking of what it handed them to (a
        # process's output): from the kept spellings, so no stream rebuilds a redactor, and
        # holding no value the call was not given.
        bound_redactor = Redactor.of(secrets, held=self.held_spellings)
        tool_context = ToolContext(
            turn_id=context.turn_id,
            session_id=context.session_id,
            core_id=context.core_id,
            owner=context.principal.principal_id,
            workspace=checked.toolset.workspace,
            secrets=FrozenMap(secrets),
            secrets_expire_at=expires_at,
            prepared=checked.prepared,
            call_id=checked.call_id,
            redact=checked.redactor.text,
            redact_bound=bound_redactor.text,
            redact_window=call_redactor.window,
            secret_reach=call_redactor.reach,
            core_revision=context.core_revision,
            request_id=context.request_id,
        )
        if author is not None:
            tool_context = dataclasses.replace(
                tool_context,
                state=author.state,
                core_state=author.core_state,
                # Masked with the call's redactor, plus the values the call binds.
                emit=author.emit(call_redactor.text),
            )
        return await self._invoke(checked, tool_context, secrets, call_redactor)

    async def _invoke(
        self,
        checked: _Checked,
        tool_context: ToolContext,
        secrets: Mapping[str, str],
        redactor: Redactor,
    ) -> EffectResult:
        call_id, entry = checked.call_id, checked.entry
        effect = entry.effect
        held = {**checked.held, **secrets}
        arguments = _argument_secrets(entry.tool, checked.raw_arguments)
        self._invoked.setdefault(tool_context.turn_id, set()).add(call_id)
        try:
            with anyio.fail_after(entry.tool.timeout_s):
                output = await entry.tool.invoke(tool_context, checked.arguments)
        except ToolChanged as exc:
            # The tool is not what the model and the approver were shown: its function
            # never ran (an authored module edited on disk since it was discovered).
            return result(
                call_id=call_id,
                effect=effect,
                status="failed",
                started=False,
                model_text="",
                error=_error_text(exc, redactor),
                redactor=redactor,
            )
        except PolicyRefusal as exc:
            await self._audit(checked, tool_context, "denied", exc.audit, redactor)
            return result(
                call_id=call_id,
                effect=effect,
                status="denied",
                started=True,
                model_text="",
                error=_error_text(exc, redactor, named=False),
                redactor=redactor,
            )
        except TimeoutError:
            await self._audit(checked, tool_context, "timed_out", None, redactor)
            return result(
                call_id=call_id,
                effect=effect,
                status="timed_out",
                started=True,
                model_text="",
                error=f"timed out after {entry.tool.timeout_s:g}s",
                redactor=redactor,
            )
        except BaseException as exc:
            # SystemExit, KeyboardInterrupt, GeneratorExit and the rest from a tool are a
            # failed call, not the end of the Host; only real cancellation propagates.
            if is_cancellation(exc):
                raise
            done = exc.audit if isinstance(exc, HostkitError) else None
            await self._audit(checked, tool_context, "failed", done, redactor)
            return result(
                call_id=call_id,
                effect=effect,
                status="failed",
                started=True,
                model_text="",
                error=_error_text(exc, redactor),
                redactor=redactor,
            )
        status: EffectStatus = "succeeded"
        error: object = None
        audit: Mapping[str, Any] | None = None
        if isinstance(output, ToolOutcome):
            status, error, audit, output = output.status, output.error, output.audit, output.output
        await self._audit(checked, tool_context, status, audit, redactor)
        try:
            # Secret-named fields of the output join the set for every view of it; a
            # structure too deep or too full to search fails closed (RedactionLimit).
            derived = [*arguments, *derived_secrets(output)]
            redactor = Redactor.of(held, derived, held=self.held_spellings)
            text, size, truncated = render_output(output, redactor=redactor)
            # The tool's own error may be any object: one whose __str__ raises is named by
            # its type (the call ran and ended as the tool said; only its text is lost).
            shown = None if error is None else unbounded_message(error)
        except Exception:
            return failed_safely(call_id=call_id, effect=effect, started=True)
        return result(
            call_id=call_id,
            effect=effect,
            status=status,
            started=True,
            model_text=text,
            error=shown,
            size=size,
            truncated=truncated,
            redactor=redactor,
        )

    async def _audit(
        self,
        checked: _Checked,
        tool_context: ToolContext,
        status: EffectStatus,
        view: Mapping[str, Any] | None,
        redactor: Redactor,
    ) -> None:
        """Persist what the invoked call really did (its audit view and the target its check found).

        Every secret spelling the call's redactor knows is masked first and the
        result checked again; a view that cannot be made safe is replaced by a
        fixed marker, never written half-redacted. Nothing is written for a
        call without a view or a target, or without a store.
        """
        if self._store is None or (not view and not checked.target):
            return
        try:
            detail: dict[str, Any] = dict(redactor.value(dict(view or {})))
            if checked.target:
                detail["target"] = redactor.value(dict(checked.target))
            safe = bounded_metadata(detail)
            if redactor and any(redactor.leaked(text) for text in _all_strings(safe)):
                raise ValueError("a secret survived redaction")
        except Exception:
            detail = {"error": REDACTION_FAILED}
        detail.update(turn_id=tool_context.turn_id, call_id=checked.call_id, outcome=status)
        await self._store.audit(
            f"effect.{checked.entry.effect}",
            principal_id=tool_context.owner,
            session_id=tool_context.session_id,
            subject=checked.call_id,
            detail=detail,
        )

    def _require_ledger(self) -> ApprovalLedger:
        if self._ledger is None:
            raise InvalidValue("this EffectRuntime keeps no durable approvals (no store)")
        return self._ledger


def _all_strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, Mapping):
        return [text for key, item in value.items() for text in _all_strings([key, item])]
    if isinstance(value, list | tuple):
        return [text for item in value for text in _all_strings(item)]
    return []


def _argument_secrets(tool: AuthoredTool, arguments: Mapping[str, Any]) -> list[str]:
    """Values of the call's secret-named arguments (not the names of secrets to bind)."""
    named = tool.secrets_argument
    return derived_secrets({key: value for key, value in arguments.items() if key != named})


def _requested_secrets(tool: AuthoredTool, arguments: Mapping[str, Any]) -> tuple[str, ...]:
    if tool.secrets_argument is None:
        return ()
    names = arguments.get(tool.secrets_argument) or ()
    return tuple(dict.fromkeys(str(name) for name in names))


def _masks_ordinary_text(plain: Any, shown: Any) -> bool:
    """Whether ``shown`` (the redacted arguments) masks text ``plain`` (the same, unredacted,
    JSON-ready) holds outside a secret-named field: a secret's value also written in an
    ordinary argument (a command line) hides part of what runs from the approver."""
    if isinstance(plain, dict) and isinstance(shown, dict):
        for (key, value), (shown_key, shown_value) in zip(
            plain.items(), shown.items(), strict=False
        ):
            if key != shown_key:
                return True
            if not is_secret_field(key) and _masks_ordinary_text(value, shown_value):
                return True
        return False
    if isinstance(plain, list) and isinstance(shown, list):
        return any(_masks_ordinary_text(a, b) for a, b in zip(plain, shown, strict=False))
    return plain is not shown and bool(plain != shown)  # NaN is never equal to itself


def approval_view(
    effect: str,
    arguments: Mapping[str, Any],
    secret_names: tuple[str, ...] = (),
    warning: str | None = None,
    *,
    held: Mapping[str, str] | None = None,
    held_spellings: HeldSpellings | None = None,
    target: Mapping[str, Any] | None = None,
    diff: str | None = None,
) -> FrozenMap:
    """What an approver sees: the effect, field-name-redacted bounded arguments, secret names.

    A secret-named argument's value is masked wherever else it appears too, and so
    is each ``held`` secret value (name -> value) the arguments happen to carry.
    ``target`` is what the tool's ``prepare`` check validated (a URL's origin and
    addresses), shown so the approver judges where the call goes, not only its text.
    ``diff`` (a file overwrite's unified diff) is redacted the same way and kept
    to the diff bounds (``MAX_DIFF_LINES``, ``MAX_DIFF_CHARS``), not cut to 300.
    ``held_spellings`` is the caller's cache of the held values' spellings.
    """
    redactor = Redactor.of(held or {}, derived_secrets(arguments), held=held_spellings)
    shown = redactor.value(arguments)
    view: dict[str, Any] = {"effect": effect, "arguments": shown}
    if target:
        view["target"] = redactor.value(target)
    if secret_names:
        # Names only, never values ("secrets" would be redacted by its field name).
        view["binds"] = [secret_grant(name) for name in secret_names]
    if warning:
        view["warning"] = warning  # kept with a durable pending approval, for the CLI
    if is_cut(view, max_string=_VIEW_STRING) or _masks_ordinary_text(
        Redactor.of({}).value(arguments), shown
    ):
        # What runs is more than what is shown: every front end says so beside the view.
        view[PARTIAL_KEY] = PARTIAL_NOTE
    bounded = bounded_metadata(view, max_string=_VIEW_STRING)
    if diff is None:
        return bounded
    return FrozenMap({**bounded, DIFF_KEY: bound_diff(redactor.text(safe_text(diff)))})
