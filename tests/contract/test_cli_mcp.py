"""``hostkit mcp list``: declared servers joined with the statuses the store recorded.

Run as a script runs it (a real subprocess on a real database whose rows were
written through ``record_mcp_status``). Listing starts no server and connects
nothing; secrets (env values, URL credentials) never appear; a server no
longer declared shows as ``removed``; bad input is one ``error:`` line, exit 2.

Agent Cores are listed as the Host runs them: each core with the servers its
live revision's ``agent.yaml`` declares (not HEAD's), a core that is not live
is one warning (not an error, not ``removed`` rows), and an unknown agent's
error names the cores too. Those tests promote through the real ``hostkit
core promote`` in-process, as the core CLI tests do (``_cli_cores``).
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path

import anyio
import pytest

from hostkit.effects import McpServerDeclaration
from hostkit.freeze import freeze
from hostkit.host import parse_config
from hostkit.inspect import mcp_server_rows
from hostkit.store import RuntimeStore
from hostkit.types import McpServerStatus, McpToolRow
from tests.cli import run_cli_async
from tests.contract._cli_cores import CORE, commit, invoke, live, make_project, manifest

pytestmark = pytest.mark.anyio

CONFIG = """
[host]
database = "hostkit.db"

[providers.p]
kind = "scripted"

[agents.assistant]
provider = "p"

[agents.assistant.mcp.files]
command = ["/bin/sh", "-c", "touch started-files"]
env = { FILES_TOKEN = "env-secret-value" }

[agents.assistant.mcp.search]
url = "https://user:url-secret@mcp.example.com/mcp"

[agents.assistant.mcp.quiet]
command = ["/bin/sh", "-c", "touch started-quiet"]
network = true

[agents.assistant.mcp.blocked]
url = "http://127.0.0.1:9/mcp"

[agents.helper]
provider = "p"

