"""A notebook object's ``text/plain``: what a terminal shows of it, under one rule.

``text/plain`` is what a notebook shows where it cannot draw HTML: ``jupyter
console``, a notebook converted to text, a repr printed in a terminal. The
text comes from a model (a reply), a provider (a model id) or a tool's
arguments, so an ESC, an OSC-8 link or a bidi override in it would drive that
terminal. Every notebook object's ``_repr_mimebundle_`` (and the Host's
``_repr_pretty_``) builds it here, through ``hostkit.inspect``'s rule:
``prose_text`` for a model's answer (its lines and its scripts kept),
``printable_text`` for everything else. The HTML beside it is escaped apart.
"""

from __future__ import annotations

from typing import Any

from hostkit.inspect import printable_text, prose_text

__all__ = ["plain_bundle", "plain_text"]


def plain_text(text: str, *, prose: bool = False) -> str:
    """``text`` as a terminal may show it: ``prose_text`` for prose, else ``printable_text``."""
    return prose_text(text) if prose else printable_text(text)


def plain_bundle(bundle: Any, text: str, *, prose: bool = False) -> Any:
    """``bundle`` (a widget's mime bundle) with ``text/plain`` set to ``plain_text(text)``.

    ``bundle`` is returned as it is when it is not a mapping (no front end).
    """
    if not isinstance(bundle, dict):
        return bundle
    return {**bundle, "text/plain": plain_text(text, prose=prose)}
