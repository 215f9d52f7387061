"""The llama.cpp server process that ``LocalModel`` runs (``python -m`` this module).

It reads its options as one JSON line on stdin, loads the model, answers one
JSON line on stdout (the address it listens on, or an error), and serves
until it is killed or its stdin reaches end of file, which is how it goes
away when the Host dies without closing it. It imports nothing but the
standard library and ``xllamacpp``.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import Mapping
from typing import IO

__all__ = ["EXIT_NO_WHEEL", "EXIT_START_FAILED", "child_main"]

EXIT_NO_WHEEL = 3
EXIT_START_FAILED = 4
# llama.cpp keeps finished prompts in RAM for reuse; its default cap is 8 GiB.
PROMPT_CACHE_MIB = 256
# llama.cpp verbosity threshold: 1 keeps errors only, so the log stays small.
LOG_VERBOSITY = 1


def child_main() -> int:
    """The server process: load the model, report the address, serve until stdin closes."""
    answer = os.fdopen(os.dup(sys.stdout.fileno()), "w", encoding="utf-8")
    # Native code may print to stdout; send fd 1 to the log so the answer channel stays clean.
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    config = json.loads(sys.stdin.buffer.readline())
    try:
        import xllamacpp  # type: ignore[import-untyped]  # the wheel ships no type information
    except ImportError as exc:
        _answer(answer, {"error": f"xllamacpp cannot be imported: {exc}"})
        return EXIT_NO_WHEEL
    params = xllamacpp.CommonParams()
    params.model.path = config["model_path"]
    params.model_alias = {config["alias"]}
    params.hostnames = [config["host"]]
    params.port = config["port"]
    params.api_keys = [config["api_key"]]
    params.n_ctx = config["context_window"]
    # One slot, so one request may use the whole window the ModelLimits promise.
    params.n_parallel = 1
    params.cpuparams.n_threads = config["threads"]
    params.cpuparams_batch.n_threads = config["threads"]
    # Refuse over-long requests (the adapter raises ContextOverflow) instead of dropping context.
    params.ctx_shift = False
    params.cache_ram_mib = PROMPT_CACHE_MIB
    params.offline = True
    params.ui = False
    params.endpoint_slots = False
    params.verbosity = LOG_VERBOSITY
    try:
        server = xllamacpp.Server(params)
    except Exception as exc:
        _answer(answer, {"error": f"{type(exc).__name__}: {exc}"})
        return EXIT_START_FAILED
    # llama.cpp may install SIGINT/SIGTERM handlers that stop only its own loop thread.
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    try:
        _answer(answer, {"address": server.listening_address})
    except BrokenPipeError:
        return EXIT_START_FAILED
    sys.stdin.buffer.read()
    del server
    return 0


def _answer(stream: IO[str], message: Mapping[str, str]) -> None:
    stream.write(json.dumps(dict(message)) + "\n")
    stream.flush()


if __name__ == "__main__":
    raise SystemExit(child_main())