[agents.helper.mcp.notes]
command = ["/bin/sh", "-c", "touch started-notes"]
"""
FAILING_UNTIL = time.time() + 3_600
SECRETS = ("env-secret-value", "url-secret")


async def hostkit(*args: str, cwd: Path, columns: int = 80) -> tuple[int, str, str]:
    """The CLI as a script runs it (no terminal on stdin), ``columns`` wide."""
    result = await run_cli_async(*args, cwd=cwd, env={**os.environ, "COLUMNS": str(columns)})
    return result.returncode, result.stdout.decode(), result.stderr.decode()


def declared(name: str, **fields: object) -> Mapping[str, object]:
    return McpServerDeclaration(name=name, **fields).view()  # type: ignore[arg-type]


@pytest.fixture
async def project(tmp_path: Path) -> Path:
    await anyio.Path(tmp_path / "hostkit.toml").write_text(CONFIG)
    files = declared(
        "files",
        transport="stdio",
        command=("/bin/sh", "-c", "touch started-files"),
        env={"FILES_TOKEN": "env-secret-value"},
    )
    statuses = [
        McpServerStatus(
            agent="assistant",
            server="files",
            state="connected",
            tools=(
                McpToolRow("mcp.files.read_file", "read_file", "Read one file of the root"),
                McpToolRow("mcp.files.list_dir", "list_dir", "List a directory"),
            ),
            updated_at=time.time(),
            declaration=files,
        ),
        McpServerStatus(
            agent="assistant",
            server="search",
            state="failing",
            detail="connect failed: the server answered 503",
            failing_until=FAILING_UNTIL,
            # As the connection pool records it: no declaration view, today's is shown.
        ),
        McpServerStatus(
            agent="assistant",
            server="blocked",
            state="denied",
            detail="policy denies mcp.connect:blocked",
            declaration=declared("blocked", transport="http", url="http://127.0.0.1:9/mcp"),
        ),
        McpServerStatus(
            agent="assistant",
            server="gone",
            state="closed",
            declaration=declared("gone", transport="stdio", command=("old-server",)),
        ),
        # Recorded for another declaration than today's: shown, and flagged as changed.
        McpServerStatus(
            agent="helper",
            server="notes",
            state="closed",
            declaration=declared("notes", transport="stdio", command=("notes-v1",)),
        ),
    ]
    async with RuntimeStore.open(tmp_path / "hostkit.db") as store:
        for status in statuses:
            await store.mcp_servers.record_mcp_status(status)
    return tmp_path


async def listed(project: Path, *args: str) -> list[dict[str, object]]:
    code, out, err = await hostkit("mcp", "list", "--json", *args, cwd=project)
    assert code == 0, err
    rows = json.loads(out)
    assert isinstance(rows, list)
    return rows


async def test_each_declared_server_is_joined_with_its_last_status(project: Path) -> None:
    rows = await listed(project)
    assert [(r["agent"], r["server"], r["state"]) for r in rows] == [
        ("assistant", "blocked", "denied"),
        ("assistant", "files", "connected"),
        ("assistant", "gone", "removed"),
        ("assistant", "quiet", "never connected"),
        ("assistant", "search", "failing"),
        ("helper", "notes", "closed"),
    ]
    by_server = {r["server"]: r for r in rows}
    files = by_server["files"]
    assert files["transport"] == "stdio"
    assert files["target"] == "/bin/sh -c touch started-files"
    assert files["env"] == ["FILES_TOKEN"]
    assert files["provenance"] == "mcp:files"
    assert files["tools"] == [
        {
            "effect": "mcp.files.read_file",
            "name": "read_file",
            "description": "Read one file of the root",
        },
        {"effect": "mcp.files.list_dir", "name": "list_dir", "description": "List a directory"},
    ]
    failing_until = datetime.fromisoformat(by_server["search"]["failing_until"])
    assert failing_until.timestamp() == pytest.approx(FAILING_UNTIL, abs=0.001)
    assert by_server["search"]["detail"] == "connect failed: the server answered 503"
    assert by_server["search"]["target"] == "https://mcp.example.com/mcp"
    assert by_server["quiet"]["network"] is True
    assert by_server["quiet"]["tools"] == []
    assert by_server["gone"]["target"] == "old-server"
    assert by_server["notes"]["changed"] is True
    assert files["changed"] is False
    assert by_server["search"]["changed"] is False
    assert set(files) >= {"agent", "server", "state", "transport", "target", "env", "detail"}


async def test_listing_starts_no_server_and_shows_no_secret(project: Path) -> None:
    code, out, err = await hostkit("mcp", "list", cwd=project)
    assert code == 0, err
    code, json_out, err = await hostkit("mcp", "list", "--json", cwd=project)
    assert code == 0, err
    for secret in SECRETS:
        assert secret not in out + json_out
    names = [path.name async for path in anyio.Path(project).iterdir()]
    assert not [name for name in names if name.startswith("started-")]
    assert "hostkit.toml" in names


async def test_the_table_fits_80_columns_with_names_and_effects_whole(project: Path) -> None:
    until = time.strftime("%H:%M:%S", time.localtime(FAILING_UNTIL))
    for columns in (80, 120):
        code, out, err = await hostkit("mcp", "list", cwd=project, columns=columns)
        assert code == 0, err
        assert all(len(line) <= columns for line in out.splitlines()), out
        assert "agent assistant" in out
        assert "agent helper" in out
        assert f"failing until {until}" in out
        assert re.search(r"\bgone\s+removed\b", out)
        assert re.search(r"\bquiet\s+never connected\b", out)
        assert re.search(r"\bnotes\s+closed \(changed\)", out)
        assert re.search(r"mcp\.files\.read_file\s+read_file\s+mcp:files", out)
        assert "search: connect failed: the server answered 503" in out
        # The command cell wraps at 80 columns; its words are all there.
        assert "[envFILES_TOKEN]" in "".join(out.split())


async def test_agent_limits_the_listing_to_that_agent(project: Path) -> None:
    rows = await listed(project, "--agent", "helper")
    assert [(r["agent"], r["server"]) for r in rows] == [("helper", "notes")]


async def test_an_unknown_agent_is_one_error_line_and_status_2(project: Path) -> None:
    code, out, err = await hostkit("mcp", "list", "--agent", "nobody", cwd=project)
    assert code == 2
    assert out == ""
    assert err.startswith("error: no agent named 'nobody'")
    assert "assistant, helper" in err
    assert len(err.strip().splitlines()) == 1


async def test_a_bad_server_table_is_one_error_line_naming_it(tmp_path: Path) -> None:
    await anyio.Path(tmp_path / "hostkit.toml").write_text(
        CONFIG + '\n[agents.helper.mcp.both]\ncommand = ["x"]\nurl = "https://h/mcp"\n'
    )
    code, out, err = await hostkit("mcp", "list", cwd=tmp_path)
    assert code == 2
    assert out == ""
    assert err.startswith("error: agents.helper.mcp.both: ")
    assert not (tmp_path / "hostkit.db").exists()


async def test_without_a_database_every_server_was_never_connected_and_none_is_created(
    tmp_path: Path,
) -> None:
    await anyio.Path(tmp_path / "hostkit.toml").write_text(CONFIG)
    rows = await listed(tmp_path)
    assert {r["state"] for r in rows} == {"never connected"}
    assert len(rows) == 5
    assert not (tmp_path / "hostkit.db").exists()


async def test_no_server_anywhere_says_so(tmp_path: Path) -> None:
    await anyio.Path(tmp_path / "hostkit.toml").write_text(
        '[providers.p]\nkind = "scripted"\n[agents.a]\nprovider = "p"\n'
    )
    code, out, err = await hostkit("mcp", "list", cwd=tmp_path)
    assert (code, out) == (0, "")
    assert "no MCP servers declared or recorded" in err
    assert await listed(tmp_path) == []


async def test_list_json_escapes_unprintable_characters_of_what_a_server_said(
    tmp_path: Path,
) -> None:
    await anyio.Path(tmp_path / "hostkit.toml").write_text(CONFIG)
    description = "Read \u202eelif\u202c one file \x9b2J\x1b[31m of the root"
    status = McpServerStatus(
        agent="assistant",
        server="files",
        state="connected",
        detail="said \x9b1;1H hello",
        tools=(McpToolRow("mcp.files.read_file", "read_file", description),),
        updated_at=time.time(),
    )
    async with RuntimeStore.open(tmp_path / "hostkit.db") as store:
        await store.mcp_servers.record_mcp_status(status)
    code, out, err = await hostkit("mcp", "list", "--json", cwd=tmp_path)
    assert code == 0, err
    assert out.replace("\n", "").isprintable()
    assert "\\u202eelif\\u202c" in out
    files = next(row for row in json.loads(out) if row["server"] == "files")
    # Recorded bounded: a control character is kept as its escape, never as itself.
    assert files["tools"][0]["description"] == description.replace("\x9b", "\\x9b").replace(
        "\x1b", "\\x1b"
    )
    assert files["detail"] == "said \\x9b1;1H hello"


# -- Agent Cores: the agents the Host runs, each core at its live revision -------------

CORE_MCP = """\
mcp:
  docs:
    command: [docs-server, --stdio]
    env:
      DOCS_TOKEN: sk-live-0123456789abcdef
