"""Counting a PDF's pages reads a bounded amount, whatever the file holds.

The context estimate inflates a PDF attachment's compressed object streams to count
the page objects in them, on the event loop every session shares. The file is the
user's: a decompression bomb, a stream that never ends, a hundred thousand streams or
a dictionary nested a million deep must cost no more than the bounds in
``hostkit.context._pdf``, and a file that reached one is priced by its size at a text
page's bytes, never by what was read of it.
"""

from __future__ import annotations

import tracemalloc
import zlib
from typing import Any

import pytest

from hostkit.context import _pdf
from hostkit.context._charclass import ceil_div
from hostkit.context._pdf import (
    MAX_INFLATED_BYTES,
    MAX_OBJECT_STREAMS,
    MAX_READ_BYTES,
    TEXT_PAGE_BYTES,
    pdf_pages,
)
from tests.support import object_stream_pdf, page_tree

MIB = 1024 * 1024
HEADER = b"<< /Type /ObjStm /Filter /FlateDecode >>\nstream\n"
# A zlib stream that never ends: empty stored blocks, each five bytes of input and none
# of output.
ENDLESS = b"\x78\x01" + b"\x00\x00\x00\xff\xff" * 20_000


class _CountingZlib:
    """``zlib`` as ``_pdf`` uses it, counting the streams opened and the bytes fed and
    inflated."""

    error = zlib.error

    def __init__(self) -> None:
        self.streams = self.fed = self.inflated = 0

    def decompressobj(self) -> Any:
        self.streams += 1
        return _CountingInflater(self, zlib.decompressobj())


class _CountingInflater:
    def __init__(self, counts: _CountingZlib, real: Any) -> None:
        self._counts, self._real = counts, real

    @property
    def eof(self) -> bool:
        return bool(self._real.eof)

    @property
    def unconsumed_tail(self) -> bytes:
        return bytes(self._real.unconsumed_tail)

    def decompress(self, data: Any, max_length: int = 0) -> bytes:
        self._counts.fed += len(data)
        out = bytes(self._real.decompress(data, max_length))
        self._counts.inflated += len(out)
        return out


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> _CountingZlib:
    counts = _CountingZlib()
    monkeypatch.setattr(_pdf, "zlib", counts)
    return counts


def _by_size(data: bytes) -> int:
    return ceil_div(len(data), TEXT_PAGE_BYTES)


def test_a_decompression_bomb_inflates_no_more_than_the_bound(counted: _CountingZlib) -> None:
    """64 MiB of page objects in 130 kB: inflated whole, 4.5 million pages and 64 MiB."""
    bomb = object_stream_pdf(b"<</Type /Page>>" * (64 * MIB // 15))
    tracemalloc.start()
    try:
        pages = pdf_pages(bomb)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()

    assert pages == _by_size(bomb)
    assert counted.inflated <= MAX_INFLATED_BYTES
    assert peak < 4 * MAX_INFLATED_BYTES


def test_streams_that_never_end_are_read_no_further_than_the_bound(
    counted: _CountingZlib,
) -> None:
    """Each stream reads on to the next one's header: 400 of them, 40 MB read unbounded."""
    data = b"%PDF-1.5\n" + (HEADER + ENDLESS) * 400

    assert pdf_pages(data) == _by_size(data)
    assert counted.fed <= MAX_READ_BYTES


def test_a_hundred_thousand_streams_open_no_more_than_the_bound(counted: _CountingZlib) -> None:
    data = b"%PDF-1.5\n" + HEADER * 100_000

    assert pdf_pages(data) == _by_size(data)
    assert counted.streams <= MAX_OBJECT_STREAMS


def test_a_dictionary_nested_a_million_deep_is_not_walked(counted: _CountingZlib) -> None:
    """Nothing is parsed recursively: the stream inside is found and counted."""
    inner = object_stream_pdf(page_tree(3))
    data = inner.replace(b"98 0 obj\n", b"98 0 obj\n" + b"<<" * 1_000_000, 1)

    assert pdf_pages(data) == 3
    assert counted.streams == 1
