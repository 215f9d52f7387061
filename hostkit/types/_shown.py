"""What an operator or approver view may show of a command line or a URL.

One redaction for every view of a program to run (an MCP server's argv, a
core's security diff and patch): the words an argv marks as credentials (the
word after ``--token`` or ``Bearer``, the value of ``password=...``, also
inside one ``sh -c`` string), bearer-shaped words, hostkit's shared
credential patterns (``hostkit.errors.redact_credentials``) and URL userinfo
and query strings. Pure functions of their text: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from urllib.parse import unquote, unquote_plus, urlsplit, urlunsplit

from hostkit.errors import redact_credentials
from hostkit.types._redact import REDACTED, is_secret_field

__all__ = [
    "MIN_SECRET",
    "argv_credentials",
    "argv_hidden_words",
    "origin",
    "redact_text",
    "safe_argv",
    "url_view",
]

# Shorter values ("1", "on") are settings, not secrets: hiding them would blank out
# every matching character of a view.
MIN_SECRET = 4
MAX_ARG = 200
_KEYWORDS = r"(pass(word|wd)?|pwd|secret|token|api[_-]?key|auth|credential|key)"
# A word whose NEXT word is a credential: "--token x", "-p x" is too short to tell; "Bearer x".
# The tail after the keyword is possessive (``*+``): a failed match does not try every
# split of "_token_token_…" again, which made a long word quadratic.
_SECRET_FLAG = re.compile(rf"(?i)^(-{{1,2}}[a-z0-9_-]*{_KEYWORDS}[a-z0-9_-]*+|bearer|basic)$")
# A word that carries its credential: "--token=x", "password=x", "API_KEY:x" (see
# _assignment: its name's characters, then a keyword looked for in them).
_NAME = re.compile(r"(?i)[a-z0-9_.-]*+")
_KEYWORD = re.compile(rf"(?i){_KEYWORDS}")
# Bearer-like words that need no flag to be recognised (sk-..., ghp_..., long hex/base64).
_SECRET_SHAPE = re.compile(r"^(sk-|ghp_|gho_|xox[abp]-|AKIA)|^[A-Za-z0-9+/_-]{32,}={0,2}$")
_SPACE = re.compile(r"(\s+)")
_QUOTES = "'\""
# Hiding states of ``_argv`` besides "" (nothing) and a quote character.
_FLAG, _HEADER = "flag", "header"
_NEXT_WORD = (_FLAG, _HEADER)
# An authorization scheme between a credential's name and its value ("Authorization:
# token X", "--header Authorization: Bearer X"): shown, and the word after it hidden.
_SCHEME = re.compile(r"(?i)^(bearer|basic|token|digest)$")
# A scheme is short (git+ssh, postgresql+psycopg): bounded, so the scan for "://" from
# each letter of a long word stays short. Not anchored at a word start: in a word longer
# than that, a URL is still found (from a later letter of its scheme).
_URL = re.compile(r"(?i)[a-z][a-z0-9+.-]{0,31}://\S*")
_URL_USERINFO = re.compile(r"(?i)([a-z][a-z0-9+.-]{0,31}://)[^/@\s]+@")
# A URL up to its query (no quote: it may sit in a quoted string). Found whole first and
# then split: searching for the "?" in the pattern itself rescanned the rest of a long
# word from every "://" in it.
_URL_TO_QUERY = re.compile(r"(?i)[a-z][a-z0-9+.-]{0,31}://[^\s'\"]*")


def redact_text(text: str, secrets: Iterable[str]) -> str:
    """``text`` without the given values, hostkit's credential patterns, URL userinfo or query."""
    for secret in secrets:
        if len(secret) >= MIN_SECRET:
            text = text.replace(secret, REDACTED)
    text = redact_credentials(text)
    text = _URL_USERINFO.sub(lambda m: f"{m.group(1)}{REDACTED}@", text)
    return _URL_TO_QUERY.sub(lambda m: _without_query(m.group(0)), text)


def _assignment(word: str) -> int:
    """How long ``word``'s credential-named ``name=`` (or ``name:``) is; 0 if it has none.

    The name runs to the first character that cannot be in one; one keyword anywhere in
    it names a credential. Two linear scans: one pattern for both backtracked over
    every keyword in a long name ("_token_token_…"), quadratically.
    """
    start = 1 if word[:1] in _QUOTES else 0  # "'X-Api-Key: v'" in one sh -c string
    name = _NAME.match(word, start)
    end = name.end() if name is not None else start
    if end < len(word) and word[end] in "=:" and _KEYWORD.search(word, start, end):
        return end + 1
    return 0