"""
CORE_HELPER = """
[agents.helper]
provider = "p"

[agents.helper.mcp.notes]
command = ["notes-server"]
"""


def core_project(root: Path) -> Path:
    """The starter core under ``[cores.assistant]`` beside ``[agents.helper]``; the core's dir."""
    core = make_project(root)
    with (root / "hostkit.toml").open("a") as config:
        config.write(CORE_HELPER)
    return core


def promote_with_docs(root: Path, core: Path) -> str:
    """Make the core live, then promote a revision declaring ``docs`` (reviewed); its sha."""
    assert invoke("core", "promote", CORE, "--reason", "first", project=root)[0] == 0
    text = manifest(core).replace("capabilities:\n", "capabilities:\n  mcp.connect:docs: ask\n")
    changed = commit(core, {"agent.yaml": text + CORE_MCP}, "declare the docs server")
    code, _, err = invoke("core", "promote", CORE, "--reason", "docs", project=root)
    assert code == 1, err
    token = err.split("then pass: --review ", 1)[1].split()[0]
    code, _, err = invoke(
        "core", "promote", CORE, "--reason", "docs", "--review", token, project=root
    )
    assert code == 0, err
    assert live(core) == changed
    return changed


def listed_in_process(root: Path, *args: str) -> list[dict[str, object]]:
    code, out, err = invoke("mcp", "list", "--json", *args, project=root)
    assert code == 0, err
    rows = json.loads(out)
    assert isinstance(rows, list)
    return rows


def test_a_live_core_lists_the_servers_its_live_revision_declares(tmp_path: Path) -> None:
    core = core_project(tmp_path)
    promote_with_docs(tmp_path, core)
    # Committed but not promoted: HEAD declares another server; the live revision does not.
    moved = manifest(core) + "  extra:\n    url: https://extra.example.com/mcp\n"
    commit(core, {"agent.yaml": moved}, "declare another server, not promoted")

    rows = listed_in_process(tmp_path)
    assert [(r["agent"], r["server"], r["state"]) for r in rows] == [
        ("assistant", "docs", "never connected"),
        ("helper", "notes", "never connected"),
    ]
    docs = rows[0]
    assert docs["transport"] == "stdio"
    assert docs["target"] == "docs-server --stdio"
    assert docs["env"] == ["DOCS_TOKEN"]
    assert docs["provenance"] == "mcp:docs"

    only = listed_in_process(tmp_path, "--agent", CORE)
    assert [(r["agent"], r["server"]) for r in only] == [("assistant", "docs")]
    code, out, err = invoke("mcp", "list", "--agent", CORE, project=tmp_path)
    assert code == 0, err
    assert "agent assistant" in out
    assert re.search(r"\bdocs\s+never connected\s+stdio\b", out)
    assert "sk-live-0123456789abcdef" not in out + err
    assert "warning" not in err


