"""Attachments (issue 12): "validated, persisted with the turn and passed to providers that
accept them, or refused explicitly".

Everything here is real: a Host on a SQLite file, the OpenAI and Anthropic adapters
against a loopback HTTP server speaking their wire formats, and the CLI as a
subprocess. The scripted model stands in only where a test needs to read the
``ModelRequest`` a provider received.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
from collections.abc import AsyncIterator, Mapping
from dataclasses import replace
from pathlib import Path

import anyio
import pytest

from hostkit.adapters.anthropic_messages import ANTHROPIC_ATTACHMENTS, AnthropicProvider
from hostkit.adapters.local_llama import LocalModel
from hostkit.adapters.openai_chat import OPENAI_ATTACHMENTS, OpenAIChatProvider
from hostkit.context import CharEstimator, fallback_summary
from hostkit.context._estimate import IMAGE_TOKENS, PDF_PAGE_TOKENS
from hostkit.errors import (
    AttachmentRefused,
    ConfigError,
    InvalidTurnRequest,
    InvalidValue,
    NotFoundOrUnauthorized,
    RequestConflict,
    TurnRejected,
)
from hostkit.host import Host, parse_config
from hostkit.providers import attachment_support
from hostkit.testing import CallTools, Reply, ScriptedModel, capabilities
from hostkit.types import (
    IMAGE_TYPES,
    MAX_ATTACHMENT_BYTES,
    MAX_ATTACHMENTS,
    MEDIA_TYPES,
    NO_ATTACHMENTS,
    Attachment,
    AttachmentPart,
    AttachmentSupport,
    ConversationFacts,
    ModelLimits,
    ModelMessage,
    ModelRequest,
    stand_in,
)
from tests.cli import run_cli_async
from tests.hosts import config, open_host, request, turn_rows
from tests.wire import WireServer, json_reply, serve_wire, sse_reply
from tests.wire import anthropic_messages as wire_anthropic
from tests.wire import openai_chat as wire_openai

pytestmark = pytest.mark.anyio

ALICE = ConversationFacts(channel="test", conversation_key="c1", principal_key="alice")
BOB = ConversationFacts(channel="test", conversation_key="c2", principal_key="bob")
PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(40))
JPEG = b"\xff\xd8\xff\xe0" + bytes(range(40))
PDF = (
    b"%PDF-1.4\n1 0 obj << /Type /Pages /Kids [2 0 R 3 0 R] >> endobj\n"
    b"2 0 obj << /Type /Page >> endobj\n3 0 obj << /Type /Page >> endobj\n%%EOF\n"
)
TEXT = "line one\nline two: caf\u00e9\n".encode()
EVERYTHING = AttachmentSupport(MEDIA_TYPES)


def _ref(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


async def _attachment_rows(host: Host) -> list[tuple[str, str, int]]:
    return await host.store.read(
        lambda c: c.execute(
            "SELECT principal_id, media_type, size FROM attachments ORDER BY id"
        ).fetchall()
    )


# -- validated ----------------------------------------------------------------------------


async def test_add_stores_content_addressed_bytes_and_refuses_what_is_not_its_type(
    tmp_path: Path,
) -> None:
    async with open_host(tmp_path, ScriptedModel([Reply("ok")])) as host:
        png = await host.attachments.add(
            ALICE, PNG, name="../../shots/screen.png", media_type="image/png"
        )
        assert png == Attachment("screen.png", "image/png", len(PNG), _ref(PNG))
        again = await host.attachments.add(ALICE, PNG, name="copy.png", media_type="image/png")
        assert again.ref == png.ref  # the same bytes are stored once
        text = await host.attachments.add(ALICE, TEXT, name="notes.txt", media_type="text/plain")
        assert await host.attachments.read(ALICE, text) == TEXT
        refusals = [
            (PNG, "image/jpeg", "image/png"),  # a PNG named .jpg claiming JPEG
            (JPEG, "image/png", "image/jpeg"),
            (b"GIF89a....", "image/webp", "its content is image/gif"),
            (b"RIFF....WAVE", "image/webp", "not of that type"),
            (PNG, "text/plain", "NUL"),
            (b"caf\xe9 latin-1", "text/plain", "UTF-8"),
            (PNG, "image/bmp", "media type must be one of"),
            (b"", "image/png", "1-"),
            (b"%PDF-" + b"0" * MAX_ATTACHMENT_BYTES, "application/pdf", "1-"),
        ]
        for data, media_type, said in refusals:
            with pytest.raises(InvalidValue) as caught:
                await host.attachments.add(ALICE, data, name="x.jpg", media_type=media_type)
            assert said in caught.value.message
            assert len(caught.value.message) <= 500
        with pytest.raises(InvalidValue):
            await host.attachments.add(ALICE, PNG, name="\x00/..", media_type="image/png")
        # Nothing of a refused add was stored.
        assert await _attachment_rows(host) == [
            ("test:alice", "image/png", len(PNG)),
            ("test:alice", "text/plain", len(TEXT)),
        ]


async def test_add_file_says_a_directory_is_a_directory(tmp_path: Path) -> None:
    folder = tmp_path / "d.png"
    await anyio.Path(folder).mkdir()
    async with open_host(tmp_path, ScriptedModel([Reply("ok")])) as host:
        with pytest.raises(InvalidValue) as directory:
            await host.attachments.add_file(ALICE, folder)
        with pytest.raises(InvalidValue) as missing:
            await host.attachments.add_file(ALICE, tmp_path / "nowhere.png")
    assert directory.value.message.endswith("d.png: a directory, not a file")
    assert missing.value.message.endswith("nowhere.png: no such file")


async def test_names_are_sanitized_and_attachment_values_are_checked() -> None:
    from hostkit.types import sanitize_name

    assert sanitize_name("C:\\Users\\me\\photo.png") == "photo.png"
    assert sanitize_name("a\x00b\u202e;rm -rf`.txt") == "a_b__rm -rf_.txt"
    long = sanitize_name("x" * 500 + ".png")
    assert len(long) == 120
    assert long.endswith(".png")
    good = {"name": "a.png", "media_type": "image/png", "size": 10, "ref": _ref(b"x")}
    for bad in (
        {"name": "../a.png"},
        {"name": "bell\x07.png"},
        {"media_type": "image/svg+xml"},
        {"size": 0},
        {"size": MAX_ATTACHMENT_BYTES + 1},
        {"ref": "sha256:nothex"},
    ):
        with pytest.raises(InvalidTurnRequest):
            Attachment(**{**good, **bad})  # type: ignore[arg-type]


def test_a_turn_is_bounded_in_attachments_count_and_bytes() -> None:
    def one(index: int, size: int = 10) -> Attachment:
        return Attachment(f"f{index}.png", "image/png", size, _ref(str(index).encode()))

    with pytest.raises(InvalidTurnRequest, match=f"at most {MAX_ATTACHMENTS}"):
        request(attachments=tuple(one(i) for i in range(MAX_ATTACHMENTS + 1)))
    with pytest.raises(InvalidTurnRequest, match="bytes together"):
        request(attachments=tuple(one(i, MAX_ATTACHMENT_BYTES) for i in range(5)))
    with pytest.raises(InvalidTurnRequest, match="once per turn"):
        request(attachments=(one(1), one(1)))
    assert len(request(attachments=tuple(one(i) for i in range(MAX_ATTACHMENTS))).attachments) == 8


async def test_another_principals_or_a_missing_ref_is_refused_before_admission(
    tmp_path: Path,
) -> None:
    model = ScriptedModel([Reply("ok")], repeat_last=True, attachments=EVERYTHING)
    async with open_host(tmp_path, model) as host:
        mine = await host.attachments.add(ALICE, PNG, name="a.png", media_type="image/png")
        with pytest.raises(NotFoundOrUnauthorized):
            await host.attachments.read(BOB, mine)
        never = Attachment("b.png", "image/png", 9, _ref(b"never added"))
        messages = []
        for attachment in (mine, never):
            with pytest.raises(InvalidTurnRequest) as caught:
                await host.turns.run(
                    request(
                        "look",
                        conversation="c2",
                        principal="bob",
                        request_id="req-bob",
                        attachments=(attachment,),
                    )
                )
            assert isinstance(caught.value, TurnRejected)
            messages.append(caught.value.message.replace(attachment.name, "NAME"))
        assert messages[0] == messages[1]  # no existence leak across principals
        lying = Attachment("a.png", "image/png", len(PNG) + 1, mine.ref)
        with pytest.raises(InvalidTurnRequest, match="stored as image/png"):
            await host.turns.run(request("look", attachments=(lying,)))
        assert await turn_rows(host) == []
        assert model.requests == []
        # The rejected request id is free: the same id runs once the request is right.
        result = await host.turns.run(
            request("look", conversation="c2", principal="bob", request_id="req-bob")
        )
        assert result.outcome == "completed"


# -- refused explicitly --------------------------------------------------------------------


async def test_a_provider_that_does_not_accept_the_type_refuses_before_turn_started(
    tmp_path: Path,
) -> None:
    model = ScriptedModel([Reply("never")], name="plainmodel")
    assert attachment_support(model) == NO_ATTACHMENTS
    async with open_host(tmp_path, model) as host:
        png = await host.attachments.add(ALICE, PNG, name="a.png", media_type="image/png")
        with pytest.raises(AttachmentRefused) as caught:
            await host.turns.run(request("what is this?", attachments=(png,)))
        assert isinstance(caught.value, TurnRejected)
        assert (caught.value.provider, caught.value.media_type) == ("plainmodel", "image/png")
        assert "'plainmodel' does not accept image/png" in caught.value.message
        assert await turn_rows(host) == []  # before turn.started: no turn at all
        assert model.requests == []
    small = ScriptedModel(
        [Reply("never")], attachments=AttachmentSupport({"image/png"}, max_bytes=8)
    )
    async with open_host(tmp_path / "small", small) as host:
        png = await host.attachments.add(ALICE, PNG, name="a.png", media_type="image/png")
        with pytest.raises(AttachmentRefused, match="at most 8 bytes"):
            await host.turns.run(request("what is this?", attachments=(png,)))
        assert small.requests == []


async def test_a_refused_turns_attachments_are_reclaimed_an_admitted_turns_are_kept(
    tmp_path: Path,
) -> None:
    """Bytes stored for a turn that was refused, or never sent, are referenced by nothing:
    reclaimed once past the grace period (never within it, so an upload racing its own turn
    is safe). A turn that was admitted keeps its attachments, the same bytes included."""
    model = ScriptedModel(
        [Reply("a chart")], repeat_last=True, attachments=AttachmentSupport({"image/png"})
    )
    async with open_host(tmp_path, model) as host:
        shown = await host.attachments.add(ALICE, PNG, name="a.png", media_type="image/png")
        refused = await host.attachments.add(ALICE, PDF, name="b.pdf", media_type="application/pdf")
        unsent = await host.attachments.add(BOB, TEXT, name="c.txt", media_type="text/plain")
        result = await host.turns.run(request("what is this?", attachments=(shown,)))
        assert result.outcome == "completed"
        with pytest.raises(AttachmentRefused):
            await host.turns.run(request("and this?", attachments=(shown, refused)))
        assert await host.attachments.reclaim() == 0  # within the grace period
        await anyio.sleep(0.01)
        assert await host.attachments.reclaim(grace_s=0) == 2
        assert await host.attachments.read(ALICE, shown) == PNG
        for principal, gone in ((ALICE, refused), (BOB, unsent)):
            with pytest.raises(NotFoundOrUnauthorized):
                await host.attachments.read(principal, gone)
        assert await _attachment_rows(host) == [("test:alice", "image/png", len(PNG))]


async def test_serves_retention_daemon_reclaims_what_no_turn_took(tmp_path: Path) -> None:
    async with open_host(tmp_path, ScriptedModel([Reply("ok")])) as host:
        unsent = await host.attachments.add(ALICE, PNG, name="a.png", media_type="image/png")
        await host.store.write(
            lambda c: c.execute(
                "UPDATE attachments_pending SET added_at = '2000-01-01T00:00:00.000Z'"
            )
        )
        daemon = host.serve()
        await daemon.retention.sweep()
        assert daemon.retention.reclaimed == 1
        with pytest.raises(NotFoundOrUnauthorized):
            await host.attachments.read(ALICE, unsent)


async def test_a_repeat_of_a_turn_that_ran_gets_its_record_after_the_provider_changed(
    tmp_path: Path,
) -> None:
    """The retry a client makes of a request that already ran returns that turn, even once
    the agent's provider no longer takes the attachment; a new request is still refused."""
    ask = request("what is this?", request_id="req_chart")
    async with open_host(
        tmp_path, ScriptedModel([Reply("a chart")], attachments=EVERYTHING)
    ) as host:
        png = await host.attachments.add(ALICE, PNG, name="c.png", media_type="image/png")
        first = await host.turns.run(replace(ask, attachments=(png,)))
    assert (first.outcome, first.text) == ("completed", "a chart")
    plain = ScriptedModel([Reply("never")])
    async with open_host(tmp_path, plain) as host:
        again = await host.turns.run(replace(ask, attachments=(png,)))
        with pytest.raises(AttachmentRefused):
            await host.turns.run(request("and this?", attachments=(png,)))
    assert (again.turn_id, again.text) == (first.turn_id, "a chart")
    assert plain.requests == []


