"""Logging for ``hostkit serve``: JSON lines for machines, Rich lines and a status line for people.

Records are handed to a queue and written to stderr by a listener thread,
so a slow terminal or pipe never blocks the event loop. The queue is
bounded (``MAX_QUEUED`` records): when the writer falls that far behind, new
records are dropped and counted, and the next record that fits is preceded by
a warning saying how many were lost. A record that repeats at every retry
while a resource is gone (``REPEATING``: psycopg.pool through a PostgreSQL
outage, asyncio's accept at the file-descriptor limit) is written once per
``REPEAT_EVERY_S``, saying how often it came meanwhile. JSON lines carry
``ts`` (UTC, ISO 8601), ``level``, ``logger``, ``msg`` and ``fields`` (the
record's extra attributes); messages are redacted and bounded like every
hostkit error text, and every character that is not printable is written as
its JSON escape, as ``--json`` output writes it.
"""

from __future__ import annotations

import datetime
import json
import logging
import logging.handlers
import queue
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Literal

from rich.console import Console
from rich.logging import RichHandler
from rich.text import Text

from hostkit._streaks import REPEAT_EVERY_S
from hostkit.cli._clock import utc_stamp
from hostkit.errors import bounded
from hostkit.inspect import printable, printable_json

__all__ = [
    "LOG_TIME_FORMAT",
    "MAX_QUEUED",
    "QUIET_LOGGERS",
    "REPEATING",
    "DroppingQueueHandler",
    "JsonLines",
    "LogFormat",
    "RepeatFilter",
    "serve_logging",
]

LogFormat = Literal["text", "json"]
# UTC, marked, as every time the CLI shows (``hostkit.cli._clock``).
LOG_TIME_FORMAT = "[%Y-%m-%d %H:%M:%SZ]"
MAX_QUEUED = 10_000
_MESSAGE_CHARS = 2_000
_STANDARD = set(vars(logging.makeLogRecord({}))) | {"message", "asctime", "color_message"}
# HTTP clients that log a line per request at INFO (every health check and chat
# completion of the embedded model, every delivery): while serving they say only
# warnings, or the requests would bury the Host's own records.
QUIET_LOGGERS = ("httpx", "httpx2", "httpcore")
# (logger, how its message begins) of records that come at every retry while a resource
# is gone: psycopg.pool's "error connecting" and failed reconnections (about one a second
# through a PostgreSQL outage), and asyncio's failed accept at the file-descriptor limit
# (one per listen backlog slot, each with its traceback, every second it lasts; each
# schedules a retry, which fails once more if the listener closed meanwhile).
REPEATING = (
    ("psycopg.pool", ""),
    ("asyncio", "socket.accept() out of system resource"),
    ("asyncio", "Exception in callback BaseSelectorEventLoop._start_serving("),
)
_REPEAT_KEYS = 100


class JsonLines(logging.Formatter):
    """One JSON object per record: ts, level, logger, msg, fields.

    Every character that is not printable is a JSON escape (``printable_json``):
    a log tailed in a terminal is not repainted or reordered by what it quotes.
    """

    def format(self, record: logging.LogRecord) -> str:
        fields: dict[str, Any] = {
            key: _plain(value) for key, value in vars(record).items() if key not in _STANDARD
        }
        if record.exc_info:
            fields["exception"] = bounded(self.formatException(record.exc_info), _MESSAGE_CHARS)
        stamp = datetime.datetime.fromtimestamp(record.created, tz=datetime.UTC)
        line = json.dumps(
            {
                "ts": stamp.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
                "level": record.levelname.lower(),
                "logger": record.name,
                "msg": bounded(record.getMessage(), _MESSAGE_CHARS),
                "fields": fields,
            },
            ensure_ascii=False,
        )
        # ``bounded`` escapes controls; a bidi override or a line separator a message quotes
        # is escaped here, as ``--json`` output escapes it.
        return printable_json(line)


class DroppingQueueHandler(logging.handlers.QueueHandler):
    """Hands records to a bounded queue; never blocks: a full queue drops and counts."""

    def __init__(self, records: queue.Queue[logging.LogRecord]) -> None:
        super().__init__(records)
        self._bounded = records
        self.dropped = 0
        self._unreported = 0

    def enqueue(self, record: logging.LogRecord) -> None:
        # Called under the handler's own lock (Handler.handle), so the counters are safe.
        if self._unreported and self._bounded.qsize() < self._bounded.maxsize - 1:
            notice = logging.makeLogRecord(
                {
                    "name": "hostkit.serve",
                    "levelno": logging.WARNING,
                    "levelname": "WARNING",
                    "msg": "%d log records were dropped (the log writer fell behind)",
                    "args": (self._unreported,),
                    "dropped": self._unreported,
                }
            )
            self._bounded.put_nowait(notice)
            self._unreported = 0
        try:
            self._bounded.put_nowait(record)
        except queue.Full:
            self.dropped += 1
            self._unreported += 1


