"""An unknown key in hostkit.toml or agent.yaml is one sentence naming it, its table and
the closest known key: never pydantic's "Extra inputs are not permitted", never a name
masked as ``[redacted]`` because it looks like a secret, never the value written there.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from hostkit.cores import load_manifest
from hostkit.errors import ConfigError
from hostkit.host import parse_config
from tests.contract._cli_cores import invoke

# What a user might paste as the value: it must never come back in a message.
VALUE = "hunter2-not-for-logs"


def refused(data: dict[str, object]) -> ConfigError:
    with pytest.raises(ConfigError) as caught:
        parse_config(data, base_dir=Path("/nonexistent"))
    return caught.value


@pytest.mark.parametrize(
    ("key", "hint"),
    [
        ("api_key", "; did you mean 'api_key_env'?"),
        ("token", ""),
        ("password", ""),
        ("client_secret", ""),
        ("modle", "; did you mean 'model'?"),
    ],
)
def test_an_unknown_provider_key_is_named_with_its_table_through_the_cli(
    tmp_path: Path, key: str, hint: str
) -> None:
    (tmp_path / "hostkit.toml").write_text(
        f'[providers.local]\nkind = "local"\n{key} = "{VALUE}"\n'
    )
    code, out, err = invoke("run", "hi", project=tmp_path)
    assert code == 2
    assert out == ""
    assert err == f"error: unknown key '{key}' in [providers.local]{hint}\n"
    assert "[redacted]" not in err
    assert VALUE not in err


@pytest.mark.parametrize(
    ("data", "message", "key"),
    [
        ({"hots": {}}, "unknown key 'hots' at the top level; did you mean 'host'?", "hots"),
        # Loader-set fields are not keys of the file: never offered.
        ({"base_dirr": "."}, "unknown key 'base_dirr' at the top level", "base_dirr"),
        (
            {"host": {"limits": {"cpu_time": 1}}},
            "unknown key 'cpu_time' in [host.limits]; did you mean 'cpu_time_s'?",
            "host.limits.cpu_time",
        ),
        (
            {"providers": {"p": {"kind": "scripted", "script": [{"replly": "x"}]}}},
            "unknown key 'replly' in providers.p.script[0]; did you mean 'reply'?",
            "providers.p.script.0.replly",
        ),
        (
            {
                "providers": {"p": {"kind": "scripted"}},
                "agents": {"a": {"provider": "p", "policy": {"alow": ["*"]}}},
            },
            "unknown key 'alow' in [agents.a.policy]; did you mean 'allow'?",
            "agents.a.policy.alow",
        ),
        (
            {
                "providers": {"p": {"kind": "scripted"}},
                "agents": {"a": {"provider": "p", "mcp": {"s": {"command": ["x"], "netwrk": 1}}}},
            },
            "unknown key 'netwrk' in [agents.a.mcp.s]; did you mean 'network'?",
            "agents.a.mcp.s.netwrk",
        ),
        (
            {"secrets": {"HK_DEPLOY_TOKEN": {"programs": ["/bin/x"], "glob": True}}},
            "unknown key 'glob' in [secrets.HK_DEPLOY_TOKEN]",
            "secrets.HK_DEPLOY_TOKEN.glob",
        ),
        (
            {"channels": {"hooks": {"kind": "webhook", "secret": VALUE}}},
            "unknown key 'secret' in [channels.hooks]; did you mean 'secret_env'?",
            "channels.hooks.secret",
        ),
    ],
    ids=["top", "excluded", "nested", "array", "policy", "mcp", "secrets", "channel"],
)
def test_an_unknown_key_anywhere_names_its_table_and_the_closest_key(
    data: dict[str, object], message: str, key: str
) -> None:
    error = refused(data)
    assert error.message == message
    assert error.key == key


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (
            {"database": "h.db"},
            "unknown key 'database' at the top level; it belongs in [host]",
        ),
        (
            {"host": {"model": "m"}},
            "unknown key 'model' in [host]; it belongs in [providers.<name>]",
        ),
        (
            {
                "providers": {"p": {"kind": "scripted"}},
                "agents": {"a": {"provider": "p", "synchronous": "FULL"}},
            },
            "unknown key 'synchronous' in [agents.a]; it belongs in [host]",
        ),
        (
            {"providers": {"p": {"kind": "scripted", "instructions": "be brief"}}},
            "unknown key 'instructions' in [providers.p]; it belongs in [agents.<name>]",
        ),
        (
            {"host": {"cpu_time_s": 5}},
            "unknown key 'cpu_time_s' in [host]; it belongs in [host.limits]",
        ),
    ],
    ids=["top", "host", "agent", "provider", "nested"],
)
def test_a_key_written_in_the_wrong_table_says_where_it_belongs(
    data: dict[str, object], message: str
) -> None:
    assert refused(data).message == message


def test_a_key_name_that_is_itself_a_credential_stays_masked() -> None:
    token = "sk-" + "a" * 40
    error = refused({"providers": {"p": {"kind": "scripted", token: 1}}})
    assert token not in error.message
    assert error.message.startswith("unknown key '[redacted]' in [providers.p]")


@pytest.mark.parametrize(
    ("text", "expected", "key"),
    [
        (
            f"id: a\nmodel: m\napi_key: {VALUE}\n",
            "agent.yaml line 3: unknown key 'api_key'",
            "api_key",
        ),
        (
            "id: a\nmodel: m\nlimits:\n  max_step: 1\n",
            "agent.yaml line 4: unknown key 'max_step' under limits; did you mean 'max_steps'?",
            "limits.max_step",
        ),
        (
            "id: a\nmodel: m\nmax_steps: 3\n",
            "agent.yaml line 3: unknown key 'max_steps'; it belongs under limits",
            "max_steps",
        ),
    ],
)
def test_an_unknown_manifest_key_is_named_not_redacted(text: str, expected: str, key: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_manifest(text.encode(), source="agent.yaml")
    assert caught.value.message == expected
    assert caught.value.key == key
    assert VALUE not in caught.value.message


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (
            {"providers": {"local": {"knd": "local"}}},
            "unknown key 'knd' in [providers.local]; did you mean 'kind'?",
        ),
        (
            {"providers": {"p": {"kind": "scripted"}}, "agents": {"a": {"provder": "p"}}},
            "unknown key 'provder' in [agents.a]; did you mean 'provider'?",
        ),
    ],
    ids=["provider kind", "agent provider"],
)
def test_a_misspelled_required_key_is_named_not_reported_missing(
    data: dict[str, object], message: str
) -> None:
    """The misspelling is the mistake; "Field required" for the key meant would send the
    reader looking for a key they did write."""
    assert refused(data).message == message


def test_a_misspelled_required_manifest_key_is_named_not_reported_missing() -> None:
    with pytest.raises(ConfigError) as caught:
        load_manifest(b"id: a\nmodle: m\n", source="agent.yaml")
    assert caught.value.message == "agent.yaml line 2: unknown key 'modle'; did you mean 'model'?"


@pytest.mark.parametrize(
    ("data", "said"),
    [
        (
            {"providers": {"openai": {"kind": "openai"}}, "agents": {"a": {"provider": "opnai"}}},
            "agents.a.provider names 'opnai', which is not under [providers]; "
            "did you mean 'openai'?",
        ),
        (
            {"agents": {"a": {"provider": "elsewhere"}}},
            "agents.a.provider names 'elsewhere', which is not under [providers]",
        ),
    ],
    ids=["agent provider", "nothing close"],
)
def test_a_name_that_is_not_defined_gets_the_closest_one(
    data: dict[str, object], said: str
) -> None:
    message = refused(data).message
    assert said in message
    if "did you mean" not in said:
        assert "did you mean" not in message
