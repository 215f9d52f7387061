"""``[store]`` in hostkit.toml: a PostgreSQL URL without secrets, bounded pool and timeouts.

The password of the database never goes in the file (libpq reads PGPASSWORD,
PGPASSFILE or ~/.pgpass); a URL that carries one is refused with a message
that names PGPASSWORD and never repeats the password. ``store_location`` is
what messages and logs show: the URL without password or query.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from hostkit.errors import ConfigError
from hostkit.host import HostConfig, load_config, parse_config
from hostkit.store import redact_url
from hostkit.store._pg_url import without_password

SECRET = "Sup3r-s3cret-pw"


def store(tmp_path: Path, **section: Any) -> HostConfig:
    return parse_config({"store": section}, base_dir=tmp_path)


def refused(tmp_path: Path, **section: Any) -> ConfigError:
    with pytest.raises(ConfigError) as caught:
        store(tmp_path, **section)
    return caught.value


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://hostkit@db.internal:5432/hostkit",
        "postgres://hostkit@db.internal/hostkit",
        "postgresql://db.internal/hostkit?sslmode=verify-full&application_name=host-a",
        "postgresql:///hostkit",  # libpq's default host (the local socket)
    ],
)
def test_postgres_urls_are_accepted_as_written(tmp_path: Path, url: str) -> None:
    config = store(tmp_path, url=url)
    assert config.store.url == url


def test_without_a_url_the_store_is_the_sqlite_file(tmp_path: Path) -> None:
    config = parse_config({}, base_dir=tmp_path)
    assert config.store.url is None
    assert config.store_location == str(config.database_path)
    assert config.store_location.startswith(str(tmp_path))


@pytest.mark.parametrize(
    "url",
    [
        f"postgresql://hostkit:{SECRET}@db.internal:5432/hostkit",
        f"postgres://hostkit:{SECRET}@db.internal/hostkit",
        f"postgresql://:{SECRET}@db.internal/hostkit",
        f"postgresql://db.internal/hostkit?password={SECRET}",
        f"postgresql://db.internal/hostkit?sslmode=require&PassWord={SECRET}",
        # Percent-encoded key: libpq decodes it to "password" too.
        f"postgresql://db.internal/hostkit?pass%77ord={SECRET}",
        # libpq ends the user info at the first "@" before any "/", not at "?" or "#".
        f"postgresql://app:Xq7?{SECRET}@db.internal/hostkit",
        f"postgresql://app:Xq7#{SECRET}@db.internal/hostkit",
        # libpq cannot read it as a password, but it was meant as one.
        f"postgresql://app:Xq7/{SECRET}@db.internal/hostkit",
        # The client key's passphrase is a secret too.
        f"postgresql://db.internal/hostkit?sslpassword={SECRET}",
    ],
    ids=[
        "userinfo",
        "postgres-scheme",
        "no-user",
        "query",
        "query-mixed-case",
        "query-encoded",
        "question-mark-in-password",
        "hash-in-password",
        "slash-in-password",
        "sslpassword",
    ],
)
def test_a_password_in_the_url_is_refused_naming_pgpassword_without_echoing_it(
    tmp_path: Path, url: str
) -> None:
    error = refused(tmp_path, url=url)
    assert error.key == "store.url"
    # The fix reads whole: the secret redactor takes none of it for a password.
    assert str(error) == (
        "store.url: url must not carry a password; the Host reads it from PGPASSWORD, "
        "PGPASSFILE or ~/.pgpass in the environment of every Host"
    )
    assert SECRET not in str(error)
    assert SECRET not in repr(error)
    assert error.__cause__ is None
    assert error.__suppress_context__


@pytest.mark.parametrize("password", [f"Xq7?{SECRET}", f"Xq7#{SECRET}", f"Xq7/{SECRET}%40x"])
def test_a_url_is_shown_and_split_from_its_password_as_libpq_reads_it(password: str) -> None:
    """What a message shows holds no part of the password, and the URL a ``pg_dump`` child
    gets holds none either, however the password is spelled (libpq is the judge)."""
    psycopg = pytest.importorskip("psycopg")
    url = f"postgresql://app:{password}@db.internal:5432/hostkit?sslmode=require"
    read = psycopg.conninfo.conninfo_to_dict(url) if "/" not in password else None
    shown = redact_url(url)
    stripped, taken = without_password(url)
    for part in (SECRET, "Xq7"):
        assert part not in shown
        assert part not in stripped
    if read is not None:  # libpq's own reading: the same password, none left behind
        assert taken == read["password"]
        assert "password" not in psycopg.conninfo.conninfo_to_dict(stripped)
        assert shown == "postgresql://app@db.internal:5432/hostkit"


def test_a_password_key_in_the_section_is_refused_without_echoing_it(tmp_path: Path) -> None:
    error = refused(tmp_path, url="postgresql://db.internal/hostkit", password=SECRET)
    assert error.key == "store.password"
    assert SECRET not in str(error)


@pytest.mark.parametrize(
    "url",
    [
        "sqlite:///var/lib/hostkit/hostkit.db",
        "mysql://hostkit@db.internal/hostkit",
        "http://db.internal:5432/hostkit",
        "postgresql+psycopg://hostkit@db.internal/hostkit",
        "host=db.internal dbname=hostkit",  # a libpq keyword string, not a URL
        "/var/lib/hostkit/hostkit.db",
        "",
    ],
)
def test_other_schemes_are_refused(tmp_path: Path, url: str) -> None:
    error = refused(tmp_path, url=url)
    assert error.key == "store.url"
    assert "postgresql://" in str(error)


def test_a_keyword_string_with_a_password_is_refused_without_echoing_it(tmp_path: Path) -> None:
    error = refused(tmp_path, url=f"host=db.internal password={SECRET}")
    assert error.key == "store.url"
    assert SECRET not in str(error)


def test_the_url_length_is_bounded(tmp_path: Path) -> None:
    base = "postgresql://hostkit@db.internal/"
    at_limit = base + "d" * (2048 - len(base))
    assert store(tmp_path, url=at_limit).store.url == at_limit
    error = refused(tmp_path, url=at_limit + "d")
    assert error.key == "store.url"
    assert "2048" in str(error)
    assert at_limit not in str(error)


def test_the_url_is_a_string(tmp_path: Path) -> None:
    assert refused(tmp_path, url=5432).key == "store.url"


def test_defaults(tmp_path: Path) -> None:
    section = store(tmp_path, url="postgresql://db.internal/hostkit").store
    assert (section.pool_size, section.connect_timeout_s, section.statement_timeout_s) == (
        8,
        10.0,
        30.0,
    )
    assert section.backup_dir == ".hostkit-backups"


def test_the_backup_folder_is_bounded_and_resolved_beside_the_config(tmp_path: Path) -> None:
    url = "postgresql://db.internal/hostkit"
    config = store(tmp_path, url=url, backup_dir="dumps")
    assert config.resolve(config.store.backup_dir) == tmp_path / "dumps"
    assert refused(tmp_path, url=url, backup_dir="").key == "store.backup_dir"
    assert refused(tmp_path, url=url, backup_dir="d" * 4097).key == "store.backup_dir"


@pytest.mark.parametrize(
    ("key", "accepted", "refused_values"),
    [
        ("pool_size", (1, 100), (0, -1, 101, 1.5)),
        ("connect_timeout_s", (0.1, 300), (0, -1, 300.5, float("nan"))),
        ("statement_timeout_s", (0.5, 3600), (0, -0.5, 3600.1, float("inf"))),
        ("max_clock_skew_s", (0.1, 60), (0, -1, 60.5, float("nan"))),
    ],
)
def test_pool_size_and_timeouts_are_bounded(
    tmp_path: Path, key: str, accepted: tuple[float, ...], refused_values: tuple[Any, ...]
) -> None:
    url = "postgresql://db.internal/hostkit"
    for value in accepted:
        assert getattr(store(tmp_path, url=url, **{key: value}).store, key) == value
    for value in refused_values:
        error = refused(tmp_path, url=url, **{key: value})
        assert error.key == f"store.{key}", value


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        (
            "postgresql://hostkit@db.internal:5432/hostkit?sslmode=require&options=-c%20x%3Dy",
            "postgresql://hostkit@db.internal:5432/hostkit",
        ),
        ("postgres://db.internal/hostkit", "postgres://db.internal/hostkit"),
        (
            "postgresql://ops@db-a:5432,db-b:5433/hostkit?target_session_attrs=read-write",
            "postgresql://ops@db-a:5432,db-b:5433/hostkit",
        ),
    ],
    ids=["query-dropped", "plain", "multi-host"],
)
def test_store_location_is_the_url_without_query(tmp_path: Path, url: str, shown: str) -> None:
    assert store(tmp_path, url=url).store_location == shown


def test_a_store_section_in_a_file_loads(tmp_path: Path) -> None:
    path = tmp_path / "hostkit.toml"
    path.write_text(
        '[store]\nurl = "postgresql://hostkit@db.internal:5432/hostkit?sslmode=require"\n'
        "pool_size = 4\nconnect_timeout_s = 2.5\nstatement_timeout_s = 60\n"
    )
    config = load_config(path)
    assert config.store.pool_size == 4
    assert config.store.connect_timeout_s == 2.5
    assert config.store.statement_timeout_s == 60
    assert config.store_location == "postgresql://hostkit@db.internal:5432/hostkit"


def test_a_password_in_a_file_is_refused_without_echoing_it(tmp_path: Path) -> None:
    path = tmp_path / "hostkit.toml"
    path.write_text(f'[store]\nurl = "postgresql://hostkit:{SECRET}@db.internal/hostkit"\n')
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert caught.value.key == "store.url"
    assert "PGPASSWORD" in str(caught.value)
    assert SECRET not in str(caught.value)


def test_a_check_across_tables_is_its_own_sentence_without_pydantics_prefix(
    tmp_path: Path,
) -> None:
    """A rule that spans tables names its keys itself: no "(root)" key, no "Value error"."""
    with pytest.raises(ConfigError) as caught:
        parse_config(
            {
                "providers": {"local": {"kind": "local"}},
                "cores": {"notes": {"path": "cores/notes"}},
                "agents": {"notes": {"provider": "local"}},
            },
            base_dir=tmp_path,
        )
    assert caught.value.key is None
    assert str(caught.value) == "cores.notes and agents.notes: one name, two agents"
