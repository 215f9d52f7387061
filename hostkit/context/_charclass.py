"""What ``CharEstimator`` counts text by: character classes and the pieces a byte-level
BPE splits text into that the classes alone price too low (its docstring says what each
costs). Every pass is C-level (translate, count, integer arithmetic over the whole text,
a few regular expressions over what a substring search found first): this runs once for
every message a session holds.
"""

from __future__ import annotations

import re
import string
from collections.abc import Mapping

__all__ = ["ceil_div", "class_tokens"]


# Byte classes: one translate of the UTF-8 bytes and C-level counts price every character
# and every piece boundary, with no Python loop per character (this runs on every message).
# l letter, d digit, p punctuation, w space, n newline, c tab or other control character,
# x a non-ASCII character's continuation byte, u its lead byte. A class is coded as its
# place in this list plus one, so that a character's class and its predecessor's fit in
# one byte (``_pairs``).
_NAMES = b"ldpwncxu"


def _code(name: bytes) -> bytes:
    return bytes([_NAMES.index(name) + 1])


def _table(classes: Mapping[bytes, bytes], default: bytes) -> bytes:
    table = bytearray(default * 256)
    for members, name in classes.items():
        for byte in members:
            table[byte] = name[0]
    return bytes(table)


_LETTER, _DIGIT, _PUNCTUATION, _CONTROL = map(_code, (b"l", b"d", b"p", b"c"))
_CONTROLS = bytes([*range(0x0A), *range(0x0B, 0x20), 0x7F])
_CLASSES = _table(
    {
        string.ascii_letters.encode(): _LETTER,
        string.digits.encode(): _DIGIT,
        string.punctuation.encode(): _PUNCTUATION,
        b" ": _code(b"w"),
        b"\n": _code(b"n"),
        _CONTROLS: _CONTROL,
        bytes(range(0x80, 0xC0)): _code(b"x"),
    },
    _code(b"u"),
)
# Where a byte-level pre-tokenizer starts a new piece that the class rates price at a
# fraction of a token, in twentieths of a token on top: a space before a digit (digits
# are split off alone, the space stays a token of its own: hex dumps, tables, logs), a
# letter next to a digit or a non-ASCII character (hex, IPv6, accented words split
# around the accent), punctuation next to a digit (CSV, dates, addresses), and a letter
# after punctuation (short names in minified code and shell); and a line break after a
# space (trailing whitespace: a token of its own, and runs of " \n" a token a pair).
_BOUNDARIES = (
    (b"wd", 14),
    (b"nd", 14),
    (b"dl", 14),
    (b"ld", 14),
    (b"xl", 14),
    (b"lu", 14),
    (b"dp", 7),
    (b"pd", 7),
    (b"pl", 10),
    (b"wn", 20),
)
_SHARES = sorted({share for _, share in _BOUNDARIES})
# A line of a word or two (a list of names, one-word bullets, "fi", ".PP"): its line break
# is a token of its own, not a fraction of one (0.7 more), where a longer line's words
# are over-counted by more than that. An indented line is left out: the indentation
# merges with the break before it ("\n    }"), and closing brackets fill JSON and code.
_SHORT_LINE = re.compile(rb"\n[^\s][^\n]{0,5}(?=\n)")
_SHORT_LINE_SHARE = 14


def _pair_shares() -> bytes:
    """A table from a ``_pairs`` byte to the place (plus one) of its share in ``_SHARES``."""
    table = bytearray(256)
    for (before, after), share in _BOUNDARIES:
        table[16 * _code(bytes([after]))[0] + _code(bytes([before]))[0]] = _SHARES.index(share) + 1
    return bytes(table)


