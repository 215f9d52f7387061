"""Clause: every hostkit error survives pickling and copying as it was raised.

A process pool, a multiprocessing queue or ``copy.deepcopy`` rebuilds an
exception from its pickle. Most hostkit errors take other arguments than
their message, and several build the message from them: rebuilt by calling
``__init__`` again they failed with a raw ``TypeError`` or doubled their
message (``'session not found not found'``). Each error class is built here
from its own signature and must come back with the same type, message and
fields.
"""

from __future__ import annotations

import copy
import inspect
import pickle
from collections.abc import Callable
from typing import Any

import pytest

import hostkit.errors as errors
from hostkit.types import DeliveryFailure

ERRORS = sorted(
    (
        value
        for value in vars(errors).values()
        if isinstance(value, type) and issubclass(value, errors.HostkitError)
    ),
    key=lambda cls: cls.__name__,
)


def _argument(annotation: str) -> Any:
    """A plausible value for a parameter annotated ``annotation``."""
    if "Failure" in annotation:
        return DeliveryFailure("transient", "http_503", "busy", retry_after_s=2.0)
    if "Sequence" in annotation or "tuple" in annotation:
        return ("pkg-a",)
    if annotation.startswith("int"):
        return 3
    if annotation.startswith("float"):
        return 1.5
    if annotation.startswith("bool"):
        return True
    return "value-7"


def build(cls: type[errors.HostkitError]) -> errors.HostkitError:
    """An instance of ``cls`` with every required parameter given a plausible value."""
    positional: list[Any] = []
    named: dict[str, Any] = {}
    for name, parameter in inspect.signature(cls.__init__).parameters.items():
        if name == "self" or parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            continue
        if parameter.default is not parameter.empty:
            continue
        value = _argument(str(parameter.annotation))
        if parameter.kind is parameter.KEYWORD_ONLY:
            named[name] = value
        else:
            positional.append(value)
    return cls(*positional, **named)


TRAVELS: dict[str, Callable[[Any], Any]] = {
    "pickle": lambda error: pickle.loads(pickle.dumps(error)),
    "copy": copy.copy,
    "deepcopy": copy.deepcopy,
}


def test_the_error_tree_is_covered() -> None:
    names = {cls.__name__ for cls in ERRORS}
    assert {"StoreClosed", "NotFoundOrUnauthorized", "TurnRejected", "ProviderError"} <= names


@pytest.mark.parametrize("travel", sorted(TRAVELS))
@pytest.mark.parametrize("cls", ERRORS, ids=lambda cls: cls.__name__)
def test_an_error_comes_back_as_it_was_raised(cls: type[errors.HostkitError], travel: str) -> None:
    error = build(cls)
    back = TRAVELS[travel](error)
    assert type(back) is cls
    assert str(back) == str(error)
    assert back.message == error.message
    assert back.retryable == error.retryable
    assert vars(back) == vars(error)
