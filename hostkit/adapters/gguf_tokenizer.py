"""An exact, offline token estimator for a GGUF model, built from the file's own metadata.

A GGUF file carries its tokenizer: the vocabulary, the BPE merges, the token
types (which tokens are special), the name of llama.cpp's pre-tokenizer and
the chat template. ``load_gguf_tokenizer(path)`` reads those with ``gguf``
(llama.cpp's own reader) and rebuilds the tokenizer with HF ``tokenizers``,
so the counts are llama.cpp's without loading the model or starting a server.

Only byte-level BPE (``tokenizer.ggml.model == "gpt2"``) with a pre-tokenizer
whose split rules are known here is supported; anything else is a
``ConfigError`` rather than a tokenizer that is silently wrong.

The chat framing is derived for ChatML templates (``<|im_start|>role\\n ...
<|im_end|>\\n``, SmolLM2's): per-role message overhead, the generation prompt
and a default system prompt the template inserts, each counted with the
tokenizer itself. Other templates keep the generic overhead, which the
ContextManager's safety margin and calibration absorb.

Tool schemas and tool-call arguments are counted only when the template
has a place for them (it names ``tools``, ``tool_calls``): llama.cpp renders
a request through the template, so a template without them (SmolLM2's)
drops them, whether or not the request carries them, and the exact estimate
must not count what the model never reads. The recorded usage shows it: the
same prompt tokens with tools offered as without. A template that names
them, or a file with no template, keeps them counted, which errs high where
the rendering is not reproduced here.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import anyio

from hostkit._extras import missing_dependency
from hostkit.adapters._gguf_fields import cached_fields
from hostkit.context import (
    DEFAULT_CACHE_CHARS,
    DEFAULT_CACHE_ENTRIES,
    MESSAGE_OVERHEAD_TOKENS,
    TokenizerEstimator,
)
from hostkit.errors import ConfigError

__all__ = ["build_gguf_estimator", "gguf_estimator_id", "load_gguf_tokenizer"]

ESTIMATOR_PREFIX = "gguf:"
CHAT_ROLES = ("system", "user", "assistant", "tool")
# GGUF token types (llama.cpp's llama_token_type): these are matched whole in text.
_CONTROL, _USER_DEFINED = 3, 4
# The split rules of llama.cpp's BPE pre-tokenizers (llama-vocab.cpp) that this module
# reproduces: each entry lists the regexes that isolate pieces before GPT-2's byte-level
# regex, which HF's ByteLevel pre-tokenizer applies itself.
_GPT2_FAMILY: tuple[str, ...] = ()
_DIGIT_FAMILY = (r"\p{N}",)
_PRE_TOKENIZERS: dict[str, tuple[str, ...]] = {
    "default": _GPT2_FAMILY,
    "gpt-2": _GPT2_FAMILY,
    "gpt2": _GPT2_FAMILY,
    "mpt": _GPT2_FAMILY,
    "olmo": _GPT2_FAMILY,
    "jais": _GPT2_FAMILY,
    "starcoder": _DIGIT_FAMILY,
    "refact": _DIGIT_FAMILY,
    "command-r": _DIGIT_FAMILY,
    "smollm": _DIGIT_FAMILY,
    "codeshell": _DIGIT_FAMILY,
    "exaone": _DIGIT_FAMILY,
    "minerva-7b": _DIGIT_FAMILY,
}
# A ChatML template's default system prompt: a literal system block emitted when the
# first message is not a system message (HF's SmolLM2 and Qwen2 templates).
_IMPLICIT_SYSTEM = re.compile(
    r"""\[0\]\[['"]role['"]\]\s*!=\s*['"]system['"].*?\{\{-?\s*(['"])"""
    r"""(<\|im_start\|>system(?:\n|\\n).*?)\1\s*-?\}\}""",
    re.DOTALL,
)
# The ``tools`` variable (not ``tool_calls``, nor a ``tool`` role): what renders schemas.
_TOOLS = re.compile(r"\btools\b")


def gguf_estimator_id(path: Path) -> str:
    """The ``estimator_id`` of a GGUF model's tokenizer: ``"gguf:<file stem>"``."""
    return f"{ESTIMATOR_PREFIX}{path.stem}"


async def load_gguf_tokenizer(
    path: Path,
    *,
    estimator_id: str | None = None,
    cache_entries: int = DEFAULT_CACHE_ENTRIES,
    cache_chars: int = DEFAULT_CACHE_CHARS,
) -> TokenizerEstimator:
    """Read ``path``'s tokenizer metadata in a worker thread and return its exact estimator.

    ``estimator_id`` defaults to ``gguf_estimator_id(path)``. Reading is
    blocking file I/O (about six seconds of CPU for SmolLM2's 49k-token
    vocabulary the first time; the fields are then cached per user, keyed by
    the file's identity, see ``_gguf_fields``), so callers cache the result.
    Raises ``ConfigError`` (key ``model_path``) when the file is missing or
    not a readable GGUF, lacks tokenizer metadata, or uses a tokenizer this
    module cannot reproduce, and when ``gguf`` or ``tokenizers``
    (hostkit[local]) is not installed.
    """
    return await anyio.to_thread.run_sync(
        lambda: build_gguf_estimator(
            path,
            estimator_id=estimator_id,
            cache_entries=cache_entries,
            cache_chars=cache_chars,
        )
    )


def build_gguf_estimator(
    path: Path,
    *,
    estimator_id: str | None = None,
    cache_entries: int = DEFAULT_CACHE_ENTRIES,
    cache_chars: int = DEFAULT_CACHE_CHARS,
) -> TokenizerEstimator:
    """The blocking core of ``load_gguf_tokenizer``; never call it on the event loop."""
    metadata = cached_fields(path, _read_metadata)
    tokenizer = _build_tokenizer(metadata)

    def count(text: str) -> int:
        return len(tokenizer.encode(text, add_special_tokens=False).ids)

    template = str(metadata.get("tokenizer.chat_template") or "")
    overheads, request_overhead, implicit_system = _chat_framing(count, template)
    if metadata.get("tokenizer.ggml.add_bos_token"):
        request_overhead += 1
    renders_definitions, renders_tool_calls = _tool_rendering(template)
    return TokenizerEstimator(
        count,
        estimator_id=estimator_id or gguf_estimator_id(path),
        message_overhead=overheads,
        request_overhead=request_overhead,
        implicit_system_tokens=implicit_system,
        renders_definitions=renders_definitions,
        renders_tool_calls=renders_tool_calls,
        cache_entries=cache_entries,
        cache_chars=cache_chars,
    )


_KEYS = (
    "tokenizer.ggml.model",
    "tokenizer.ggml.pre",
    "tokenizer.ggml.tokens",
    "tokenizer.ggml.token_type",
    "tokenizer.ggml.merges",
    "tokenizer.ggml.add_bos_token",
    "tokenizer.chat_template",
)


def _read_metadata(path: Path) -> dict[str, Any]:
    """The tokenizer fields of the GGUF header, as plain Python values."""
    try:
        from gguf import GGUFReader
    except ImportError as exc:
        raise missing_dependency(
            "local", exc, feature="reading a GGUF tokenizer", key="model_path"
        ) from exc
    if not path.is_file():
        raise ConfigError(f"no model file at {path}", key="model_path")
    try:
        reader = GGUFReader(path, "r")
    except (OSError, ValueError, KeyError, IndexError, TypeError) as exc:
        # gguf raises ValueError for a bad magic or version and struct/numpy errors
        # (ValueError, IndexError) for a truncated file; none of them is ours to surface.
        raise ConfigError(
            f"{path.name} is not a readable GGUF file ({type(exc).__name__})", key="model_path"
        ) from exc
    try:
        values: dict[str, Any] = {}
        for key in _KEYS:
            field = reader.fields.get(key)
            if field is not None:
                values[key] = field.contents()
        return values
    except (ValueError, IndexError, TypeError, UnicodeDecodeError) as exc:
        raise ConfigError(
            f"{path.name} has unreadable tokenizer metadata ({type(exc).__name__})",
            key="model_path",
        ) from exc
    finally:
        # Drop the memory map now rather than whenever the collector runs.
        del reader


def _build_tokenizer(metadata: dict[str, Any]) -> Any:
    try:
        from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers
    except ImportError as exc:
        raise missing_dependency(
            "local", exc, feature="a GGUF tokenizer", key="model_path"
        ) from exc
    model = metadata.get("tokenizer.ggml.model")
    if model != "gpt2":
        raise ConfigError(
            f"tokenizer model {str(model)[:40]!r} is not supported (only byte-level BPE, 'gpt2')",
            key="model_path",
        )
    pre = str(metadata.get("tokenizer.ggml.pre") or "default")
    splits = _PRE_TOKENIZERS.get(pre)
    if splits is None:
        raise ConfigError(f"pre-tokenizer {pre[:40]!r} is not supported", key="model_path")
    tokens: Sequence[str] = metadata.get("tokenizer.ggml.tokens") or ()
    merges: Sequence[str] = metadata.get("tokenizer.ggml.merges") or ()
    types: Sequence[int] = metadata.get("tokenizer.ggml.token_type") or ()
    if not tokens or not merges:
        raise ConfigError("the GGUF file has no BPE vocabulary or merges", key="model_path")
    if types and len(types) != len(tokens):
        raise ConfigError("the GGUF token types do not match its vocabulary", key="model_path")
    try:
        bpe = models.BPE(
            vocab={token: index for index, token in enumerate(tokens)},
            merges=[_merge(line) for line in merges],
        )
    except Exception as exc:  # the Rust builder raises plain Exception subclasses
        raise ConfigError(
            f"the GGUF vocabulary cannot be loaded ({type(exc).__name__})", key="model_path"
        ) from exc
    tokenizer = Tokenizer(bpe)
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            *(pre_tokenizers.Split(Regex(pattern), "isolated") for pattern in splits),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        ]
    )
    tokenizer.decoder = decoders.ByteLevel()
    # llama.cpp's server parses special tokens in the rendered prompt, so they count as one.
    tokenizer.add_special_tokens(
        [
            AddedToken(tokens[index], special=kind == _CONTROL, normalized=False)
            for index, kind in enumerate(types)
            if kind in (_CONTROL, _USER_DEFINED)
        ]
    )
    return tokenizer