_PAIR_SHARES = _pair_shares()
# Scripts and symbols a byte-level vocabulary covers thinly, spending up to a token per
# UTF-8 byte (SmolLM2 does on accented Latin, Armenian, Hangul, rare CJK, Braille,
# private use and most other scripts and symbols; cl100k on polytonic Greek Extended);
# a space before them is a token of its own. Everything non-ASCII except what is listed
# here: Greek and Cyrillic, combining marks (counted below), Hebrew and Arabic (a quarter
# more below), Devanagari, Bengali, Tamil, Thai, Georgian, Latin extended additional
# (Vietnamese), general punctuation, the first math operators, box drawing, CJK
# punctuation and kana, variation selectors, and the emoji and symbol planes, which cost
# at most a token per byte beyond the first. The expressions see only the non-ASCII
# characters and the spaces (a space kept before them may have had ASCII in between:
# that errs high).
_THIN = re.compile(
    r" ?[^\x00-\x7f\u0300-\u04ff\u0590-\u06ff\u0900-\u09ff\u0b80-\u0bff\u0e00-\u0e7f"
    r"\u10a0-\u10ff\u1e00-\u1eff\u2000-\u206f\u2200-\u227f\u2500-\u25ff\u3000-\u30ff\ufe00-\ufe0f"
    r"\U0001d000-\U0001dfff\U0001f000-\U0001ffff]+"
)
_HEBREW_ARABIC = re.compile(r" ?[\u0590-\u06ff]+")
# Combining marks (decomposed accents), each usually a token of its own.
_COMBINING = re.compile(r"[\u0300-\u036f\u1ab0-\u1aff\u1dc0-\u1dff\u20d0-\u20ff\ufe20-\ufe2f]")
_ASCII_BUT_SPACE = bytes(byte for byte in range(0x80) if byte != 0x20)

# Runs of identifier characters too long to be words, with letters and digits: base64
# (also wrapped at 11 characters a line or more, as base64url ids are), hex, keys,
# hashes, ids of 11 (YouTube's) and passwords of 12. BPE vocabularies split them into
# pieces of one to three characters, about twice the count of the same letters in prose;
# a run of 10 or fewer is mostly a word or a name with a number ("utf8", "sha256").
_MIXED_RUN = 11
_IDENTIFIERS = _table({(string.ascii_letters + string.digits + "+/=_-").encode(): b"i"}, b" ")


# Letters that no word has in a row: 24 or more of many different letters and few vowels
# (random letters, mixed-case noise), or 6 or more with no vowel (consonant strings). Both
# tokenize at about twice prose's count. A long word has more vowels (0.3 and up of its
# letters, German compounds included; random letters 0.23), and a filler ("xxxx", "abab")
# few different letters: BPE packs both as prose.
_LONG_LETTERS = 24
_LETTER_RUN = re.compile(rb"[A-Za-z]{%d,}" % _LONG_LETTERS)
_VOWELLESS = 6
_CONSONANTS = _table({b"BCDFGHJKLMNPQRSTVWXZbcdfghjklmnpqrstvwxz": b"c"}, b" ")
_VOWELS = frozenset(b"aeiouyAEIOUY")
_RANDOM_LETTERS = 10
_WORD_VOWELS = 0.28
# A vowelless run of fewer different letters is a filler or a sound ("zzzzzz", "hmmmmm").
_CONSONANT_LETTERS = 4
# Letters in an order words seldom have, wherever they are: four consonants in a row
# ("xkqz"; a word has a few, "strengths", "html") and a change of case inside a run of
# capitals (lower, upper, upper or upper, upper, lower: random mixed case has one every
# few letters, names about one each, "getHTTP", "IDs"). BPE splits random letters into
# pieces of one or two, and prices each of these a token above the class rate.
_SCRAMBLED_CONSONANTS = b"cccc"
_SCRAMBLED_LETTERS = 3
_CASES = _table(
    {string.ascii_lowercase.encode(): b"a", string.ascii_uppercase.encode(): b"A"}, b" "
)
_SCRAMBLED_CASES = (b"aAA", b"AAa")


def _random_letters(run: bytes) -> bool:
    return len(set(run)) >= _RANDOM_LETTERS and sum(c in _VOWELS for c in run) < _WORD_VOWELS * len(
        run
    )


def _random_chars(encoded: bytes, classes: bytes) -> int:
    """Characters in runs that look random: long, with both letters and digits (a word,
    however long, or a filler of one letter repeated has no digits), and long letter runs
    of many distinct letters.

    A substring search over a translated copy finds the few long runs, bounded searches
    of the classes test them, and the regular expression only sees the longest: prose
    has none of those, and costs a few C-level passes."""
    chars = 0
    identifiers = encoded.translate(_IDENTIFIERS)
    start = identifiers.find(b"i" * _MIXED_RUN)
    while start >= 0:
        end = identifiers.find(b" ", start)
        end = len(identifiers) if end < 0 else end
        if classes.find(_DIGIT, start, end) >= 0 and classes.find(_LETTER, start, end) >= 0:
            chars += end - start
        if end - start >= _LONG_LETTERS:
            chars += sum(
                len(letters)
                for letters in _LETTER_RUN.findall(encoded, start, end)
                if _random_letters(letters)
            )
        start = identifiers.find(b"i" * _MIXED_RUN, end)
    return chars


