"""Clause: what a core's author, a config file or a model wrote never reaches the terminal raw.

An error (or start-up warning) may quote a YAML key or a path; an ESC in it would
clear the operator's screen, retitle the window or hide the lines after it. The
CLI prints such characters escaped, and so do the notebook's text/plain views
(printed by terminal front ends) and the daemon's JSON log lines.
"""

from __future__ import annotations

import io
import json
import logging
from pathlib import Path
from typing import Any

import anyio
import ipywidgets as widgets
import pytest
from rich.console import Console

import hostkit.notebook as hn
from hostkit.cli._common import fail
from hostkit.cli._inspect import budget_report, context_report
from hostkit.cli._serve_logs import JsonLines
from hostkit.errors import ConfigError
from hostkit.inspect import BudgetView, CalibrationView, ContextView, TokenTotals
from hostkit.notebook import ApprovalsPanel, BudgetInspector
from hostkit.testing import CallTools, Reply, ScriptedModel, capabilities
from tests.contract.test_clause_notebook_approval_rows import writer_config

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


# -- the notebook's text/plain and the JSON log: the same rule -------------------------

# A reply and a model id as a hostile model or server writes them: screen clears, an
# OSC-8 link, a bidi override, a C1 CSI and a line separator.
HOSTILE_REPLY = (
    "Done.\x1b[2J\x1b[H\x1b]8;;https://evil.example\x07click\x1b]8;;\x07 "
    "\u202etxt.exe\x9b31m\u2028line two\nline three"
)
DRIVES = ("\x1b", "\x07", "\x9b", "\u202e", "\u2028")


def raw_drives(text: str) -> list[str]:
    return [ch for ch in DRIVES if ch in text]


def plain_of(shown: Any, widget: widgets.Widget) -> str:
    """``shown``'s text/plain; every other entry of its bundle is its widget's own."""
    bundle = shown._repr_mimebundle_()
    own = widgets.VBox._repr_mimebundle_(widget)
    assert {k: v for k, v in bundle.items() if k != "text/plain"} == {
        k: v for k, v in own.items() if k != "text/plain"
    }
    return str(bundle["text/plain"])


@pytest.mark.anyio
async def test_notebook_text_plain_escapes_what_a_model_or_its_server_wrote(
    tmp_path: Path,
) -> None:
    """The turn panel (the reply, as prose: its lines kept), the budget (the provider's
    model id), the approvals panel (the model's arguments) and the dashboard print in a
    terminal as escapes, like the CLI; their widgets (HTML) are what they were."""
    (tmp_path / "ws").mkdir()
    config = writer_config(tmp_path)
    arguments = {"path": "notes\u202etxt.sh", "content": "echo hi\x9b2J\u2028"}
    model = ScriptedModel(
        [Reply(HOSTILE_REPLY), CallTools(("files_write", arguments)), Reply("no")],
        model=SERVER_MODEL,
    )
    nb = await hn.start(config, capabilities=capabilities(model, config=config))
    try:
        view = nb.chat("hi")
        result = await view
        plain = plain_of(view, view.panel)
        assert raw_drives(plain) == []
        assert "Done.\\x1b[2J" in plain
        assert "\\u202etxt.exe\\x9b31m\\u2028line two\nline three" in plain
        assert "\x1b" not in view.reply_html
        scope = await nb.scope()
        budget = await BudgetInspector.load(nb.host, scope, result.session_id)
        plain = plain_of(budget, budget)
        assert raw_drives(plain) == []
        assert "gpt\\x1b]0;PWNED\\x07" in plain
        assert "\x1b" not in budget.html()

        asking = nb.chat("write it")
        with anyio.fail_after(10):
            while asking.pending_row is None:  # noqa: ASYNC110 (as a person looks)
                await anyio.sleep(0.02)
        panel = await ApprovalsPanel.load(nb.host, scope)
        plain = plain_of(panel, panel)
        assert raw_drives(plain) == []
        assert "notes\\u202etxt.sh" in plain
        dashboard = await nb.dashboard()
        assert raw_drives(plain_of(dashboard, dashboard)) == []
        row = asking.pending_row
        assert row is not None
        row.deny.click()
        with anyio.fail_after(10):
            await asking
    finally:
        await nb.aclose()


def test_json_log_lines_escape_what_a_message_quotes() -> None:
    """``--log-format json`` writes what ``--json`` writes: a C1 control, a bidi override
    or a line separator a message quotes is a JSON escape, and a parser gets the text."""
    quoted = "x\x9b2J\u2028\u202eevil\x1b[2J"
    record = logging.makeLogRecord(
        {
            "name": "hostkit.inbox",
            "levelno": logging.WARNING,
            "levelname": "WARNING",
            "msg": "inbound %s deferred: %s",
            "args": ("inb_1", quoted),
            "detail": "field\u202e\u2029",
        }
    )
    line = JsonLines().format(record)
    assert raw_drives(line) == []
    assert "\u2029" not in line
    assert line.isprintable()
    parsed = json.loads(line)
    assert parsed["msg"].endswith("\u2028\u202eevil\\x1b[2J")
    assert parsed["fields"]["detail"] == "field\u202e\u2029"
