"""Clause: what a core's author or a config file wrote never reaches the terminal raw.

An error (or start-up warning) may quote a YAML key or a path; an ESC in it would
clear the operator's screen, retitle the window or hide the lines after it. The
CLI prints such characters escaped.
"""

from __future__ import annotations

import pytest

from hostkit.cli._common import fail
from hostkit.errors import ConfigError

HOSTILE = "agent.yaml line 3: \x1b[2J\x1b[H\x1b]0;owned\x07 promoted OK \x1b[8m: bad key"


def test_an_error_quoting_control_characters_prints_them_escaped(
    capsys: pytest.CaptureFixture[str],
) -> None:
    exit_code = fail(ConfigError(HOSTILE))
    err = capsys.readouterr().err
    assert exit_code.exit_code == 2
    assert "\x1b" not in err
    assert "\x07" not in err
    assert "promoted OK" in err
    assert "\\x1b[2J" in err