def _pairs(classes: bytes) -> bytes:
    """Each character's class code and its predecessor's in one byte, 16 times its own
    plus the other (the first has none, 0): integer arithmetic over the whole text at
    once, no byte carrying into the next, so every kind of neighbour is then counted as
    one byte is, whatever number of kinds is priced."""
    lanes = int.from_bytes(classes, "big")
    return ((lanes << 4) + (lanes >> 8)).to_bytes(len(classes), "big")


def _scrambled(encoded: bytes, classes: bytes) -> tuple[int, int]:
    """(tokens, characters) for letters in an order no word has: a token on top of the
    class rate for each change of case inside capitals and each four consonants in a row,
    and the characters of vowelless words, priced as random runs. A substring search
    finds the few runs of four consonants or more; a run of few different letters (a
    filler, "zzzz", "hmmmm") adds nothing."""
    tokens = sum(map(encoded.translate(_CASES).count, _SCRAMBLED_CASES))
    vowelless = 0
    consonants = encoded.translate(_CONSONANTS)
    start = consonants.find(_SCRAMBLED_CONSONANTS)
    while start >= 0:
        end = consonants.find(b" ", start)
        end = len(consonants) if end < 0 else end
        letters = len(set(encoded[start:end]))
        if letters >= _SCRAMBLED_LETTERS:
            tokens += (end - start) // len(_SCRAMBLED_CONSONANTS)
        if (
            end - start >= _VOWELLESS
            and letters >= _CONSONANT_LETTERS
            and classes[start - 1 : start] != _LETTER
            and classes[end : end + 1] != _LETTER
        ):
            vowelless += end - start
        start = consonants.find(_SCRAMBLED_CONSONANTS, end)
    return tokens, vowelless


def _boundaries(encoded: bytes, classes: bytes) -> int:
    """The tokens piece boundaries (and short lines' breaks) cost on top of their
    characters' class rates."""
    marked = _pairs(classes).translate(_PAIR_SHARES)
    shares = sum(marked.count(place) * share for place, share in enumerate(_SHARES, start=1))
    return ceil_div(shares + len(_SHORT_LINE.findall(encoded)) * _SHORT_LINE_SHARE, 20)


def _foreign(encoded: bytes) -> tuple[int, int]:
    """(characters costing a token per byte, with the spaces before them; tokens on top)
    for the non-ASCII characters, which alone reach the regular expressions."""
    foreign = encoded.translate(None, _ASCII_BUT_SPACE).decode("utf-8", "surrogatepass")
    thin = sum(map(len, _THIN.findall(foreign)))
    semitic = sum(map(len, _HEBREW_ARABIC.findall(foreign)))
    return thin, 2 * len(_COMBINING.findall(foreign)) + ceil_div(semitic, 4)


def class_tokens(text: str, chars_per_token: float, punctuation_per_token: float) -> int:
    """``CharEstimator.text``: the tokens of ``text`` by its character classes."""
    if not text:  # no characters, no tokens: an assistant message with calls has no text
        return 0
    encoded = text.encode("utf-8", "surrogatepass")
    classes = encoded.translate(_CLASSES)
    digits = classes.count(_DIGIT)
    punctuation = classes.count(_PUNCTUATION)
    # A tab or control character is a token of its own (runs of tabs merge a little).
    controls = classes.count(_CONTROL)
    plain = len(text) - digits - punctuation - controls
    # Digits, controls and each UTF-8 byte beyond a character's first: a token each.
    whole = digits + controls + len(encoded) - len(text)
    if not text.isascii():
        thin, on_top = _foreign(encoded)
        plain, whole = plain - thin, whole + thin + on_top
    scrambled, vowelless = _scrambled(encoded, classes)
    runs = _random_chars(encoded, classes) + vowelless
    dense = _boundaries(encoded, classes) + scrambled + ceil_div(runs * 9, 20)
    return (
        ceil_div(plain, chars_per_token)
        + ceil_div(punctuation, punctuation_per_token)
        + whole
        + dense
    )


def ceil_div(count: int, per_token: float) -> int:
    """``count`` items at ``per_token`` a token, rounded up."""
    return int(-(-count // per_token))
