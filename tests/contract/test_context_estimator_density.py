"""CharEstimator on what people and tools write: at or above a real tokenizer's count.

A reviewer measured SmolLM2's count against the estimate on tool output and
scripts the estimate priced as prose: hex dumps, tab-indented code, CSV,
IPv6 lists, wrapped base64, Armenian, random CJK, private-use and Braille
text. A request made of them went out up to 1.6 times (base64 wrapped at 20
characters: twice) larger than estimated. These pin each at or above the
count, English, code and JSON not grossly above it, and tool-call ids counted.
"""

from __future__ import annotations

import base64
import json
import random
import string

import anyio
import pytest

from hostkit.adapters.local_llama import load_local_estimator
from hostkit.context import CharEstimator, TokenizerEstimator
from hostkit.types import ModelMessage, ToolCall
from tests.parts import local_model_missing, needs

needs_gguf = needs("local-model", local_model_missing(tokenizer=True))


@pytest.fixture(scope="module")
def gguf() -> TokenizerEstimator:
    # Built once, outside any event loop: reading the vocabulary takes about two seconds.
    return anyio.run(load_local_estimator)


def _od(data: bytes) -> str:
    """``od -A x -t x1``: an offset, then each byte as a two-digit hex group."""
    rows = (
        f"{offset:06x} " + " ".join(f"{byte:02x}" for byte in data[offset : offset + 16])
        for offset in range(0, len(data), 16)
    )
    return "\n".join(rows) + "\n"


def _xxd(data: bytes) -> str:
    """``xxd``: an offset, hex in groups of four digits, and the printable bytes."""
    rows = []
    for offset in range(0, len(data), 16):
        chunk = data[offset : offset + 16]
        groups = " ".join(chunk[i : i + 2].hex() for i in range(0, len(chunk), 2))
        shown = "".join(chr(byte) if 32 <= byte < 127 else "." for byte in chunk)
        rows.append(f"{offset:08x}: {groups:<39}  {shown}")
    return "\n".join(rows) + "\n"


GO = """func (s *Server) handle(w http.ResponseWriter, r *http.Request) {
\tif r.Method != http.MethodGet {
\t\thttp.Error(w, "method not allowed", 405)
\t\treturn
\t}
\tfor i, item := range s.items {
\t\tif item.ID == r.URL.Query().Get("id") {
\t\t\tfmt.Fprintf(w, "%d: %s\\n", i, item.Name)
\t\t}
\t}
}
"""
ARMENIAN = (
    "Բոլոր մարդիկ ծնվում են ազատ ու հավասար իրենց արժանապատվությամբ ու իրավունքներով\u0589 "
    "Նրանք ունեն բանականություն ու խիղճ և միմյանց պետք է եղբայրաբար վերաբերվեն\u0589 "
)


def _written() -> dict[str, str]:
    rng = random.Random(11)
    data = rng.randbytes(3_000)

    def chars(low: int, high: int) -> str:
        return "".join(chr(rng.randint(low, high)) for _ in range(2_000))

    def drawn(alphabet: str, length: int) -> str:
        return "".join(rng.choice(alphabet) for _ in range(length))

    alphanumeric = string.ascii_letters + string.digits

    return {
        "od -t x1": _od(data),
        "xxd": _xxd(data),
        "tab-indented code": GO * 20,
        "csv of floats": "\n".join(
            ",".join(f"{rng.random():.6f}" for _ in range(8)) for _ in range(60)
        ),
        "ipv6 list": "\n".join(
            ":".join(f"{rng.randint(0, 65535):x}" for _ in range(8)) for _ in range(150)
        ),
        "base64 wrapped at 20": "\n".join(
            base64.b64encode(rng.randbytes(15)).decode() for _ in range(150)
        ),
        "base64url wrapped at 12": "\n".join(
            base64.urlsafe_b64encode(rng.randbytes(9)).decode() for _ in range(300)
        ),
        "ids of 11": "\n".join(drawn(alphanumeric + "_-", 11) for _ in range(300)),
        "passwords of 12": "\n".join(drawn(alphanumeric, 12) for _ in range(300)),
        "space-newline runs": " \n" * 2_000,
        "armenian prose": ARMENIAN * 20,
        "random cjk": chars(0x4E00, 0x9FFF),
        "latin-1 accents": chars(0xC0, 0xFF),
        "private use": chars(0xE000, 0xF8FF),
        "braille": chars(0x2800, 0x28FF),
    }


