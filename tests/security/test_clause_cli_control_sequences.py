"""Clause: what a core's author or a config file wrote never reaches the terminal raw.

An error (or start-up warning) may quote a YAML key or a path; an ESC in it would
clear the operator's screen, retitle the window or hide the lines after it. The
CLI prints such characters escaped.
"""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from hostkit.cli._common import fail
from hostkit.cli._inspect import budget_report, context_report
from hostkit.errors import ConfigError
from hostkit.inspect import BudgetView, CalibrationView, ContextView, TokenTotals

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


# A model id as a provider's server may report it (stored as the calibration's model, or
# configured by hand): it must be shown as escapes, never written to the terminal.
SERVER_MODEL = "gpt\x1b]0;PWNED\x07\x1b[2J\x1b[31mred"


def rendered(renderable: object) -> str:
    out = io.StringIO()
    Console(file=out, width=160, force_terminal=True, color_system="standard").print(renderable)
    return out.getvalue()


def test_budget_prints_a_stored_model_name_escaped_under_its_table_too() -> None:
    """The table escapes its cells; the calibration and session lines under and over it
    are stored values too (``hostkit budget``)."""
    totals = TokenTotals(0, 0, 0, 0, 0, 0.0, 0)
    calibration = CalibrationView("openai\x1b[8m", SERVER_MODEL, "est\x9b2J", 1.25, 3, "")
    view = BudgetView("ses_\x1b[2Jx", (), calibration, totals, False)
    text = rendered(budget_report(view))
    assert "PWNED\x07" not in text
    assert "\x1b]0" not in text
    assert "\x1b[2J" not in text
    assert "\x1b[8m" not in text
    assert "\x9b" not in text
    assert "calibration: openai\\x1b[8m/gpt\\x1b]0;PWNED\\x07\\x1b[2J\\x1b[31mred" in text
    assert "ses_\\x1b[2Jx" in text


def test_context_prints_its_stored_header_escaped() -> None:
    view = ContextView("ses_1", "turn_\x1b[2J", "lost", "agent\x1b]0;t\x07", None, (), False)
    text = rendered(context_report(view))
    assert "\x1b[2J" not in text
    assert "\x1b]0" not in text
    assert "turn_\\x1b[2J" in text
    assert "agent\\x1b]0;t\\x07" in text
