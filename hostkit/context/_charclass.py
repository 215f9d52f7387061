"""What ``CharEstimator`` counts text by: character classes and the pieces a byte-level
BPE splits text into that the classes alone price too low (its docstring says what each
costs). Every pass is C-level (translate, count, a few regular expressions over what a
substring search found first): this runs once for every message a session holds.
"""

from __future__ import annotations

import re
import string
from collections.abc import Mapping

__all__ = ["ceil_div", "class_tokens"]


# Byte classes: one translate of the UTF-8 bytes and C-level counts price every character
# and every piece boundary, with no Python loop per character (this runs on every message).
# l letter, d digit, p punctuation, w space or newline, c tab or other control character,
# x a non-ASCII character's continuation byte, u its lead byte.
def _table(classes: Mapping[bytes, bytes], default: bytes) -> bytes:
    table = bytearray(default * 256)
    for members, name in classes.items():
        for byte in members:
            table[byte] = name[0]
    return bytes(table)


_CONTROLS = bytes([*range(0x0A), *range(0x0B, 0x20), 0x7F])
_CLASSES = _table(
    {
        string.ascii_letters.encode(): b"l",
        string.digits.encode(): b"d",
        string.punctuation.encode(): b"p",
        b" \n": b"w",
        _CONTROLS: b"c",
        bytes(range(0x80, 0xC0)): b"x",
    },
    b"u",
)
# Where a byte-level pre-tokenizer starts a new piece that the class rates price at a
# fraction of a token, in twentieths of a token on top: a space before a digit (digits
# are split off alone, the space stays a token of its own: hex dumps, tables, logs), a
# letter next to a digit or a non-ASCII character (hex, IPv6, accented words split
# around the accent), punctuation next to a digit (CSV, dates, addresses), and a letter
# after punctuation (short names in minified code and shell).
_BOUNDARIES = (
    (b"wd", 14),
    (b"dl", 14),
    (b"ld", 14),
    (b"xl", 14),
    (b"lu", 14),
    (b"dp", 7),
    (b"pd", 7),
    (b"pl", 10),
)
# Scripts and symbols a byte-level vocabulary covers thinly, spending up to a token per
# UTF-8 byte (SmolLM2 does on accented Latin, Armenian, Hangul, rare CJK, Braille,
# private use and most other scripts and symbols); a space before them is a token of
# its own. Everything non-ASCII except
# what is listed here: Greek and Cyrillic, combining marks (counted below), Hebrew and
# Arabic (a quarter more below), Devanagari, Bengali, Tamil, Thai, Georgian, Latin and
# Greek extended, general punctuation, the first math operators, box drawing, CJK
# punctuation and kana, variation selectors, and the emoji and symbol planes, which cost
# at most a token per byte beyond the first. The expressions see only the non-ASCII
# characters and the spaces (a space kept before them may have had ASCII in between:
# that errs high).
_THIN = re.compile(
    r" ?[^\x00-\x7f\u0300-\u04ff\u0590-\u06ff\u0900-\u09ff\u0b80-\u0bff\u0e00-\u0e7f"
    r"\u10a0-\u10ff\u1e00-\u206f\u2200-\u227f\u2500-\u25ff\u3000-\u30ff\ufe00-\ufe0f"
    r"\U0001d000-\U0001dfff\U0001f000-\U0001ffff]+"
)
_HEBREW_ARABIC = re.compile(r" ?[\u0590-\u06ff]+")
# Combining marks (decomposed accents), each usually a token of its own.
_COMBINING = re.compile(r"[\u0300-\u036f\u1ab0-\u1aff\u1dc0-\u1dff\u20d0-\u20ff\ufe20-\ufe2f]")
_ASCII_BUT_SPACE = bytes(byte for byte in range(0x80) if byte != 0x20)

# Runs of identifier characters too long to be words: base64 (wrapped at 16 characters a
# line or more), hex, keys, hashes. BPE vocabularies split them into pieces of one to
# three characters, about twice the count of the same letters in prose.
_MIXED_RUN = 16
_IDENTIFIERS = _table({(string.ascii_letters + string.digits + "+/=_-").encode(): b"i"}, b" ")
_HAS_DIGIT = re.compile(rb"[0-9]")
_HAS_LETTER = re.compile(rb"[A-Za-z]")