@needs_gguf
@pytest.mark.parametrize("kind", sorted(_written()))
def test_char_estimator_is_at_or_above_smollm2_on_tool_output_and_scripts(
    gguf: TokenizerEstimator, kind: str
) -> None:
    text = _written()[kind]
    assert CharEstimator().text(text) >= gguf.text(text)


ENGLISH = (
    "The context manager counts each message once while the window holds it, and the "
    "request's total is the sum of those counts. When the total would not fit, the oldest "
    "groups are summarised first; a summary that fails falls back to a plain cut. "
)
PYTHON = '''def prune(groups: list[Group], *, budget: int) -> list[Group]:
    """The newest groups that fit in ``budget``, oldest first."""
    kept: list[Group] = []
    for group in reversed(groups):
        if group.tokens > budget:
            break
        budget -= group.tokens
        kept.append(group)
    return kept[::-1]
'''
JSON = json.dumps(
    [
        {"id": f"item-{i}", "name": "example", "tags": ["a", "b"], "size": i * 37, "ok": True}
        for i in range(40)
    ],
    indent=2,
)


@needs_gguf
@pytest.mark.parametrize(
    ("text", "most"),
    [(ENGLISH * 20, 1.45), (PYTHON * 20, 1.55), (JSON, 1.3)],
    ids=["english", "python", "json"],
)
def test_char_estimator_does_not_grossly_over_count_prose_code_and_json(
    gguf: TokenizerEstimator, text: str, most: float
) -> None:
    """Erring high costs window: what is over-counted is compacted early."""
    assert CharEstimator().text(text) <= most * gguf.text(text)


def _crafted() -> dict[str, tuple[str, float]]:
    """Text the estimate still counts low, with the factor docs/context.md gives for it."""
    rng = random.Random(5)

    def drawn(alphabet: str, low: int, high: int) -> str:
        return "".join(rng.choice(alphabet) for _ in range(rng.randint(low, high)))

    upper, lower = string.ascii_uppercase, string.ascii_lowercase
    words = "the of and to in is was for on that with as by at from his her which or be"
    return {
        "random mixed-case letters": (
            " ".join(drawn(string.ascii_letters, 3, 23) for _ in range(600)),
            1.3,
        ),
        "random lower-case letters": (" ".join(drawn(lower, 3, 20) for _ in range(600)), 1.5),
        "random capitals": (" ".join(drawn(upper, 3, 20) for _ in range(600)), 1.65),
        "random CamelCase ids": (
            " ".join(
                drawn(upper, 1, 1) + drawn(lower, 3, 3) + drawn(upper, 1, 1) + drawn(lower, 3, 3)
                for _ in range(600)
            ),
            1.55,
        ),
        "a word a line": ("\n".join(rng.choice(words.split()) for _ in range(2_000)), 1.15),
        "one-word bullets": (
            "\n".join("- " + rng.choice(words.split()) for _ in range(2_000)),
            1.15,
        ),
        "a word and a space a line": (
            "\n".join(rng.choice(words.split()) + " " for _ in range(2_000)),
            1.05,
        ),
    }


@needs_gguf
@pytest.mark.parametrize("kind", sorted(_crafted()))
def test_crafted_text_is_counted_low_by_no_more_than_the_documented_factor(
    gguf: TokenizerEstimator, kind: str
) -> None:
    """A reviewer measured SmolLM2 at 2.29 times the estimate on random letters in short
    runs, 1.86 on random CamelCase ids, 1.75 on runs of " \n" and 1.9 on a word a line."""
    text, factor = _crafted()[kind]
    assert gguf.text(text) <= factor * CharEstimator().text(text)