@pytest.mark.slow
async def test_the_local_model_refuses_attachments_before_the_turn_starts(tmp_path: Path) -> None:
    async with LocalModel.start() as local, local.provider() as provider:
        assert attachment_support(provider) == NO_ATTACHMENTS
        async with open_host(tmp_path, provider) as host:
            png = await host.attachments.add(ALICE, PNG, name="a.png", media_type="image/png")
            with pytest.raises(AttachmentRefused) as caught:
                await host.turns.run(request("what is this?", attachments=(png,)))
            assert (caught.value.provider, caught.value.media_type) == ("local", "image/png")
            assert await turn_rows(host) == []


def test_what_each_provider_accepts_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    assert (
        attachment_support(OpenAIChatProvider(model="gpt-4o", api_key="sk-x")) == OPENAI_ATTACHMENTS
    )
    assert OPENAI_ATTACHMENTS.media_types == MEDIA_TYPES
    # A compatible server's model (vLLM, llama.cpp, the local model) may read no images.
    compatible = OpenAIChatProvider(model="m", base_url="http://127.0.0.1:9/v1")
    assert attachment_support(compatible) == NO_ATTACHMENTS
    official = OpenAIChatProvider(model="m", base_url="https://api.openai.com/v1", api_key="k")
    assert attachment_support(official) == OPENAI_ATTACHMENTS
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    assert attachment_support(OpenAIChatProvider(model="m", api_key="k")) == NO_ATTACHMENTS
    told = OpenAIChatProvider(
        model="m", base_url="http://127.0.0.1:9/v1", attachments=AttachmentSupport(IMAGE_TYPES)
    )
    assert attachment_support(told).media_types == IMAGE_TYPES
    anthropic = AnthropicProvider(model="claude", api_key="sk-ant-x")
    assert attachment_support(anthropic) == ANTHROPIC_ATTACHMENTS
    assert ANTHROPIC_ATTACHMENTS.max_bytes * 4 // 3 == 5 * 1024 * 1024  # 5 MiB of base64
    assert attachment_support(object()) == NO_ATTACHMENTS


