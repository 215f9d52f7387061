"""A PDF attachment is priced by its pages, also when they sit in compressed object streams.

A reviewer attached a 36-page manual (pdfTeX output, PDF 1.5): its page objects are in
compressed object streams, a search of the file found none, and the estimate fell back
to a page per 100 kB: 3 pages, 9,015 tokens, while the provider counts 36 pages (its
text alone is 25,951 o200k tokens). On a 32k window the turn was sent though it could
not fit. These pin the page count inside object streams, the fallback by size at a text
page's bytes when the streams cannot be read, and the turn failing before any provider
call when the pages do not fit.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from hostkit.context import CharEstimator
from hostkit.context._charclass import ceil_div
from hostkit.context._estimate import PDF_PAGE_TOKENS
from hostkit.context._pdf import TEXT_PAGE_BYTES, pdf_pages
from hostkit.testing import Reply, ScriptedModel
from hostkit.types import (
    MEDIA_TYPES,
    Attachment,
    AttachmentPart,
    AttachmentSupport,
    ConversationFacts,
    ModelLimits,
    ModelMessage,
)
from tests.hosts import open_host, request
from tests.support import object_stream_pdf, page_tree

ALICE = ConversationFacts(channel="test", conversation_key="c1", principal_key="alice")
# An update appended to the file: one page object and a 30 kB content stream, both
# visible.
UPDATE = (
    b"200 0 obj\n<< /Type /Page /Parent 2 0 R /Contents 201 0 R >>\nendobj\n"
    b"201 0 obj\n<< /Length 30000 >>\nstream\n" + b"BT (text) Tj ET\n" * 1875 + b"endstream\n"
)


def _cost(data: bytes) -> int:
    """What attaching ``data`` adds to a user message's estimate."""
    estimator = CharEstimator()
    ref = "sha256:" + hashlib.sha256(data).hexdigest()
    part = AttachmentPart(Attachment("a.pdf", "application/pdf", len(data), ref), data)
    plain = estimator.message(ModelMessage("user", "summarize"))
    return estimator.message(ModelMessage("user", "summarize", attachments=(part,))) - plain


@pytest.mark.parametrize("direct_length", [True, False], ids=["length", "length-reference"])
def test_page_objects_in_a_compressed_object_stream_are_counted(direct_length: bool) -> None:
    data = object_stream_pdf(page_tree(36), direct_length=direct_length)
    assert b"/Type /Page" not in data  # nothing a search of the file finds

    assert pdf_pages(data) == 36
    assert _cost(data) == 36 * PDF_PAGE_TOKENS


def test_visible_page_objects_and_those_in_object_streams_add_up() -> None:
    """An update appended to a PDF 1.5 file writes its new objects uncompressed."""
    assert pdf_pages(object_stream_pdf(page_tree(4)) + UPDATE) == 5


@pytest.mark.parametrize(
    "data",
    [
        object_stream_pdf(page_tree(36), filters=b"/LZWDecode") + UPDATE,
        object_stream_pdf(page_tree(36), filters=b"[/FlateDecode /ASCIIHexDecode]") + UPDATE,
        object_stream_pdf(page_tree(36), keep=60) + UPDATE,
        b"%PDF-1.7\n" + UPDATE.replace(b"/Type /Page ", b""),
    ],
    ids=["other-filter", "filter-chain", "cut-short", "no-page-object"],
)
def test_a_pdf_whose_pages_cannot_all_be_counted_is_priced_by_size_at_a_text_page(
    data: bytes,
) -> None:
    """Not by the one page found beside the stream that could not be read, and not at a
    scanned page's 100 kB: a file of text pages has fewer pages than that counts."""
    assert pdf_pages(data) == ceil_div(len(data), TEXT_PAGE_BYTES) > 1


def test_images_and_embedded_fonts_are_not_priced_as_text_pages() -> None:
    """A protected 3 MB scan (its object stream unreadable, as an encrypted one is) is not
    2,000 pages of text: its image and font streams are left out of the size."""
    unreadable = object_stream_pdf(page_tree(3), filters=b"/ASCIIHexDecode")
    image = os.urandom(3_000_000)
    font = os.urandom(60_000)
    streams = b"".join(
        (
            b"7 0 obj\n<< /Type /XObject /Subtype /Image /Width 2480 /Height 3508 /Length 8 0 R"
            b" /Filter /DCTDecode >>\nstream\n" + image + b"\nendstream\nendobj\n",
            b"9 0 obj\n<< /Length1 60000 /Length 60000 >>\nstream\n"
            + font
            + b"\nendstream\nendobj\n",
        )
    )
    data = unreadable.replace(b"startxref", streams + b"startxref")
    text_bytes = len(data) - len(image) - len(font)
    assert pdf_pages(data) <= ceil_div(text_bytes, TEXT_PAGE_BYTES) + 1
    assert pdf_pages(data) < 10


@pytest.mark.anyio
async def test_a_pdf_whose_pages_in_object_streams_cannot_fit_fails_before_the_provider(
    tmp_path: Path,
) -> None:
    """12 pages (36,000 tokens) on a 32k window: before, priced as one page and sent."""
    data = object_stream_pdf(page_tree(12))
    model = ScriptedModel(
        [Reply("never")],
        limits=ModelLimits(context_window=32_768, max_output_tokens=4_096),
        attachments=AttachmentSupport(MEDIA_TYPES),
    )
    async with open_host(tmp_path, model) as host:
        pdf = await host.attachments.add(ALICE, data, name="m.pdf", media_type="application/pdf")
        result = await host.turns.run(request("summarize", attachments=(pdf,)))
    assert result.outcome == "failed"
    assert "context overflow (current_input_too_large)" in (result.error or "")
    assert model.requests == []
