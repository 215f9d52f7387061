"""The provider layer: the ModelProvider protocol, retries and normalization.

SDK-backed adapters live in ``hostkit.adapters``; this package knows no vendor.
"""

from hostkit.providers._normalize import (
    parse_tool_arguments,
    retry_after_seconds,
    to_finish_reason,
)
from hostkit.providers._protocol import ModelProvider, attachment_support, open_stream
from hostkit.providers._retry import RetryPolicy, call_with_retries
from hostkit.providers._urls import MAX_URL_CHARS, http_url_problem

__all__ = [
    "MAX_URL_CHARS",
    "ModelProvider",
    "RetryPolicy",
    "attachment_support",
    "call_with_retries",
    "http_url_problem",
    "open_stream",
    "parse_tool_arguments",
    "retry_after_seconds",
    "to_finish_reason",
]
