"""Property tests: no edit of an issued scope survives verification; payload text never
becomes Host authority."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hostkit.authority import AuthorityResolver
from hostkit.errors import InvalidValue, ScopeError
from hostkit.store import RuntimeStore
from hostkit.types import ConversationFacts, PrincipalScope

text = st.text(min_size=1, max_size=40)
FIELDS = ["principal_id", "authority", "channel", "conversation_key", "session_id", "grant_id"]


async def _issued(path: Path) -> tuple[RuntimeStore, AuthorityResolver, list[PrincipalScope]]:
    store = await RuntimeStore.open(path)
    resolver = AuthorityResolver.bind(store)
    conversation = await resolver.for_conversation(
        ConversationFacts(channel="webhook", conversation_key="c", principal_key="alice")
    )
    operator = await resolver.operator_issuer().issue("ops", reason="property test")
    run = await resolver.for_scheduled_run(schedule_id="s", run_id="r")
    return store, resolver, [conversation, operator, run]


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(field=st.sampled_from(FIELDS), value=text, which=st.integers(0, 2))
def test_any_field_edit_of_an_issued_scope_is_rejected(
    tmp_path: Path, field: str, value: str, which: int
) -> None:
    async def check() -> None:
        store, _, scopes = await _issued(tmp_path / f"{abs(hash((field, value, which)))}.db")
        async with store:
            scope = scopes[which]
            try:
                edited = dataclasses.replace(scope, **{field: value})
            except InvalidValue:
                return  # the edit does not even make a well-formed scope
            if edited == scope:
                return
            with pytest.raises(ScopeError):
                store.verify_scope(edited)
            with pytest.raises(ScopeError):
                await store.list_sessions(edited)

    anyio.run(check)


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
