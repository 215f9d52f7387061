"""A person in JupyterLab: Stop a running turn, see the truncated badge and the chart, and look.

Chromium (Debian's, driven by Playwright) runs a notebook this test writes
into its temporary folder, cell by cell with Shift+Enter. Its scripted model
sleeps on *wait* (until the panel's real Stop button is clicked), cuts its
answer at the output limit on *long*, asks for ``files.write`` (under
``ask``) on *write*, and otherwise answers at once. The page is checked for
what a person would see: ``cancelled`` after Stop, the *truncated* badge,
the BudgetInspector's SVG chart with its axis and legend, an approval row
waiting for a click.

While that row waits, the chat panel, the approval row and both inspectors
are photographed in JupyterLab's light and then dark theme (switched through
Lab's own ``apputils:change-theme`` command) into
``.hostkit-browser/screenshots/<name>-<theme>.png``, for a reviewer to look
at; then Approve once is clicked and the turn ends.
"""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest
from playwright.sync_api import Locator, Page, expect, sync_playwright

from tests.browser.lab import CHROMIUM, CHROMIUM_ARGS, serve_lab

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
SHOTS = ROOT / ".hostkit-browser" / "screenshots"
NAME = "panels.ipynb"

CELL_TIMEOUT_S = 30.0  # a cold kernel plus the first hostkit import, on 2 cores
PAGE_TIMEOUT_S = 90.0
TURN_TIMEOUT_S = 20.0
KERNEL_IDLE = re.compile(r"\(ipykernel\) \| Idle")
THEMES = {"light": "JupyterLab Light", "dark": "JupyterLab Dark"}

SETUP = """
import asyncio
import tempfile
from pathlib import Path

import hostkit.notebook as hn
from hostkit.host import DefaultToolSource, NoChannels, RuntimeCapabilities, parse_config
from hostkit.testing import CallTools, InMemoryMemorySource, Reply, ScriptedModel
from hostkit.testing import StaticProviderSource

workdir = Path(tempfile.mkdtemp())
config = parse_config(
    {
        "host": {"database": str(workdir / "hostkit.db"), "workspace": str(workdir / "ws")},
        "providers": {"script": {"kind": "scripted"}},
        "agents": {
            "assistant": {
                "provider": "script",
                "memory": False,
                "builtins": ["files.write"],
                "policy": {"allow": ["*"], "ask": ["files.write"]},
            }
        },
    },
    base_dir=workdir,
)


async def script(request):
    last = request.messages[-1]
    if last.role == "tool":
        return Reply("Done: **note.md** now holds the line.")
    if last.content.startswith("wait"):
        await asyncio.sleep(600)  # until the panel's Stop button cancels the turn
        return Reply("too late")
    if last.content.startswith("long"):
        return Reply("The shed needs cedar boards, a gravel base and " * 6, finish_reason="length")
    if last.content.startswith("write"):
        return CallTools(("files_write", {"path": "note.md", "content": "from a browser\\n"}))
    return Reply("Hello! A **short** answer, in Markdown:\\n\\n- cedar\\n- gravel\\n- `3 x 2 m`")


nb = await hn.start(
    config,
    capabilities=RuntimeCapabilities(
        providers=StaticProviderSource(ScriptedModel([script], repeat_last=True)),
        memory=InMemoryMemorySource(),
        tools=DefaultToolSource(config),
        channels=NoChannels(),
    ),
)
"""
CELLS = {
    "setup": SETUP.strip(),
    "chat": 'hello = nb.chat("Hello! What do I need for a shed?")\nhello',
    "stop": 'stopped = nb.chat("wait for me")\nstopped',
    "truncated": 'cut = nb.chat("long answer, please")\ncut',
    "approval": 'asking = nb.chat("write note.md")\nasking',
    "context": "await nb.context_inspector(turn_id=hello.result.turn_id)",
    "budget": "await nb.budget_inspector()",
}


