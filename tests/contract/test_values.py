"""Contract values are deeply immutable and validated on construction."""

from __future__ import annotations

import dataclasses
import pickle
from typing import ClassVar

import pydantic
import pytest

from hostkit.errors import (
    ConfigError,
    HostkitError,
    InvalidValue,
    MigrationError,
    NotFoundOrUnauthorized,
    StoreError,
    TurnInfrastructureError,
    TurnRejected,
    UserError,
    bounded,
    bounded_hides,
)
from hostkit.freeze import DEEPLY_FROZEN, FrozenMap, freeze, thaw
from hostkit.types import (
    REDACTED,
    ConversationFacts,
    MessageRecord,
    PrincipalScope,
    ToolDefinition,
    TurnExecutionContext,
    TurnToken,
    bounded_data,
    bounded_metadata,
    is_secret_field,
    new_id,
)


def make_scope(**overrides: object) -> PrincipalScope:
    fields: dict[str, object] = {
        "principal_id": "webhook:u1",
        "authority": "conversation",
        "channel": "webhook",
        "conversation_key": "c1",
        "session_id": "ses_1",
        "allowed_session_ids": frozenset({"ses_1"}),
        "issuer_id": "store_1",
    }
    fields.update(overrides)
    return PrincipalScope(**fields)  # type: ignore[arg-type]


def make_context(**overrides: object) -> TurnExecutionContext:
    def token(kind: str) -> TurnToken:
        return TurnToken(kind, "req_1", "turn_1", "ses_1", new_id("n"))  # type: ignore[arg-type]

    fields: dict[str, object] = {
        "request_id": "req_1",
        "turn_id": "turn_1",
        "principal": make_scope(),
        "session_id": "ses_1",
        "core_id": "assistant",
        "core_revision": "rev1",
        "capability_snapshot": {"tools": ["memory.recall"], "policy": {"ask": ["fs.write"]}},
        "workspace_scope": "/work/space",
        "route_token": token("route"),
        "admission_lease_token": token("admission"),
        "cancellation_token": token("cancellation"),
        "trace_ids": ["trace_a", "trace_b"],
        "interaction_metadata": {"client": {"name": "cli", "tags": ["a"]}},
    }
    fields.update(overrides)
    return TurnExecutionContext(**fields)  # type: ignore[arg-type]


def test_freeze_converts_nested_containers() -> None:
    frozen = freeze({"a": [1, {"b": {2, 3}}], "c": bytearray(b"x")})
    assert isinstance(frozen, FrozenMap)
    assert frozen["a"] == (1, FrozenMap({"b": frozenset({2, 3})}))
    assert frozen["c"] == b"x"
    assert thaw(frozen) == {"a": [1, {"b": [2, 3]}], "c": b"x"}


def test_freeze_refuses_unknown_mutable_objects() -> None:
    class Bag:
        pass

    with pytest.raises(TypeError):
        freeze({"bag": Bag()})


def test_freeze_trusts_only_a_model_that_says_it_is_frozen_all_the_way_down() -> None:
    """The parsed configuration's models declare ``DEEPLY_FROZEN`` (their containers are
    tuples and FrozenMap): a table of them freezes as it is. pydantic's ``frozen`` alone
    stops reassignment, not an edit of a list the model holds: refused, as is a model that
    is not frozen at all."""

    class Deep(pydantic.BaseModel):
        model_config = pydantic.ConfigDict(frozen=True)
        __hostkit_deeply_frozen__: ClassVar[bool] = True
        names: tuple[str, ...] = ("a",)

    class Shallow(pydantic.BaseModel):
        model_config = pydantic.ConfigDict(frozen=True)
        names: list[str] = ["a"]

    class Open(pydantic.BaseModel):
        name: str = "a"

    assert getattr(Deep, DEEPLY_FROZEN) is True
    model = Deep()
    assert freeze({"m": model})["m"] is model
    for refused in (Shallow(), Open()):
        with pytest.raises(TypeError):
            freeze({"m": refused})


def test_frozen_map_cannot_be_mutated_and_is_hashable() -> None:
    frozen = FrozenMap({"k": [1]})
    with pytest.raises(TypeError):
        frozen["k"] = 2  # type: ignore[index]
    with pytest.raises(AttributeError):
        frozen._data = {}  # type: ignore[misc]
    assert hash(frozen) == hash(FrozenMap({"k": (1,)}))
    assert pickle.loads(pickle.dumps(frozen)) == frozen