def _unquoted(word: str) -> str:
    return word.strip(_QUOTES)


def _still_hiding(value: str, *, header: bool) -> str:
    """What an assignment leaves to hide after its own word: the next word when a header
    names it with no value ("X-Api-Key: x"), the rest of a quote it opens, else nothing
    (in a shell, "NAME= cmd" is an empty value, then the command)."""
    if not value:
        return _HEADER if header else ""
    quote = value[0]
    if quote in _QUOTES and not (len(value) > 1 and value.endswith(quote)):
        return quote
    return ""


def _passes(hiding: str, word: str) -> bool:
    """Whether ``word`` comes before the credential still to hide: a header's scheme
    ("Authorization: Bearer X") or the end of a flag's options ("--api-key -- X")."""
    return (hiding == _HEADER and bool(_SCHEME.match(word))) or (hiding == _FLAG and word == "--")


def _without_query(url: str) -> str:
    """``url`` with its query (up to a fragment) masked: it often carries a key."""
    path, mark, rest = url.partition("?")
    if not mark:
        return url
    _, hash_mark, fragment = rest.partition("#")
    return f"{path}?{REDACTED}{hash_mark}{fragment}"


def safe_argv(argv: Iterable[str], secrets: Iterable[str]) -> list[str]:
    """``argv`` as an operator may see it: ``secrets`` and credential words redacted, items cut."""
    return _argv(argv, tuple(secrets))[0]


def argv_hidden_words(argv: Iterable[str], secrets: Iterable[str]) -> set[str]:
    """The words ``safe_argv`` hides in ``argv`` (to hide them where argv is not parsed)."""
    return _argv(argv, tuple(secrets))[1]


def argv_credentials(argv: Iterable[str], secrets: Iterable[str]) -> set[str]:
    """The words ``argv`` marks as credentials: after a credential flag or header name,
    an assignment's value, and a URL's credentials (``url_view``).

    A subset of ``argv_hidden_words``: a word hidden only for its shape (a long
    token-like word, often a path) is kept from views but is no known secret,
    and masking it in every result would hide ordinary text.
    """
    return _argv(argv, tuple(secrets))[2]


# A URL path segment shaped like a token (webhook- and Zapier-style ".../s/<token>/mcp"):
# 16 or more characters, or 8 or more mixing letters and digits. Hidden from views.
_PATH_TOKEN = re.compile(r"^(?=[^/]*[0-9])(?=[^/]*[A-Za-z])[^/]{8,}$|^[^/]{16,}$")
# A URL part that is also masked in results: 8 or more characters without a space where
# letters and digits alternate at least three times (a token, a key, an id: "7f3a9c2e",
# "Zk93hQpL"), or 16 or more with a letter next to a digit somewhere. A word, a slug or
# a name of parts ("?lang=english", "/modelcontextprotocol/", "us-east1", "python3.11",
# "project2024", "claude-3-5-sonnet-20241022") is only kept from views: masked in every
# result, with every 8-character piece of it, it would hide a server's ordinary output.
_TOKEN_CHARS = 8
_LONG_TOKEN_CHARS = 16
_TOKEN_ALTERNATIONS = 3
_LETTER_BY_DIGIT = re.compile(r"(?=[A-Za-z][0-9]|[0-9][A-Za-z])")
_BLANK = re.compile(r"\s")


def _token_shaped(value: str) -> bool:
    """Whether a (percent-decoded) URL part looks like a token (see ``_LETTER_BY_DIGIT``)."""
    if len(value) < _TOKEN_CHARS or _BLANK.search(value) is not None:
        return False
    alternations = len(_LETTER_BY_DIGIT.findall(value))
    return alternations >= _TOKEN_ALTERNATIONS or (
        alternations > 0 and len(value) >= _LONG_TOKEN_CHARS
    )