def test_configured_providers_declare_attachments_and_the_local_model_takes_none(
    tmp_path: Path,
) -> None:
    base = {"host": {"database": str(tmp_path / "h.db")}, "agents": {"a": {"provider": "p"}}}
    parsed = parse_config(
        {**base, "providers": {"p": {"kind": "scripted", "attachments": ["image/png"]}}},
        base_dir=tmp_path,
    )
    assert parsed.providers["p"].attachments == ("image/png",)
    for bad in (
        {"kind": "local", "attachments": ["image/png"]},
        {"kind": "scripted", "attachments": ["image/bmp"]},
    ):
        with pytest.raises(ConfigError):
            parse_config({**base, "providers": {"p": bad}}, base_dir=tmp_path)


# -- persisted with the turn -----------------------------------------------------------------


async def test_attachments_persist_with_the_turn_and_later_turns_read_a_stand_in(
    tmp_path: Path,
) -> None:
    model = ScriptedModel(
        [CallTools(("missing_tool", {})), Reply("a chart"), Reply("still a chart")],
        attachments=EVERYTHING,
    )
    async with open_host(tmp_path, model) as host:
        png = await host.attachments.add(ALICE, PNG, name="chart.png", media_type="image/png")
        text = await host.attachments.add(ALICE, TEXT, name="notes.txt", media_type="text/plain")
        first = await host.turns.run(
            request("what is this?", request_id="req-1", attachments=(png, text))
        )
        assert first.outcome == "completed"
        # Both steps of the turn that attached them carry the bytes.
        for sent in model.requests[:2]:
            user = [m for m in sent.messages if m.role == "user"][-1]
            assert user.attachments == (AttachmentPart(png, PNG), AttachmentPart(text, TEXT))
        # The transcript keeps the references (never the bytes): what inspect and replay read.
        scope = await host.authority.for_conversation(ALICE)
        page = await host.store.list_messages(scope, first.session_id)
        stored = next(r for r in page.items if r.role == "user")
        assert [dict(a) for a in stored.content["attachments"]] == [png.to_json(), text.to_json()]
        raw = await host.store.read(
            lambda c: c.execute("SELECT content FROM messages WHERE role = 'user'").fetchone()[0]
        )
        assert base64.b64encode(PNG).decode() not in raw
        assert len(raw) < 1000
        # A repeat of the request id with other attachments is a conflict, not the first result.
        with pytest.raises(RequestConflict):
            await host.turns.run(request("what is this?", request_id="req-1", attachments=(png,)))
        # The next turn's history shows the attachments as references: sent as a stand-in.
        second = await host.turns.run(request("and now?"))
        assert second.outcome == "completed"
        history_user = next(m for m in model.requests[-1].messages if m.role == "user")
        assert history_user.attachments == (AttachmentPart(png), AttachmentPart(text))
        assert "was shown in an earlier turn" in stand_in(png)


