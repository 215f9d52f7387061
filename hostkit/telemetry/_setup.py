"""Tracing from ``[host.telemetry]``: a TracerProvider of the Host's own, and its bounded end.

The Host never installs a global provider (an application's own
OpenTelemetry setup stays untouched); spans are batched and exported on the
SDK's worker thread, so an exporter that is slow or down costs a turn nothing.
The OpenTelemetry packages are imported only when tracing is on: without the
``otel`` extra, hostkit runs as before and ``traces = "none"`` needs nothing.
"""

from __future__ import annotations

import logging
import sys
from typing import TYPE_CHECKING, Literal, get_args
from urllib.parse import urlsplit, urlunsplit

import anyio
from anyio.abc import AsyncResource

from hostkit._extras import missing_dependency, require_extra
from hostkit.errors import ConfigError
from hostkit.types import is_text

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SpanExporter

    from hostkit.telemetry._observer import TracingObserver

__all__ = ["Tracing", "open_tracing"]

_log = logging.getLogger("hostkit.telemetry")
# Per export request, and for the flush at Host close (which waits for nothing longer).
_EXPORT_TIMEOUT_S = 5.0
_SHUTDOWN_TIMEOUT_S = 10.0
_TRACES_PATH = "/v1/traces"
_KEY = "host.telemetry.traces"

Traces = Literal["none", "console", "otlp"]


class Tracing(AsyncResource):
    """The Host's tracer provider and the observer that feeds it; ``aclose`` flushes."""

    def __init__(self, provider: TracerProvider, observer: TracingObserver) -> None:
        self.provider = provider
        self.observer = observer
        self._closed = False

    async def aclose(self) -> None:
        """Export what is queued and stop the worker: off the event loop, at most ~10 s."""
        if self._closed:
            return
        self._closed = True
        self.observer.close()
        with anyio.move_on_after(_SHUTDOWN_TIMEOUT_S) as waited:
            await anyio.to_thread.run_sync(self.provider.shutdown, abandon_on_cancel=True)
        if waited.cancelled_caught:
            _log.warning("tracing: the exporter did not finish within %gs", _SHUTDOWN_TIMEOUT_S)


def open_tracing(
    traces: Traces, *, endpoint: str | None = None, service_name: str = "hostkit"
) -> Tracing | None:
    """The tracing ``[host.telemetry]`` asks for; None when ``traces = "none"``.

    Raises ``MissingDependency`` (a ``ConfigError``) naming the package and
    ``pip install "hostkit[otel]"`` when tracing is on and the otel extra is not
    installed. Blocking (it looks for and imports the SDK): run it off the loop.
    """
    if traces not in get_args(Traces):  # any other word would quietly mean OTLP
        raise ConfigError(f"traces must be one of {', '.join(get_args(Traces))}", key=_KEY)
    if not is_text(service_name, limit=200):
        raise ConfigError("service_name must be 1 to 200 characters of text", key=_KEY)
    if traces == "none":
        return None
    feature = f'[host.telemetry] traces = "{traces}"'
    require_extra("otel", feature=feature, key=_KEY)
    try:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        from hostkit.telemetry._observer import TracingObserver

        exporter = _exporter(traces, endpoint)
    except ImportError as exc:
        raise missing_dependency("otel", exc, feature=feature, key=_KEY) from exc
    provider = TracerProvider(resource=Resource.create({"service.name": service_name}))
    provider.add_span_processor(
        BatchSpanProcessor(exporter, export_timeout_millis=_EXPORT_TIMEOUT_S * 1000)
    )
    return Tracing(provider, TracingObserver(provider))


def _exporter(traces: Traces, endpoint: str | None) -> SpanExporter:
    if traces == "console":
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        # stderr: stdout carries answers (and --json) in the CLI.
        return ConsoleSpanExporter(out=sys.stderr)
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter(endpoint=_traces_url(endpoint), timeout=_EXPORT_TIMEOUT_S)


def _traces_url(endpoint: str | None) -> str | None:
    """A collector's base URL gets the OTLP traces path; a full URL is kept as given.

    None leaves the choice to the standard ``OTEL_EXPORTER_OTLP_*`` variables.
    """
    if endpoint is None:
        return None
    parts = urlsplit(endpoint)
    if parts.path in ("", "/"):
        return urlunsplit(parts._replace(path=_TRACES_PATH))
    return endpoint
