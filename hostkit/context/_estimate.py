"""Token estimation: a fast default that errs on the high side, and exact tokenizer counts.

``CharEstimator`` needs nothing and over-estimates; ``TokenizerEstimator``
counts with the provider's own tokenizer (see
``hostkit.adapters.gguf_tokenizer`` for the embedded model's). Estimators are
looked up by the ``estimator_id`` a provider declares in its ``ModelLimits``
through an ``EstimatorRegistry`` the Host owns; there is no process-wide one.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from hostkit.context._charclass import class_tokens
from hostkit.context._pdf import pdf_pages
from hostkit.errors import ConfigError
from hostkit.freeze import thaw
from hostkit.types import (
    AttachmentPart,
    ModelMessage,
    ToolCall,
    ToolDefinition,
    is_count,
    is_positive,
    is_text,
    stand_in,
)

__all__ = [
    "DEFAULT_CACHE_CHARS",
    "DEFAULT_CACHE_ENTRIES",
    "IMAGE_TOKENS",
    "MESSAGE_OVERHEAD_TOKENS",
    "PDF_PAGE_TOKENS",
    "REQUEST_OVERHEAD_TOKENS",
    "CharEstimator",
    "Estimator",
    "EstimatorRegistry",
    "TokenizerEstimator",
    "arguments_text",
]

# Role markers and separators a chat format adds around a message: ChatML spends five
# or six (SmolLM2, Qwen), Llama 3's headers five; the default is the larger.
MESSAGE_OVERHEAD_TOKENS = 6
# What a template adds once per request when nothing better is known: a generation
# prompt (3-5 tokens) and a short default system prompt (SmolLM2's is 21 tokens).
REQUEST_OVERHEAD_TOKENS = 32
# Messages repeat across the steps and turns of a session; these bound the memo.
DEFAULT_CACHE_ENTRIES = 4096
DEFAULT_CACHE_CHARS = 4_000_000
# Attachments sent with their bytes (only in the turn that attached them). An image costs
# what the providers charge for the largest one they do not downscale (Anthropic: w*h/750,
# about 1,600; OpenAI's high detail stays below it); a PDF page what Anthropic charges for
# its text and its picture together at most. Text attachments are counted as text.
IMAGE_TOKENS = 1_600
PDF_PAGE_TOKENS = 3_000


class Estimator(Protocol):
    """Estimates provider tokens for text, messages and tool schemas.

    Pure and synchronous: no I/O, no awaiting, the same answer for the same
    input. ``estimator_id`` names the tokenizer (and framing) so calibration
    learned for one estimator is never applied to another.
    """

    @property
    def estimator_id(self) -> str: ...

    def text(self, text: str) -> int:
        """Tokens of ``text`` on its own, without any chat framing."""
        ...

    def message(self, message: ModelMessage) -> int:
        """Tokens of one chat message including its role framing and tool calls."""
        ...

    def definitions(self, definitions: Sequence[ToolDefinition]) -> int:
        """Tokens the tool schemas add to a request (0 for none)."""
        ...

    def request(
        self, messages: Sequence[ModelMessage], definitions: Sequence[ToolDefinition] = ()
    ) -> int:
        """A whole request: the messages, the schemas and the chat template's fixed framing.

        It must be ``sum(message(m) for m in messages) + definitions(definitions)``
        plus a fixed part that depends only on whether ``messages`` is empty and
        whether it opens with a system message: the ContextManager counts each
        message once and adds the fixed part to those counts.
        """
        ...


class CharEstimator:
    """A fast estimate from character classes that errs high; needs no tokenizer.

    Plain text (letters, spaces) counts one token per ``chars_per_token``
    characters; each ASCII digit, tab or control character one token; ASCII
    punctuation one per ``punctuation_per_token`` characters; and every UTF-8
    byte beyond the first of a character one more. Where a byte-level BPE
    starts a new piece the class rates price too low (a space before a digit,
    a letter next to a digit or an accented letter, punctuation next to a
    digit, a letter after punctuation, a line break after a space or ending a
    line of six characters or fewer) a fraction of a token more. Scripts and
    symbols such vocabularies cover thinly cost a token per byte (all but the
    scripts listed in this module); Hebrew and Arabic a quarter more; a
    combining mark two more. A run of 11 or more identifier characters with
    letters and digits (base64, hex, keys, ids), of 24 or more letters of ten
    different ones and few vowels, or of six or more letters with no vowel,
    0.45 of a token more per character; four consonants in a row and a change
    of case inside capitals ("aBC", "ABc") a token more. English prose stays
    within about 1.4x of SmolLM2's counts, code and JSON within about 1.6x,
    while hex dumps, tab-indented code, CSV, IPv6, wrapped base64, ids and
    Armenian, CJK or private-use text are at or above them. Crafted text
    (random letters of one case, letters alternating with punctuation) and
    languages whose words the vocabulary splits finely (Dutch, German, Polish)
    can still be counted low; docs/context.md lists by how much.

    Each message adds ``message_overhead`` framing tokens, and ``request()``
    adds ``request_overhead`` once for what a chat template puts around the
    whole request (a generation prompt, a default system prompt).
    """

    def __init__(
        self,
        *,
        chars_per_token: float = 3.5,
        punctuation_per_token: float = 1.5,
        message_overhead: int = MESSAGE_OVERHEAD_TOKENS,
        request_overhead: int = REQUEST_OVERHEAD_TOKENS,
    ) -> None:
        # Finite and positive: an infinite ratio counts every text as one token.
        for key, ratio in (
            ("chars_per_token", chars_per_token),
            ("punctuation_per_token", punctuation_per_token),
        ):
            if not is_positive(ratio, high=1_000.0):
                raise ConfigError("must be a positive, finite number", key=key)
        for key, tokens in (
            ("message_overhead", message_overhead),
            ("request_overhead", request_overhead),
        ):
            if not is_count(tokens, low=0):
                raise ConfigError("must be an integer of at least 0", key=key)
        self._ratio = chars_per_token
        self._punctuation = punctuation_per_token
        self._message_overhead = message_overhead
        self._request_overhead = request_overhead
        self._id = f"charclass/{chars_per_token:g}/{punctuation_per_token:g}"

    @property
    def estimator_id(self) -> str:
        return self._id

    @property
    def request_overhead(self) -> int:
        """Tokens allowed once per request for the chat template's fixed parts."""
        return self._request_overhead

    def text(self, text: str) -> int:
        return class_tokens(text, self._ratio, self._punctuation)

    def message(self, message: ModelMessage) -> int:
        return _message(self.text, message, self._message_overhead)

    def definitions(self, definitions: Sequence[ToolDefinition]) -> int:
        return _definitions(self.text, definitions, self._message_overhead)

    def request(
        self, messages: Sequence[ModelMessage], definitions: Sequence[ToolDefinition] = ()
    ) -> int:
        """A whole request: every message, the schemas and ``request_overhead``."""
        size = sum(self.message(m) for m in messages) + self.definitions(definitions)
        return size + self._request_overhead