def test_a_frozen_map_of_a_frozen_map_is_equal_and_a_tool_schema_is_kept_as_is() -> None:
    inner = FrozenMap({"type": "object", "properties": {"p": {"type": "string"}}})
    copy = FrozenMap(inner)
    assert copy == inner
    assert hash(copy) == hash(inner)
    assert copy["properties"] is inner["properties"]  # shared: nothing is frozen twice
    with pytest.raises(AttributeError):
        copy._data = {}  # type: ignore[misc]
    assert ToolDefinition("t", "d", inner).parameters is inner
    thawed = ToolDefinition("t", "d", {"type": "object"}).parameters
    assert isinstance(thawed, FrozenMap)
    assert thawed == {"type": "object"}


def test_principal_scope_fields_and_nested_values_are_immutable() -> None:
    scope = make_scope(allowed_session_ids={"ses_1", "ses_2"})
    assert isinstance(scope.allowed_session_ids, frozenset)
    with pytest.raises(dataclasses.FrozenInstanceError):
        scope.session_id = "ses_2"  # type: ignore[misc]
    with pytest.raises(AttributeError):
        scope.allowed_session_ids.add("ses_3")  # type: ignore[attr-defined]


def test_principal_scope_repr_hides_proof() -> None:
    scope = dataclasses.replace(make_scope(), proof="deadbeef" * 8)
    assert "deadbeef" not in repr(scope)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"authority": "admin"}, "authority"),
        ({"principal_id": ""}, "principal_id"),
        ({"session_id": "ses_other"}, "allowed_session_ids"),
        ({"session_id": None, "allowed_session_ids": frozenset()}, "exactly one session"),
        ({"allowed_session_ids": frozenset(f"s{i}" for i in range(40)) | {"ses_1"}}, "at most"),
        ({"grant_id": "grant_x"}, "grant_id"),
        ({"authority": "operator", "grant_id": ""}, "grant_id"),
    ],
)
def test_principal_scope_rejects_inconsistent_fields(
    overrides: dict[str, object], message: str
) -> None:
    with pytest.raises(InvalidValue, match=message):
        make_scope(**overrides)


def test_turn_execution_context_nested_values_are_immutable() -> None:
    context = make_context()
    with pytest.raises(TypeError):
        context.capability_snapshot["tools"] = ()  # type: ignore[index]
    with pytest.raises(AttributeError):
        context.capability_snapshot["tools"].append("x")  # type: ignore[attr-defined]
    with pytest.raises(TypeError):
        context.capability_snapshot["policy"]["ask"] = ()  # type: ignore[index]
    with pytest.raises(AttributeError):
        context.trace_ids.append("t")  # type: ignore[attr-defined]
    with pytest.raises(TypeError):
        context.interaction_metadata["client"]["name"] = "evil"  # type: ignore[index]
    with pytest.raises(AttributeError):
        context.principal.allowed_session_ids.add("ses_2")  # type: ignore[attr-defined]
    with pytest.raises(dataclasses.FrozenInstanceError):
        context.session_id = "ses_2"  # type: ignore[misc]


def test_turn_execution_context_does_not_share_callers_containers() -> None:
    snapshot = {"tools": ["a"]}
    context = make_context(capability_snapshot=snapshot)
    snapshot["tools"].append("b")
    assert context.capability_snapshot["tools"] == ("a",)


def test_turn_execution_context_requires_agreeing_bindings() -> None:
    with pytest.raises(InvalidValue, match="does not authorize"):
        make_context(session_id="ses_2")
    foreign = TurnToken("route", "req_1", "turn_OTHER", "ses_1", "n")
    with pytest.raises(InvalidValue, match="another request"):
        make_context(route_token=foreign)
    wrong_kind = TurnToken("admission", "req_1", "turn_1", "ses_1", "n")
    with pytest.raises(InvalidValue, match="route TurnToken"):
        make_context(route_token=wrong_kind)


def test_interaction_metadata_is_bounded_and_redacted() -> None:
    metadata = bounded_metadata(
        {"api_key": "sk-live", "nested": {"password": "p"}, "long": "x" * 5000}
        | {f"k{i}": i for i in range(100)},
        max_keys=32,
    )
    assert metadata["api_key"] == REDACTED
    assert metadata["nested"]["password"] == REDACTED
    assert len(metadata["long"]) <= 512
    assert len(metadata) <= 33


