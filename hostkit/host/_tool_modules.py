"""Authored tool modules: discovered in a child process, imported by the Host only to run.

Contract (EffectRuntime): no authored tool import before the capability and
approval checks of an effect in it. The catalog still needs each tool's name,
description and schema before the model may call it, so a child process
(``python -I``, in the agent's bubblewrap sandbox when it works here: no
network, the import path read-only, the Host's state masked; a deadline;
bounded output) imports the module and prints its tools' definitions. The
Host offers each as a ``ModuleTool``: the discovered definition, whose
invocation, which the runtime makes only after every check and approval
passed, imports the real module (once per process) and refuses with
``ToolChanged`` when the file or the tool no longer matches what the model
was shown. A module every effect of which is denied is never imported here.

Discoveries are cached per version of the module's file (path, size,
modification time), so a new configuration generation does not spawn again.
A module the Host process imported already (an earlier call ran it) is used
as it is: nothing is left to import.

A ``search`` path (an Agent Core's materialized revision) is looked in first
for the module's top-level package, by the discovery child and by the Host's
own import at call time, without touching ``sys.path``: the package's parents
are imported from there before the verified module, so relative imports
inside ``agent/`` work and two revisions' packages never share a name.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import importlib
import importlib.machinery
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import anyio
from anyio.abc import ByteReceiveStream, Process

from hostkit.builtins.process import (
    DEFAULT_ENV_ALLOWLIST,
    SandboxPolicy,
    mask_plan,
    owned_process,
    probe_bubblewrap,
    sandbox_argv,
)
from hostkit.cores import import_parents
from hostkit.effects import (
    MAX_DESCRIPTION_CHARS,
    MAX_WARNING_CHARS,
    AuthoredTool,
    SchemaTool,
    ToolChanged,
    ToolContext,
    is_effect_name,
    is_timeout,
    schema_problem,
)
from hostkit.errors import ConfigError, RuntimeFailure, bounded
from hostkit.host._code_places import import_path_places, judge_places, module_places
from hostkit.host._tool_child import describe

__all__ = [
    "DISCOVERY_TIMEOUT_S",
    "MAX_DISCOVERY_BYTES",
    "MODULE_NAME",
    "DiscoveryUnavailable",
    "ModuleTool",
    "ToolModules",
    "forget_versions",
]

DISCOVERY_TIMEOUT_S = 30.0
MAX_DISCOVERY_BYTES = 1_000_000
MAX_TOOLS_PER_MODULE = 256
_STDERR_TAIL = 4_000
_STDERR_GRACE_S = 1.0
# Ending the discovery tree: TERM, this grace, then KILL until confirmed (bounded).
_END_GRACE_S = 0.2
_END_CONFIRM_S = 5.0
_CACHED_VERSIONS = 256
# A module name (dotted identifiers): parse_config refuses any other, and so does discovery.
MODULE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")
_FIELDS: Mapping[str, tuple[type, ...]] = {
    "name": (str,),
    "description": (str,),
    "parameters": (dict,),
    "timeout_s": (int, float),
    "secrets_argument": (str, type(None)),
    "approval_warning": (str, type(None)),
    "prepare": (bool,),
    "preflight": (bool,),
}


@dataclasses.dataclass(frozen=True, slots=True)
class _Stamp:
    """One version of a module's file: where it is, its size, mtime and content digest."""

    path: str
    size: int
    mtime_ns: int
    digest: str


