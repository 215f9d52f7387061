"""JupyterLab on loopback and Debian's chromium under Playwright, for the opt-in browser test.

Everything lives under one temporary directory: the notebook folder, Jupyter's
config, runtime and Lab settings (so nothing is read from or written to the
user's ``~/.jupyter``) and a fresh Chromium profile. Lab is told not to fetch
news or check for updates; the browser gets no background networking. The
only sockets are the server's loopback port and the kernel's.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx

__all__ = ["CHROMIUM", "CHROMIUM_ARGS", "Lab", "serve_lab"]

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
]

# Lab user settings: every cell stays in the DOM (no virtual scrolling), no news toasts.
_LAB_SETTINGS = {
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"},
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {
        "fetchNews": "false",
        "checkForUpdates": False,
    },
}
_SERVER_CONFIG = {
    "LabApp": {
        "news_url": None,
        "check_for_updates_class": "jupyterlab.NeverCheckForUpdate",
        "extension_manager": "readonly",
        # window.jupyterapp: the test switches themes through Lab's own command.
        "expose_app_in_browser": True,
    },
    # Root in containers and CI; the server listens on loopback only, behind a token.
    "ServerApp": {"open_browser": False, "port_retries": 0, "allow_root": True},
}


@dataclass(frozen=True)
class Lab:
    """A running JupyterLab: its base URL and token."""

    base_url: str
    token: str

    def notebook_url(self, name: str) -> str:
        return f"{self.base_url}/lab/tree/{name}?token={self.token}"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _write_json(path: Path, data: object) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))


@contextlib.contextmanager
def serve_lab(
    root: Path, notebooks: Path, *, startup_timeout_s: float = 60.0, stop_timeout_s: float = 20.0
) -> Iterator[Lab]:
    """Serve ``notebooks`` with JupyterLab on 127.0.0.1; stop it (and its kernels) on exit."""
    token = secrets.token_hex(16)
    config, runtime, settings = root / "config", root / "runtime", root / "lab-settings"
    _write_json(config / "jupyter_server_config.json", _SERVER_CONFIG)
    for name, data in _LAB_SETTINGS.items():
        _write_json(settings / name, data)
    env = {
        **os.environ,
        "JUPYTER_CONFIG_DIR": str(config),
        "JUPYTER_RUNTIME_DIR": str(runtime),
        "JUPYTERLAB_SETTINGS_DIR": str(settings),
        "JUPYTERLAB_WORKSPACES_DIR": str(root / "workspaces"),
        "JUPYTER_PLATFORM_DIRS": "1",
    }
    for attempt in range(1, _PORT_ATTEMPTS + 1):
        port = _free_port()
        log_path = root / f"lab-{attempt}.log"
        log = log_path.open("wb")
        server = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "jupyterlab",
                "--ServerApp.ip=127.0.0.1",
                f"--ServerApp.port={port}",
                # A port another process took after it was found free ends the server
                # (another port is tried here), instead of moving it to a port this
                # test never looks at.
                "--ServerApp.port_retries=0",
                f"--ServerApp.root_dir={notebooks}",
                f"--IdentityProvider.token={token}",
            ],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its kernels share its process group: one kill ends all
        )
        lab = Lab(f"http://127.0.0.1:{port}", token)
        try:
            ready = _wait_ready(lab, server, startup_timeout_s, log_path)
            if ready:
                yield lab
        finally:
            _stop(server, stop_timeout_s)
            log.close()
        if ready:
            return
        if attempt == _PORT_ATTEMPTS:
            raise RuntimeError(f"JupyterLab exited ({server.returncode}):\n{log_path.read_text()}")


# Ports tried: each was free when found, but another process may bind it first.
_PORT_ATTEMPTS = 3


def _stop(server: subprocess.Popen[bytes], timeout_s: float) -> None:
    server.send_signal(signal.SIGTERM)  # jupyter_server shuts its kernels down on TERM
    with contextlib.suppress(subprocess.TimeoutExpired):
        server.wait(timeout=timeout_s)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(server.pid, signal.SIGKILL)
    server.wait(timeout=timeout_s)


def _wait_ready(lab: Lab, server: subprocess.Popen[bytes], timeout_s: float, log: Path) -> bool:
    """True once the server answers; False if it exited first (its port was taken)."""
    deadline = time.monotonic() + timeout_s
    headers = {"Authorization": f"token {lab.token}"}
    with httpx.Client(timeout=2.0) as client:
        while time.monotonic() < deadline:
            if server.poll() is not None:
                return False
            with contextlib.suppress(httpx.TransportError):
                if client.get(f"{lab.base_url}/api/status", headers=headers).status_code == 200:
                    return True
            time.sleep(0.2)  # polling a server we started, not ordering the test
    raise RuntimeError(f"JupyterLab not ready after {timeout_s} s:\n{log.read_text()}")
