"""The redactor finds a secret in every spelling: escaped, re-lined, flattened, cut, overlapped.

These pin ``hostkit.effects._redaction`` directly; the Host-level scans in
``test_secret_leak_shapes`` show the same through a real turn.
"""

from __future__ import annotations

import json

import pytest

from hostkit.effects import MIN_SECRET_CHARS, redact_secrets
from hostkit.effects._redaction import (
    MAX_DERIVED_SECRETS,
    Redactor,
    derived_secrets,
    safe_text,
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
    assert text.endswith(" after")


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
    many = {"tokens": [f"token-{i:04d}" for i in range(200)]}
    assert len(derived_secrets(many)) == MAX_DERIVED_SECRETS


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
