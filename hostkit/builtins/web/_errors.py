"""The web family's two failures, below the URL policy and the fetch that both raise them.

``UrlPolicy`` refuses (``UrlDenied``) and also resolves names, which can fail
in the network (``FetchError``); ``fetch`` raises both. Keeping the classes
here lets the policy stay below the fetch instead of importing it.
"""

from __future__ import annotations

from hostkit.errors import PolicyRefusal, RuntimeFailure

__all__ = ["FetchError", "UrlDenied"]


class UrlDenied(PolicyRefusal):
    """The URL policy refused a URL or a redirect hop before any connection to it.

    ``reason`` is a short machine-readable cause: ``invalid``, ``scheme``,
    ``credentials``, ``ambiguous-host``, ``redirects``, or the address category
    that failed (``loopback``, ``private``, ``link-local``, ``metadata`` …).
    """

    def __init__(self, message: str, *, reason: str) -> None:
        self.reason = reason
        super().__init__(message)


class FetchError(RuntimeFailure):
    """A permitted fetch failed in the network: DNS, connect, TLS, protocol or deadline."""

    def __init__(self, message: str, *, timed_out: bool = False, retryable: bool = True) -> None:
        self.timed_out = timed_out
        super().__init__(message, retryable=retryable)