def write_notebook(folder: Path) -> None:
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_code_cell(source) for source in CELLS.values()]
    notebook.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    nbformat.write(notebook, folder / NAME)


class Cells:
    """The notebook's cells by name, run in order with Shift+Enter as a person would."""

    def __init__(self, page: Page) -> None:
        self.page = page
        self.all = page.locator(".jp-NotebookPanel .jp-Notebook .jp-Cell")
        self.names = list(CELLS)
        self.ran = 0

    def __getitem__(self, name: str) -> Locator:
        return self.all.nth(self.names.index(name))

    def output(self, name: str) -> Locator:
        return self[name].locator(".jp-OutputArea")

    def open(self) -> None:
        # Shift+Enter before the kernel is connected advances without running.
        expect(self.all).to_have_count(len(CELLS), timeout=PAGE_TIMEOUT_S * 1000)
        expect(self.page.locator(".jp-StatusBar-Widget")).to_contain_text(
            KERNEL_IDLE, timeout=PAGE_TIMEOUT_S * 1000
        )

    def run(self, name: str) -> Locator:
        """Run the next cell, which must be ``name``; its output area once it has run."""
        assert self.names[self.ran] == name, (self.names[self.ran], name)
        cell = self[name]
        # Select it first: a click in a panel (Stop) takes the keyboard focus from the notebook.
        cell.locator(".jp-InputPrompt").click()
        self.page.keyboard.press("Shift+Enter")
        self.ran += 1
        cell.locator(".jp-InputPrompt", has_text=re.compile(r"\[\d+\]")).wait_for(
            state="attached", timeout=CELL_TIMEOUT_S * 1000
        )
        cell.scroll_into_view_if_needed()
        shown = self.output(name).inner_text()
        assert "Traceback (most recent call last)" not in shown, f"cell {name} failed:\n{shown}"
        return self.output(name)


def outcome(area: Locator, text: str) -> Locator:
    """The panel's bold outcome word (``completed``, ``cancelled``)."""
    return area.locator("b", has_text=re.compile(rf"^\s*{text}\s*$"))


def use_theme(page: Page, theme: str) -> None:
    """Switch Lab's theme with its own command; return once its colours are applied."""
    light = "true" if theme == "light" else "false"
    page.evaluate(
        "(name) => window.jupyterapp.commands.execute('apputils:change-theme', {theme: name})",
        THEMES[theme],
    )
    page.wait_for_function(
        "(light) => document.body.dataset.jpThemeLight === light && "
        "document.body.dataset.jpThemeName !== undefined",
        arg=light,
        timeout=PAGE_TIMEOUT_S * 1000,
    )
    # The theme's stylesheet has loaded when Lab's background variable has its colour.
    page.wait_for_function(
        "(light) => { const c = getComputedStyle(document.body)"
        ".getPropertyValue('--jp-layout-color0').trim().toLowerCase();"
        " return light === 'true' ? c === 'white' || c === '#ffffff' || c === '#fff'"
        " : c !== '' && c !== 'white' && c !== '#ffffff' && c !== '#fff'; }",
        arg=light,
        timeout=PAGE_TIMEOUT_S * 1000,
    )
    page.mouse.move(0, 0)  # no hover highlight in the pictures


def photograph(targets: dict[str, Locator], theme: str) -> list[Path]:
    SHOTS.mkdir(parents=True, exist_ok=True)
    written = []
    for name, target in targets.items():
        path = SHOTS / f"{name}-{theme}.png"
        target.screenshot(path=path, animations="disabled")
        written.append(path)
    return written


