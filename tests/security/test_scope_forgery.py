"""Property tests: no edit of an issued scope survives verification; payload text never
becomes Host authority.

Edits are drawn from the *valid* domain (other issued scopes' fields, the
authority literals, other real session ids and live grants of the same store),
so each one builds a well-formed ``PrincipalScope`` and only the proof can
reject it: a field left out of the signed payload shows up as an edit that
verifies.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import get_args

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hostkit.authority import AuthorityResolver, OperatorIssuer
from hostkit.errors import InvalidValue, ScopeError
from hostkit.store import Admitted, LeaseOwner, RuntimeStore, TurnAdmission
from hostkit.types import Authority, ConversationFacts, PrincipalScope, new_id

text = st.text(min_size=1, max_size=40)
# Every field but ``proof``: what signing_payload must cover.
FIELDS = [
    "principal_id",
    "authority",
    "channel",
    "conversation_key",
    "session_id",
    "allowed_session_ids",
    "issuer_id",
    "grant_id",
]
# ``issuer_id`` is checked by equality before the proof, so no valid edit of it
# depends on the signature; every other field must be caught by the proof alone.
PROOF_ONLY_FIELDS = [name for name in FIELDS if name != "issuer_id"]


async def _issued(store: RuntimeStore) -> dict[str, PrincipalScope]:
    """One scope of each kind the store issues, plus siblings to borrow fields from."""
    # Bound by hand (not ``AuthorityResolver.bind``) so a second ``OperatorIssuer`` on
    # the same mint gives a second live grant: a valid alternative ``grant_id``.
    mint = store.bind_authority()
    resolver = AuthorityResolver(store, mint)
    alice = await resolver.for_conversation(
        ConversationFacts(channel="webhook", conversation_key="c", principal_key="alice")
    )
    bob = await resolver.for_conversation(
        ConversationFacts(channel="slack", conversation_key="d", principal_key="bob")
    )
    operator = resolver.operator_issuer()
    ops = await operator.issue("ops", reason="property test")
    ops_session = await operator.issue("ops", reason="property test", conversation_key="k")
    other = await OperatorIssuer(store, mint).issue("ops2", reason="second live grant")
    run = await resolver.for_scheduled_run(schedule_id="s", run_id="r")
    admission = TurnAdmission(
        turn_id=new_id("turn"),
        request_id=new_id("req"),
        principal_id=alice.principal_id,
        core_id="assistant",
        core_revision="rev1",
        generation=1,
        session=alice.session_id or "",
    )
    holder = LeaseOwner("another-machine", 4242, 1.0, "remote-instance", "other-boot:1")
    admitted = await store.turns.admit(admission, owner=holder, ttl_s=600.0)
    assert isinstance(admitted, Admitted), admitted
    await store.turns.abandon(admitted.lease)
    # A child's lineage names a real turn of its parent's session.
    child = await resolver.for_child_agent(alice, parent_turn_id=admission.turn_id, agent="helper")
    return {
        "alice": alice,
        "bob": bob,
        "ops": ops,
        "ops_session": ops_session,
        "ops2": other,
        "run": run,
        "child": child,
    }


def _domain(scopes: dict[str, PrincipalScope], name: str) -> list[object]:
    """Valid alternative values of field ``name``: what real scopes of this store hold."""
    values: list[object] = [getattr(scope, name) for scope in scopes.values()]
    if name == "authority":
        values += list(get_args(Authority))
    if name in ("conversation_key", "session_id"):
        values.append(None)
    if name == "session_id":
        values += [sid for scope in scopes.values() for sid in scope.allowed_session_ids]
    if name == "allowed_session_ids":
        sessions = sorted({sid for scope in scopes.values() for sid in scope.allowed_session_ids})
        values += [frozenset(pair) for pair in itertools.combinations(sessions, 2)]
        values += [
            scope.allowed_session_ids | {sid} for scope in scopes.values() for sid in sessions
        ]
    return values


def _valid_edits(
    scope: PrincipalScope, name: str, candidates: list[object]
) -> Iterator[PrincipalScope]:
    for value in candidates:
        try:
            edited = dataclasses.replace(scope, **{name: value})
        except InvalidValue:
            continue  # not a well-formed scope: nothing for the proof to reject
        if edited != scope:
            assert edited.proof == scope.proof  # the edit carries the original proof
            yield edited


async def _assert_rejected(store: RuntimeStore, edited: PrincipalScope) -> None:
    with pytest.raises(ScopeError):
        store.verify_scope(edited)
    with pytest.raises(ScopeError):
        await store.list_sessions(edited)


@pytest.mark.anyio
async def test_every_valid_single_field_edit_is_rejected(tmp_path: Path) -> None:
    """Exhaustive over the valid domain: every scope kind x every field x every value."""
    reached: Counter[str] = Counter()
    async with await RuntimeStore.open(tmp_path / "runtime.db") as store:
        scopes = await _issued(store)
        for scope in scopes.values():
            store.verify_scope(scope)  # the originals verify: the rejections are the edits'
            for name in FIELDS:
                for edited in _valid_edits(scope, name, _domain(scopes, name)):
                    await _assert_rejected(store, edited)
                    reached[name] += 1
    # Every proof-covered field had valid alternatives to try (none was vacuous).
    assert set(PROOF_ONLY_FIELDS) <= set(reached), reached


def test_the_signed_payload_covers_every_field_but_the_proof() -> None:
    """Including ``issuer_id``, which no edit can test through a single store."""
    scope = PrincipalScope(
        principal_id="p",
        authority="operator",
        channel="operator",
        conversation_key="k",
        session_id="s",
        allowed_session_ids=frozenset({"s"}),
        issuer_id="store-1",
        grant_id="grant-1",
        proof="x",
    )
    names = [f.name for f in dataclasses.fields(PrincipalScope) if f.name != "proof"]
    assert sorted(names) == sorted(FIELDS)  # a new field must join FIELDS (and the payload)
    for name in names:
        edited = dataclasses.replace(scope)
        value = frozenset({"s", "t"}) if name == "allowed_session_ids" else "other"
        object.__setattr__(edited, name, value)
        assert edited.signing_payload() != scope.signing_payload(), name
    unproved = dataclasses.replace(scope, proof="y")
    assert unproved.signing_payload() == scope.signing_payload()


Edit = Callable[[dict[str, PrincipalScope]], object]
# One named, valid edit per field: (scope to edit, field, how to get the new value).
NAMED_EDITS: list[tuple[str, str, Edit]] = [
    ("alice", "principal_id", lambda s: s["bob"].principal_id),
    ("alice", "authority", lambda s: "system"),
    ("run", "authority", lambda s: "conversation"),
    ("alice", "channel", lambda s: s["bob"].channel),
    ("alice", "conversation_key", lambda s: s["bob"].conversation_key),
    ("child", "conversation_key", lambda s: s["alice"].conversation_key),
    ("ops_session", "session_id", lambda s: None),
    ("ops", "allowed_session_ids", lambda s: s["bob"].allowed_session_ids),
    (
        "alice",
        "allowed_session_ids",
        lambda s: s["alice"].allowed_session_ids | {s["bob"].session_id},
    ),
    ("ops", "grant_id", lambda s: s["ops2"].grant_id),
]


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("which", "name", "value"),
    NAMED_EDITS,
    ids=[f"{which}-{name}" for which, name, _ in NAMED_EDITS],
)
async def test_a_named_valid_edit_is_rejected(
    tmp_path: Path, which: str, name: str, value: Edit
) -> None:
    async with await RuntimeStore.open(tmp_path / "runtime.db") as store:
        scopes = await _issued(store)
        edited = dataclasses.replace(scopes[which], **{name: value(scopes)})
        assert getattr(edited, name) != getattr(scopes[which], name)
        await _assert_rejected(store, edited)
        # The unedited scope still works, so the rejection is the edit's.
        assert store.verify_scope(scopes[which]) is scopes[which]


@pytest.mark.anyio
async def test_a_scope_pointed_at_another_real_session_is_rejected(tmp_path: Path) -> None:
    """Bob's session id written into Alice's scope (past ``__post_init__``) never verifies."""
    async with await RuntimeStore.open(tmp_path / "runtime.db") as store:
        scopes = await _issued(store)
        alice, bob = scopes["alice"], scopes["bob"]
        assert alice.session_id != bob.session_id
        for name, value in (
            ("session_id", bob.session_id),
            ("allowed_session_ids", bob.allowed_session_ids),
        ):
            forged = dataclasses.replace(alice)
            object.__setattr__(forged, name, value)  # a frozen dataclass is only a convention
            assert forged.proof == alice.proof
            await _assert_rejected(store, forged)
        # Both at once: a scope identical to Bob's except for principal and proof.
        forged = dataclasses.replace(
            alice, session_id=bob.session_id, allowed_session_ids=bob.allowed_session_ids
        )
        await _assert_rejected(store, forged)


def test_any_field_edit_of_an_issued_scope_is_rejected(tmp_path: Path) -> None:
    """Random scope, field and value (valid domain or arbitrary text); most reach the check."""
    reached: Counter[str] = Counter()
    tried = 0
    paths = itertools.count()

    @settings(
        max_examples=80,
        deadline=None,
        derandomize=True,
        suppress_health_check=[HealthCheck.function_scoped_fixture],
    )
    @given(
        which=st.integers(0, 6),
        field=st.sampled_from(FIELDS),
        pick=st.one_of(st.integers(0, 10_000), text),
    )
    def edit(which: int, field: str, pick: int | str) -> None:
        nonlocal tried
        tried += 1

        async def check() -> None:
            async with await RuntimeStore.open(tmp_path / f"{next(paths)}.db") as store:
                scopes = await _issued(store)
                if isinstance(pick, str):
                    scope = list(scopes.values())[which]
                    candidates: list[object] = [pick]
                else:
                    # Any valid edit of this field, of any scope: each field has some.
                    domain = _domain(scopes, field)
                    valid = [
                        edited
                        for each in scopes.values()
                        for edited in _valid_edits(each, field, domain)
                    ]
                    if not valid:  # issuer_id: one store, one issuer
                        return
                    chosen = valid[pick % len(valid)]
                    scope = next(s for s in scopes.values() if s.proof == chosen.proof)
                    candidates = [getattr(chosen, field)]
                for edited in _valid_edits(scope, field, candidates):
                    await _assert_rejected(store, edited)
                    reached[field] += 1

        anyio.run(check)

    edit()
    # The check ran for most examples and for every field the proof alone guards.
    assert sum(reached.values()) * 2 >= tried, (tried, reached)
    assert set(PROOF_ONLY_FIELDS) <= set(reached), reached


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(channel=text, conversation=text, principal=text)
def test_conversation_facts_never_yield_host_authority(
    tmp_path: Path, channel: str, conversation: str, principal: str
) -> None:
    async def check() -> None:
        path = tmp_path / f"{abs(hash((channel, conversation, principal)))}.db"
        async with await RuntimeStore.open(path) as store:
            resolver = AuthorityResolver.bind(store)
            try:
                facts = ConversationFacts(
                    channel=channel, conversation_key=conversation, principal_key=principal
                )
                scope = await resolver.for_conversation(facts)
            except (InvalidValue, ScopeError):
                return
            assert scope.authority == "conversation"
            assert scope.grant_id == ""
            assert scope.allowed_session_ids == frozenset({scope.session_id})
            record = await store.get_session(scope, scope.session_id or "")
            assert record.owner_kind == "conversation"

    anyio.run(check)
