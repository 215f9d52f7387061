"""Clause: no secret shape in an MCP declaration reaches an operator view of a core change.

The security diff is recorded (``core_history.security_diff``), printed by
``hostkit core diff`` and drawn by the CoreHistory widget; the patch is
printed beside it. Both go through one redaction: the declared env values of
either side wherever they are repeated, the word after a credential flag or
``Bearer`` (also inside one ``sh -c`` string), ``password=...`` inside a DSN
item, hostkit's shared credential patterns and URL userinfo/query.
"""

from __future__ import annotations

import json
import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
import yaml

from hostkit.cores import CoreLocation, CoreRegistry
from hostkit.errors import PromotionRefused
from hostkit.freeze import thaw
from hostkit.notebook import CoreHistory
from hostkit.store import RuntimeStore
from tests.contract import _cli_cores as cli
from tests.cores_support import commit, make_core, manifest_text

pytestmark = pytest.mark.anyio

SECRETS = ("Zq9vEnvValueRepeated", "tok_SHcSecret77", "hunter2pw", "abcBearerVal99")
MCP: dict[str, Any] = {
    "a": {"command": ["gh-mcp", "--x", SECRETS[0]], "env": {"GH_TOKEN": SECRETS[0]}},
    "b": {"command": ["sh", "-c", f"exec mcp-server --token {SECRETS[1]} --stdio"]},
    "c": {"command": ["pg-mcp", "--conn", f"host=db user=app password={SECRETS[2]}"]},
    "d": {"command": ["mcp-proxy", "-H", "Authorization", f"Bearer {SECRETS[3]}"]},
}
GRANTS = {f"mcp.connect:{name}": "ask" for name in MCP}


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # the widget's loop is a kernel's: asyncio


def _leaked(text: str) -> list[str]:
    return [secret for secret in SECRETS if secret in text]


async def test_the_diff_the_stored_row_the_patch_and_the_widget_hide_every_shape(
    tmp_path: Path, store: RuntimeStore, db_path: Path
) -> None:
    base = {"id": "notes", "model": "test", "memory": False}
    path, _ = make_core(tmp_path, "notes", manifest=manifest_text(base))
    commit(path, {"agent.yaml": manifest_text({**base, "mcp": MCP, "capabilities": GRANTS})}, "mcp")
    location = CoreLocation("notes", path, "refs/hostkit/live")
    registry = CoreRegistry(store, {"notes": location}, cores_root=tmp_path / "cores")

    diff = await registry.diff("notes")
    shown = json.dumps(thaw(diff.security_diff))
    assert _leaked(shown) == []
    assert _leaked(diff.patch) == []
    servers = thaw(diff.security_diff)["servers"]
    # Redacted where the secret was, and nothing else: the diff still says what runs.
    assert servers["a"]["after"]["command"] == ["gh-mcp", "--x", "[redacted]"]
    assert servers["b"]["after"]["command"][2] == "exec mcp-server --token [redacted] --stdio"
    assert servers["c"]["after"]["command"][2] == "host=db user=app password=[redacted]"
    assert servers["d"]["after"]["command"][3] == "Bearer [redacted]"
    assert "exec mcp-server --token [redacted] --stdio" in diff.patch

    with pytest.raises(PromotionRefused) as refused:
        await registry.promote("notes", actor="ops")
    assert _leaked(str(refused.value)) == []
    with closing(sqlite3.connect(db_path)) as raw, raw:
        rows = [
            row[0]
            for row in raw.execute(
                "SELECT security_diff FROM core_history WHERE action = 'refused'"
            )
        ]
    assert len(rows) == 1
    assert '"servers"' in rows[0]
    assert _leaked(rows[0]) == []

    widget = await CoreHistory.load_from(registry, store, "notes")
    html = widget.html()
    assert "hk-security-diff" in html
    assert "GH_TOKEN" in html
    assert _leaked(html) == []
    assert _leaked(widget.text()) == []


def test_the_cli_diff_hides_every_shape(tmp_path: Path) -> None:
    core = cli.make_project(tmp_path)
    assert cli.invoke("core", "promote", cli.CORE, "--reason", "first", project=tmp_path)[0] == 0
    manifest = yaml.safe_load(cli.manifest(core))
    manifest["mcp"] = MCP
    manifest["capabilities"] = {**manifest.get("capabilities", {}), **GRANTS}
    cli.commit(core, {"agent.yaml": yaml.safe_dump(manifest, sort_keys=False)}, "mcp")
    for flags in ((), ("--json",)):
        code, out, err = cli.invoke("core", "diff", cli.CORE, *flags, project=tmp_path)
        assert code == 0, err
        assert "GH_TOKEN" in out
        assert "[redacted]" in out
        assert _leaked(out + err) == []