class TokenizerEstimator:
    """Exact token counts from a real tokenizer, with a chat format's framing added.

    ``tokenizer`` is either an object whose ``encode(text)`` returns a
    sequence of ids or an object with ``.ids`` (a ``tokenizers.Tokenizer``
    returns an ``Encoding``), or a plain ``count(text) -> int`` callable, so
    this module depends on no tokenizer library. It must not add special
    tokens (BOS/EOS) per call; those belong in ``request_overhead``.

    ``message_overhead`` is the tokens a chat template adds around each
    message: one number for every role, or a mapping per role (roles it does
    not name get its largest value). ``request_overhead`` is what the template
    adds once per request (the generation prompt, a BOS token), and
    ``implicit_system_tokens`` what it adds when the request does not open
    with a system message (a template's default system prompt); both only
    enter ``request()``, which the ``Estimator`` protocol does not have.

    ``renders_definitions`` and ``renders_tool_calls`` say whether the chat
    template puts tool schemas and tool calls (ids, names, arguments and the
    id a tool result answers) into the prompt. A template with no place for
    them (SmolLM2's ChatML) drops them, and then they cost nothing:
    ``definitions()`` is 0 and a message counts without its calls. Both
    default to True, which errs high where nothing is known.

    Counts are memoized in an LRU keyed by the text, bounded by
    ``cache_entries`` and by ``cache_chars`` in total; a text longer than
    ``cache_chars`` is counted every time.
    """

    def __init__(
        self,
        tokenizer: Any,
        *,
        estimator_id: str,
        message_overhead: int | Mapping[str, int] = MESSAGE_OVERHEAD_TOKENS,
        request_overhead: int = 0,
        implicit_system_tokens: int = 0,
        renders_definitions: bool = True,
        renders_tool_calls: bool = True,
        cache_entries: int = DEFAULT_CACHE_ENTRIES,
        cache_chars: int = DEFAULT_CACHE_CHARS,
    ) -> None:
        if not is_text(estimator_id, limit=200):
            raise ConfigError("must be 1 to 200 characters of text", key="estimator_id")
        for key, bound in (("cache_entries", cache_entries), ("cache_chars", cache_chars)):
            if not is_count(bound, low=0):
                raise ConfigError("must be an integer of at least 0", key=key)
        overheads = (
            dict(message_overhead)
            if isinstance(message_overhead, Mapping)
            else {"": message_overhead}
        )
        if not overheads or min(overheads.values()) < 0:
            raise ConfigError("needs non-negative token counts", key="message_overhead")
        if request_overhead < 0 or implicit_system_tokens < 0:
            raise ConfigError("cannot be negative", key="request_overhead")
        self._count = _counter(tokenizer)
        self._id = estimator_id
        self._overheads = overheads
        self._default_overhead = max(overheads.values())
        self._request_overhead = request_overhead
        self._implicit_system = implicit_system_tokens
        self._renders_definitions = bool(renders_definitions)
        self._renders_tool_calls = bool(renders_tool_calls)
        self._cache: OrderedDict[str, int] = OrderedDict()
        self._cache_entries = cache_entries
        self._cache_chars = cache_chars
        self._cached_chars = 0
        self._cache_lock = threading.Lock()

    @property
    def estimator_id(self) -> str:
        return self._id

    @property
    def request_overhead(self) -> int:
        """Tokens the chat format adds once per request (generation prompt, BOS)."""
        return self._request_overhead

    @property
    def implicit_system_tokens(self) -> int:
        """Tokens the template adds when a request does not open with a system message."""
        return self._implicit_system

    @property
    def renders_definitions(self) -> bool:
        """Whether the template puts tool schemas into the prompt (else they count 0)."""
        return self._renders_definitions

    @property
    def renders_tool_calls(self) -> bool:
        """Whether the template puts an assistant message's tool calls into the prompt."""
        return self._renders_tool_calls

    def overhead(self, role: str) -> int:
        """The framing tokens around one message of ``role``."""
        return self._overheads.get(role, self._default_overhead)

    def text(self, text: str) -> int:
        # The lock guards only the cache: the ContextManager counts long attached text in
        # a worker thread while the event loop counts other sessions' messages.
        with self._cache_lock:
            cached = self._cache.get(text)
            if cached is not None:
                self._cache.move_to_end(text)
                return cached
        count = self._count(text)
        if len(text) <= self._cache_chars and self._cache_entries:
            with self._cache_lock:
                if text not in self._cache:
                    self._cache[text] = count
                    self._cached_chars += len(text)
                while (
                    len(self._cache) > self._cache_entries or self._cached_chars > self._cache_chars
                ):
                    evicted, _ = self._cache.popitem(last=False)
                    self._cached_chars -= len(evicted)
        return count

    def message(self, message: ModelMessage) -> int:
        return _message(
            self.text, message, self.overhead(message.role), calls=self._renders_tool_calls
        )

    def definitions(self, definitions: Sequence[ToolDefinition]) -> int:
        if not self._renders_definitions:
            return 0  # sent, perhaps, but never part of the prompt the model reads
        return _definitions(self.text, definitions, self._default_overhead)

    def request(
        self, messages: Sequence[ModelMessage], definitions: Sequence[ToolDefinition] = ()
    ) -> int:
        """A whole request as the template renders it: messages, schemas and fixed parts."""
        size = sum(self.message(m) for m in messages) + self.definitions(definitions)
        size += self._request_overhead
        if not messages or messages[0].role != "system":
            size += self._implicit_system
        return size

    def cache_info(self) -> tuple[int, int]:
        """(entries, characters) currently memoized; for tests and diagnostics."""
        return len(self._cache), self._cached_chars


