"""Clause: an approver sees what a call would change and how long it has to answer.

``files.write`` over an existing workspace file puts a bounded unified diff
in the approval view (redacted like every view, never read through a link);
a new file has none. The runtime stamps each prompt with ``expires_at``, the
wall-clock end of its decision timeout.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from hostkit.authority import AuthorityResolver
from hostkit.builtins.files import WorkspaceScope, workspace_tools
from hostkit.effects import (
    DIFF_KEY,
    MAX_DIFF_CHARS,
    MAX_DIFF_LINES,
    ApprovalDecision,
    ApprovalKey,
    ApprovalRequest,
    ApprovalRuntime,
    AuthoredTool,
    EffectPolicy,
    EffectRuntime,
    ToolContext,
    Toolset,
    secret_grant,
    unified_diff,
)
from hostkit.types import EffectRequest, EffectResult, TurnExecutionContext
from tests.contract.test_context_basic import context_for
from tests.support import facts

pytestmark = pytest.mark.anyio

SECRET = "s3cr3t-VALUE-42-abcdef"


class Tools:
    def __init__(self, tools: Sequence[AuthoredTool], policy: EffectPolicy, root: Path) -> None:
        self.tools, self.policy, self.root = tools, policy, root

    async def toolset(self, context: TurnExecutionContext) -> Toolset:
        return Toolset(tuple((t, "test") for t in self.tools), self.policy, self.root)


class Recorder:
    def __init__(self, decision: ApprovalDecision = "deny") -> None:
        self.decision = decision
        self.seen: list[ApprovalRequest] = []

    async def decide(self, request: ApprovalRequest) -> ApprovalDecision:
        self.seen.append(request)
        return self.decision


async def ask_write(
    authority: AuthorityResolver,
    root: Path,
    arguments: Mapping[str, Any],
    *,
    tools: Sequence[AuthoredTool] | None = None,
    policy: EffectPolicy | None = None,
    approvals: ApprovalRuntime | None = None,
) -> tuple[Recorder, EffectResult]:
    """Run one ``files.write`` (asked, denied) with HK_TOKEN held by the turn."""
    recorder = Recorder()
    tools = tools if tools is not None else workspace_tools(WorkspaceScope(root / "ws"))
    scope = await authority.for_conversation(facts("diff"))
    base = context_for(scope)
    context = TurnExecutionContext(
        **{
            name: getattr(base, name)
            for name in base.__dataclass_fields__
            if name != "capability_snapshot"
        },
        capability_snapshot={
            "effects": tuple(t.name for t in tools),
            "secrets": (secret_grant("HK_TOKEN"),),
        },
    )
    if approvals is None:
        approvals = ApprovalRuntime(provider=recorder)
    else:
        approvals.provider = recorder
    runtime = EffectRuntime(
        toolsets=Tools(tools, policy or EffectPolicy(ask=("files.*", "probe.*")), root),
        approvals=approvals,
        environ={"HK_TOKEN": SECRET},
    )
    catalog = await runtime.prepare_catalog(context)
    name = tools[0].name if len(tools) == 1 else "files.write"
    ref = catalog.resolve(name.replace(".", "_"))
    assert ref is not None
    result = await runtime.execute(EffectRequest("call_1", ref, dict(arguments)), context)
    return recorder, result


@pytest.fixture
def root(tmp_path: Path) -> Path:
    (tmp_path / "ws").mkdir()
    return tmp_path


async def test_an_overwrite_shows_its_approver_a_unified_diff(
    authority: AuthorityResolver, root: Path
) -> None:
    (root / "ws" / "notes.md").write_text("one\ntwo\nthree\n")
    recorder, result = await ask_write(
        authority, root, {"path": "notes.md", "content": "one\nTWO\nthree\nfour\n"}
    )
    assert result.status == "denied"
    (asked,) = recorder.seen
    diff = asked.view[DIFF_KEY]
    assert diff.splitlines() == [
        "--- a/notes.md",
        "+++ b/notes.md",
        "@@ -1,3 +1,4 @@",
        " one",
        "-two",
        "+TWO",
        " three",
        "+four",
    ]
    assert (root / "ws" / "notes.md").read_text() == "one\ntwo\nthree\n"  # nothing written


async def test_a_new_file_has_no_diff(authority: AuthorityResolver, root: Path) -> None:
    recorder, _ = await ask_write(authority, root, {"path": "new.md", "content": "a\nb\n"})
    (asked,) = recorder.seen
    assert DIFF_KEY not in asked.view
    assert asked.view["arguments"]["content"] == "a\nb\n"


async def test_the_diff_is_redacted_like_every_view(
    authority: AuthorityResolver, root: Path
) -> None:
    (root / "ws" / "env.txt").write_text(f"TOKEN={SECRET}\nname=old\n")
    recorder, _ = await ask_write(
        authority, root, {"path": "env.txt", "content": f"TOKEN={SECRET}x\nname=new\n"}
    )
    (asked,) = recorder.seen
    diff = asked.view[DIFF_KEY]
    assert "-name=old" in diff
    assert "+name=new" in diff
    assert "[redacted:HK_TOKEN]" in diff
    assert SECRET not in diff
    assert SECRET[:12] not in repr(dict(asked.view))


async def test_a_link_is_never_followed_to_make_a_diff(
    authority: AuthorityResolver, root: Path
) -> None:
    (root / "outside.txt").write_text("outside secret line\n")
    os.symlink(root / "outside.txt", root / "ws" / "link.txt")
    os.symlink(root, root / "ws" / "up")
    recorder, _ = await ask_write(authority, root, {"path": "link.txt", "content": "x\n"})
    (asked,) = recorder.seen
    assert DIFF_KEY not in asked.view
    assert "outside secret line" not in repr(dict(asked.view))
    # A link on the way is refused by the write's check before anyone is asked.
    recorder, refused = await ask_write(
        authority, root, {"path": "up/outside.txt", "content": "x\n"}
    )
    assert recorder.seen == []
    assert (refused.status, refused.started) == ("denied", False)
    assert "outside secret line" not in repr(refused)


async def test_a_long_diff_is_bounded_in_lines_and_characters(
    authority: AuthorityResolver, root: Path
) -> None:
    (root / "ws" / "big.txt").write_text("".join(f"old line {i}\n" for i in range(2_000)))
    recorder, _ = await ask_write(
        authority,
        root,
        {"path": "big.txt", "content": "".join(f"new line {i}\n" for i in range(2_000))},
    )
    diff = recorder.seen[0].view[DIFF_KEY]
    lines = diff.splitlines()
    assert len(lines) <= MAX_DIFF_LINES + 1
    assert len(diff) <= MAX_DIFF_CHARS
    assert lines[-1].startswith("… ")
    assert "more diff lines not shown" in lines[-1]
    # An ApprovalRequest keeps a diff to the diff bounds, not the 512 characters of metadata.
    request = ApprovalRequest(
        "apr_1",
        ApprovalKey("p", "s", "f", "r"),
        "files.write",
        "t",
        {DIFF_KEY: "x" * (MAX_DIFF_CHARS * 2), "other": "y" * 2_000},
    )
    assert len(request.view[DIFF_KEY]) == MAX_DIFF_CHARS
    assert len(request.view["other"]) == 512


async def test_the_diff_is_made_only_when_someone_is_asked_and_never_refuses_a_call(
    authority: AuthorityResolver, root: Path
) -> None:
    previews: list[Mapping[str, Any]] = []

    async def fn(ctx: ToolContext, label: str) -> str:
        return f"stamped {label}"

    async def preview(arguments: Mapping[str, Any]) -> str | None:
        previews.append(arguments)
        raise OSError("cannot read the old version")

    stamp = AuthoredTool("probe.stamp", fn, description="Stamps.", preview_diff=preview)
    _, allowed = await ask_write(
        authority, root, {"label": "a"}, tools=[stamp], policy=EffectPolicy()
    )
    assert allowed.status == "succeeded"
    assert previews == []  # allowed without a prompt: nothing previewed
    recorder, _ = await ask_write(authority, root, {"label": "b"}, tools=[stamp])
    assert previews == [{"label": "b"}]
    (asked,) = recorder.seen  # the failing preview left the diff out, the prompt still came
    assert DIFF_KEY not in asked.view


async def test_a_prompt_carries_the_wall_clock_end_of_its_decision_timeout(
    authority: AuthorityResolver, root: Path
) -> None:
    approvals = ApprovalRuntime(decision_timeout_s=272.0, wall_clock=lambda: 1_000.0)
    recorder, _ = await ask_write(
        authority, root, {"path": "n.md", "content": "x"}, approvals=approvals
    )
    assert recorder.seen[0].expires_at == 1_272.0


def test_a_diff_whose_work_would_be_unbounded_is_not_made() -> None:
    """Under the character bound, 87,000 short lines drawn from 100 values (each under
    difflib's junk threshold) took 10 s of CPU per approval: past 5,000 lines a side
    there is no diff (the approver sees the new content, as for a long text), and a file
    within the bounds still gets one."""
    values = [f"{n:02d}" for n in range(100)]
    many = 87_000
    old = "".join(f"{values[(i * 7) % 100]}\n" for i in range(many))
    new = "".join(f"{values[(i * 13 + 5) % 100]}\n" for i in range(many))
    assert len(old) < 256 * 1024
    assert unified_diff(old, new, "a.txt") is None
    small = unified_diff("one\ntwo\n", "one\nthree\n", "a.txt")
    assert small is not None
    assert "-two" in small
    assert "+three" in small