def url_view(url: str) -> tuple[str, set[str]]:
    """``url`` as a view may show it, and the credentials it carries.

    The view has no userinfo or fragment, its query masked and path segments
    shaped like tokens masked. The credentials, each raw and percent-decoded,
    are its password, a token-shaped user name (``https://<token>@host``), the
    values of secret-named query parameters (``api_key=``, ``token=``), and
    every path segment and query value shaped like a token (``_token_shaped``,
    judged decoded): ``/s/<token>/mcp``, ``?code=<key>``. A part hidden only
    for its length (a long word) is no credential.
    """
    try:
        parts = urlsplit(url)
        user, password = parts.username, parts.password
    except ValueError:  # a bracketed host that is no address ("[redacted]" put there)
        return REDACTED, set()
    credentials = {password, unquote(password)} if password else set()
    if user and _token_shaped(unquote(user)):
        credentials.update((user, unquote(user)))
    for pair in parts.query.split("&"):
        name, _, raw = pair.partition("=")
        named = is_secret_field(name) or is_secret_field(unquote_plus(name))
        # The shape is judged with "+" kept: a base64 token's "+" is no space between words.
        if raw and (named or _token_shaped(unquote(raw))):
            credentials.update((raw, unquote_plus(raw)))
    segments = parts.path.split("/")
    for index, segment in enumerate(segments):
        if _PATH_TOKEN.match(segment):
            if _token_shaped(unquote(segment)):
                credentials.update((segment, unquote(segment)))
            segments[index] = REDACTED
    host = parts.netloc.rpartition("@")[2]
    query = REDACTED if parts.query else ""
    shown = urlunsplit((parts.scheme, host, "/".join(segments), query, ""))
    return shown, {value for value in credentials if len(value) >= MIN_SECRET}


def origin(url: str) -> str:
    """``scheme://host[:port]``: userinfo, path, query and fragment can all carry secrets."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
    except ValueError:  # a bracketed host that is no address ("[redacted]" put there)
        return REDACTED
    if ":" in host:
        host = f"[{host}]"
    try:
        port = parts.port
    except ValueError:
        port = None
    return f"{parts.scheme}://{host}" + (f":{port}" if port is not None else "")


def _argv(argv: Iterable[str], secrets: tuple[str, ...]) -> tuple[list[str], set[str], set[str]]:
    """The shown argv, every word it hid, and the credentials among them.

    Each item is read word by word (an ``sh -c`` script is one item): a
    credential flag hides the next word, or the whole next item when it ends
    the item ("--api-key", "<key>"); a header name with no value in its word
    ("X-Api-Key:", "Authorization: Bearer") hides the word after it; an
    assignment hides its value, up to the closing quote of one it opens.
    """
    shown: list[str] = []
    hidden: set[str] = set()
    marked: set[str] = set()
    # As redact_text: a shorter value ("1", "") is a setting, and hiding it would blank out
    # every matching character of the command line.
    values = [secret for secret in secrets if len(secret) >= MIN_SECRET]
    # Still to hide: nothing, the next word (after a flag, a header), or up to a quote.
    hiding = ""
    quoted: list[str] = []
    for raw in argv:
        item = raw
        for secret in values:
            item = item.replace(secret, REDACTED)
        if hiding in _NEXT_WORD and not _passes(hiding, item):
            marked.add(item)
            shown.append(REDACTED)
            hiding = ""
            continue
        words = _SPACE.split(item)
        for index in range(0, len(words), 2):
            word = words[index]
            if not word:
                continue
            if hiding in _NEXT_WORD:
                if not _passes(hiding, word):
                    marked.add(_unquoted(word))
                    words[index] = REDACTED
                    hiding = ""
                continue
            if hiding:  # inside a quoted value: a credential once its quote closes
                closed = word.endswith(hiding)
                quoted.append(_unquoted(word))
                words[index] = REDACTED + (hiding if closed else "")
                if closed:
                    marked.update(quoted)
                    hiding = ""
                continue
            assign = _assignment(word)
            if assign:
                value = word[assign:]
                if value:
                    marked.add(_unquoted(value))
                    words[index] = word[:assign] + REDACTED
                hiding = _still_hiding(value, header=word[assign - 1] == ":")
                quoted = []
            elif _SECRET_FLAG.match(word):
                hiding = _FLAG
            elif "://" in word:
                for found in _URL.finditer(word):  # a closing quote is no part of it
                    marked.update(url_view(found.group(0).rstrip(_QUOTES))[1])
                words[index] = _URL.sub(lambda m: origin(m.group(0)), word)
            elif _SECRET_SHAPE.search(word):
                hidden.add(word)
                words[index] = REDACTED
        if hiding not in _NEXT_WORD:
            # A quote still open at the end of its item: hidden from views, but which of
            # its words are the credential is anyone's guess.
            hidden.update(quoted)
            hiding, quoted = "", []
        text = redact_text("".join(words), ())
        shown.append(text if len(text) <= MAX_ARG else text[: MAX_ARG - 1] + "…")
    marked.discard(REDACTED)
    hidden.discard(REDACTED)
    return shown, hidden | marked, marked
