"""Estimators: the registry, memoized tokenizer counts, and accuracy against recorded usage.

The recorded usage (``tests/fixtures/usage/smollm2-135m.json``, written by
``bench/record_usage.py``) holds chat requests and the prompt tokens
llama.cpp's server reported for them, so the GGUF tokenizer is checked
against llama.cpp offline: no server runs here except in the one test that
checks LocalModel's wiring.
"""

from __future__ import annotations

import base64
import json
import math
import random
import string
import unicodedata
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio
import pytest

from hostkit.adapters._model_source import resolve_model_path
from hostkit.adapters.gguf_tokenizer import gguf_estimator_id, load_gguf_tokenizer
from hostkit.adapters.local_llama import LocalModel, load_local_estimator
from hostkit.adapters.openai_chat import OpenAIChatProvider
from hostkit.context import CharEstimator, Estimator, EstimatorRegistry, TokenizerEstimator
from hostkit.errors import MESSAGE_LIMIT, ConfigError
from hostkit.types import ModelMessage, ToolCall, ToolDefinition
from tests.parts import local_model_missing, needs

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "usage" / "smollm2-135m.json"
# The GGUF tokenizer reproduces llama.cpp's; the chat framing is derived from the template.
TOKENIZER_TOLERANCE = 0.02

needs_gguf = needs("local-model", local_model_missing(tokenizer=True))

Recorded = tuple[str, tuple[ModelMessage, ...], tuple[ToolDefinition, ...], int]


def recorded() -> list[Recorded]:
    document = json.loads(FIXTURE.read_text(encoding="utf-8"))
    return [
        (
            entry["name"],
            tuple(ModelMessage.from_json(m["role"], m["content"]) for m in entry["messages"]),
            tuple(
                ToolDefinition(d["name"], d["description"], d["parameters"])
                for d in entry["definitions"]
            ),
            entry["input_tokens"],
        )
        for entry in document["requests"]
    ]


def uses_tools(messages: Sequence[ModelMessage], definitions: Sequence[ToolDefinition]) -> bool:
    return bool(definitions) or any(m.tool_calls for m in messages)


@pytest.fixture(scope="module")
def gguf() -> TokenizerEstimator:
    # Built once, outside any event loop: reading the vocabulary takes about two seconds.
    return anyio.run(load_local_estimator)