def test_bounded_data_is_the_thawed_bounded_metadata() -> None:
    """A stored event's detail skips the freeze: same redaction, same bounds, plain data."""
    hostile = {
        "api_key": "sk-live",
        "nested": {"password": "p", "items": ({"cookie": "c"}, {1, 2}), "deep": {"a": {"b": {}}}},
        "long": "x" * 5000,
        "huge": 10**100,
        7: object(),
    } | {f"k{i}": i for i in range(100)}
    data = bounded_data(hostile)
    assert data == thaw(bounded_metadata(hostile))
    assert type(data) is dict
    assert type(data["nested"]["items"]) is list
    assert data["api_key"] == data["nested"]["password"] == REDACTED
    assert data["nested"]["items"][0]["cookie"] == REDACTED
    assert bounded_data(None) == {}


def test_token_counts_are_shown_and_token_values_are_not() -> None:
    """An event says how many tokens a step used; a token itself never shows."""
    data = bounded_data(
        {
            "input_tokens": 1190,
            "Output_Tokens": 3,
            "nested": {"cache_read_tokens": 0, "max_tokens": 4096},
            "tokens": ["sk-live"],
            "api_tokens": "sk-live",
            "refresh_tokens_secret": 7,
            "lease_token": 12,
            "token": 123456,
            "password_tokens": 5,
            "flag_tokens": True,
        }
    )
    assert data["input_tokens"] == 1190
    assert data["Output_Tokens"] == 3
    assert data["nested"] == {"cache_read_tokens": 0, "max_tokens": 4096}
    for secret in ("tokens", "api_tokens", "refresh_tokens_secret", "lease_token", "token"):
        assert data[secret] == REDACTED, secret
    assert data["password_tokens"] == REDACTED
    assert data["flag_tokens"] == REDACTED


def test_secret_field_names_answer_the_same_at_any_length() -> None:
    for name in ("password", "API-Key", "x_refresh_token", "name", "step"):
        for padded in (name, "a" * 200 + name, name + "z" * 200):
            assert is_secret_field(padded) == is_secret_field(name)
    assert is_secret_field("a" * 10_000 + "secret")
    assert not is_secret_field("a" * 10_000)


def test_records_freeze_their_payloads() -> None:
    record = MessageRecord("m", "s", 1, "user", {"parts": [{"text": "hi"}]}, None, "t")
    with pytest.raises(TypeError):
        record.content["parts"][0]["text"] = "bye"  # type: ignore[index]


def test_conversation_facts_are_validated() -> None:
    with pytest.raises(InvalidValue):
        ConversationFacts(channel="", conversation_key="c", principal_key="p")
    with pytest.raises(InvalidValue):
        ConversationFacts(channel="x", conversation_key="c" * 1000, principal_key="p")


def test_error_tree_shape() -> None:
    assert issubclass(ConfigError, UserError)
    assert issubclass(UserError, HostkitError)
    assert issubclass(MigrationError, StoreError)
    assert issubclass(TurnRejected, HostkitError)
    assert TurnInfrastructureError("req_1").outcome == "indeterminate"
    assert StoreError("x", retryable=True).retryable
    assert not UserError("x").retryable


def test_error_messages_are_bounded_and_redacted() -> None:
    error = TurnRejected("api_key=sk-secret-value " + "y" * 5000)
    assert "sk-secret-value" not in str(error)
    assert len(str(error)) <= 600
    assert "\n" not in bounded("a\nb")
    assert "tok123" not in bounded("Authorization: Bearer tok123")


def test_error_messages_show_control_characters_as_escapes() -> None:
    """A NUL (which PostgreSQL's text refuses), an ESC or a CSI (which drive a terminal):
    each control character but tab is written as its escape, within the bound, and a view
    whose escapes no longer fit says it is partial."""
    assert bounded("a\x00b\x1b[2J\x7f\x9b\x0bc\td") == "a\\x00b\\x1b[2J\\x7f\\x9b\\x0bc\td"
    assert str(TurnRejected("HTTP 500: \x00\x00")) == "turn rejected: HTTP 500: \\x00\\x00"
    assert len(bounded("\x00" * 5000, 100)) == 100
    assert bounded("\x00" * 40, 100).isprintable()
    assert not bounded_hides("\x00" * 25, 100)
    assert bounded_hides("\x00" * 26, 100)
    assert "tok123" not in bounded("Authorization: Bearer\x0btok123")


def test_not_found_and_unauthorized_share_one_message() -> None:
    assert str(NotFoundOrUnauthorized("session")) == "session not found"


def test_migration_error_keeps_whole_paths() -> None:
    long_path = "/" + "d" * 300 + "/hostkit.db"
    error = MigrationError("boom " * 200, database=long_path, backup=long_path + ".bak")
    assert long_path in str(error)
    assert long_path + ".bak" in str(error)
