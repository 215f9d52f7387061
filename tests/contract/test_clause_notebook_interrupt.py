"""Which cell endings count as the kernel's interrupt: the interrupt reaches a cell as
``KeyboardInterrupt`` or as the cancellation of its coroutine, recorded by IPython while a
statement runs (``error_in_exec``) or while the next one compiles (``error_before_exec``).
Any other error, and a cell that ended well, stop no turn."""

from __future__ import annotations

import asyncio

import pytest
from IPython.core.interactiveshell import ExecutionInfo, ExecutionResult

from hostkit.notebook._interrupt import interrupted


def ended(*, before: BaseException | None = None, during: BaseException | None = None) -> object:
    info = ExecutionInfo("pass", False, False, True, None)  # type: ignore[no-untyped-call]
    result = ExecutionResult(info)  # type: ignore[no-untyped-call]
    result.error_before_exec = before
    result.error_in_exec = during
    return result


@pytest.mark.parametrize("error", [KeyboardInterrupt(), asyncio.CancelledError()])
def test_an_interrupt_while_a_statement_runs_counts(error: BaseException) -> None:
    assert interrupted(ended(during=error))


@pytest.mark.parametrize("error", [KeyboardInterrupt(), asyncio.CancelledError()])
def test_an_interrupt_between_two_statements_counts(error: BaseException) -> None:
    assert interrupted(ended(before=error))


@pytest.mark.parametrize(
    "result",
    [ended(), ended(during=ValueError("boom")), ended(before=SyntaxError("bad"))],
    ids=["ok", "error while running", "syntax error"],
)
def test_other_endings_do_not(result: object) -> None:
    assert not interrupted(result)