def test_the_estimate_counts_attachments_sent_and_their_stand_in_later() -> None:
    estimator = CharEstimator()
    plain = estimator.message(ModelMessage("user", "what is this?"))

    def cost(part: AttachmentPart) -> int:
        return estimator.message(ModelMessage("user", "what is this?", attachments=(part,))) - plain

    png = Attachment("a.png", "image/png", len(PNG), _ref(PNG))
    pdf = Attachment("a.pdf", "application/pdf", len(PDF), _ref(PDF))
    text = Attachment("a.txt", "text/plain", len(TEXT), _ref(TEXT))
    assert cost(AttachmentPart(png, PNG)) == IMAGE_TOKENS
    assert cost(AttachmentPart(pdf, PDF)) == 2 * PDF_PAGE_TOKENS  # two /Type /Page objects
    assert cost(AttachmentPart(text, TEXT)) >= estimator.text(TEXT.decode())
    assert cost(AttachmentPart(png)) == estimator.text(stand_in(png)) < IMAGE_TOKENS


def test_a_summary_records_which_files_were_attached() -> None:
    png = Attachment("chart.png", "image/png", len(PNG), _ref(PNG))
    messages = [ModelMessage("user", "look", attachments=(AttachmentPart(png),))]
    assert "user: look [attached: chart.png]" in fallback_summary(None, messages, max_chars=500)