# Letters that no word has in a row: 24 or more of many different letters and few vowels
# (random letters, mixed-case noise), or 6 or more with no vowel (consonant strings). Both
# tokenize at about twice prose's count. A long word has more vowels (0.3 and up of its
# letters, German compounds included; random letters 0.23), and a filler ("xxxx", "abab")
# few different letters: BPE packs both as prose.
_LETTER_RUN = re.compile(rb"[A-Za-z]{24,}")
_VOWELLESS_RUN = re.compile(r"(?<![A-Za-z])[B-DF-HJ-NP-TV-XZb-df-hj-np-tv-xz]{6,}(?![A-Za-z])")
_CONSONANTS = _table({b"BCDFGHJKLMNPQRSTVWXZbcdfghjklmnpqrstvwxz": b"c"}, b" ")
_VOWELS = frozenset(b"aeiouyAEIOUY")
_RANDOM_LETTERS = 10
_WORD_VOWELS = 0.28
# A vowelless run of fewer different letters is a filler or a sound ("zzzzzz", "hmmmmm").
_CONSONANT_LETTERS = 4


def _random_letters(run: bytes) -> bool:
    return len(set(run)) >= _RANDOM_LETTERS and sum(c in _VOWELS for c in run) < _WORD_VOWELS * len(
        run
    )


def _random_chars(text: str, encoded: bytes) -> int:
    """Characters in runs that look random: long, with both letters and digits (a word,
    however long, or a filler of one letter repeated has no digits); long letter runs of
    many distinct letters; and vowelless letter runs no word spells.

    A substring search over a translated copy finds the few long runs, so the regular
    expressions only see those: prose has none, and costs two C-level passes."""
    chars = 0
    identifiers = encoded.translate(_IDENTIFIERS)
    start = identifiers.find(b"i" * _MIXED_RUN)
    while start >= 0:
        end = identifiers.find(b" ", start)
        end = len(identifiers) if end < 0 else end
        run = encoded[start:end]
        if _HAS_DIGIT.search(run) and _HAS_LETTER.search(run):
            chars += len(run)
        chars += sum(
            len(letters) for letters in _LETTER_RUN.findall(run) if _random_letters(letters)
        )
        start = identifiers.find(b"i" * _MIXED_RUN, end)
    if b"c" * 6 in encoded.translate(_CONSONANTS):
        chars += sum(
            len(run) for run in _VOWELLESS_RUN.findall(text) if len(set(run)) >= _CONSONANT_LETTERS
        )
    return chars


def _boundaries(classes: bytes) -> int:
    """The tokens piece boundaries cost on top of their characters' class rates."""
    return ceil_div(sum(classes.count(pair) * share for pair, share in _BOUNDARIES), 20)


def _foreign(encoded: bytes) -> tuple[int, int]:
    """(characters costing a token per byte, with the spaces before them; tokens on top)
    for the non-ASCII characters, which alone reach the regular expressions."""
    foreign = encoded.translate(None, _ASCII_BUT_SPACE).decode("utf-8", "surrogatepass")
    thin = sum(map(len, _THIN.findall(foreign)))
    semitic = sum(map(len, _HEBREW_ARABIC.findall(foreign)))
    return thin, 2 * len(_COMBINING.findall(foreign)) + ceil_div(semitic, 4)


def class_tokens(text: str, chars_per_token: float, punctuation_per_token: float) -> int:
    """``CharEstimator.text``: the tokens of ``text`` by its character classes."""
    encoded = text.encode("utf-8", "surrogatepass")
    classes = encoded.translate(_CLASSES)
    digits = classes.count(b"d")
    punctuation = classes.count(b"p")
    # A tab or control character is a token of its own (runs of tabs merge a little).
    controls = classes.count(b"c")
    plain = len(text) - digits - punctuation - controls
    # Digits, controls and each UTF-8 byte beyond a character's first: a token each.
    whole = digits + controls + len(encoded) - len(text)
    if not text.isascii():
        thin, on_top = _foreign(encoded)
        plain, whole = plain - thin, whole + thin + on_top
    dense = _boundaries(classes) + ceil_div(_random_chars(text, encoded) * 9, 20)
    return (
        ceil_div(plain, chars_per_token)
        + ceil_div(punctuation, punctuation_per_token)
        + whole
        + dense
    )


def ceil_div(count: int, per_token: float) -> int:
    """``count`` items at ``per_token`` a token, rounded up."""
    return int(-(-count // per_token))
