"""Clause: a Slack or Telegram channel names who may talk to its agent.

Anyone can message a Telegram bot and every member of a Slack workspace can
message its app, so ``allow`` has no default for those kinds: a table without
it is a ``ConfigError`` naming ``channels.<id>.allow`` and telling how to open
it to everyone on purpose. The generic webhook keeps ``["*"]``: its sender is
asserted by whoever holds the signing secret.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from hostkit.errors import ConfigError
from hostkit.host._config import HostConfig, parse_config

TABLES: dict[str, dict[str, Any]] = {
    "slack": {"kind": "slack", "secret_env": "S_SECRET", "token_env": "S_TOKEN"},
    "telegram": {"kind": "telegram", "secret_env": "T_SECRET", "token_env": "T_TOKEN"},
    "telegram-polling": {"kind": "telegram", "inbound": "polling", "token_env": "T_TOKEN"},
}


def _config(tmp_path: Path, table: dict[str, Any]) -> HostConfig:
    return parse_config(
        {
            "providers": {"test": {"kind": "scripted"}},
            "agents": {"assistant": {"provider": "test"}},
            "channels": {"chat": table},
        },
        base_dir=tmp_path,
    )


@pytest.mark.parametrize("case", sorted(TABLES))
def test_slack_and_telegram_refuse_a_table_without_allow(tmp_path: Path, case: str) -> None:
    with pytest.raises(ConfigError) as refused:
        _config(tmp_path, TABLES[case])
    assert refused.value.key == "channels.chat.allow"
    assert 'allow = ["*"]' in refused.value.message
    assert "explicitly" in refused.value.message


@pytest.mark.parametrize("case", sorted(TABLES))
def test_an_explicit_allow_is_kept(tmp_path: Path, case: str) -> None:
    everyone = _config(tmp_path, {**TABLES[case], "allow": ["*"]})
    assert everyone.channels["chat"].allow == ("*",)
    some = _config(tmp_path, {**TABLES[case], "allow": ["U42", "7"]})
    assert some.channels["chat"].allow == ("U42", "7")
    nobody = _config(tmp_path, {**TABLES[case], "allow": []})
    assert nobody.channels["chat"].allow == ()


def test_the_generic_webhook_defaults_to_every_signed_sender(tmp_path: Path) -> None:
    config = _config(tmp_path, {"kind": "webhook", "secret_env": "H_SECRET"})
    assert config.channels["chat"].allow == ("*",)
