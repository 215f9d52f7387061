"""Logging for ``hostkit serve``: JSON lines for machines, Rich lines and a status line for people.

Records are handed to a queue and written to stderr by a listener thread,
so a slow terminal or pipe never blocks the event loop. JSON lines carry
``ts`` (UTC, ISO 8601), ``level``, ``logger``, ``msg`` and ``fields`` (the
record's extra attributes); messages are redacted and bounded like every
hostkit error text.
"""

from __future__ import annotations

import datetime
import json
import logging
import logging.handlers
import queue
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Literal

from rich.console import Console
from rich.logging import RichHandler

from hostkit.errors import bounded

__all__ = ["JsonLines", "LogFormat", "serve_logging"]

LogFormat = Literal["text", "json"]
_MESSAGE_CHARS = 2_000
_STANDARD = set(vars(logging.makeLogRecord({}))) | {"message", "asctime", "color_message"}


class JsonLines(logging.Formatter):
    """One JSON object per record: ts, level, logger, msg, fields."""

    def format(self, record: logging.LogRecord) -> str:
        fields: dict[str, Any] = {
            key: _plain(value) for key, value in vars(record).items() if key not in _STANDARD
        }
        if record.exc_info:
            fields["exception"] = bounded(self.formatException(record.exc_info), _MESSAGE_CHARS)
        stamp = datetime.datetime.fromtimestamp(record.created, tz=datetime.UTC)
        return json.dumps(
            {
                "ts": stamp.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
                "level": record.levelname.lower(),
                "logger": record.name,
                "msg": bounded(record.getMessage(), _MESSAGE_CHARS),
                "fields": fields,
            },
            ensure_ascii=False,
        )


def _plain(value: object) -> object:
    if value is None or isinstance(value, bool | int | float):
        return value
    return bounded(value, 200)


@contextmanager
def serve_logging(log_format: LogFormat, console: Console) -> Iterator[None]:
    """Route the root logger (hostkit.*, uvicorn.*) to stderr in ``log_format`` while serving."""
    handler: logging.Handler
    if log_format == "json":
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(JsonLines())
    else:
        handler = RichHandler(console=console, show_path=False, markup=False, rich_tracebacks=False)
    records: queue.SimpleQueue[logging.LogRecord] = queue.SimpleQueue()
    listener = logging.handlers.QueueListener(records, handler, respect_handler_level=True)
    front = logging.handlers.QueueHandler(records)
    root = logging.getLogger()
    saved = (root.level, list(root.handlers))
    root.handlers = [front]
    root.setLevel(logging.INFO)
    listener.start()
    try:
        yield
    finally:
        listener.stop()
        root.handlers = saved[1]
        root.setLevel(saved[0])
