"""The headless front end: ``hostkit init | run | sessions | approvals | demo``."""

from hostkit.cli._app import app, main

__all__ = ["app", "main"]