def test_a_core_without_a_live_revision_is_a_warning_not_an_error(tmp_path: Path) -> None:
    core_project(tmp_path)
    hint = f'hostkit core promote assistant --reason "..." -c {tmp_path / "hostkit.toml"}'
    # No database yet (none is created), then one the Host made but with nothing promoted.
    for database in (False, True):
        if database:
            assert invoke("core", "status", project=tmp_path)[0] == 0
        assert (tmp_path / "hostkit.db").exists() is database

        code, out, err = invoke("mcp", "list", "--agent", CORE, "--json", project=tmp_path)
        assert (code, json.loads(out)) == (0, [])
        assert err.count("core 'assistant' has no live revision") == 1, err
        assert hint in " ".join(err.split())
        assert "its MCP servers are not listed" in " ".join(err.split())

        code, out, err = invoke("mcp", "list", project=tmp_path)
        assert code == 0, err
        assert "agent helper" in out
        assert "agent assistant" not in out
        assert err.count("core 'assistant' has no live revision") == 1, err


def test_a_not_live_cores_recorded_servers_are_not_shown_as_removed(tmp_path: Path) -> None:
    core_project(tmp_path)
    assert invoke("core", "status", project=tmp_path)[0] == 0

    async def record() -> None:
        async with RuntimeStore.open(tmp_path / "hostkit.db") as store:
            await store.mcp_servers.record_mcp_status(
                McpServerStatus(agent=CORE, server="docs", state="closed")
            )

    anyio.run(record)
    # Its declarations are unknown (no revision runs): neither listed nor "removed".
    rows = listed_in_process(tmp_path)
    assert [(r["agent"], r["server"], r["state"]) for r in rows] == [
        ("helper", "notes", "never connected")
    ]
    assert listed_in_process(tmp_path, "--agent", CORE) == []


@pytest.mark.parametrize("database", [False, True], ids=["no-database", "database"])
def test_an_unknown_agent_is_one_error_line_naming_the_cores_too(
    tmp_path: Path, database: bool
) -> None:
    core = core_project(tmp_path)
    if database:
        promote_with_docs(tmp_path, core)
    code, out, err = invoke("mcp", "list", "--agent", "nobody", project=tmp_path)
    assert (code, out) == (2, "")
    assert err.startswith("error: no agent named 'nobody' in the configuration")
    assert "(agents: assistant, helper)" in err
    assert len(err.strip().splitlines()) == 1


def test_a_status_stored_by_an_older_version_is_shown_with_todays_redaction(
    tmp_path: Path,
) -> None:
    """Views stored before a redaction existed (a token on the command line, a key in a
    URL path) are redacted when shown, and their server is not flagged as changed."""
    config = parse_config(
        {
            "host": {"database": str(tmp_path / "hostkit.db")},
            "providers": {"test": {"kind": "scripted"}},
            "agents": {
                "assistant": {
                    "provider": "test",
                    "memory": False,
                    "mcp": {"git": {"command": ["git-srv", "--token", "legacy-tok-123456"]}},
                }
            },
        },
        base_dir=tmp_path,
    )
    legacy = {"server": "git", "transport": "stdio", "env": [], "network": False}
    statuses = [
        McpServerStatus(
            agent="assistant",
            server="git",
            state="closed",
            declaration=freeze({**legacy, "command": ["git-srv", "--token", "legacy-tok-123456"]}),
        ),
        McpServerStatus(
            agent="assistant",
            server="old",
            state="closed",
            declaration=freeze(
                {"server": "old", "transport": "http", "url": "https://h/s/key9f8e7d6c5b/mcp"}
            ),
        ),
    ]
    rows = {row.server: row for row in mcp_server_rows(config, statuses).servers}
    assert rows["git"].target == "git-srv --token [redacted]"
    assert rows["git"].changed is False
    assert (rows["old"].state, rows["old"].target) == ("removed", "https://h/s/[redacted]/mcp")
    assert "legacy-tok-123456" not in repr(rows)
    assert "key9f8e7d6c5b" not in repr(rows)