class EstimatorRegistry:
    """Estimators by ``estimator_id``; the Host owns one and the ContextManager resolves in it.

    ``default`` (a ``CharEstimator`` unless given) answers for ids nobody
    registered. It is not itself registered, so ``resolve`` reports it as
    inexact even when a provider declares its id.
    """

    def __init__(self, *, default: Estimator | None = None) -> None:
        self._default: Estimator = default if default is not None else CharEstimator()
        self._estimators: dict[str, Estimator] = {}

    @property
    def default(self) -> Estimator:
        """The conservative estimator used for unknown ids."""
        return self._default

    def register(self, estimator: Estimator) -> None:
        """Make ``estimator`` the one for its ``estimator_id``; a later registration replaces it.

        Replacing is what a restarted provider (a new ``LocalModel`` for the
        same file) needs; the id promises the same counts, so nothing learned
        for the old object becomes wrong.
        """
        estimator_id = estimator.estimator_id
        if not estimator_id:
            raise ConfigError("an estimator needs a non-empty estimator_id", key="estimator_id")
        self._estimators[estimator_id] = estimator

    def get(self, estimator_id: str) -> Estimator | None:
        """The registered estimator for ``estimator_id``, or None."""
        return self._estimators.get(estimator_id)

    def resolve(self, estimator_id: str) -> tuple[Estimator, bool]:
        """(registered estimator, True), or (the default, False) when none is registered.

        False tells the caller the figures come from a stand-in, not the
        provider's tokenizer, and should be treated as conservative estimates.
        """
        found = self._estimators.get(estimator_id)
        if found is None:
            return self._default, False
        return found, True

    def __contains__(self, estimator_id: object) -> bool:
        return estimator_id in self._estimators