async def test_an_image_that_does_not_fit_the_window_overflows_before_the_provider(
    tmp_path: Path,
) -> None:
    small = ModelLimits(context_window=2048, max_output_tokens=256, safety_margin_tokens=64)
    model = ScriptedModel([Reply("never")], limits=small, attachments=EVERYTHING)
    async with open_host(tmp_path, model) as host:
        pdf = await host.attachments.add(ALICE, PDF, name="a.pdf", media_type="application/pdf")
        result = await host.turns.run(request("summarize", attachments=(pdf,)))
        assert result.outcome == "failed"
        assert "context overflow (current_input_too_large)" in (result.error or "")
        assert model.requests == []


# -- passed to providers in their native shapes ----------------------------------------------


@pytest.fixture
async def wire() -> AsyncIterator[WireServer]:
    async with serve_wire() as server:
        yield server


def _parts() -> tuple[AttachmentPart, ...]:
    return (
        AttachmentPart(Attachment("a.png", "image/png", len(PNG), _ref(PNG)), PNG),
        AttachmentPart(Attachment("doc.pdf", "application/pdf", len(PDF), _ref(PDF)), PDF),
        AttachmentPart(Attachment("n.txt", "text/plain", len(TEXT), _ref(TEXT)), TEXT),
        AttachmentPart(Attachment("old.jpg", "image/jpeg", len(JPEG), _ref(JPEG))),
    )


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


