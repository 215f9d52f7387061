"""Clause: `hostkit core diff` shows what a promotion would change — files, the bounded
patch, dependency changes, the secret-safe MCP security diff — and the review token that
exact change needs, which `hostkit core promote --review` then accepts.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

from tests.contract._cli_cores import CORE, commit, head, invoke, live, make_project, manifest

SECRET = "sk-live-0123456789abcdef"
MCP_SERVER = f"""\
mcp:
  docs:
    command: [docs-server, --stdio]
    env:
      DOCS_TOKEN: {SECRET}
"""
# A core file whose text would repaint a terminal if it were printed raw.
ESCAPE = "\x1b[2J\x1b[31m"


def changed_core(tmp_path: Path) -> tuple[Path, str, str]:
    """A live first revision and a HEAD that changes code, dependencies and MCP servers."""
    core = make_project(tmp_path)
    assert invoke("core", "promote", CORE, "--reason", "first", project=tmp_path)[0] == 0
    first = head(core)
    text = manifest(core).replace("capabilities:\n", "capabilities:\n  mcp.connect:docs: ask\n")
    second = commit(
        core,
        {
            "agent.yaml": text + MCP_SERVER,
            "requirements.txt": "humanize==4.9.0\n",
            "agent/notes.py": f'BANNER = "{ESCAPE}"\n',
        },
        "docs server, humanize, a banner",
        remove=("agent/__init__.py",),
    )
    return core, first, second


def test_diff_shows_files_dependencies_the_security_diff_and_the_token(tmp_path: Path) -> None:
    core, first, second = changed_core(tmp_path)
    code, out, err = invoke("core", "diff", CORE, project=tmp_path)
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == f"core {CORE}: {first[:12]} -> {second[:12]}"
    assert lines[1] == "files changed: 4"
    assert set(lines[2:6]) == {
        "  M agent.yaml",
        "  D agent/__init__.py",
        "  A agent/notes.py",
        "  A requirements.txt",
    }
    assert "dependency changes (promote needs --reviewed-deps with the token below):" in lines
    assert any("humanize" in line for line in lines)
    assert "security diff (MCP declarations; values of env and secrets never shown):" in lines
    assert '"DOCS_TOKEN"' in out
    assert "+++ b/agent/notes.py" in lines
    # Never the secret (the security diff names the env entry, the patch redacts it),
    # never a raw escape sequence from the core's files.
    assert SECRET not in out
    assert "\x1b" not in out
    assert "\\x1b[2J" in out
    token_line = next(line for line in lines if line.startswith("review token: "))
    token = token_line.removeprefix("review token: ")
    promote_line = next(line for line in lines if line.startswith("  promote with: "))
    printed = shlex.split(promote_line.removeprefix("  promote with: "))

    code, out, err = invoke("core", "diff", CORE, "--json", project=tmp_path)
    assert code == 0, err
    shown = json.loads(out)
    assert (shown["core_id"], shown["base"], shown["target"]) == (CORE, first, second)
    assert shown["review"] == token
    assert {"path": "requirements.txt", "change": "added"} in shown["files"]
    assert shown["dependency_changes"]
    assert "docs" in json.dumps(shown["security_diff"])
    assert SECRET not in out

    # The promotion the diff printed works as printed: the token it names is the one this
    # change needs, and it asks for the dependency review the change also needs.
    assert printed[:3] == ["hostkit", "core", "promote"]
    assert printed[printed.index("--review") + 1] == token
    deps_line = next(line for line in lines if line.startswith("dependency review token: "))
    deps_token = deps_line.removeprefix("dependency review token: ")
    assert printed[printed.index("--reviewed-deps") + 1] == deps_token
    assert shown["dependency_review"] == deps_token
    code, out, err = invoke(*printed[1:], project=tmp_path)
    assert code == 0, err
    assert live(core) == second


def test_diff_between_any_two_revisions(tmp_path: Path) -> None:
    _, first, second = changed_core(tmp_path)
    code, out, err = invoke(
        "core", "diff", CORE, "--base", second[:12], "--target", first, "--json", project=tmp_path
    )
    assert code == 0, err
    shown = json.loads(out)
    assert (shown["base"], shown["target"]) == (second, first)
    assert {"path": "agent/__init__.py", "change": "added"} in shown["files"]
    assert {"path": "requirements.txt", "change": "deleted"} in shown["files"]
    code, out, err = invoke("core", "diff", CORE, "--target", first, project=tmp_path)
    assert code == 0, err
    assert out.splitlines()[1] == f"nothing to promote: {first[:12]} is the live revision"
    assert out.splitlines()[2] == "files changed: 0"
    assert "review token" not in out