class _ModuleVersion:
    """One discovered version of a module: its definitions and, once a call imported
    it, its real tools in this process (shared by every agent and generation)."""

    def __init__(
        self,
        module_name: str,
        stamp: _Stamp | None,
        definitions: tuple[dict[str, Any], ...],
        search: tuple[str, ...] = (),
    ) -> None:
        self.module_name = module_name
        self.stamp = stamp
        self.definitions = definitions
        self.search = search
        self._lock = threading.Lock()
        self._tools: dict[str, AuthoredTool] | None = None

    def load(self, key: str) -> dict[str, AuthoredTool]:
        """Worker thread: the module's real tools by name, importing it the first time.

        The file is checked first: a module edited since its discovery is not
        imported at all (``ToolChanged``).
        """
        with self._lock:
            if self._tools is not None:
                return self._tools
            module = sys.modules.get(self.module_name)
            if module is None and self.stamp is not None:
                if self.search:
                    import_parents(self.module_name, self.search)
                module = self._import_verified(key)
            elif module is None:
                module = importlib.import_module(self.module_name)
            tools: dict[str, AuthoredTool] = {}
            for tool in _tools_of(module):
                tools.setdefault(tool.name, tool)
            self._tools = tools
            return tools

    def _import_verified(self, key: str) -> ModuleType:
        """Import exactly the bytes that were discovered, or nothing (``ToolChanged``).

        The file is read once and its digest checked every time (a kept size
        and modification time prove nothing), and those very bytes are
        compiled: no bytecode cache is read, so a planted ``.pyc`` never runs.
        """
        assert self.stamp is not None
        path = self.stamp.path
        try:
            source = Path(path).read_bytes()
        except OSError:
            source = b""
        if hashlib.sha256(source).hexdigest() != self.stamp.digest:
            raise ToolChanged(
                f"tool module {bounded(self.module_name, 120)!r} changed on disk since "
                "its tools were discovered; the call did not run (apply the "
                "configuration again to use the new version)",
                key=key,
            )
        package = Path(path).name == "__init__.py"
        loader = _VerifiedLoader(self.module_name, path, source)
        spec = importlib.util.spec_from_file_location(
            self.module_name,
            path,
            loader=loader,
            submodule_search_locations=[str(Path(path).parent)] if package else None,
        )
        assert spec is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[self.module_name] = module
        try:
            loader.exec_module(module)
        except BaseException:
            sys.modules.pop(self.module_name, None)
            raise
        parent, _, child = self.module_name.rpartition(".")
        if parent and parent in sys.modules:
            setattr(sys.modules[parent], child, module)
        return module


class _VerifiedLoader(importlib.machinery.SourceFileLoader):
    """Compiles the verified source bytes it was given; reads and writes no bytecode."""

    def __init__(self, fullname: str, path: str, source: bytes) -> None:
        super().__init__(fullname, path)
        self._source = source

    def get_code(self, fullname: str) -> Any:
        return compile(self._source, self.path, "exec", dont_inherit=True)


class ModuleTool(SchemaTool):
    """An authored module's tool as discovered: its definition, not (yet) its code.

    Arguments validate against the discovered JSON schema before approval
    (``invalid`` otherwise). ``invoke`` runs only after every check passed: it
    imports the module (once per process, in a worker thread), refuses with
    ``ToolChanged`` when the imported tool's definition differs from the
    discovered one, then validates the arguments with the tool's own types and
    runs it.
    """

    def __init__(self, definition: Mapping[str, Any], version: _ModuleVersion, key: str) -> None:
        super().__init__(
            str(definition["name"]),
            self._call,
            description=str(definition["description"]),
            parameters=definition["parameters"],
            timeout_s=float(definition["timeout_s"]),
            approval_warning=definition["approval_warning"],
            secrets_argument=definition["secrets_argument"],
        )
        self._definition = dict(definition)
        self._version = version
        self._key = key

    async def _call(self, context: ToolContext, **arguments: Any) -> Any:
        tools = await anyio.to_thread.run_sync(self._version.load, self._key)
        real = tools.get(self.name)
        if real is None or _canonical(describe(real)) != _canonical(self._definition):
            raise ToolChanged(
                f"tool {self.name!r} of module {bounded(self._version.module_name, 120)!r} "
                "no longer matches the definition the model was shown; the call did not run",
                key=self._key,
            )
        return await real.invoke(context, real.validate(arguments))


class DiscoveryUnavailable(RuntimeFailure):
    """A tool module could not be discovered here and now (overdue, no working sandbox):
    the environment's failure, not the configuration's, so a reload is not refused for it.
    """