class RepeatFilter(logging.Filter):
    """Passes the first of a ``REPEATING`` warning, then one per ``REPEAT_EVERY_S`` with a count.

    Keyed by logger and kind of message, so each kind of failure is said once
    whatever its arguments; every other record passes untouched.
    """

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()  # loggers call from any thread
        self._seen: dict[tuple[str, str], tuple[float, int]] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        template = str(record.msg)
        begins = next(
            (b for name, b in REPEATING if record.name == name and template.startswith(b)), None
        )
        if begins is None or record.levelno < logging.WARNING:
            return True
        # asyncio's messages are formatted already (a handle's address in each): their
        # beginning is the kind; psycopg.pool's template is.
        key, now = (record.name, begins or template), time.monotonic()
        with self._lock:
            logged_at, since = self._seen.get(key, (-REPEAT_EVERY_S, 0))
            if now - logged_at < REPEAT_EVERY_S:
                self._seen[key] = (logged_at, since + 1)
                return False
            if len(self._seen) >= _REPEAT_KEYS:
                self._seen.clear()
            self._seen[key] = (now, 0)
        if since:
            record.msg, record.args = f"{record.getMessage()} ({since} more times since)", None
        return True


class _Listener(logging.handlers.QueueListener):
    """Its stop waits for room for the end marker (the queue may be full) instead of failing."""

    def enqueue_sentinel(self) -> None:
        self.queue.put(self._sentinel)  # type: ignore[attr-defined]


class _PlainLines(logging.Formatter):
    """A record as one line of text (its traceback after it), bounded as a JSON line is."""

    def converter(self, seconds: float | None) -> time.struct_time:
        return time.gmtime(seconds)  # LOG_TIME_FORMAT is UTC

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s", LOG_TIME_FORMAT)

    def formatMessage(self, record: logging.LogRecord) -> str:
        record.message = bounded(record.message, _MESSAGE_CHARS)
        return super().formatMessage(record)

    def formatException(self, ei: Any) -> str:
        return bounded(super().formatException(ei), _MESSAGE_CHARS)


def _log_time(moment: datetime.datetime) -> Text:
    """Rich's time column (``moment`` is the record's local time, naive) in UTC."""
    return Text(f"[{utc_stamp(moment)}]")


def _plain(value: object) -> object:
    if value is None or isinstance(value, bool | int | float):
        return value
    return bounded(value, 200)


def _escaped(record: logging.LogRecord) -> bool:
    """Keep ``record``, its message with every non-printable character escaped."""
    record.msg, record.args = printable(record.getMessage()), None
    return True


@contextmanager
def serve_logging(log_format: LogFormat, console: Console) -> Iterator[None]:
    """Route the root logger (hostkit.*, uvicorn.*) to stderr in ``log_format`` while serving.

    ``QUIET_LOGGERS`` say only warnings meanwhile; every level is restored after.
    """
    handler: logging.Handler
    if log_format == "json":
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(JsonLines())
    elif not console.is_terminal:
        # Text to a file or a pipe: one line per record. Rich would wrap each at the
        # console's width and pad it with spaces, so no grep finds a whole message.
        handler = logging.StreamHandler(console.file)
        handler.setFormatter(_PlainLines())
        handler.addFilter(_escaped)
    else:
        handler = RichHandler(
            console=console,
            show_path=False,
            markup=False,
            rich_tracebacks=False,
            # UTC, as every other time hostkit prints (Rich's default is the locale's %x
            # in local time).
            log_time_format=_log_time,
        )
        # A message may quote what a platform, a model or a config file wrote; the terminal
        # gets it escaped, as every other CLI line (JSON escapes it already).
        handler.addFilter(_escaped)
    records: queue.Queue[logging.LogRecord] = queue.Queue(MAX_QUEUED)
    listener = _Listener(records, handler, respect_handler_level=True)
    front = DroppingQueueHandler(records)
    front.addFilter(RepeatFilter())
    root = logging.getLogger()
    saved = (root.level, list(root.handlers))
    quiet = {name: logging.getLogger(name).level for name in QUIET_LOGGERS}
    root.handlers = [front]
    root.setLevel(logging.INFO)
    for name in quiet:
        logging.getLogger(name).setLevel(logging.WARNING)
    listener.start()
    try:
        yield
    finally:
        listener.stop()
        root.handlers = saved[1]
        root.setLevel(saved[0])
        for name, level in quiet.items():
            logging.getLogger(name).setLevel(level)
