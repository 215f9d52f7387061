"""``[agents.<agent>.mcp.<server>]``: a declared MCP server is validated before any Host opens.

Exactly one of ``command`` (stdio argv) and ``url`` (http/https); env names
are environment variable names; timeouts are bounded; extra keys are
refused. Each problem is one ``ConfigError`` whose key names the server's
table. A good table becomes the seam's ``McpServerDeclaration``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from hostkit.effects import McpServerDeclaration
from hostkit.errors import ConfigError
from hostkit.host import HostConfig, McpServerConfig, load_config

HEAD = """
[providers.p]
kind = "scripted"

[agents.assistant]
provider = "p"
"""


def load(tmp_path: Path, tables: str) -> HostConfig:
    path = tmp_path / "hostkit.toml"
    path.write_text(HEAD + tables, encoding="utf-8")
    return load_config(path)


def test_a_stdio_and_an_http_server_become_declarations(tmp_path: Path) -> None:
    config = load(
        tmp_path,
        """
[agents.assistant.mcp.files]
command = ["/usr/bin/mcp-files", "--root", "."]
env = { FILES_TOKEN = "s3cret" }
network = true
connect_timeout_seconds = 5
call_timeout_seconds = 120

[agents.assistant.mcp.search]
url = "https://user:pw@mcp.example.com/mcp"
""",
    )
    servers = config.agents["assistant"].mcp
    assert sorted(servers) == ["files", "search"]
    files = servers["files"].declaration("files")
    assert files == McpServerDeclaration(
        name="files",
        transport="stdio",
        command=("/usr/bin/mcp-files", "--root", "."),
        env={"FILES_TOKEN": "s3cret"},
        network=True,
        connect_timeout_s=5.0,
        call_timeout_s=120.0,
    )
    assert "s3cret" not in repr(dict(files.view()))
    search = servers["search"].declaration("search")
    assert (search.transport, search.url, search.command) == (
        "http",
        "https://user:pw@mcp.example.com/mcp",
        (),
    )
    assert (search.connect_timeout_s, search.call_timeout_s) == (30.0, 60.0)
    assert search.view()["url"] == "https://mcp.example.com/mcp"


def test_a_servers_view_hides_credentials_on_its_command_line_and_in_its_url() -> None:
    """The view is what `hostkit mcp list`, the connect approval and the stored status
    show: a token passed as an argument is hidden as in a core's security diff."""
    stdio = McpServerDeclaration(
        name="git",
        transport="stdio",
        command=("mcp-server-git", "--repository", "repo", "--token", "abc123secret"),
        env={"GIT_KEY": "env-value-123456"},
    )
    shown = stdio.view()["command"]
    assert tuple(shown[:3]) == ("mcp-server-git", "--repository", "repo")
    assert "abc123secret" not in repr(shown)
    with_env = McpServerDeclaration(
        name="x",
        transport="stdio",
        command=("srv", "password=hunter2-long", "--key-from", "env-value-123456"),
        env={"GIT_KEY": "env-value-123456"},
    )
    assert "hunter2-long" not in repr(with_env.view())
    assert "env-value-123456" not in repr(with_env.view())
    http = McpServerDeclaration(
        name="s", transport="http", url="https://mcp.example.com/mcp?api_key=k-123456789"
    )
    assert "k-123456789" not in http.view()["url"]
    assert http.view()["url"].startswith("https://mcp.example.com/mcp?")


def test_an_agent_without_mcp_tables_declares_no_server(tmp_path: Path) -> None:
    assert load(tmp_path, "").agents["assistant"].mcp == {}