class ToolModules:
    """The tools of an agent's ``tool_modules``, discovered without importing them here."""

    def __init__(self, *, timeout_s: float = DISCOVERY_TIMEOUT_S) -> None:
        self._timeout_s = timeout_s

    async def tools(
        self,
        module_name: str,
        *,
        agent: str,
        sandbox: SandboxPolicy,
        search: Sequence[Path] = (),
        writable: Mapping[Path, str] = {},
        protected: Sequence[Path] = (),
    ) -> list[AuthoredTool]:
        """``module_name``'s tools for ``agent``; ``ConfigError`` naming
        ``agents.<agent>.tool_modules`` when it cannot be discovered.

        ``search`` directories are looked in first for the module's top-level
        package (before the Host's import path). ``writable`` maps each workspace
        an agent can write to that agent's name: a module file or a ``search``
        directory inside one is refused, since an agent could rewrite the code the
        Host runs in its own process, and so is a module file with more than one
        link (``_code_places``); unless it is inside ``protected`` Host state (an
        Agent Core's revision), which ``files.*`` refuse and sandboxes hide.
        """
        key = f"agents.{agent}.tool_modules"
        # Already absolute (the Host resolves them): no cwd lookup on the event loop.
        paths = tuple(str(entry) for entry in search)
        shown = bounded(module_name, 120)
        if not MODULE_NAME.fullmatch(module_name):
            raise ConfigError(f"{shown!r} is not a Python module name", key=key)
        loaded = sys.modules.get(module_name)
        located = None
        if loaded is None:
            located = await anyio.to_thread.run_sync(_locate, module_name, paths)
            if located is None:
                # The working directory is not looked in: say where a module beside the
                # configuration goes, the mistake a first tool module makes.
                hint = (
                    ""
                    if paths
                    else f' (a module beside hostkit.toml needs tool_path = ["."] in '
                    f"[agents.{agent}])"
                )
                raise ConfigError(
                    f"cannot import tool module {shown!r}: No module named {shown!r}{hint}",
                    key=key,
                )
        if writable:
            # The module, the directories it is found in, and every directory its own
            # imports may come from (the Host's import path: the working directory too).
            places = [
                *((where, "tool module") for where in _places_of(loaded, located)),
                *((entry, "tool_path entry") for entry in search),
                *import_path_places(),
            ]
            judge = functools.partial(
                judge_places,
                key=key,
                advice="keep tool modules and the Host's import path outside every workspace",
            )
            await anyio.to_thread.run_sync(judge, places, writable, protected)
        if loaded is not None:
            found = _tools_of(loaded)
            definitions = [describe(tool) for tool in found]
            await anyio.to_thread.run_sync(_check_definitions, shown, definitions, key)
            return found
        assert located is not None
        stamp = await anyio.to_thread.run_sync(_stamp_of, located)
        cache_key = None if stamp is None else (module_name, stamp.path, stamp.size, stamp.mtime_ns)
        version = _CACHE.get(cache_key) if cache_key is not None else None
        if version is None:
            definitions = await self._discover(module_name, sandbox, key, paths)
            # Worker thread: jsonschema is imported on first use, a large schema is checked.
            await anyio.to_thread.run_sync(_check_definitions, shown, definitions, key)
            version = _ModuleVersion(module_name, stamp, tuple(definitions), paths)
            if cache_key is not None:
                _remember(cache_key, version)
        return await anyio.to_thread.run_sync(_proxies, version, key)

    async def _discover(
        self, module_name: str, sandbox: SandboxPolicy, key: str, search: tuple[str, ...]
    ) -> list[dict[str, Any]]:
        shown = bounded(module_name, 120)
        source, host_path = await anyio.to_thread.run_sync(_child_plan)
        command = _child_command(source, module_name, [*search, *host_path])
        scratch: Path | None = None
        if sandbox.sandboxed:
            probe = await anyio.to_thread.run_sync(probe_bubblewrap)
            if probe.ok:
                command, scratch = await anyio.to_thread.run_sync(
                    _sandboxed, probe, sandbox, (source, module_name), host_path, search, key
                )
            elif not _ships_with_hostkit(module_name):
                # Fail closed, as terminal.run does: the module's top level would run
                # unconfined, before anyone approved anything.
                raise DiscoveryUnavailable(
                    f"{key}: tool module {shown!r} cannot be discovered in the agent's "
                    f'sandbox: {bounded(probe.reason, 160)} (or set sandbox = "none" for this '
                    "agent)"
                )
        env = {name: os.environ[name] for name in DEFAULT_ENV_ALLOWLIST if name in os.environ}
        try:
            # A scratch directory is the sandbox's: the command is bubblewrap's then.
            out, err, problem = await _run(
                command, env, scratch, self._timeout_s, sandboxed=scratch is not None
            )
        except TimeoutError as exc:
            # A cold import on a loaded machine: the next build (a turn) may finish.
            raise DiscoveryUnavailable(
                f"{key}: cannot discover tool module {shown!r}: {exc}", retryable=True
            ) from None
        finally:
            if scratch is not None:
                await anyio.to_thread.run_sync(
                    functools.partial(shutil.rmtree, scratch, ignore_errors=True)
                )
        if problem is not None:
            raise ConfigError(f"cannot discover tool module {shown!r}: {problem}", key=key)
        try:
            answer = json.loads(out)
        except ValueError:
            detail = _last_line(err) or "the discovery process gave no answer"
            raise ConfigError(f"cannot discover tool module {shown!r}: {detail}", key=key) from None
        if isinstance(answer, dict) and isinstance(answer.get("error"), str):
            raise ConfigError(f"cannot import tool module {shown!r}: {answer['error']}", key=key)
        tools = answer.get("tools") if isinstance(answer, dict) else None
        if not isinstance(tools, list):
            raise ConfigError(f"cannot discover tool module {shown!r}: malformed answer", key=key)
        return tools


