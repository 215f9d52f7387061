"""The words memory search matches: one tokeniser, in Python, for every adapter.

SQLite's FTS5 and PostgreSQL's text search each split and fold text their own way
(PostgreSQL keeps ``bob@example.com`` or ``3.11`` as one token, folds case by the
server's locale and keeps accents), so the same words found different items. Here
a text is folded once (compatibility decomposition, case folding, combining marks
dropped: ``École`` is ``ecole``) and its words are the runs of letters and digits
(``_`` and other numeric signs separate them); both engines index these words,
joined by spaces, and nothing else: FTS5's ``ascii`` tokenizer and PostgreSQL's
parser in any locale split that text at the spaces alone.
"""

from __future__ import annotations

import re
import unicodedata
from itertools import islice

__all__ = ["MAX_WORD_CHARS", "query_phrases", "search_words"]

# A longer "word" is no word anyone searches for: it is not indexed, and a query's is cut.
MAX_WORD_CHARS = 64
_RUN = re.compile(r"\w+")
_WORD = re.compile(r"[^\W_]+")
# Dropped: combining marks (accents). Separators: numbers that are not digits (fractions,
# Tamil or Bengali number signs), which PostgreSQL's parser drops under a glibc locale.
_DROPPED = {"Mn": "", "No": " "}


def _folded(text: str) -> str:
    decomposed = unicodedata.normalize("NFKD", unicodedata.normalize("NFKD", text).casefold())
    return "".join(_DROPPED.get(unicodedata.category(c), c) for c in decomposed)


def _words(folded: str) -> list[str]:
    return [w for w in _WORD.findall(folded) if len(w) <= MAX_WORD_CHARS]


def search_words(text: str) -> str:
    """The words of ``text`` as the index holds them: folded, space-separated."""
    return " ".join(_words(_folded(text)))


def query_phrases(query: str, max_terms: int) -> list[str]:
    """The first ``max_terms`` ``\\w+`` runs of ``query``, each cut to ``MAX_WORD_CHARS``
    and folded, as phrases of the index's words (``foo_bar`` is ``foo`` then ``bar``);
    a run with no words (``_``) is no phrase."""
    runs = (m.group()[:MAX_WORD_CHARS] for m in islice(_RUN.finditer(_folded(query)), max_terms))
    return [phrase for phrase in (" ".join(_words(run)) for run in runs) if phrase]