@pytest.mark.parametrize(
    ("table", "key", "words"),
    [
        ('[agents.assistant.mcp.s]\ncommand = ["srv"]\nurl = "https://h/mcp"', "s", "exactly one"),
        ("[agents.assistant.mcp.s]\nnetwork = false", "s", "exactly one"),
        ('[agents.assistant.mcp.Bad-Name]\nurl = "https://h/mcp"', "Bad-Name", "pattern"),
        ('[agents.assistant.mcp.s]\ncommand = ["srv"]\nenv = { "1BAD" = "v" }', "s", "1BAD"),
        ('[agents.assistant.mcp.s]\nurl = "ftp://h/mcp"', "s", "http"),
        ('[agents.assistant.mcp.s]\nurl = "file:///tmp/sock"', "s", "http"),
        ("[agents.assistant.mcp.s]\ncommand = []", "s", "argv"),
        ('[agents.assistant.mcp.s]\ncommand = ["./srv"]', "s", "absolute path"),
        ('[agents.assistant.mcp.s]\ncommand = ["srv", "a\\u0000b"]', "s", "NUL"),
        ('[agents.assistant.mcp.s]\ncommand = ["srv"]\nenv = { K = "a\\u0000b" }', "s", "NUL"),
        ('[agents.assistant.mcp.s]\nurl = "https://h/mcp"\nnetwork = true', "s", "stdio"),
        ('[agents.assistant.mcp.s]\nurl = "https://h/mcp"\nenv = { K = "v" }', "s", "stdio"),
        (
            '[agents.assistant.mcp.s]\ncommand = ["srv"]\nconnect_timeout_seconds = 0',
            "s.connect_timeout_seconds",
            "greater than 0",
        ),
        (
            '[agents.assistant.mcp.s]\ncommand = ["srv"]\nconnect_timeout_seconds = 601',
            "s.connect_timeout_seconds",
            "600",
        ),
        (
            '[agents.assistant.mcp.s]\ncommand = ["srv"]\ncall_timeout_seconds = 3601',
            "s.call_timeout_seconds",
            "3600",
        ),
        ('[agents.assistant.mcp.s]\ncommand = "srv --flag"', "s.command", "list"),
    ],
)
def test_a_bad_server_table_is_a_config_error_naming_it(
    tmp_path: Path, table: str, key: str, words: str
) -> None:
    with pytest.raises(ConfigError) as raised:
        load(tmp_path, table)
    assert raised.value.key == f"agents.assistant.mcp.{key}"
    assert raised.value.message.startswith(f"agents.assistant.mcp.{key}: ")
    assert words in raised.value.message