def _proxies(version: _ModuleVersion, key: str) -> list[AuthoredTool]:
    return [ModuleTool(definition, version, key) for definition in version.definitions]


def _check_definitions(shown: str, definitions: Sequence[Any], key: str) -> None:
    """Refuse a module without tools, malformed definitions, and hooks that would run
    the module's code before approval."""
    if not definitions:
        raise ConfigError(f"tool module {shown!r} defines no tools", key=key)
    if len(definitions) > MAX_TOOLS_PER_MODULE:
        raise ConfigError(
            f"tool module {shown!r} defines more than {MAX_TOOLS_PER_MODULE} tools", key=key
        )
    for definition in definitions:
        if not isinstance(definition, dict) or any(
            not isinstance(definition.get(name), kinds) for name, kinds in _FIELDS.items()
        ):
            raise ConfigError(f"tool module {shown!r}: a malformed tool definition", key=key)
        name = bounded(definition["name"], 80)
        # The bounds an in-process AuthoredTool enforces: a module's top level may have
        # changed its tool's attributes after construction.
        problem = None
        if not is_effect_name(definition["name"]):
            problem = "its name is not dotted lower_snake_case of at most 64 characters"
        elif len(definition["description"]) > MAX_DESCRIPTION_CHARS:
            problem = f"its description is longer than {MAX_DESCRIPTION_CHARS} characters"
        elif len(definition["approval_warning"] or "") > MAX_WARNING_CHARS:
            problem = f"its approval warning is longer than {MAX_WARNING_CHARS} characters"
        elif not is_timeout(definition["timeout_s"]):
            problem = "its timeout_s is not a number of seconds in (0, 86400]"
        if problem is not None:
            raise ConfigError(f"tool {name!r} of module {shown!r}: {problem}", key=key)
        for hook in ("prepare", "preflight"):
            if definition[hook]:
                raise ConfigError(
                    f"tool {name!r} of module {shown!r} has a {hook} hook: a module tool's "
                    "code runs only after approval, so check inside the tool instead",
                    key=key,
                )
        problem = schema_problem(definition["parameters"])
        if problem is not None:
            raise ConfigError(f"tool {name!r} of module {shown!r}: {problem}", key=key)


def _tools_of(module: ModuleType) -> list[AuthoredTool]:
    found: dict[int, AuthoredTool] = {}
    for value in vars(module).values():
        if isinstance(value, AuthoredTool):
            found.setdefault(id(value), value)
    return list(found.values())


def _canonical(definition: Mapping[str, Any]) -> str:
    return json.dumps(definition, sort_keys=True, default=str)


# -- locating, stamping and caching (worker threads) -------------------------------------

_CACHE: OrderedDict[tuple[str, str, int, int], _ModuleVersion] = OrderedDict()
_CACHE_LOCK = threading.Lock()


def _remember(key: tuple[str, str, int, int], version: _ModuleVersion) -> None:
    with _CACHE_LOCK:
        _CACHE[key] = version
        _CACHE.move_to_end(key)
        while len(_CACHE) > _CACHED_VERSIONS:
            _CACHE.popitem(last=False)


