"""Delivery clause: an ``ask`` in a routed (channel) conversation sends an approval prompt.

A turn that ends ``needs_user`` on a pending approval with a captured route gets, in its
terminal transaction, one outbox intent whose payload carries the prompt text and
``{"approval": {"approval_id", "code", "tool", "summary"}}`` with ``code =
approval_code(approval_id)``, built from the approval row's redacted view (no secret reaches
it). A turn without a route (CLI, notebook) writes no intent.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hostkit.freeze import thaw
from hostkit.testing import CallTools, Reply, ScriptedModel
from hostkit.types import approval_code
from tests.contract._delivery_adapters import ROUTE
from tests.contract.test_effects_approval_flow import Stamps, approval_host
from tests.hosts import request

pytestmark = pytest.mark.anyio

SECRET = "sk-live-9f8e7d6c5b4a"


def asking_model() -> ScriptedModel:
    return ScriptedModel(
        [CallTools(("files_stamp", {"label": "invoice 42", "api_key": SECRET})), Reply("done")]
    )


async def test_a_routed_needs_user_turn_writes_its_approval_prompt(tmp_path: Path) -> None:
    stamps = Stamps(tmp_path / "stamps.txt")
    async with approval_host(tmp_path, asking_model(), stamps) as host:
        result = await host.turns.run(request("stamp the invoice", route=dict(ROUTE)))
        intents = await host.store.delivery.intents()
    assert result.outcome == "needs_user"
    approval_id = result.pending_approval
    assert approval_id
    prompts = [i for i in intents if i.approval is not None]
    assert len(prompts) == 1
    (prompt,) = prompts
    assert prompt.intent_id in result.deliveries
    assert set(result.deliveries) == {i.intent_id for i in intents}
    assert (prompt.turn_id, prompt.status, prompt.route) == (result.turn_id, "pending", ROUTE)
    approval = thaw(prompt.approval)
    code = approval_code(approval_id)
    assert approval["approval_id"] == approval_id
    assert approval["code"] == code
    assert approval["tool"] == "files.stamp"
    assert "invoice 42" in approval["summary"]
    text = prompt.payload["text"]
    assert "files.stamp" in text
    assert "invoice 42" in text
    assert f"approve {code}" in text
    assert f"deny {code}" in text
    assert "\n" not in approval["summary"]
    assert SECRET not in json.dumps(thaw(prompt.payload))
    assert SECRET[:12] not in json.dumps(thaw(prompt.payload))
    assert stamps.lines() == []


async def test_an_unrouted_needs_user_turn_writes_no_intent(tmp_path: Path) -> None:
    stamps = Stamps(tmp_path / "stamps.txt")
    async with approval_host(tmp_path, asking_model(), stamps) as host:
        result = await host.turns.run(request("stamp the invoice"))
        intents = await host.store.delivery.intents()
    assert result.outcome == "needs_user"
    assert result.pending_approval
    assert (intents, result.deliveries) == ((), ())