def test_a_space_before_a_line_break_and_greek_extended_cost_a_token_each() -> None:
    """SmolLM2 spends a token on each " \n" of a run; cl100k a token per byte of
    polytonic Greek, whose accented letters sit in Greek Extended."""
    estimator = CharEstimator()
    assert estimator.text(" \n" * 1_000) >= 1_000
    polytonic = "ἀἐἠἰὀὐὠᾀᾐᾠἄἔἤἴὄὔὤ" * 20
    assert estimator.text(polytonic) >= len(polytonic.encode())


def test_each_tab_and_control_character_counts_a_token() -> None:
    estimator = CharEstimator()
    assert estimator.text("\t" * 40) >= 40
    assert estimator.text("".join(chr(code) for code in range(1, 9)) * 5) >= 40


def test_thin_scripts_count_a_token_per_byte_and_covered_ones_less() -> None:
    """Armenian, Hangul, CJK and private use are split into bytes by an English-first
    vocabulary; Cyrillic, Greek and kana are merged, and keep the cheaper rate."""
    estimator = CharEstimator()
    for thin in ("միմյանց", "안녕하세요", "人人生而自由", "\ue000\ue001\ue002"):
        assert estimator.text(thin) >= len(thin.encode()), thin
    for covered in ("свободными", "ελεύθεροι", "すべての"):
        assert estimator.text(covered) < len(covered.encode()), covered


def _step(id_length: int) -> list[ModelMessage]:
    ids = [f"{i:03d}".ljust(id_length, "x")[:id_length] for i in range(64)]
    calls = tuple(ToolCall(i, "files_read", {"path": "a"}) for i in ids)
    return [ModelMessage("assistant", "", calls)] + [
        ModelMessage("tool", "ok", tool_call_id=i, name="files_read") for i in ids
    ]


def test_tool_call_ids_are_counted_on_calls_and_results() -> None:
    """OpenAI-compatible adapters send each call's id with the call and with its result:
    up to 128 characters, twice, for each of 64 calls in a step."""
    estimator = CharEstimator()
    short, long = _step(3), _step(128)

    assert estimator.message(long[0]) - estimator.message(short[0]) >= 64 * 125 / 4
    assert estimator.message(long[1]) - estimator.message(short[1]) >= 125 / 4
    assert estimator.request(long) > estimator.request(short) + 2 * 64 * 125 / 4


def test_a_template_without_tool_calls_counts_no_ids() -> None:
    """A tokenizer estimator whose template drops tool calls (SmolLM2's) drops their ids
    with them; one that renders them counts the ids too."""

    def words(text: str) -> int:
        return len(text.split())

    dropping = TokenizerEstimator(words, estimator_id="w", renders_tool_calls=False)
    rendering = TokenizerEstimator(words, estimator_id="w")
    result = ModelMessage("tool", "ok", tool_call_id="call_1")
    call = ModelMessage("assistant", "", (ToolCall("call_1", "read", {}),))

    # An id counts a token a byte, whatever the estimator: "call_1" is 6.
    assert dropping.message(result) == rendering.message(result) - 6
    assert dropping.message(call) == rendering.message(call) - 6 - 2  # id; name, arguments


def test_an_id_counts_the_same_whatever_characters_it_drew() -> None:
    """Ids are random: estimated by their characters, the same request came out at 965
    tokens in one run and 975 in the next, and a window kept different history."""
    estimator = CharEstimator()
    counts = {
        estimator.message(ModelMessage("tool", "ok", tool_call_id=call_id))
        for call_id in ("call_01a24a46c3dfbc7cb02733ea6acf", "call_zzzzzzzzzzzzzzzzzzzzzzzzzzzz")
    }
    assert len(counts) == 1