def forget_versions(package: str) -> None:
    """Drop the discovered modules of ``package`` (its revision left ``sys.modules``).

    A revision loaded again (a rollback) then imports its modules afresh,
    instead of handing out tools whose package can no longer be imported.
    """
    prefix = f"{package}."
    with _CACHE_LOCK:
        for key in [k for k in _CACHE if k[0] == package or k[0].startswith(prefix)]:
            del _CACHE[key]


def _locate(module_name: str, first: Sequence[str] = ()) -> Path | None:
    """Blocking: the file ``module_name`` would be imported from, found without running
    any of its packages' code (their finders only), or None when there is none.

    The top-level package is looked for in ``first`` before the import path."""
    parts = module_name.split(".")
    search: Sequence[str] | None = None
    for depth in range(1, len(parts) + 1):
        name = ".".join(parts[:depth])
        loaded = sys.modules.get(name)
        if loaded is not None:
            spec = getattr(loaded, "__spec__", None)
        else:
            spec = None
            if depth == 1 and first:
                spec = importlib.machinery.PathFinder.find_spec(name, list(first))
            if spec is None:
                spec = _find_spec(name, search)
        if spec is None:
            return None
        if depth == len(parts):
            origin = spec.origin if spec.has_location else None
            return Path(origin) if origin else None
        search = spec.submodule_search_locations
        if search is None:
            return None
    return None


def _find_spec(name: str, search: Sequence[str] | None) -> Any:
    for finder in sys.meta_path:
        find = getattr(finder, "find_spec", None)
        if find is None:
            continue
        try:
            spec = find(name, search)
        except (ImportError, OSError, ValueError):
            continue
        if spec is not None:
            return spec
    return None


def _places_of(loaded: ModuleType | None, located: Path | None) -> list[Path]:
    """The file a module is (or would be) imported from, and its package's directories."""
    if loaded is None:
        return [] if located is None else [located]
    return module_places(loaded)


def _stamp_of(path: Path) -> _Stamp | None:
    """Blocking: the file's stamp (None if it is gone)."""
    try:
        info = path.stat()
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None
    return _Stamp(str(path.resolve()), info.st_size, info.st_mtime_ns, digest)


def _ships_with_hostkit(module_name: str) -> bool:
    """hostkit's own example modules are the Host's code, not an operator's: without
    bubblewrap they are still discovered (in a child), so the demo runs anywhere."""
    return module_name == "hostkit" or module_name.startswith("hostkit.")


def _child_plan() -> tuple[str, list[str]]:
    """Blocking: the discovery child's program text, and the Host's import path made
    absolute (the child starts with ``-I``: no current directory, no environment)."""
    path = [os.path.abspath(entry) for entry in sys.path if isinstance(entry, str)]
    return _child_source(), path


@functools.cache
def _child_source() -> str:
    return Path(__file__).with_name("_tool_child.py").read_text(encoding="utf-8")


def _child_command(source: str, module_name: str, path: Sequence[str]) -> list[str]:
    return [sys.executable, "-I", "-B", "-c", source, module_name, json.dumps(list(path))]


