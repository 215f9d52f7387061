"""The redactor finds a secret in every spelling: escaped, re-lined, flattened, cut, overlapped.

These pin ``hostkit.effects._redaction`` directly; the Host-level scans in
``test_secret_leak_shapes`` show the same through a real turn.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import re
import types
from urllib.parse import quote, quote_plus, urlencode

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from hostkit.effects import MIN_SECRET_CHARS, redact_secrets
from hostkit.effects._redaction import (
    MAX_DERIVED_SECRET_CHARS,
    MAX_DERIVED_SECRETS,
    RedactionLimit,
    Redactor,
    derived_secrets,
    safe_text,
    spellings,
)
from hostkit.effects._views import render_output, result
from hostkit.errors import bounded

PEM = (
    "-----BEGIN KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEF\n"
    "AASCBKcwggSjAgEAAoIBAQC7VJTU\n-----END KEY-----"
)
AWKWARD = 'a"b\\c\nd\u00e9f-\u03a9-\U0001f511-tail'


def leftovers(text: str, secret: str, size: int = MIN_SECRET_CHARS) -> list[str]:
    """Every piece of ``secret`` of ``size`` characters still in ``text``."""
    return [
        secret[i : i + size] for i in range(len(secret) - size + 1) if secret[i : i + size] in text
    ]


@pytest.mark.parametrize(
    "shown",
    [
        PEM.replace("\n", "\r\n"),
        PEM.replace("\n", "\r"),
        " | ".join(PEM.splitlines()),
        "\n".join("    " + line for line in PEM.splitlines()),
        json.dumps({"key": PEM}),
        json.dumps(json.dumps(PEM)),
        repr(PEM),
        repr([PEM.replace("\n", "\r\n")]),
        bounded(PEM, 10_000),
        "".join(PEM.splitlines()),
    ],
    ids=[
        "crlf",
        "cr",
        "printed",
        "indented",
        "json",
        "json2",
        "repr",
        "repr_crlf",
        "bounded",
        "joined",
    ],
)
def test_a_multi_line_secret_is_caught_in_any_layout(shown: str) -> None:
    text = redact_secrets(f"before {shown} after", {"HK_KEY": PEM})
    for line in PEM.splitlines():
        assert line not in text
    assert "[redacted:HK_KEY]" in text
    assert text.startswith("before ")
    # A fragment of the key's flattened spelling ("EY----- ") may take the space too.
    assert text.endswith("after")


@pytest.mark.parametrize(
    "shown",
    [
        AWKWARD,
        json.dumps(AWKWARD),
        json.dumps(AWKWARD, ensure_ascii=False),
        repr(AWKWARD),
        ascii(AWKWARD),
        repr(AWKWARD + "'\""),
        repr(json.dumps({"v": AWKWARD})),
        bounded(AWKWARD, 1_000),
    ],
)
def test_an_awkward_secret_is_caught_raw_and_escaped(shown: str) -> None:
    text = redact_secrets(f"<{shown}>", {"HK_S": AWKWARD})
    assert "[redacted:HK_S]" in text
    assert leftovers(text, AWKWARD) == []
    assert "d\u00e9f-\u03a9" not in text
    assert "d\\u00e9f" not in text


def test_a_line_shorter_than_the_minimum_is_not_matched_alone() -> None:
    """The documented limit: a short line printed on its own cannot be told from text."""
    secret = "long-enough-line\nab12"
    text = redact_secrets("ab12 and long-enough-line", {"HK_S": secret})
    assert text == "ab12 and [redacted:HK_S]"


def test_overlapping_secrets_leave_no_piece_of_either() -> None:
    first, second = "alpha-123456", "123456-omega"
    text = Redactor.of({"HK_A": first, "HK_B": second}).text("x alpha-123456-omega y")
    assert text == "x [redacted:HK_A] y"
    assert leftovers(text, first, 3) == leftovers(text, second, 3) == []


@pytest.mark.parametrize("cut", range(1, 20))
def test_a_cut_through_a_secret_leaves_none_of_its_beginning(cut: int) -> None:
    secret = "sk-0123456789abcdef"
    text = "x" * 10 + secret + " more"
    limit = 10 + cut
    redacted = Redactor.of({"HK_S": secret}).text(text, limit=limit)
    assert redacted.endswith("…")
    kept = redacted.removesuffix("…")
    assert not any(kept.endswith(secret[:k]) for k in range(2, len(secret)))
    assert leftovers(redacted, secret, 2) == []


def test_structures_are_redacted_leaf_by_leaf_and_key_by_key() -> None:
    redactor = Redactor.of({"HK_S": AWKWARD})
    value = {"v": [AWKWARD, {"deep": f"x{AWKWARD}y"}], AWKWARD: 1, "n": 2**5000, (1, 2): "k"}
    out = redactor.value(value)
    encoded = json.dumps(out, ensure_ascii=False)
    assert leftovers(encoded, AWKWARD) == []
    assert leftovers(repr(out), AWKWARD) == []
    assert out["[redacted:HK_S]"] == 1
    assert out["n"] == "[an integer of 5001 bits]"
    assert out["(1, 2)"] == "k"


def test_secret_named_fields_give_derived_secrets_anywhere_in_a_structure() -> None:
    source = {
        "user": "bob-the-user",
        "api_key": "key-123456",
        "nested": [{"Authorization": ["Bearer abcdef", "short"]}],
        "password": 12345678,
        "client_secret": {"value": "inner-secret"},
    }
    assert derived_secrets(source) == ["key-123456", "Bearer abcdef", "inner-secret"]


def test_derived_values_are_masked_without_naming_their_field() -> None:
    text = Redactor.of({}, ["key-123456"]).text('{"token_key-123456": "key-123456"}')
    assert text == '{"token_[redacted]": "[redacted]"}'


def test_lone_surrogates_become_escapes_or_replacement_characters() -> None:
    assert safe_text("name-\udcff\udc80.txt") == "name-\\xff\\x80.txt"
    assert safe_text("odd-\ud800-\udfff") == "odd-\ufffd-\ufffd"
    assert safe_text("plain ✓") == "plain ✓"
    safe_text("\udcff" * 10).encode("utf-8")


def test_a_derived_value_equal_to_the_hosts_own_words_does_not_fail_the_result() -> None:
    redactor = Redactor.of({}, ["succeeded", "probe.echo"])
    text, size, truncated = render_output({"token": "succeeded"}, redactor=redactor)
    done = result(
        call_id="c1",
        effect="probe.echo",
        status="succeeded",
        started=True,
        model_text=text,
        size=size,
        truncated=truncated,
        redactor=redactor,
    )
    assert (done.status, done.views.model) == ("succeeded", '{"token": "[redacted]"}')
    assert done.views.operator["effect"] == "probe.echo"


# --- fragments: a piece of 8+ characters is masked wherever it appears ------------------

SPLIT = "term-secret-Zq81xK55"


@pytest.mark.parametrize(
    "text",
    [
        "A" * 50 + SPLIT[:10] + "\n" + "B" * 20,  # the first half on stdout, then more output
        "C" * 20 + SPLIT[10:] + "\nD",  # the second half on stderr
        f"x {SPLIT[3:11]} y",  # any 8 characters from the middle
        json.dumps({"v": AWKWARD})[9:20],  # a piece of an escaped spelling
    ],
    ids=["first_half", "second_half", "middle", "escaped_piece"],
)
def test_a_piece_of_eight_or_more_characters_is_masked_anywhere(text: str) -> None:
    secrets = {"HK_S": SPLIT, "HK_A": AWKWARD}
    redacted = redact_secrets(text, secrets)
    assert "[redacted:HK_" in redacted
    assert leftovers(redacted, SPLIT, 8) == []
    assert leftovers(redacted, json.dumps(AWKWARD)[1:-1], 8) == []
    assert Redactor.of(secrets).leaked(text)
    assert not Redactor.of(secrets).leaked(redacted)


def test_pieces_shorter_than_eight_characters_are_not_caught() -> None:
    """The documented limit: a value printed in short pieces looks like ordinary text."""
    pieces = f"{SPLIT[:7]} and {SPLIT[7:14]} and {SPLIT[14:]}"
    assert redact_secrets(pieces, {"HK_S": SPLIT}) == pieces
    alternating = SPLIT[::2]  # every other character, as one stream of two shows it
    assert redact_secrets(alternating, {"HK_S": SPLIT}) == alternating


def test_fragments_are_found_in_long_text_without_touching_the_rest() -> None:
    text = ("ordinary output line\n" * 20_000) + SPLIT[4:16] + " tail"
    redacted = redact_secrets(text, {"HK_S": SPLIT})
    assert redacted == ("ordinary output line\n" * 20_000) + "[redacted:HK_S] tail"


# --- bytes are decoded before they are redacted ---------------------------------------

NON_ASCII = "pässwörd-geheim-ΩΩΩ-12345"


def test_bytes_are_decoded_as_utf8_before_redaction() -> None:
    redactor = Redactor.of({"HK_S": NON_ASCII})
    raw = NON_ASCII.encode()
    out = redactor.value(
        {"raw": raw, "array": bytearray(raw), "view": memoryview(b"\xff" + raw), raw: 1}
    )
    assert out == {
        "raw": "[redacted:HK_S]",
        "array": "[redacted:HK_S]",
        "view": "\\xff[redacted:HK_S]",
        "[redacted:HK_S]": 1,
    }
    text, _, _ = render_output(raw, redactor=redactor)
    assert text == '"[redacted:HK_S]"'
    # str() of bytes (an exception's message, a repr) shows \xc3\xa4: a spelling too.
    shown = redactor.text(f"KeyError: {raw!r}")
    assert "xc3" not in shown
    assert "geheim" not in shown


# --- secret-named fields in any shape; the search fails closed at its limits -----------


def test_secret_named_fields_are_found_in_every_shape() -> None:
    Creds = collections.namedtuple("Creds", "user token")

    class Login(BaseModel):
        user: str
        password: str

    @dataclasses.dataclass
    class Account:
        api_key: str

    class Holder:
        def __init__(self) -> None:
            self.client_secret = "object-secret-5"
            self.me = self  # a cycle is visited once, not followed for ever

    source = [
        Creds("bob-the-user", "namedtuple-secret-1"),
        types.SimpleNamespace(password="namespace-secret-2"),
        Login(user="bob-the-user", password="pydantic-secret-3"),
        Account("dataclass-secret-4"),
        Holder(),
        {"password": b"bytes-secret-6"},
    ]
    assert derived_secrets(source) == [
        "namedtuple-secret-1",
        "namespace-secret-2",
        "pydantic-secret-3",
        "dataclass-secret-4",
        "object-secret-5",
        "bytes-secret-6",
    ]


def test_the_search_fails_closed_past_its_cap_and_depth() -> None:
    many = {"tokens": [f"token-{i:04d}" for i in range(MAX_DERIVED_SECRETS + 1)]}
    with pytest.raises(RedactionLimit):
        derived_secrets(many)
    assert len(derived_secrets({"tokens": many["tokens"][:MAX_DERIVED_SECRETS]})) == 64
    deep: object = {"token": "deep-secret-77"}
    for _ in range(40):
        deep = {"x": deep}
    with pytest.raises(RedactionLimit):
        derived_secrets(deep)


@settings(max_examples=300, deadline=None)
@given(
    prefix=st.text(alphabet="xyz \n", max_size=40),
    suffix=st.text(alphabet="xyz \n", max_size=40),
    cut=st.tuples(st.integers(0, 120), st.integers(0, 120)),
)
def test_a_window_masks_exactly_its_part_of_a_secret_found_in_its_context(
    prefix: str, suffix: str, cut: tuple[int, int]
) -> None:
    """Whatever the window's edges, the characters of the value inside it are masked (one
    label) and every other character is kept: no window leaves a piece of the value."""
    secret = "Window-Secret-7f3a9c"
    text = prefix + secret + suffix
    start, end = sorted(min(edge, len(text)) for edge in cut)
    low, high = len(prefix), len(prefix) + len(secret)
    overlaps = start < high and end > low
    expected = (
        text[start : max(start, low)] + "[redacted:HK_W]" + text[min(end, high) : end]
        if overlaps
        else text[start:end]
    )
    redactor = Redactor.of({"HK_W": secret})
    assert redactor.window(text, start, end) == expected
    assert redactor.reach >= len(secret)
    assert Redactor.of({}).window(text, start, end) == text[start:end]


# --- as a URL and HTML-safe JSON carry it: HTTP clients' error lines, Go's encoding/json ---

# "+", "/", "=", "&", "<", ">", a space and non-ASCII: URL encoders change it, and Go's
# JSON changes every third or so, so no run either leaves raw is 8 characters long (a
# fragment the redactor would know without the encoded spellings).
URL_SECRET = "q7R+k2&Zp/9L<m w3>T8=Yb&Hc4/sE>ä"


def lower_hex(text: str) -> str:
    return re.sub(r"%[0-9A-F]{2}", lambda hit: hit.group().lower(), text)


def go_json(value: str) -> str:
    """``value`` as Go's encoding/json writes it: & < > escaped, non-ASCII kept."""
    escaped = json.dumps(value, ensure_ascii=False)
    return escaped.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")