def test_stop_truncated_badge_chart_and_screenshots_in_both_themes(tmp_path: Path) -> None:
    folder = tmp_path / "notebooks"
    folder.mkdir()
    write_notebook(folder)
    for stale in SHOTS.glob("*.png"):  # a reviewer sees this run's pictures or none
        stale.unlink()
    written: list[Path] = []
    with serve_lab(tmp_path, folder) as lab, sync_playwright() as playwright:
        browser = playwright.chromium.launch_persistent_context(
            str(tmp_path / "chromium-profile"),
            executable_path=CHROMIUM,
            headless=True,
            args=CHROMIUM_ARGS,
            viewport={"width": 1400, "height": 1000},
        )
        try:
            page = browser.pages[0] if browser.pages else browser.new_page()
            page.goto(lab.notebook_url(NAME), timeout=PAGE_TIMEOUT_S * 1000)
            try:
                written = drive(page)
            except BaseException:
                SHOTS.mkdir(parents=True, exist_ok=True)
                page.screenshot(path=SHOTS.parent / "panels-failure.png", full_page=True)
                raise
        finally:
            browser.close()
    print("\nscreenshots:\n" + "\n".join(f"  {path}" for path in written))
    assert {path.name for path in written} == {
        f"{name}-{theme}.png"
        for name in ("chat", "stopped", "truncated", "approval", "context", "budget")
        for theme in THEMES
    }
    assert all(path.stat().st_size > 1_000 for path in written)


def drive(page: Page) -> list[Path]:
    cells = Cells(page)
    cells.open()
    wait = TURN_TIMEOUT_S * 1000
    cells.run("setup")

    chat = cells.run("chat")
    expect(outcome(chat, "completed")).to_be_visible(timeout=wait)
    expect(chat.locator(".hostkit-answer li")).to_have_count(3)

    # (1) The real Stop button of a turn whose model is asleep.
    stopped = cells.run("stop")
    stop = stopped.locator("button:not([disabled])", has_text="Stop")
    expect(stop).to_be_visible(timeout=wait)
    expect(stopped).to_contain_text("waiting for the model's first token", timeout=wait)
    stop.click()
    expect(outcome(stopped, "cancelled")).to_be_visible(timeout=wait)
    expect(stopped.locator("button", has_text=re.compile("Stop"))).to_be_disabled()
    assert "too late" not in stopped.inner_text()

    # (2) An answer cut at the output limit carries the badge.
    cut = cells.run("truncated")
    expect(outcome(cut, "completed")).to_be_visible(timeout=wait)
    badge = cut.locator("span[title='the answer hit the output limit']")
    expect(badge).to_be_visible()
    expect(badge).to_contain_text("truncated")

    # (4) An approval row that waits for a click (answered after the screenshots).
    asking = cells.run("approval")
    approve = asking.locator("button:not([disabled])", has_text="Approve once")
    expect(approve).to_be_visible(timeout=wait)
    # The innermost box around the buttons: the row, not the panel that holds it.
    row = asking.locator(".widget-vbox", has=page.locator("button", has_text="Approve once")).last

    context = cells.run("context")
    expect(context).to_contain_text("step", timeout=wait)

    # (3) The BudgetInspector's chart is drawn, with its axis label and legend.
    budget = cells.run("budget")
    chart = budget.locator("svg.hk-chart")
    expect(chart).to_be_visible(timeout=wait)
    box = chart.bounding_box()
    assert box is not None
    assert box["width"] > 100, box
    assert box["height"] > 40, box
    expect(chart.locator(".hk-legend")).to_contain_text("input (reported)")
    expect(chart.locator(".hk-legend")).to_contain_text("output")
    expect(chart.locator(".hk-axis-label")).to_contain_text(
        ["tokens per call", "turn (oldest shown first"]
    )
    assert chart.locator("rect").count() > 2  # the legend's swatches and the bars

    # (5) The same panels in both themes, the approval still waiting.
    targets = {
        "chat": chat,
        "stopped": stopped,
        "truncated": cut,
        "approval": row,
        "context": context,
        "budget": budget,
    }
    written = []
    for theme in THEMES:
        use_theme(page, theme)
        expect(approve).to_be_enabled()
        written += photograph(targets, theme)

    approve.click()
    expect(outcome(asking, "completed")).to_be_visible(timeout=wait)
    expect(asking).to_contain_text("files.write: succeeded")
    expect(asking).to_contain_text("note.md now holds the line")
    return written