class Counting:
    """A count(text) callable that remembers how often it ran."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def __call__(self, text: str) -> int:
        self.calls.append(text)
        return len(text.split())


# -- registry ---------------------------------------------------------------------------


def test_registry_resolves_registered_estimators_as_exact() -> None:
    registry = EstimatorRegistry()
    exact = TokenizerEstimator(Counting(), estimator_id="words")
    registry.register(exact)

    assert registry.resolve("words") == (exact, True)
    assert registry.get("words") is exact
    assert "words" in registry


def test_registry_falls_back_to_the_conservative_default_as_inexact() -> None:
    registry = EstimatorRegistry()

    estimator, exact = registry.resolve("gguf:unknown-model")

    assert isinstance(estimator, CharEstimator)
    assert estimator is registry.default
    assert exact is False
    assert registry.get("gguf:unknown-model") is None
    # The default answers for everyone but is not registered, even under its own id.
    assert registry.resolve(registry.default.estimator_id) == (registry.default, False)


def test_registries_share_nothing_and_a_later_registration_replaces() -> None:
    first, second = EstimatorRegistry(), EstimatorRegistry()
    old = TokenizerEstimator(Counting(), estimator_id="m")
    new = TokenizerEstimator(Counting(), estimator_id="m")
    first.register(old)
    first.register(new)

    assert first.get("m") is new
    assert second.get("m") is None


def test_registry_takes_a_custom_default() -> None:
    fallback = CharEstimator(chars_per_token=2.0)
    assert EstimatorRegistry(default=fallback).resolve("x") == (fallback, False)


def test_estimators_satisfy_the_protocol() -> None:
    estimators: list[Estimator] = [
        CharEstimator(),
        TokenizerEstimator(Counting(), estimator_id="words"),
    ]
    for estimator in estimators:
        assert estimator.text("") == 0
        assert estimator.definitions([]) == 0
        assert estimator.message(ModelMessage("user", "a b c")) > estimator.text("a b c")


# -- TokenizerEstimator -----------------------------------------------------------------


class Encoding:
    def __init__(self, ids: list[int]) -> None:
        self.ids = ids


class EncodingTokenizer:
    """Shaped like tokenizers.Tokenizer: encode() returns an object with .ids."""

    def encode(self, text: str) -> Encoding:
        return Encoding(list(range(len(text.split()))))


class ListTokenizer:
    def encode(self, text: str) -> list[int]:
        return [0] * len(text.split())


@pytest.mark.parametrize("tokenizer", [EncodingTokenizer(), ListTokenizer(), Counting()])
def test_tokenizer_estimator_accepts_encoders_and_count_callables(tokenizer: Any) -> None:
    estimator = TokenizerEstimator(tokenizer, estimator_id="words", message_overhead=3)

    assert estimator.text("one two three") == 3
    assert estimator.message(ModelMessage("user", "one two")) == 2 + 3


def test_tokenizer_estimator_rejects_what_cannot_count() -> None:
    with pytest.raises(ConfigError) as caught:
        TokenizerEstimator(object(), estimator_id="x")
    assert caught.value.key == "tokenizer"
    with pytest.raises(ConfigError):
        TokenizerEstimator(Counting(), estimator_id="")


def test_tokenizer_counts_are_memoized_per_text() -> None:
    counting = Counting()
    estimator = TokenizerEstimator(counting, estimator_id="words")
    history = [ModelMessage("user", f"message number {i}") for i in range(10)]

    for _step in range(5):
        for message in history:
            estimator.message(message)

    assert sorted(counting.calls) == sorted(m.content for m in history)


def test_tokenizer_memo_is_bounded_by_entries_and_characters() -> None:
    counting = Counting()
    estimator = TokenizerEstimator(counting, estimator_id="words", cache_entries=3, cache_chars=100)
    for i in range(10):
        estimator.text(f"text {i}")
    assert estimator.cache_info()[0] == 3
    # The least recently used entries went first: the newest are still cached.
    before = len(counting.calls)
    estimator.text("text 9")
    assert len(counting.calls) == before

    long = "x " * 100  # longer than the character bound: counted, never cached
    estimator.text(long)
    estimator.text(long)
    assert counting.calls.count(long) == 2
    entries, chars = estimator.cache_info()
    assert entries <= 3
    assert chars <= 100


def test_per_role_framing_and_request_level_parts() -> None:
    estimator = TokenizerEstimator(
        Counting(),
        estimator_id="words",
        message_overhead={"user": 5, "assistant": 6},
        request_overhead=4,
        implicit_system_tokens=21,
    )
    user, assistant = ModelMessage("user", "a b"), ModelMessage("assistant", "c")
    system, tool = ModelMessage("system", "s"), ModelMessage("tool", "r", tool_call_id="1")

    assert estimator.message(user) == 2 + 5
    assert estimator.message(assistant) == 1 + 6
    # The id the tool result answers ("1") counts too: tool calls render by default.
    assert estimator.message(tool) == 1 + 1 + 6, "an unnamed role gets the largest overhead"
    assert estimator.request([user]) == 7 + 4 + 21, "no leading system message: template adds one"
    assert estimator.request([system, user]) == 7 + 7 + 4


def test_tool_calls_and_schemas_are_counted() -> None:
    estimator = TokenizerEstimator(Counting(), estimator_id="words", message_overhead=0)
    call = ModelMessage("assistant", "", (ToolCall("c1", "lookup", {"query": "weather today"}),))
    schema = ToolDefinition("lookup", "find things", {"type": "object"})

    assert estimator.message(call) > 0
    assert estimator.definitions([schema]) > 0


# -- accuracy against llama.cpp's recorded usage ------------------------------------------


def test_fixture_is_small_and_varied() -> None:
    size = FIXTURE.stat().st_size
    cases = recorded()
    assert size < 200 * 1024
    assert len(cases) >= 20
    assert any(uses_tools(messages, definitions) for _, messages, definitions, _ in cases)
    assert any(messages[0].role != "system" for _, messages, _, _ in cases)


@pytest.mark.parametrize("case", recorded(), ids=lambda case: case[0])
def test_char_estimator_over_estimates_every_recorded_request(case: Recorded) -> None:
    _name, messages, definitions, reported = case
    assert CharEstimator().request(messages, definitions) >= reported


@needs_gguf
@pytest.mark.parametrize("case", recorded(), ids=lambda case: case[0])
def test_gguf_tokenizer_matches_llama_cpp_prompt_tokens(
    gguf: TokenizerEstimator, case: Recorded
) -> None:
    _name, messages, definitions, reported = case
    # With tools too: SmolLM2's template drops schemas and tool-call arguments, and so
    # does the estimator built from it.
    estimate = gguf.request(messages, definitions)
    assert abs(estimate - reported) <= max(1, TOKENIZER_TOLERANCE * reported)


def _dense_texts() -> dict[str, str]:
    """Text that tokenizes denser than prose: random identifiers, decomposed accents,
    Hangul, and a URL with a hash in it, next to plain English."""
    rng = random.Random(7)
    return {
        "base64": base64.b64encode(rng.randbytes(6_000)).decode(),
        "hex": rng.randbytes(4_000).hex(),
        "decomposed accents": unicodedata.normalize("NFD", "café résumé naïve élève " * 100),
        "hangul": "안녕하세요 오늘 날씨가 좋네요 " * 100,
        "url with a hash": "see https://example.com/r?id=8f14e45fceea167a5a36dedd4bea2543 " * 30,
        # Random letters and consonant strings were counted as prose: about half.
        "random letters": "".join(rng.choice(string.ascii_lowercase) for _ in range(8_000)),
        "mixed-case noise": "".join(
            rng.choice("aAbBcCdDeEfFgGhHiIjJkKlLmMnNoOpP") for _ in range(8_000)
        ),
        "consonant strings": " ".join(
            "".join(rng.choice("bcdfghjklmnpqrstvwxz") for _ in range(rng.randint(6, 9)))
            for _ in range(900)
        ),
        "english": "The quick brown fox jumps over the lazy dog. " * 100,
    }


@needs_gguf
@pytest.mark.parametrize("kind", sorted(_dense_texts()))
def test_char_estimator_is_at_or_above_a_real_tokenizer_on_dense_text(
    gguf: TokenizerEstimator, kind: str
) -> None:
    """A paste of base64 was estimated at half its real size: the request went out larger
    than the provider's window. Dense text now counts at or above SmolLM2's tokens."""
    text = _dense_texts()[kind]
    assert CharEstimator().text(text) >= gguf.text(text)


def test_a_long_filler_of_one_letter_or_a_long_word_is_not_counted_as_random() -> None:
    """Test fillers keep their prose estimate: no extra cost for what tokenizes like
    prose. Long words (a German compound, a CamelCase name: vowels enough) are not priced
    as random runs (0.45 a letter more); a cluster of four consonants or more costs them
    a token (SmolLM2 counts the compound at 17 tokens, the prose rate at 12)."""
    estimator = CharEstimator()
    for filler in ("a" * 400, "z" * 400, "hmmmmmm"):
        assert estimator.text(filler) == math.ceil(len(filler) / 3.5), filler
    for word in (
        "pneumonoultramicroscopicsilicovolcanoconiosis",
        "Donaudampfschiffahrtsgesellschaftskapitaen",
        "AbstractSingletonProxyFactoryBean",
    ):
        assert estimator.text(word) <= math.ceil(len(word) / 3.5) + len(word) // 10, word


@needs_gguf
def test_gguf_estimator_is_named_after_the_model_file(gguf: TokenizerEstimator) -> None:
    document = json.loads(FIXTURE.read_text(encoding="utf-8"))
    assert gguf.estimator_id == document["estimator_id"] == "gguf:SmolLM2-135M-Instruct.Q4_1"
    assert gguf_estimator_id(Path("/models/SmolLM2-135M-Instruct.Q4_1.gguf")) == gguf.estimator_id


@needs_gguf
def test_gguf_tokenizer_handles_special_tokens_digits_and_bytes(
    gguf: TokenizerEstimator,
) -> None:
    assert gguf.text("<|im_start|>") == 1, "special tokens in text count as one, as in llama.cpp"
    assert gguf.text("12345") == 5, "SmolLM2's pre-tokenizer splits every digit"
    assert gguf.text("🦊") >= 1
    assert gguf.overhead("assistant") == gguf.overhead("user") + 1


@needs_gguf
@pytest.mark.anyio
async def test_loading_runs_off_the_event_loop() -> None:
    # blockbuster fails this test if reading the GGUF blocks the loop.
    estimator = await load_local_estimator()
    assert estimator.text("Hello world") == 2


# -- errors -------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_missing_gguf_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no model file") as caught:
        await load_gguf_tokenizer(tmp_path / "missing.gguf")
    assert caught.value.key == "model_path"


@needs_gguf
@pytest.mark.anyio
@pytest.mark.parametrize(
    "content",
    [b"", b"this is not a GGUF file", b"GGUF" + b"\xff" * 64],
    ids=["empty", "text", "bad-header"],
)
async def test_unreadable_gguf_is_a_bounded_config_error(tmp_path: Path, content: bytes) -> None:
    broken = tmp_path / ("x" * 200 + ".gguf")
    await anyio.Path(broken).write_bytes(content)

    with pytest.raises(ConfigError) as caught:
        await load_gguf_tokenizer(broken)

    assert caught.value.key == "model_path"
    assert len(str(caught.value)) <= MESSAGE_LIMIT


@needs_gguf
@pytest.mark.anyio
async def test_truncated_gguf_is_a_config_error(tmp_path: Path) -> None:
    head = await anyio.to_thread.run_sync(_packaged_gguf_head, 64 * 1024)
    truncated = tmp_path / "truncated.gguf"
    await anyio.Path(truncated).write_bytes(head)

    with pytest.raises(ConfigError) as caught:
        await load_gguf_tokenizer(truncated)
    assert caught.value.key == "model_path"


@needs_gguf
@pytest.mark.anyio
async def test_unsupported_tokenizer_model_is_a_config_error(tmp_path: Path) -> None:
    path = tmp_path / "spm.gguf"
    await anyio.to_thread.run_sync(_write_gguf, path, "llama")

    with pytest.raises(ConfigError, match="not supported") as caught:
        await load_gguf_tokenizer(path)
    assert caught.value.key == "model_path"


def _packaged_gguf_head(size: int) -> bytes:
    # The embedded GGUF where LocalModel finds it (the cache).
    with resolve_model_path(None).open("rb") as stream:
        return stream.read(size)


def _write_gguf(path: Path, tokenizer_model: str) -> None:
    from gguf import GGUFWriter

    writer = GGUFWriter(str(path), arch="llama")
    writer.add_tokenizer_model(tokenizer_model)
    writer.add_token_list(["<unk>", "a", "b"])
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


# -- LocalModel wiring --------------------------------------------------------------------


@needs_gguf
@pytest.mark.slow
@pytest.mark.anyio
async def test_local_model_limits_name_its_estimator() -> None:
    async with LocalModel.start() as local:
        first = await local.estimator()
        # The OpenAI SDK is imported above: importing it reads files, which blockbuster flags.
        provider: OpenAIChatProvider = local.provider(max_output_tokens=8)
        try:
            assert provider.limits.estimator_id == local.limits.estimator_id
        finally:
            await provider.aclose()
    assert first.estimator_id == local.limits.estimator_id
    assert await local.estimator() is first, "loaded once, kept after the server closed"
    registry = EstimatorRegistry()
    registry.register(first)
    assert registry.resolve(local.limits.estimator_id) == (first, True)
