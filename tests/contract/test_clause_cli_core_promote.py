"""Clause: `hostkit core promote|rollback|log|status` move and show the Host-owned ref.

A promotion prints each gate and exits 0 when the ref moved; a refused one
prints the failing gate and, for an MCP change, the review token it needs,
exits 1 and moves nothing. (The starter's own tests pass the test gate in
test_clause_cli_init_core; here the core has no tests/, so no pytest child
runs.) Rollback moves the ref back;
`log` shows the commits with the live one marked and every move with its
gates; `status` says whether HEAD is live. Each is checked against the
repository's ref itself (dulwich) and the --json values.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

from tests.contract._cli_cores import CORE, commit, head, invoke, live, make_project, manifest

MCP_SERVER = """\
mcp:
  docs:
    command: [docs-server, --stdio]
    env:
      DOCS_TOKEN: sk-live-0123456789abcdef
"""


def test_promote_prints_each_gate_and_refuses_changed_dependencies_until_reviewed(
    tmp_path: Path,
) -> None:
    core = make_project(tmp_path)
    first = head(core)
    code, out, err = invoke("core", "promote", CORE, "--reason", "first", project=tmp_path)
    assert code == 0, err
    gates = [line.split()[:2] for line in out.splitlines()[:4]]
    assert gates == [
        ["passed", "manifest:"],
        ["passed", "dependencies:"],
        ["passed", "mcp_review:"],
        ["passed", "tests:"],
    ]
    assert f"promoted {CORE} to {first[:12]} (was not live); new turns run it" in out
    assert live(core) == first

    changed = commit(core, {"requirements.txt": "humanize==4.9.0\n"}, "needs humanize")
    code, out, err = invoke("core", "promote", CORE, "--reason", "deps", project=tmp_path)
    assert code == 1
    assert "FAILED  dependencies" in out
    assert "humanize" in out
    # The gate's detail is printed once, above; the error line names the gate.
    assert err.startswith(
        f"error: promote of core '{CORE}' refused: the dependencies gate failed (see above)"
    )
    assert "humanize" not in err
    # The core's own tests never ran for a candidate refused anyway, and it says so.
    assert "skipped tests: the core's own tests run once the other gates pass" in out
    # One line to paste back: the dependency review token, after a look at the diff.
    assert err.count("\n") == 2
    pasted = err.splitlines()[1]
    assert pasted.startswith(f"review the dependency changes (hostkit core diff {CORE} ")
    reviewed = shlex.split(pasted.split("then pass: ", 1)[1])
    assert reviewed[0] == "--reviewed-deps"
    assert reviewed[1].startswith("deps-review:")
    assert "--review " not in err  # the MCP declarations did not change
    assert live(core) == first
    # The flag alone is no review: it takes the token of this change, and says so when it
    # is given something else (most often the next option, taken as its value).
    code, out, err = invoke(
        "core", "promote", CORE, "--reason", "deps", "--reviewed-deps", project=tmp_path
    )
    assert code == 2
    assert err.startswith(
        "error: --reviewed-deps takes the deps-review:<sha256> token `hostkit core diff` "
        "printed (got '--config')"
    )
    code, out, err = invoke(
        "core", "promote", CORE, "--reason", "deps", "--reviewed-deps", "yes", project=tmp_path
    )
    assert (code, out) == (2, "")
    assert "(got 'yes')" in err
    code, out, err = invoke(
        "core", "promote", CORE, "--reason", "deps", "--review", reviewed[1], project=tmp_path
    )
    assert (code, out) == (2, "")
    assert err.startswith("error: --review takes the mcp-review:<sha256> token")
    assert live(core) == first
    code, out, err = invoke(
        "core", "promote", CORE, "--reason", "deps", *reviewed, project=tmp_path
    )
    assert code == 0, err
    assert "passed  dependencies" in out
    assert live(core) == changed
    code, out, err = invoke("core", "log", CORE, "--json", project=tmp_path)
    assert code == 0, err
    history = json.loads(out)["history"]
    assert [(event["action"], event["revision"]) for event in history] == [
        ("promote", changed),
        ("refused", changed),
        ("promote", first),
    ]
    refused = {gate["gate"]: gate["passed"] for gate in history[1]["gates"]}
    # The core's tests run only once the review gates passed.
    assert refused == {"manifest": True, "dependencies": False, "mcp_review": True}


def test_an_mcp_change_is_refused_with_the_token_and_promoted_with_it(tmp_path: Path) -> None:
    core = make_project(tmp_path)
    assert invoke("core", "promote", CORE, "--reason", "first", project=tmp_path)[0] == 0
    before = live(core)
    text = manifest(core).replace("capabilities:\n", "capabilities:\n  mcp.connect:docs: ask\n")
    changed = commit(core, {"agent.yaml": text + MCP_SERVER}, "declare the docs server")

    code, out, err = invoke("core", "promote", CORE, "--reason", "docs", project=tmp_path)
    assert code == 1
    assert "FAILED  mcp_review" in out
    token = err.split("then pass: --review ", 1)[1].split()[0]
    assert token.startswith("mcp-review:")
    assert len(token) == len("mcp-review:") + 64
    assert live(core) == before
    assert "sk-live-0123456789abcdef" not in out + err

    # The token passed, the dependencies not reviewed: the refusal names the dependencies
    # alone, never the review the operator has already given.
    changed = commit(core, {"requirements.txt": "humanize==4.9.0\n"}, "and a dependency")
    code, out, err = invoke("core", "diff", CORE, project=tmp_path)
    assert code == 0, err
    token = next(
        line.removeprefix("review token: ")
        for line in out.splitlines()
        if line.startswith("review token: ")
    )
    code, out, err = invoke(
        "core", "promote", CORE, "--reason", "docs", "--review", token, project=tmp_path
    )
    assert code == 1
    assert "FAILED  dependencies" in out
    assert "passed  mcp_review" in out
    assert "then pass: --review " not in err, err
    deps_token = err.split("then pass: --reviewed-deps ", 1)[1].split()[0]

    stale = "mcp-review:" + "0" * 64
    code, out, _ = invoke(
        "core", "promote", CORE, "--reason", "docs", "--review", stale, project=tmp_path
    )
    assert code == 1
    assert live(core) == before
    code, out, err = invoke(
        "core",
        "promote",
        CORE,
        "--reason",
        "docs",
        "--review",
        token,
        "--reviewed-deps",
        deps_token,
        project=tmp_path,
    )
    assert code == 0, err
    assert "passed  mcp_review" in out
    assert live(core) == changed


def test_a_second_rollback_undoes_the_first_as_the_first_said(tmp_path: Path) -> None:
    core = make_project(tmp_path)
    first = head(core)
    assert invoke("core", "promote", CORE, first[:12], "--reason", "v1", project=tmp_path)[0] == 0
    second = commit(core, {"agent/extra.py": "VALUE = 2\n"}, "a second revision")
    assert invoke("core", "promote", CORE, "--reason", "v2", project=tmp_path)[0] == 0
    code, out, err = invoke("core", "rollback", CORE, "--reason", "v2 misbehaves", project=tmp_path)
    assert code == 0, err
    assert f"a rollback without --to now returns to {second[:12]}" in out
    code, out, err = invoke("core", "rollback", CORE, "--reason", "it was fine", project=tmp_path)
    assert code == 0, err
    assert live(core) == second
    assert f"a rollback without --to now returns to {first[:12]}" in out


def test_rollback_moves_the_ref_back_and_log_marks_the_live_commit(tmp_path: Path) -> None:
    core = make_project(tmp_path)
    first = head(core)
    assert invoke("core", "promote", CORE, first[:12], "--reason", "v1", project=tmp_path)[0] == 0
    second = commit(core, {"agent/extra.py": "VALUE = 2\n"}, "a second revision")
    assert invoke("core", "promote", CORE, "--reason", "v2", project=tmp_path)[0] == 0
    assert live(core) == second

    code, out, err = invoke("core", "rollback", CORE, "--reason", "v2 misbehaves", project=tmp_path)
    assert code == 0, err
    assert f"rolled back {CORE} to {first[:12]} (was {second[:12]})" in out
    assert f"a rollback without --to now returns to {second[:12]}" in out
    assert live(core) == first

    code, out, err = invoke("core", "log", CORE, project=tmp_path)
    assert code == 0, err
    rows = [line.split() for line in out.splitlines()]
    marked = [row for row in rows if row and row[0] == "*"]
    assert len(marked) == 1
    assert marked[0][1] == first[:12]
    assert "rollback" in out
    assert "v2 misbehaves" in out
    # The promotions (the core names `tools:`: the tools gate ran too); the rollback ran
    # the manifest and tools gates only (its tools must still build here).
    assert "all 5 passed" in out
    assert "all 2 passed" in out

    code, out, err = invoke("core", "log", CORE, "--json", "--limit", "2", project=tmp_path)
    assert code == 0, err
    shown = json.loads(out)
    assert shown["core_id"] == CORE
    assert [(rev["sha"], rev["live"]) for rev in shown["revisions"]] == [
        (second, False),
        (first, True),
    ]
    assert [event["action"] for event in shown["history"]] == ["rollback", "promote"]
    assert shown["history"][0]["reason"] == "v2 misbehaves"
    assert shown["history"][0]["previous"] == second
    # Both lists are cut to the newest: the output says which (it said nothing).
    assert shown["truncated"] == ["revisions", "history"]
    code, out, err = invoke("core", "log", CORE, "--limit", "1", project=tmp_path)
    assert code == 0, err
    assert "(the 1 newest commits; --limit shows more)" in err
    assert "(the 1 newest; --limit shows more)" in err
    code, out, err = invoke("core", "log", CORE, "--json", "--limit", "50", project=tmp_path)
    assert json.loads(out)["truncated"] == []

    code, out, err = invoke(
        "core", "rollback", CORE, "--to", second, "--reason", "fixed", project=tmp_path
    )
    assert code == 0, err
    assert live(core) == second


def test_status_says_whether_head_is_live(tmp_path: Path) -> None:
    core = make_project(tmp_path)
    code, out, err = invoke("core", "status", "--json", project=tmp_path)
    assert code == 0, err
    (row,) = json.loads(out)
    assert (row["core_id"], row["live"], row["head"]) == (CORE, None, head(core))
    assert row["ref"] == "refs/hostkit/live"
    assert "no live revision: promote one" in invoke("core", "status", project=tmp_path)[1]
    assert invoke("core", "promote", CORE, "--reason", "first", project=tmp_path)[0] == 0
    code, out, _ = invoke("core", "status", CORE, project=tmp_path)
    assert code == 0
    assert f"{head(core)[:12]}" in out
    assert "HEAD is live" in out
    commit(core, {"agent/extra.py": "VALUE = 3\n"}, "not promoted yet")
    assert "HEAD not promoted" in invoke("core", "status", project=tmp_path)[1]


def test_status_gives_a_core_whose_repository_is_missing_its_own_row(tmp_path: Path) -> None:
    """One broken repository does not hide every other core's status."""
    core = make_project(tmp_path)
    with (tmp_path / "hostkit.toml").open("a") as toml:
        toml.write('\n[cores.ghost]\npath = "cores/ghost"\n')
    code, out, err = invoke("core", "status", "--json", project=tmp_path)
    assert code == 0, err
    rows = {row["core_id"]: row for row in json.loads(out)}
    assert rows[CORE]["head"] == head(core)
    assert rows[CORE]["problem"] is None
    assert rows["ghost"]["head"] is None
    assert "is not a directory" in rows["ghost"]["problem"]
    code, out, err = invoke("core", "status", project=tmp_path)
    assert code == 0, err
    assert "no live revision: promote one" in out
    assert "repository unreadable" in out
    assert err.count("ghost: core repository") == 1