def _counter(tokenizer: Any) -> Callable[[str], int]:
    encode = getattr(tokenizer, "encode", None)
    if encode is None:
        if not callable(tokenizer):
            raise ConfigError(
                "needs an encode(text) method or a count(text) -> int callable", key="tokenizer"
            )
        return lambda text: int(tokenizer(text))

    def count(text: str) -> int:
        encoded = encode(text)
        return len(getattr(encoded, "ids", encoded))

    return count


def _message(
    count: Callable[[str], int], message: ModelMessage, overhead: int, *, calls: bool = True
) -> int:
    size = count(message.content) + overhead
    if calls and message.tool_call_id:
        size += _id_tokens(message.tool_call_id)
    for call in message.tool_calls if calls else ():
        # OpenAI-compatible APIs send each call's id (up to 128 characters) with it.
        size += _id_tokens(call.call_id) + count(call.name) + count(arguments_text(call))
    for part in message.attachments:
        size += _attachment(count, part)
    return size


def _id_tokens(call_id: str) -> int:
    """A call id's tokens: one a UTF-8 byte, what a byte-level tokenizer spends at most.
    Ids are random, so an estimate by their characters would differ from run to run (and
    with it what a window keeps); by their length it does not."""
    return len(call_id.encode("utf-8", "surrogatepass"))


def _attachment(count: Callable[[str], int], part: AttachmentPart) -> int:
    """An attachment's tokens: its stand-in line once its bytes are no longer sent."""
    attachment = part.attachment
    if part.data is None:
        return count(stand_in(attachment))
    if attachment.media_type == "text/plain":
        return count(part.data.decode("utf-8", "replace")) + count(attachment.name) + 4
    if attachment.media_type == "application/pdf":
        return PDF_PAGE_TOKENS * pdf_pages(part.data)
    return IMAGE_TOKENS


def _definitions(
    count: Callable[[str], int], definitions: Sequence[ToolDefinition], overhead: int
) -> int:
    if not definitions:
        return 0
    payload = [
        {"name": d.name, "description": d.description, "parameters": thaw(d.parameters)}
        for d in definitions
    ]
    return count(json.dumps(payload)) + overhead * len(definitions)


def arguments_text(call: ToolCall) -> str:
    """The text a call's arguments are counted as (JSON, ASCII-escaped): calls whose texts
    are equal count the same, whatever Python says of their values (``1 == 1.0 == True``)."""
    return json.dumps(thaw(call.arguments))