def _merge(line: str) -> tuple[str, str]:
    left, sep, right = line.partition(" ")
    if not sep:
        raise ValueError("a BPE merge needs two parts")
    return left, right


def _chat_framing(count: Callable[[str], int], template: str) -> tuple[dict[str, int], int, int]:
    """(per-role message overhead, per-request overhead, implicit system prompt tokens)."""
    if "<|im_start|>" not in template or "<|im_end|>" not in template:
        return {"": MESSAGE_OVERHEAD_TOKENS}, 0, 0
    overheads = {role: count(f"<|im_start|>{role}\n<|im_end|>\n") for role in CHAT_ROLES}
    generation = count("<|im_start|>assistant\n")
    found = _IMPLICIT_SYSTEM.search(template)
    implicit = 0
    if found:
        block = found.group(2).replace("\\n", "\n")
        implicit = count(block if block.endswith("\n") else block + "\n")
    return overheads, generation, implicit


def _tool_rendering(template: str) -> tuple[bool, bool]:
    """(renders tool schemas, renders tool calls) for a chat template.

    A Jinja template reaches the request's tools only through the ``tools``
    variable and an assistant message's calls only through ``tool_calls``;
    one that names neither cannot render them. Without a template llama.cpp
    picks a built-in one this module does not read, so both stay counted.
    """
    if not template:
        return True, True
    return _TOOLS.search(template) is not None, "tool_calls" in template
