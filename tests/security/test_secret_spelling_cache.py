"""Held secrets' spellings are kept by their owner, one generation's runtime, and no one else.

Computing a held value's spellings and their 8-gram index costs milliseconds
(a PEM key's lines, escaped twice), and every tool call builds several
redactors from the same values; so they are kept. A module-level
``lru_cache`` kept them process-wide: the values of a closed Host, or of a
secret rotated or removed from the configuration, stayed in a global every
other Host of the process shared. Now each generation's ``EffectRuntime``
owns a ``HeldSpellings``, closed with the generation.
"""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest

from hostkit.effects import ApprovalRuntime, EffectRuntime
from hostkit.effects import _redaction as redaction
from hostkit.effects._redaction import Redactor
from hostkit.freeze import FrozenMap
from hostkit.host import Host, HostConfig
from hostkit.testing import CallTools, Reply, ScriptedModel, capabilities
from tests.contract.test_effects_terminal import POLICY, PY, Terminal, Tools, output
from tests.hosts import request
from tests.security.test_secret_cross_call import NAME, SECRET, Approve, host_config

pytestmark = pytest.mark.anyio

PEM = (
    "-----BEGIN KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEF\n"
    "AASCBKcwggSjAgEAAoIBAQC7VJTU\n-----END KEY-----"
)
HELD = {"HK_PEM": PEM, "HK_TOKEN": "tok-81f3a9c2e7", "HK_PASS": 'p\u00e4ss"w&rd'}
TEXT = f"key {PEM!r} token tok-81f3a9c2e7 and {HELD['HK_PASS']} and half: tok-81f3a9"


