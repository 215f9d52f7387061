"""A throwaway PostgreSQL cluster for the test suite: initdb, pg_ctl, loopback only.

One cluster per test process (per pytest-xdist worker), started lazily by the
session fixture ``postgres_cluster`` the first time a test needs it, stopped
with ``pg_ctl stop -m immediate`` and removed at the end of the session.

* Binaries: ``initdb`` and ``pg_ctl`` on PATH, else the highest version under
  ``/usr/lib/postgresql/*/bin`` (Debian's layout). Missing binaries raise
  ``PostgresUnavailable``, which the fixture turns into one skip line.
* Root: postgres refuses to run as root, so when the euid is 0 the server runs
  as the ``postgres`` system user (``runuser``) and owns the temp directory.
* Auth: a superuser ``hostkit`` with a generated password, SCRAM on
  127.0.0.1, trust on the private socket directory. ``url()`` never carries
  the password: it comes from ``PGPASSWORD``, which the session fixture sets,
  as production takes its secrets from the environment.
* Speed: fsync, synchronous_commit and full_page_writes are off (a crash
  loses the cluster, which is thrown away anyway); a fresh database is a
  ``CREATE DATABASE ... TEMPLATE`` clone of one migrated once per cluster.
  ``PostgresCluster.start(durable=True)`` keeps them on, as a production
  server has them: the benchmarks measure that (bench/_scaleout.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import pwd
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePath
from typing import TYPE_CHECKING

import anyio
import psutil

if TYPE_CHECKING:
    import psycopg

__all__ = [
    "HOSTKIT_TEMPLATE",
    "PostgresCluster",
    "PostgresUnavailable",
    "active_cluster",
    "find_bindir",
]

# The database every fresh store database is cloned from: migrated once per cluster.
HOSTKIT_TEMPLATE = "hostkit_template"
SUPERUSER = "hostkit"
INSTALL_HINT = "`make install` (as root with apt-get) installs Debian's postgresql package"
_DEBIAN_BINDIRS = Path("/usr/lib/postgresql")
# Settings for a cluster nobody needs to survive a crash; max_connections leaves room
# for several pools (8 connections each by default) open at once in one test.
_SETTINGS = {
    "listen_addresses": "'127.0.0.1'",
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
    "max_connections": "200",
    "log_min_messages": "warning",
}
# What start(durable=True) puts back: every COMMIT on disk when it returns, torn pages repaired.
_DURABLE_SETTINGS = {"fsync": "on", "synchronous_commit": "on", "full_page_writes": "on"}
_PORT_ATTEMPTS = 5
# Stops the server and removes its directory when the test process dies without its
# session teardown (SIGKILL, a CI timeout): argv is the test process id, the cluster
# directory and the stop command. It exits on its own once the directory is gone.
_WATCHDOG = """
import os, shutil, subprocess, sys, time
parent, root, stop = int(sys.argv[1]), sys.argv[2], sys.argv[3:]
while os.path.isdir(root):
    try:
        os.kill(parent, 0)
    except ProcessLookupError:
        subprocess.run(stop, timeout=60, check=False, capture_output=True)
        shutil.rmtree(root, ignore_errors=True)
        break
    time.sleep(0.5)
"""

_active: PostgresCluster | None = None


class PostgresUnavailable(Exception):
    """This machine cannot run a throwaway PostgreSQL (the message says what is missing)."""


def active_cluster() -> PostgresCluster:
    """The cluster the session fixture ``postgres_cluster`` started in this process."""
    if _active is None:
        raise RuntimeError(
            "no PostgreSQL cluster in this process: request the postgres_cluster fixture "
            "(the postgres leg of store_adapter does)"
        )
    return _active


def _version_key(path: Path) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", path.parent.name)) or (0,)


def find_bindir() -> Path | None:
    """The directory holding initdb and pg_ctl: PATH first, else Debian's newest version."""
    on_path = shutil.which("initdb")
    if on_path and shutil.which("pg_ctl", path=str(Path(on_path).parent)):
        return Path(on_path).parent
    found = [b for b in _DEBIAN_BINDIRS.glob("*/bin") if (b / "initdb").is_file()]
    if not found:
        return None
    return max(found, key=_version_key)