def _sandboxed(
    probe: Any,
    policy: SandboxPolicy,
    child: tuple[str, str],
    host_path: Sequence[str],
    search: Sequence[str],
    key: str,
) -> tuple[list[str], Path]:
    """Blocking: the discovery child ``child`` (its source, the module name) in the
    agent's sandbox, without network, seeing the interpreter and the import path
    read-only (the Host's state masked) and a private scratch directory as its
    working directory.

    A ``search`` directory inside the Host's state (a core's materialized
    revision, under ``.hostkit-cores``) is bound at a path of its own in the
    scratch directory, and the child looks for the module there: the state
    around it stays masked even when an import root holds it (``python -m``
    and Jupyter put the project folder on ``sys.path``), and bubblewrap never
    has to create a mount point inside a read-only mask. Any other ``search``
    directory is an import root like the rest, its Host state masked.
    """
    hidden = [path.resolve() for path in policy.hidden]
    aliased: list[tuple[Path, int]] = []
    inner: list[str] = []
    for index, entry in enumerate(search):
        real = Path(os.path.realpath(entry))
        if not any(real.is_relative_to(state) for state in hidden):
            inner.append(str(real))
            continue
        if any(state != real and state.is_relative_to(real) for state in hidden):
            raise ConfigError(
                f"tool path {bounded(str(real), 160)!r} holds Host state of its own "
                "and cannot be shown to the discovery process",
                key=key,
            )
        aliased.append((real, index))
    interpreter = (
        sys.prefix,
        sys.exec_prefix,
        sys.base_prefix,
        sys.base_exec_prefix,
        os.path.dirname(os.path.realpath(sys.executable)),
    )
    roots: list[Path] = []
    for entry in sorted({os.path.realpath(p) for p in (*interpreter, *inner, *host_path)}):
        root = Path(entry)
        if root.exists() and not any(root.is_relative_to(shown) for shown in roots):
            roots.append(root)
    scratch = Path(tempfile.mkdtemp(prefix="hostkit-discovery-"))
    try:
        shown: list[str] = []
        for real, index in aliased:  # ascending: each lands at its place in the search order
            alias = scratch / "search" / str(index)
            alias.mkdir(parents=True)
            shown += ["--ro-bind", str(real), str(alias)]
            inner.insert(index, str(alias))
        binds = [arg for root in roots for arg in ("--ro-bind", str(root), str(root))]
        masks = mask_plan(scratch, policy.hidden, roots=roots)
        quiet = dataclasses.replace(policy, network=False)
        command = _child_command(*child, [*inner, *host_path])
        argv = sandbox_argv(
            probe,
            quiet,
            command,
            workspace=scratch,
            workdir=scratch,
            masks=[*binds, *masks, *shown],
        )
    except BaseException:
        shutil.rmtree(scratch, ignore_errors=True)
        raise
    return argv, scratch


# -- the child process ---------------------------------------------------------------------


async def _run(
    command: list[str],
    env: Mapping[str, str],
    cwd: Path | None,
    timeout_s: float,
    *,
    sandboxed: bool,
) -> tuple[bytes, bytes, str | None]:
    """Run the discovery child: (stdout, stderr tail, problem or None); ``TimeoutError``
    when it is overdue.

    stdout is read up to ``MAX_DISCOVERY_BYTES``; the child runs as an owned
    tree (under the per-run init), ended when it is done, overdue or too
    talkative, with everything it started.
    """
    process: Process | None = None
    try:
        async with owned_process(
            command,
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            grace_s=_END_GRACE_S,
            confirm_s=_END_CONFIRM_S,
            sandboxed=sandboxed,
        ) as owned:
            process = owned.process
            return await _read_answer(process, timeout_s)
    finally:
        if process is not None:
            with anyio.CancelScope(shield=True):
                await process.aclose()  # the tree has ended: its pipes close, it is reaped


async def _read_answer(process: Process, timeout_s: float) -> tuple[bytes, bytes, str | None]:
    """The child's stdout (bounded), stderr tail and problem; the caller ends its tree."""
    out = bytearray()
    err = bytearray()
    problem: str | None = None
    stdout, stderr = process.stdout, process.stderr
    if stdout is None or stderr is None:
        raise RuntimeError("the discovery child has no output pipes")
    with anyio.move_on_after(timeout_s) as deadline:
        async with anyio.create_task_group() as group:
            drained = anyio.Event()
            group.start_soon(_tail, stderr, err, drained)
            async for chunk in stdout:
                out += chunk
                if len(out) > MAX_DISCOVERY_BYTES:
                    problem = f"its answer is larger than {MAX_DISCOVERY_BYTES} bytes"
                    break
            if problem is None:
                await process.wait()
                # A process the module left behind may hold stderr open: do not wait on it.
                with anyio.move_on_after(_STDERR_GRACE_S):
                    await drained.wait()
            group.cancel_scope.cancel()
    if deadline.cancelled_caught:
        raise TimeoutError(f"discovery did not finish within {timeout_s:g}s")
    return bytes(out), bytes(err), problem


async def _tail(stream: ByteReceiveStream, into: bytearray, drained: anyio.Event) -> None:
    """Keep the last ``_STDERR_TAIL`` bytes of ``stream`` (a failure's last line)."""
    async for chunk in stream:
        into += chunk
        del into[:-_STDERR_TAIL]
    drained.set()


def _last_line(err: bytes) -> str:
    lines = [line.strip() for line in err.decode("utf-8", "replace").splitlines() if line.strip()]
    return lines[-1] if lines else ""
