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

from hostkit.effects import AuthoredTool, ToolContext
from hostkit.freeze import thaw
from hostkit.host import Host, parse_config
from hostkit.testing import CallTools, Reply, ScriptedModel, capabilities
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


async def test_the_prompt_says_what_the_call_binds_and_the_tools_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the CLI and notebook show beside the arguments, a chat approver is told too:
    the Host secret the call binds (its value masked as a secret-named argument) and the
    tool's warning, never cut off by a long argument."""
    deploy_token = "dpl-SECRET-VALUE-123456"
    monkeypatch.setenv("DEPLOY_TOKEN", deploy_token)

    async def deploy(ctx: ToolContext, target: str, secrets: list[str] | None = None) -> str:
        return f"deployed {target}"

    tool = AuthoredTool(
        "deploy.run",
        deploy,
        secrets_argument="secrets",
        approval_warning="UNSANDBOXED: runs with the Host's rights",
    )
    agent = {
        "provider": "test",
        "memory": False,
        "secrets": ["DEPLOY_TOKEN"],
        "policy": {"allow": ["*"], "ask": ["deploy.run"]},
    }
    config = parse_config(
        {
            "host": {"database": str(tmp_path / "h.db"), "workspace": str(tmp_path)},
            "providers": {"test": {"kind": "scripted"}},
            "agents": {"assistant": agent},
        },
        base_dir=tmp_path,
    )
    call = {"target": "prod " + "x" * 500, "secrets": ["DEPLOY_TOKEN"]}
    model = ScriptedModel([CallTools(("deploy_run", call)), Reply("done")])
    async with Host.open(config, capabilities=capabilities(model, tools=[tool])) as host:
        result = await host.turns.run(request("deploy", route=dict(ROUTE)))
        intents = await host.store.delivery.intents()
    assert result.outcome == "needs_user"
    (prompt,) = [i for i in intents if i.approval is not None]
    text = prompt.payload["text"]
    assert "warning: UNSANDBOXED: runs with the Host's rights;" in text
    assert "binds secrets: DEPLOY_TOKEN;" in text
    assert text.index("binds secrets") < text.index("prod xxx")
    approval = thaw(prompt.approval)
    assert approval["binds_secrets"] == "DEPLOY_TOKEN"
    assert approval["warning"].startswith("UNSANDBOXED")
    assert deploy_token not in json.dumps(thaw(prompt.payload))