def _ident(name: str) -> str:
    """A database name this module made, quoted (they are all lowercase word characters)."""
    if not re.fullmatch(r"[a-z0-9_]{1,63}", name):
        raise ValueError(f"not a test database name: {name!r}")
    return f'"{name}"'


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass
class PostgresCluster:
    """A running throwaway cluster: ``url(dbname)``, ``create_database()``, ``stop()``."""

    bindir: Path
    root: Path
    port: int
    password: str
    run_as: str | None
    connect_timeout_s: float = 10.0
    statement_timeout_s: float = 60.0
    _names: itertools.count[int] = field(default_factory=itertools.count)
    _template_ready: bool = False
    # Databases create_database made and drop_created has not dropped yet.
    _created: list[str] = field(default_factory=list)
    # database_for: the database standing in for each SQLite path, until drop_created.
    _by_path: dict[str, str] = field(default_factory=dict)
    # Clones of the template (recyclable), emptied clones ready for reuse, and the
    # template's table names (a clone whose tables differ is dropped, not reused).
    _templated: set[str] = field(default_factory=set)
    _recycled: list[str] = field(default_factory=list)
    _template_tables: list[str] = field(default_factory=list)
    _template_versions: list[int] = field(default_factory=list)
    _watchdog: subprocess.Popen[bytes] | None = None
    # One lock per event loop: each anyio test runs on its own loop, and only the tests
    # of this one process share the cluster, one test at a time.
    _template_locks: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = field(
        default_factory=weakref.WeakKeyDictionary
    )

    # -- lifecycle (synchronous: the session fixture runs outside any event loop) -------

    @classmethod
    def start(cls, *, start_timeout_s: float = 60.0, durable: bool = False) -> PostgresCluster:
        """initdb and start a cluster in a new temp directory; ``PostgresUnavailable`` if
        this machine has no server binaries (or, as root, no ``postgres`` user).
        ``durable=True`` keeps fsync, synchronous_commit and full_page_writes on."""
        bindir = find_bindir()
        if bindir is None:
            raise PostgresUnavailable(
                "no PostgreSQL server binaries (initdb, pg_ctl) on PATH or under "
                f"{_DEBIAN_BINDIRS}/*/bin; {INSTALL_HINT}"
            )
        run_as: str | None = None
        if os.geteuid() == 0:
            try:
                pwd.getpwnam("postgres")
            except KeyError:
                raise PostgresUnavailable(
                    "running as root and there is no `postgres` system user to run the "
                    f"server as; {INSTALL_HINT}"
                ) from None
            run_as = "postgres"
        # Imported here, outside any event loop: imported first inside a test, under the
        # Host's frames, blockbuster refuses the import's file reads, psycopg falls back
        # to its ctypes libpq and leaves an ldconfig process behind.
        import psycopg
        import psycopg_pool

        del psycopg, psycopg_pool
        root = Path(tempfile.mkdtemp(prefix="hostkit-pg-"))
        cluster = cls(bindir, root, 0, secrets.token_urlsafe(24), run_as)
        try:
            cluster._initdb(start_timeout_s, durable=durable)
            for attempt in range(_PORT_ATTEMPTS):
                cluster.port = _free_port()
                if cluster._pg_ctl_start(start_timeout_s, last=attempt == _PORT_ATTEMPTS - 1):
                    break
            cluster._watchdog = subprocess.Popen(
                [
                    sys.executable,
                    "-c",
                    _WATCHDOG,
                    str(os.getpid()),
                    str(root),
                    *cluster._command(cluster._stop_args()),
                ],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,  # outlives a signal sent to the test run's group
            )
        except BaseException:
            try:
                cluster._run(cluster._stop_args(), timeout_s=40.0, check=False)
            finally:
                cluster._remove()
            raise
        return cluster

    def stop(self) -> None:
        """Stop the server at once (nothing here must survive) and remove its directory."""
        try:
            self._run(self._stop_args(), timeout_s=40.0, check=False)
        finally:
            self._remove()
            if self._watchdog is not None:
                # It sees the directory gone and exits within its poll interval.
                try:
                    self._watchdog.wait(timeout=10.0)
                except subprocess.TimeoutExpired:
                    self._watchdog.kill()
                    self._watchdog.wait(timeout=10.0)

    def crash(self) -> None:
        """Stop the server as a crash would (every connection cut, no checkpoint); blocking."""
        self._run(self._stop_args(), timeout_s=40.0)

    def restart(self) -> None:
        """Start the server again on its port after ``crash``; blocking."""
        self._pg_ctl_start(30.0, last=True)

    def freeze(self) -> None:
        """Stop every server process (SIGSTOP): connections stay open, nothing answers.

        The postmaster first: stopped, it forks no backend after the listing (one
        forked just before it stopped shows up in the next listing, and is stopped too).
        """
        postmaster = self._postmaster()
        postmaster.send_signal(signal.SIGSTOP)
        stopped: set[int] = set()
        while fresh := [p for p in postmaster.children(recursive=True) if p.pid not in stopped]:
            self._signal(fresh, signal.SIGSTOP)
            stopped.update(p.pid for p in fresh)

    def thaw(self) -> None:
        """Let a frozen server go on (SIGCONT)."""
        self._signal(self._processes(), signal.SIGCONT)

    @staticmethod
    def _signal(processes: list[psutil.Process], signum: signal.Signals) -> None:
        for process in processes:
            # A backend whose client just closed its connection ends on its own, maybe
            # between the listing and its signal: it has nothing left to stop or resume.
            with contextlib.suppress(psutil.NoSuchProcess):
                process.send_signal(signum)

    def _postmaster(self) -> psutil.Process:
        return psutil.Process(int((self.data / "postmaster.pid").read_text().split()[0]))

    def _processes(self) -> list[psutil.Process]:
        postmaster = self._postmaster()
        return [postmaster, *postmaster.children(recursive=True)]

    def _stop_args(self) -> list[str]:
        return ["pg_ctl", "-D", str(self.data), "stop", "-m", "immediate", "-w", "-t", "30"]

    @property
    def data(self) -> Path:
        return self.root / "data"

    @property
    def socket_dir(self) -> Path:
        return self.root / "sock"

    def url(self, dbname: str = "postgres") -> str:
        """A libpq URL for ``dbname`` as the superuser; the password is in ``PGPASSWORD``."""
        return f"postgresql://{SUPERUSER}@127.0.0.1:{self.port}/{dbname}"

    # -- databases -------------------------------------------------------------------

    async def create_database(self, *, template: str | None = None) -> str:
        """A new database with a unique name; its URL.

        ``template=None`` gives an empty database (``template0``).
        ``template=HOSTKIT_TEMPLATE`` clones a database holding the migrated hostkit
        schema, built on first use by opening the PostgreSQL store on it.
        """
        if template == HOSTKIT_TEMPLATE:
            await self._ensure_hostkit_template()
        name = f"t{os.getpid()}_{next(self._names)}"
        await self._create(name, template or "template0")
        self._created.append(name)
        if template == HOSTKIT_TEMPLATE:
            self._templated.add(name)
        return self.url(name)

    async def database_for(self, path: str | os.PathLike[str]) -> str:
        """The URL of the database standing in for the SQLite file ``path``: a fresh clone
        of the migrated template the first time, the same database again after that (a
        test that closes and reopens its file sees its data), until ``drop_created``."""
        # The path as written, not resolve()d: no file-system call on the event loop (the
        # tests' paths are absolute tmp_path ones).
        key = str(PurePath(path))
        if key not in self._by_path:
            if self._recycled:
                name = self._recycled.pop()
                self._created.append(name)
                url = self.url(name)
            else:
                url = await self.create_database(template=HOSTKIT_TEMPLATE)
            self._by_path.setdefault(key, url)
        return self._by_path[key]

    def drop_created(self) -> None:
        """Recycle or drop every database ``create_database`` made since the last call
        (synchronous: a fixture's teardown, outside the event loop).

        A clone of the hostkit template whose tables are still the template's is
        emptied (every row deleted, every identity restarted, triggers and foreign
        keys off for the deletion only) and kept for the next ``database_for``:
        a few milliseconds, where dropping and cloning costs a checkpoint each.
        Anything else (an empty database, a schema a test changed, rows that cannot
        be deleted within the statement timeout) is dropped.
        """
        names, self._created = self._created, []
        self._by_path.clear()
        if not names:
            return

        doomed: list[str] = []
        for name in names:
            if name in self._templated and self._empty(name):
                self._recycled.append(name)
            else:
                self._templated.discard(name)
                doomed.append(name)
        if not doomed:
            return
        with self._connect_sync(self.url()) as conn:
            for name in doomed:
                # FORCE: a test that failed may have left a pool connected.
                conn.execute(f"DROP DATABASE IF EXISTS {_ident(name)} WITH (FORCE)")

    def _empty(self, name: str) -> bool:
        """Delete every row of a template clone; False when it is not one any more."""
        import psycopg

        try:
            with self._connect_sync(self.url(name)) as conn:
                tables = [
                    row[0]
                    for row in conn.execute(
                        "SELECT tablename FROM pg_tables WHERE schemaname = 'public' "
                        "ORDER BY tablename"
                    )
                ]
                if tables != self._template_tables:
                    return False
                # A test that migrated it to another version (a synthetic step) dirtied it.
                versions = conn.execute("SELECT version FROM hostkit_schema ORDER BY version")
                if [row[0] for row in versions] != self._template_versions:
                    return False
                with conn.transaction():
                    conn.execute("SET LOCAL session_replication_role = replica")
                    conn.execute("SET LOCAL lock_timeout = '2s'")
                    for table in tables:
                        if table != "hostkit_schema":
                            conn.execute(f"DELETE FROM {_ident(table)}")
                    for (sequence,) in conn.execute(
                        "SELECT sequencename FROM pg_sequences WHERE schemaname = 'public'"
                    ).fetchall():
                        conn.execute(f"ALTER SEQUENCE {_ident(sequence)} RESTART")
        except psycopg.Error:
            return False
        return True

    def _connect_sync(self, url: str) -> psycopg.Connection[tuple[object, ...]]:
        import psycopg

        return psycopg.connect(
            url,
            password=self.password,
            autocommit=True,
            connect_timeout=max(1, round(self.connect_timeout_s)),
            options=f"-c statement_timeout={round(self.statement_timeout_s * 1000)}",
        )

    async def _create(self, name: str, template: str) -> None:
        with anyio.fail_after(self.statement_timeout_s):
            async with await self._admin() as conn:
                # FILE_COPY: with fsync off its checkpoints cost nothing, and copying the
                # files beats WAL_LOG's block-by-block copy (about 45 ms against 80 ms for
                # a 60-table template, measured here).
                await conn.execute(
                    f"CREATE DATABASE {_ident(name)} TEMPLATE {_ident(template)} STRATEGY FILE_COPY"
                )

    async def _tables(self, url: str) -> list[str]:
        import psycopg

        async with await psycopg.AsyncConnection.connect(
            url, password=self.password, autocommit=True
        ) as conn:
            cur = await conn.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY tablename"
            )
            return [str(row[0]) for row in await cur.fetchall()]

    async def _admin(self) -> psycopg.AsyncConnection[tuple[object, ...]]:
        # Imported here: a session that selects no PostgreSQL test never loads psycopg.
        import psycopg

        return await psycopg.AsyncConnection.connect(
            self.url(),
            password=self.password,
            autocommit=True,
            connect_timeout=max(1, round(self.connect_timeout_s)),
            options=f"-c statement_timeout={round(self.statement_timeout_s * 1000)}",
        )

    def _template_built(self) -> bool:
        return self._template_ready

    async def _ensure_hostkit_template(self) -> None:
        if self._template_ready:
            return
        loop = asyncio.get_running_loop()
        lock = self._template_locks.setdefault(loop, asyncio.Lock())
        async with lock:
            if self._template_built():  # another task of this loop built it meanwhile
                return
            from hostkit.store import RuntimeStore
            from hostkit.store._pg_schema import PG_SCHEMA_VERSION

            await self._create(HOSTKIT_TEMPLATE, "template0")
            try:
                url = self.url(HOSTKIT_TEMPLATE)
                with anyio.fail_after(self.statement_timeout_s):
                    async with RuntimeStore.open_postgres(url):
                        pass
                    self._template_tables = await self._tables(url)
                    self._template_versions = list(range(1, PG_SCHEMA_VERSION + 1))
                # A clone fails while anyone is connected to its template: refuse them.
                with anyio.fail_after(self.statement_timeout_s):
                    async with await self._admin() as conn:
                        await conn.execute(
                            f"ALTER DATABASE {_ident(HOSTKIT_TEMPLATE)} "
                            "WITH IS_TEMPLATE true ALLOW_CONNECTIONS false"
                        )
            except BaseException:
                with anyio.CancelScope(shield=True), anyio.move_on_after(self.statement_timeout_s):
                    async with await self._admin() as conn:
                        await conn.execute(
                            f"DROP DATABASE IF EXISTS {_ident(HOSTKIT_TEMPLATE)} WITH (FORCE)"
                        )
                raise
            self._template_ready = True

    # -- processes -------------------------------------------------------------------

    def _initdb(self, timeout_s: float, *, durable: bool = False) -> None:
        pwfile = self.root / "pwfile"
        pwfile.write_text(self.password + "\n")
        pwfile.chmod(0o600)
        self.socket_dir.mkdir()
        for path in (self.root, pwfile, self.socket_dir):
            self._own(path)
        try:
            self._run(
                [
                    "initdb",
                    "-D",
                    str(self.data),
                    "-U",
                    SUPERUSER,
                    f"--pwfile={pwfile}",
                    "-E",
                    "UTF8",
                    "--locale=C",
                    "--auth-local=trust",
                    "--auth-host=scram-sha-256",
                    "--no-sync",
                    "--no-instructions",
                ],
                timeout_s=timeout_s,
            )
        finally:
            pwfile.unlink(missing_ok=True)
        settings = {
            **_SETTINGS,
            **(_DURABLE_SETTINGS if durable else {}),
            "unix_socket_directories": f"'{self.socket_dir}'",
        }
        with (self.data / "postgresql.conf").open("a") as conf:
            conf.write("\n# hostkit test cluster\n")
            conf.writelines(f"{key} = {value}\n" for key, value in settings.items())

    def _pg_ctl_start(self, timeout_s: float, *, last: bool) -> bool:
        log = self.root / "server.log"
        done = self._run(
            [
                "pg_ctl",
                "-D",
                str(self.data),
                "-l",
                str(log),
                "-w",
                "-t",
                str(round(timeout_s)),
                "-o",
                f"-p {self.port}",
                "start",
            ],
            timeout_s=timeout_s + 10.0,
            check=False,
        )
        if done.returncode == 0:
            return True
        tail = log.read_text(errors="replace")[-2000:] if log.exists() else done.stdout
        if not last and "could not bind" in tail:
            return False  # the free port was taken meanwhile: try another
        raise RuntimeError(f"pg_ctl start failed (exit {done.returncode}):\n{tail}")

    def _run(
        self, argv: Sequence[str], *, timeout_s: float, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            self._command(argv),
            cwd=self.root,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=timeout_s,
            check=False,
        )
        if check and done.returncode != 0:
            raise RuntimeError(f"{argv[0]} failed (exit {done.returncode}):\n{done.stdout[-2000:]}")
        return done

    def _command(self, argv: Sequence[str]) -> list[str]:
        command = [str(self.bindir / argv[0]), *argv[1:]]
        if self.run_as is not None:
            command = ["runuser", "-u", self.run_as, "--", *command]
        return command

    def _own(self, path: Path) -> None:
        if self.run_as is not None:
            entry = pwd.getpwnam(self.run_as)
            os.chown(path, entry.pw_uid, entry.pw_gid)

    def _remove(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


def set_active(cluster: PostgresCluster | None) -> None:
    """Make ``cluster`` the one ``active_cluster()`` returns (the session fixture's job)."""
    global _active
    _active = cluster