async def test_openai_receives_image_parts_as_data_urls_pdf_as_files_and_text_inline(
    wire: WireServer,
) -> None:
    wire.script(json_reply(wire_openai.completion(text="seen")))
    async with OpenAIChatProvider(
        model="gpt-4o", base_url=f"{wire.base_url}/v1", api_key="sk-test-0123456789"
    ) as provider:
        request_ = ModelRequest(messages=(ModelMessage("user", "Describe.", attachments=_parts()),))
        await provider.complete(request_)
    old = Attachment("old.jpg", "image/jpeg", len(JPEG), _ref(JPEG))
    assert wire.requests[0].body["messages"] == [
        {
            "role": "user",
            "content": [
                {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{_b64(PNG)}"}},
                {
                    "type": "file",
                    "file": {
                        "filename": "doc.pdf",
                        "file_data": f"data:application/pdf;base64,{_b64(PDF)}",
                    },
                },
                {"type": "text", "text": f"[attachment n.txt]\n{TEXT.decode()}"},
                {"type": "text", "text": stand_in(old)},
                {"type": "text", "text": "Describe."},
            ],
        }
    ]


async def test_anthropic_receives_image_blocks_and_document_blocks(wire: WireServer) -> None:
    wire.script(json_reply(wire_anthropic.message([wire_anthropic.text_block("seen")])))
    async with AnthropicProvider(
        model="claude-x", base_url=wire.base_url, api_key="sk-ant-0123456789"
    ) as provider:
        request_ = ModelRequest(messages=(ModelMessage("user", "Describe.", attachments=_parts()),))
        await provider.complete(request_)
    old = Attachment("old.jpg", "image/jpeg", len(JPEG), _ref(JPEG))
    assert wire.requests[0].body["messages"] == [
        {
            "role": "user",
            "content": [
                {
                    "type": "image",
                    "source": {"type": "base64", "media_type": "image/png", "data": _b64(PNG)},
                },
                {
                    "type": "document",
                    "source": {
                        "type": "base64",
                        "media_type": "application/pdf",
                        "data": _b64(PDF),
                    },
                    "title": "doc.pdf",
                },
                {
                    "type": "document",
                    "source": {"type": "text", "media_type": "text/plain", "data": TEXT.decode()},
                    "title": "n.txt",
                },
                {"type": "text", "text": stand_in(old)},
                {"type": "text", "text": "Describe."},
            ],
        }
    ]


def _streamed(text: str) -> object:
    return sse_reply(
        wire_openai.sse(
            [
                wire_openai.chunk(role="assistant"),
                wire_openai.chunk(content=text),
                wire_openai.chunk(finish_reason="stop"),
                wire_openai.chunk(usage_block=wire_openai.usage(20, 5)),
            ]
        )
    )


async def test_a_host_turn_sends_the_bytes_once_and_a_stand_in_after(
    tmp_path: Path, wire: WireServer
) -> None:
    wire.script(_streamed("a cat"), _streamed("still a cat"))  # type: ignore[arg-type]
    provider = OpenAIChatProvider(
        model="vision-1",
        base_url=f"{wire.base_url}/v1",
        api_key="sk-test-0123456789",
        attachments=AttachmentSupport(IMAGE_TYPES),
    )
    async with provider, Host.open(config(tmp_path), capabilities=capabilities(provider)) as host:
        png = await host.attachments.add(ALICE, PNG, name="cat.png", media_type="image/png")
        assert (await host.turns.run(request("what is it?", attachments=(png,)))).text == "a cat"
        assert (await host.turns.run(request("sure?"))).text == "still a cat"
    first, second = (seen.body["messages"] for seen in wire.requests)
    image = {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{_b64(PNG)}"}}
    assert first[-1] == {
        "role": "user",
        "content": [image, {"type": "text", "text": "what is it?"}],
    }
    earlier = next(m for m in second if m["role"] == "user")
    assert earlier["content"] == [
        {"type": "text", "text": stand_in(png)},
        {"type": "text", "text": "what is it?"},
    ]
    assert _b64(PNG) not in json.dumps(second)


# -- the CLI ---------------------------------------------------------------------------------


async def _hostkit(
    *args: str, cwd: Path, env: Mapping[str, str] | None = None
) -> tuple[int, str, str]:
    result = await run_cli_async(
        *args, cwd=cwd, env={**os.environ, "COLUMNS": "200", **(env or {})}
    )
    return result.returncode, result.stdout.decode(), result.stderr.decode()


@pytest.mark.sqlite_only("the hostkit CLI child opens the project's SQLite file")
async def test_hostkit_run_attach_sends_files_and_refuses_bad_ones_in_one_line(
    tmp_path: Path, wire: WireServer
) -> None:
    wire.script(_streamed("a tiny image"))  # type: ignore[arg-type]
    await anyio.Path(tmp_path / "hostkit.toml").write_text(
        f"""
[host]
database = "state/hostkit.db"

[providers.vision]
kind = "openai"
base_url = "{wire.base_url}/v1"
model = "vision-1"
attachments = ["image/png", "text/plain"]

[providers.plain]
kind = "scripted"
script = [{{ reply = "never" }}]

[agents.assistant]
provider = "vision"

[agents.texty]
provider = "plain"
"""
    )
    await anyio.Path(tmp_path / "pic.png").write_bytes(PNG)
    await anyio.Path(tmp_path / "notes.txt").write_bytes(TEXT)
    code, out, err = await _hostkit(
        "run", "--attach", "pic.png", "--attach", "notes.txt", "what is it?", cwd=tmp_path
    )
    assert code == 0, err
    assert "a tiny image" in out
    content = wire.requests[0].body["messages"][-1]["content"]
    assert content[0]["image_url"]["url"] == f"data:image/png;base64,{_b64(PNG)}"
    assert content[1] == {"type": "text", "text": f"[attachment notes.txt]\n{TEXT.decode()}"}

    await anyio.Path(tmp_path / "fake.jpg").write_bytes(PNG)
    await anyio.Path(tmp_path / "drawing.bmp").write_bytes(b"BM....")
    await anyio.Path(tmp_path / "huge.png").write_bytes(PNG + bytes(MAX_ATTACHMENT_BYTES))
    cases = [
        (("--attach", "nowhere.png"), "nowhere.png: no such file"),
        (("--attach", "huge.png"), f"huge.png: {len(PNG) + MAX_ATTACHMENT_BYTES} bytes is over"),
        (("--attach", "drawing.bmp"), "drawing.bmp: unknown attachment type"),
        (("--attach", "fake.jpg"), "declared image/jpeg, but its content is image/png"),
        (
            ("--agent", "texty", "--attach", "pic.png"),
            "provider 'plain' does not accept image/png attachments",
        ),
    ]
    for args, said in cases:
        code, out, err = await _hostkit("run", *args, "what is it?", cwd=tmp_path)
        assert code == 2, err
        assert said in err
        lines = [line for line in err.splitlines() if line.strip()]
        assert len(lines) == 1, err
        assert lines[0].startswith("error: ")
        assert out.strip() == ""
    assert len(wire.requests) == 1  # no refused turn reached the provider