@pytest.fixture
def spelled(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every value ``spellings`` is computed for, in order."""
    calls: list[str] = []
    real = redaction.spellings

    def counting(value: str) -> set[str]:
        calls.append(value)
        return real(value)

    monkeypatch.setattr(redaction, "spellings", counting)
    return calls


def test_a_second_redactor_for_the_same_held_secrets_reuses_their_spellings(
    spelled: list[str],
) -> None:
    held = redaction.HeldSpellings()
    first = Redactor.of(HELD, held=held)
    assert sorted(spelled) == sorted(HELD.values())
    second = Redactor.of(HELD, held=held)
    assert len(spelled) == len(HELD)  # nothing computed again
    assert second.index is first.index
    # A derived value (tool-chosen) is spelled for its own call only, and never kept.
    derived = Redactor.of(HELD, ["derived-value-99"], held=held)
    assert spelled[len(HELD) :] == ["derived-value-99"]
    assert not held.holds("derived-value-99")
    # The same redaction as one built without a cache.
    assert second.text(TEXT) == Redactor.of(HELD).text(TEXT)
    assert "[redacted:HK_TOKEN]" in second.text(TEXT)
    shown = "derived-value-99 and tok-81f3a9c2e7"
    assert derived.text(shown) == Redactor.of(HELD, ["derived-value-99"]).text(shown)


def test_a_held_set_that_shares_values_with_a_kept_one_spells_only_the_new_value(
    spelled: list[str],
) -> None:
    held = redaction.HeldSpellings()
    Redactor.of(HELD, held=held)
    Redactor.of({**HELD, "HK_MORE": "another-value-7"}, held=held)
    assert spelled[len(HELD) :] == ["another-value-7"]


def test_a_rotated_secret_leaves_no_spelling_of_its_old_value() -> None:
    held = redaction.HeldSpellings()
    Redactor.of(HELD, held=held)
    assert held.holds("tok-81f3a9c2e7")
    rotated = Redactor.of({**HELD, "HK_TOKEN": "tok-rotated-5521"}, held=held)
    assert not held.holds("tok-81f3a9c2e7")
    assert held.holds("tok-rotated-5521")
    assert held.holds(PEM)
    assert rotated.text("tok-rotated-5521") == "[redacted:HK_TOKEN]"


def test_a_closed_cache_keeps_nothing_and_still_redacts() -> None:
    held = redaction.HeldSpellings()
    Redactor.of(HELD, held=held)
    held.close()
    assert len(held) == 0
    assert not held.holds(PEM)
    again = Redactor.of(HELD, held=held)
    assert len(held) == 0
    assert again.text(TEXT) == Redactor.of(HELD).text(TEXT)


def test_no_module_level_cache_holds_secret_material() -> None:
    Redactor.of(HELD)
    Redactor.of(HELD, ["derived-value-99"])
    caches = {
        name: value.cache_info().currsize
        for name, value in vars(redaction).items()
        if hasattr(value, "cache_info")
    }
    assert caches == {}


async def turn_reading_a_file(config: HostConfig) -> Host:
    """An open Host that ran one turn whose tool call was redacted with the held secret."""
    model = ScriptedModel([CallTools(("files_read", {"path": "note.txt"})), Reply("done")])
    await anyio.Path(config.resolve(config.host.workspace) / "note.txt").write_text("no secret")
    host = await Host.open(
        config, capabilities=capabilities(model, config=config), approver=Approve()
    )
    try:
        result = await host.turns.run(request("read the note"))
        assert [e.status for e in result.effects] == ["succeeded"], result.effects
    except BaseException:
        await host.aclose()
        raise
    return host


def runtime_of(host: Host) -> EffectRuntime:
    return host._generation.effects


async def test_a_closed_host_leaves_no_spelling_of_its_secrets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(NAME, SECRET)
    host = await turn_reading_a_file(host_config(tmp_path, ["files.read"]))
    try:
        cache = runtime_of(host).held_spellings
        assert cache.holds(SECRET)  # the call's redactors were built from it
    finally:
        await host.aclose()
    assert not cache.holds(SECRET)
    assert len(cache) == 0


async def test_two_hosts_in_one_process_keep_their_own_spellings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(NAME, SECRET)
    for each in ("a", "b"):
        await anyio.Path(tmp_path / each).mkdir()
    first = await turn_reading_a_file(host_config(tmp_path / "a", ["files.read"]))
    try:
        second = await turn_reading_a_file(host_config(tmp_path / "b", ["files.read"]))
        try:
            mine, theirs = runtime_of(first).held_spellings, runtime_of(second).held_spellings
            assert mine is not theirs
            assert mine.holds(SECRET)
            assert theirs.holds(SECRET)
            await first.aclose()
            assert not mine.holds(SECRET)
            assert theirs.holds(SECRET)  # the other Host's calls still use theirs
        finally:
            await second.aclose()
        assert not theirs.holds(SECRET)
    finally:
        await first.aclose()


async def test_a_replaced_generation_leaves_no_spelling_of_a_secret_it_removed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(NAME, SECRET)
    config = host_config(tmp_path, ["files.read"])
    host = await turn_reading_a_file(config)
    try:
        old = runtime_of(host).held_spellings
        assert old.holds(SECRET)
        agent = config.agents["assistant"].model_copy(update={"secrets": ()})
        removed = config.model_copy(
            update={"agents": FrozenMap({"assistant": agent}), "secrets": FrozenMap()}
        )
        model = ScriptedModel([CallTools(("files_read", {"path": "note.txt"})), Reply("done")])
        await host.apply_config(removed, capabilities=capabilities(model, config=removed))
        assert not old.holds(SECRET)
        assert len(old) == 0
        await host.turns.run(request("read the note again"))
        assert not runtime_of(host).held_spellings.holds(SECRET)
    finally:
        await host.aclose()


TERMINAL_KEY = (
    "-----BEGIN TEST KEY-----\nMIIBOgIBAAJBAKj34GkxFhD9\n0Zk4xQ7w2LrR1mYtVbN8aPeA\n"
    "-----END TEST KEY-----"
)
PRINTS_THE_KEY = (
    "import os, sys\n"
    "key = os.environ['TLS_KEY']\n"
    "print('the key:', key)\n"
    "print('half of it:', key[len(key) // 2 :], file=sys.stderr)\n"
)


async def test_terminal_runs_mask_a_bound_secret_without_spelling_it_again(
    terminal: Terminal, spelled: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run's streams are masked with the redactor the runtime built for the call from its
    kept spellings: two runs that print a bound PEM key spell it once, and show none of it."""
    monkeypatch.setenv("TLS_KEY", TERMINAL_KEY)
    await anyio.Path(terminal.workspace / "leak.py").write_text(PRINTS_THE_KEY)
    # A secret-bound run is always asked: this runtime's approver says yes.
    terminal.runtime = EffectRuntime(
        toolsets=Tools(terminal.runs.tools(sandbox=POLICY), terminal.workspace),
        approvals=ApprovalRuntime(provider=Approve()),
    )
    session = await terminal.session(grants=("secret.bind:TLS_KEY",))
    for _ in range(2):
        result = await session.call("terminal.run", argv=[PY, "leak.py"], secrets=["TLS_KEY"])
        assert (result.status, result.started) == ("succeeded", True), result.error
        shown = output(result)
        for line in TERMINAL_KEY.splitlines():
            assert line not in json.dumps(shown)
        assert "[redacted:TLS_KEY]" in shown["stdout"]["tail"]
        assert "[redacted:TLS_KEY]" in shown["stderr"]["tail"]
    assert spelled.count(TERMINAL_KEY) == 1
