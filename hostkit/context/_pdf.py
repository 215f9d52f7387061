"""How many pages a PDF attachment has, as the context estimate prices it.

A PDF 1.5 writer (pdfTeX, xdvipdfmx, Ghostscript, qpdf) puts its page objects into
compressed object streams, where a search of the file finds none; priced by size at a
scanned page's 100 kB, a 36-page manual came out at 3 pages. So the object streams are
inflated and searched too. The file is the user's: whatever it holds, the work is
bounded (a number of streams, bytes read and bytes inflated, no nesting: an object
stream cannot hold another), and what could not be searched is priced by size at a
text page's, which counts more pages than such a file has. Its images and embedded
fonts are left out of that size (their dictionaries are always in sight, encrypted
file or not: a stream is never inside an object stream): a 3 MB scan is not 2,000
pages of text.
"""

from __future__ import annotations

import re
import zlib
from dataclasses import dataclass

from hostkit.context._charclass import ceil_div

__all__ = [
    "MAX_INFLATED_BYTES",
    "MAX_OBJECT_STREAMS",
    "MAX_READ_BYTES",
    "TEXT_PAGE_BYTES",
    "pdf_pages",
]

_PAGE = re.compile(rb"/Type\s*/Page(?![A-Za-z])")
# What marks the dictionary of a stream that holds no page's text: an image, or an embedded
# font (FontFile's /Length1-3, FontFile3's subtypes).
_NOT_TEXT = re.compile(
    rb"/Subtype\s*/(?:Image|Type1C|CIDFontType0C|OpenType)(?![A-Za-z])|/Length[123](?![\d])"
)
_OBJECT_STREAM = re.compile(rb"/Type\s*/ObjStm(?![A-Za-z])")
# Only a stream inflated by FlateDecode alone is read: another filter, a chain of them or a
# predictor (DecodeParms) leaves the stream unread, and the file is priced by size.
_FLATE = re.compile(rb"/Filter\s*(?:/FlateDecode|\[\s*/FlateDecode\s*\])(?![A-Za-z])")
# A length given directly, not as a reference ("/Length 12 0 R": then zlib finds the end).
_DIRECT_LENGTH = re.compile(rb"/Length\s+(\d{1,9})(?![\d\s]*\d\s+R)")
# How far around "/Type /ObjStm" its dictionary and the "stream" keyword after it are
# looked for: the dictionary of an object stream holds a few short entries.
_DICTIONARY_SPAN = 1024
# The bounds on the work one PDF costs, on the event loop: streams looked at, and bytes
# read and inflated in all (a bomb stops after some 7 ms). Object streams hold 1.2-3 kB
# a page (100 objects each) in the manuals measured, so these count 700 pages or more:
# more than a provider takes (Anthropic: 100) or a window holds at 3,000 tokens a page.
# A file past them is priced by size, which counts more.
MAX_OBJECT_STREAMS = 512
MAX_READ_BYTES = 8 * 1024 * 1024
MAX_INFLATED_BYTES = 2 * 1024 * 1024
_CHUNK = 64 * 1024
# The bytes a page of text takes at least, for a file whose pages could not all be
# counted: its content deflates to 1.6 and 2.0 kB a page on average in the two manuals
# measured (their fonts add 5-6 kB a page more, a file that names standard fonts none),
# and each page adds its page object (about 150 bytes) and cross-reference entry. A file
# of text pages has fewer pages than its bytes divided by this, unless most of its pages
# are nearly empty (a title page: 0.5 kB).
TEXT_PAGE_BYTES = 1_500


@dataclass(slots=True)
class _Work:
    """What is left of one file's bounds on streams, bytes read and bytes inflated."""

    streams: int = MAX_OBJECT_STREAMS
    read: int = MAX_READ_BYTES
    inflated: int = MAX_INFLATED_BYTES


def pdf_pages(data: bytes) -> int:
    """The pages of the PDF ``data`` as the estimate prices them (at least 1).

    Page objects are counted in the file and in the object streams it holds; when a
    stream could not be read whole (another filter, a broken or truncated stream, the
    bounds reached) or no page object was found at all, the size decides at
    ``TEXT_PAGE_BYTES`` a page, if that is more.
    """
    pages = len(_PAGE.findall(data))
    whole = True
    work = _Work()
    view = memoryview(data)
    for found in _OBJECT_STREAM.finditer(data):
        if work.streams == 0:
            whole = False
            break
        work.streams -= 1
        body = _object_stream(view, data, found.start(), work)
        if body is None:
            whole = False
            continue
        pages += len(_PAGE.findall(body))
    if pages and whole:
        return pages
    return max(pages, ceil_div(len(data) - _image_and_font_bytes(data), TEXT_PAGE_BYTES), 1)


def _image_and_font_bytes(data: bytes) -> int:
    """The bytes of the file's image and embedded-font streams (none of a page's text),
    from each such dictionary's ``stream`` keyword to its ``endstream``."""
    total = 0
    past = 0  # the end of the last stream counted: a dictionary can match twice
    for found in _NOT_TEXT.finditer(data):
        if found.start() < past:
            continue
        keyword = data.find(b"stream", found.end(), found.end() + _DICTIONARY_SPAN)
        if keyword < 0:
            continue
        start = keyword + len(b"stream")
        end = data.find(b"endstream", start)
        past = len(data) if end < 0 else end
        total += past - start
    return total


def _object_stream(view: memoryview, data: bytes, at: int, work: _Work) -> bytes | None:
    """The inflated bytes of the object stream whose dictionary names its type at
    ``at``, or None when it cannot be read whole within ``work``."""
    opening = data.rfind(b"<<", max(0, at - _DICTIONARY_SPAN), at)
    keyword = data.find(b"stream", at, at + _DICTIONARY_SPAN)
    if opening < 0 or keyword < 0:
        return None
    dictionary = data[opening:keyword]
    if not _FLATE.search(dictionary) or b"/DecodeParms" in dictionary:
        return None
    start = keyword + len(b"stream")
    start += 2 if data.startswith(b"\r\n", start) else 1
    length = _DIRECT_LENGTH.search(dictionary)
    end = min(len(data), start + int(length.group(1))) if length else len(data)
    return _inflate(view, start, end, work)


def _inflate(view: memoryview, start: int, end: int, work: _Work) -> bytes | None:
    """A zlib stream from ``start`` (ending by ``end``) inflated, fed in chunks so that a
    stream that never ends is read no further than ``work`` allows, and inflated no
    further either (a decompression bomb stops there); None if it is not whole."""
    inflater = zlib.decompressobj()
    out = bytearray()
    while not inflater.eof:
        size = min(_CHUNK, end - start, work.read)
        if size <= 0 or work.inflated <= 0:
            return None
        work.read -= size
        try:
            piece = inflater.decompress(view[start : start + size], work.inflated)
        except zlib.error:
            return None
        work.inflated -= len(piece)
        out += piece
        if inflater.unconsumed_tail:
            return None
        start += size
    return bytes(out)
