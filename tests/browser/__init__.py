"""Opt-in browser tests (`make browser-test`): JupyterLab on loopback, Debian's chromium."""