URL_SHAPES = {
    "quote": quote(URL_SECRET, safe=""),
    "quote_path": quote(URL_SECRET),
    "quote_plus": quote_plus(URL_SECRET),
    "urlencode": urlencode({"token": URL_SECRET}).partition("=")[2],
    "quote_lower_hex": lower_hex(quote(URL_SECRET, safe="")),
    "quote_plus_lower_hex": lower_hex(quote_plus(URL_SECRET)),
    "go_json": go_json(URL_SECRET)[1:-1],
    "go_json_ascii": json.dumps(URL_SECRET)
    .replace("&", "\\u0026")
    .replace("<", "\\u003c")
    .replace(">", "\\u003e")[1:-1],
    "go_json_in_json": json.dumps(go_json(URL_SECRET)[1:-1])[1:-1],
}


@pytest.mark.parametrize("shape", sorted(URL_SHAPES))
def test_a_secret_is_caught_url_encoded_and_html_safe_escaped(shape: str) -> None:
    """requests, httpx and urllib print a failed call's URL with its query
    percent-encoded; Go writes & < > as \\u0026 \\u003c \\u003e. Each such spelling is
    masked whole, and so is every piece of 8 characters of it."""
    shown = URL_SHAPES[shape]
    assert shown != URL_SECRET
    line = f"401 Client Error: Unauthorized for url: https://api.example.com/v1?token={shown}&x=1"
    redactor = Redactor.of({"HK_S": URL_SECRET})
    text = redactor.text(line)
    assert text == (
        "401 Client Error: Unauthorized for url: https://api.example.com/v1?token="
        "[redacted:HK_S]&x=1"
    )
    # Half of it on its own (the other half on another stream) is masked too.
    assert redactor.text(f"> {shown[:16]}\n") == "> [redacted:HK_S]\n"
    assert leftovers(redactor.text(f"> {shown[-16:]}\n"), shown, 8) == []


def test_a_value_no_url_or_html_encoding_changes_adds_no_spelling() -> None:
    """The cost stays where it was for a plain token: one spelling, nothing to index twice."""
    assert spellings("sk-proj-4fT9xQ2mZ8vL1nB7cR3k_v.~") == {"sk-proj-4fT9xQ2mZ8vL1nB7cR3k_v.~"}


def test_the_spellings_of_a_value_at_the_derived_cap_stay_bounded() -> None:
    """A hostile tool names a field "token" and fills it with every character an encoder
    changes, on short lines; every 8-gram of every spelling is indexed on the event loop.
    Its spellings were 584 times its length before URL and HTML-safe forms (4.8 MB for
    8 KB); they are 686 times now. Escaping the HTML-safe forms every way again, or
    URL-encoding each line, would pass 700."""
    alphabet = "aZ9&<>\"'\\/+= é\t" * 8
    lines = [alphabet[i % 15 : i % 15 + 63] for i in range(MAX_DERIVED_SECRET_CHARS // 64)]
    value = "\n".join(lines)
    assert len(value) < MAX_DERIVED_SECRET_CHARS
    total = sum(len(form) for form in spellings(value))
    assert total <= 700 * len(value), total / len(value)
