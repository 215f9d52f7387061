"""OpenTelemetry traces of turns, after the GenAI semantic conventions (the ``otel`` extra).

``TracingObserver(tracer_provider)`` is an ``Observer``: give it to a Host as
``RuntimeCapabilities(observer=...)`` to trace into a provider of your own,
or set ``[host.telemetry] traces`` and the Host builds and closes one itself
(docs/observability.md). Importing this package needs no OpenTelemetry;
``TracingObserver`` does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from hostkit._extras import missing_dependency
from hostkit.telemetry._setup import Tracing, open_tracing

if TYPE_CHECKING:
    from hostkit.telemetry._observer import TracingObserver

__all__ = ["Tracing", "TracingObserver", "open_tracing"]


def __getattr__(name: str) -> Any:
    if name == "TracingObserver":
        try:
            from hostkit.telemetry._observer import TracingObserver
        except ImportError as exc:
            # A MissingDependency is an ImportError too: ``except ImportError`` still works.
            raise missing_dependency(
                "otel", exc, feature="hostkit.telemetry.TracingObserver"
            ) from exc
        return TracingObserver
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