def test_an_unknown_server_key_is_named_with_its_table(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as raised:
        load(tmp_path, '[agents.assistant.mcp.s]\ncommand = ["srv"]\ncwd = "/"')
    assert raised.value.key == "agents.assistant.mcp.s.cwd"
    assert raised.value.message == "unknown key 'cwd' in [agents.assistant.mcp.s]"


def test_env_is_bounded_in_count_and_no_value_reaches_the_message(tmp_path: Path) -> None:
    entries = ", ".join(f'K{i} = "secret-{i}"' for i in range(65))
    with pytest.raises(ConfigError, match="at most 64") as raised:
        load(tmp_path, f'[agents.assistant.mcp.s]\ncommand = ["srv"]\nenv = {{ {entries} }}')
    assert "secret-" not in raised.value.message


def test_the_config_value_is_frozen() -> None:
    server = McpServerConfig(command=["srv"])
    with pytest.raises(ValueError, match="frozen"):
        server.network = True
    assert server.declaration("s").transport == "stdio"


def test_a_short_env_value_is_not_hidden_inside_the_command_line() -> None:
    """A setting ("1", "") is no secret: hiding it would blank out every matching
    character of the command the approver must read."""
    for value in ("1", ""):
        declaration = McpServerDeclaration(
            name="s",
            transport="stdio",
            command=("node", "server-1.js", "--port", "8011"),
            env={"DEBUG": value},
        )
        assert tuple(declaration.view()["command"]) == ("node", "server-1.js", "--port", "8011")


@pytest.mark.parametrize(
    "argv",
    [
        ("curl", "--header", "X-API-Key: ak_live_55Hh77Jj"),
        ("curl", "-H", "Authorization: token ak_live_55Hh77Jj"),
        ("curl", "-H", "Authorization:", "Bearer", "ak_live_55Hh77Jj"),
        ("sh", "-c", "exec srv --header 'X-Api-Key: ak_live_55Hh77Jj'"),
        ("sh", "-c", "TOKEN='xx ak_live_55Hh77Jj' srv"),
        ("sh", "-c", "PASSWORD=ak_live_55Hh77Jj srv"),
        ("npx", "mcp-remote", "https://h.example/mcp?api_key=ak_live_55Hh77Jj&format=json"),
        ("srv", "--api_key", "--", "ak_live_55Hh77Jj"),
        ("docker", "run", "-e", "DB_PWD=ak_live_55Hh77Jj"),
    ],
)
def test_a_credential_after_its_name_scheme_or_quote_is_hidden(argv: tuple[str, ...]) -> None:
    """A name with an empty value ("X-API-Key:", "PASSWORD="), an authorization scheme
    or an opened quote hides the words that carry the credential, and masks them in
    what the server prints."""
    server = McpServerDeclaration(name="s", transport="stdio", command=argv)
    assert "ak_live_55Hh77Jj" not in repr(server.view())
    assert "ak_live_55Hh77Jj" in server.secret_values().values()


def test_a_token_in_a_servers_url_path_is_hidden_and_plain_words_are_kept() -> None:
    server = McpServerDeclaration(
        name="z", transport="http", url="https://u:pw-1234@h.example/api/s/tok9f8e7d6c/mcp?x=1"
    )
    assert server.view()["url"] == "https://h.example/api/s/[redacted]/mcp?[redacted]"
    # The token-shaped segment is masked in results too; "api", "mcp" and "1" are not.
    assert set(server.secret_values().values()) == {"pw-1234", "tok9f8e7d6c"}


@pytest.mark.parametrize(
    ("url", "secrets"),
    [
        ("https://mcp.example.com/s/Zk93hQpL2xVb7TqW/mcp", {"Zk93hQpL2xVb7TqW"}),
        ("https://fn.example.net/runtime/webhooks/mcp?code=AbCdEf123456XyzQ", {"AbCdEf123456XyzQ"}),
        ("https://maps.example.com/mcp?key=AIzaSyD-9tSrke72PouQMnMX", {"AIzaSyD-9tSrke72PouQMnMX"}),
        # Raw and percent-decoded: a client may print the URL either way.
        ("https://h.example/s/Zk93%2BhQpL2x%2FVb7/mcp", {"Zk93%2BhQpL2x%2FVb7", "Zk93+hQpL2x/Vb7"}),
        ("https://h.example/mcp?sig=Zk93%2BhQpL2x+Vb7", {"Zk93%2BhQpL2x+Vb7", "Zk93+hQpL2x Vb7"}),
        ("https://ghp0Zk93hQpL2xVb7@h.example/mcp", {"ghp0Zk93hQpL2xVb7"}),
        ("https://u:p%40ss-w0rd@h.example/mcp", {"p%40ss-w0rd", "p@ss-w0rd"}),
    ],
)
def test_token_shaped_url_parts_are_masked_in_results_raw_and_decoded(
    url: str, secrets: set[str]
) -> None:
    """What a server's view hides of its URL for its shape (a path token, a query value
    mixing letters and digits, whatever its parameter's name) is a secret of its calls."""
    server = McpServerDeclaration(name="remote", transport="http", url=url)
    assert set(server.secret_values().values()) == secrets
    assert all(label.startswith("mcp.remote.url.") for label in server.secret_values())
    shown = repr(server.view())
    assert not any(secret in shown for secret in secrets)


URL = "https://h.example/s/Zk93hQpL2xVb7TqW/mcp?code=AbCdEf123456XyzQ&lang=english"


@pytest.mark.parametrize(
    ("command", "secrets"),
    [
        (("npx", "mcp-remote", URL), {"Zk93hQpL2xVb7TqW", "AbCdEf123456XyzQ"}),
        (("sh", "-c", f"exec mcp-remote '{URL}'"), {"Zk93hQpL2xVb7TqW", "AbCdEf123456XyzQ"}),
        # The closing quote is no part of the token the URL ends with.
        (
            ("sh", "-c", "exec mcp-remote 'https://h.example/mcp?code=AbCdEf123456XyzQ'"),
            {"AbCdEf123456XyzQ"},
        ),
    ],
)
def test_token_shaped_url_parts_on_a_command_line_are_masked_in_results(
    command: tuple[str, ...], secrets: set[str]
) -> None:
    server = McpServerDeclaration(name="s", transport="stdio", command=command)
    assert set(server.secret_values().values()) == secrets
    assert not any(secret in repr(server.view()) for secret in secrets)


@pytest.mark.parametrize(
    ("command", "url"),
    [
        (("mcp-fs", "/srv/projects/customer_portal_backend_service"), None),
        (("env", "OPENAI_API_KEY=", "node", "server.js"), None),
        (("srv", "--password", "basic", "--port", "8080"), None),
        ((), "https://gitmcp.io/modelcontextprotocol/python-sdk?format=json"),
        # Words, short values and numbers under names that say nothing stay in results.
        ((), "https://h.example/mcp/v1?lang=english&page=2&region=us-east-1&v=ab12cd"),
        ((), "https://h.example/customer-portal-backend/mcp?date=2025-03-26"),
        ((), "https://h.example/mcp?model=claude-3-5-sonnet-20241022&q=hello%20world2x"),
        # A letter next to a digit once or twice is a name, not a token.
        ((), "https://h.example/docs/python3.11/project2024/mcp?region=us-east1&m=gpt4o-mini"),
        (("npx", "mcp-remote", "https://h.example/modelcontextprotocol/mcp?lang=english"), None),
    ],
)
def test_what_a_view_hides_only_for_its_shape_is_not_masked_in_results(
    command: tuple[str, ...], url: str | None
) -> None:
    """A long path, an empty shell assignment before its command, a word after a flag's
    value, a URL's path and plain query: masking those in every result (and every piece
    of 8 characters of them) would hide the server's ordinary output."""
    server = McpServerDeclaration(
        name="s", transport="http" if url else "stdio", command=command, url=url
    )
    masked = set(server.secret_values().values())
    assert masked <= {"basic"}, masked
