"""The tool-module discovery child: import one module, print its tools' definitions.

The Host runs this file's text with ``python -I -c`` (in the agent's sandbox
when it can), never imports it to run it. Its top level uses the standard
library only: ``hostkit`` is imported after ``sys.path`` is the Host's, so the
child sees the same ``hostkit`` and the same module the Host would. Whatever
the module prints goes to stderr; the one JSON answer goes to the original
stdout: ``{"tools": [definition, ...]}`` or ``{"error": "<Type>: <message>"}``.
``describe`` is shared with the Host, which compares the tool it imports later
with what the model was shown.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

__all__ = ["describe", "main"]

_MAX_ERROR = 2_000


def describe(tool: Any) -> dict[str, Any]:
    """What the catalog, the policy and the approver see of one ``AuthoredTool``."""
    from hostkit.freeze import thaw

    return {
        "name": tool.name,
        "description": tool.description,
        "parameters": thaw(tool.parameters),
        "timeout_s": tool.timeout_s,
        "secrets_argument": tool.secrets_argument,
        "approval_warning": tool.approval_warning,
        "prepare": tool.prepare is not None,
        "preflight": tool.preflight is not None,
    }


def _light_package() -> None:
    """``hostkit`` without running its ``__init__``, which imports the whole Host (half the
    child's time): a tool module needs ``hostkit.effects``. The first attribute the
    package itself would define (``hostkit.Host``) runs the real ``__init__`` then."""
    import importlib.util

    spec = importlib.util.find_spec("hostkit")
    if spec is None or spec.loader is None:
        return
    package = importlib.util.module_from_spec(spec)
    loader = spec.loader

    def __getattr__(name: str) -> Any:
        del package.__dict__["__getattr__"]
        loader.exec_module(package)
        return getattr(package, name)

    package.__dict__["__getattr__"] = __getattr__
    sys.modules["hostkit"] = package


def _discover(module_name: str) -> list[dict[str, Any]]:
    import importlib

    _light_package()
    from hostkit.effects import AuthoredTool

    module = importlib.import_module(module_name)
    found: dict[int, AuthoredTool] = {}
    for value in vars(module).values():
        if isinstance(value, AuthoredTool):
            found.setdefault(id(value), value)
    return [describe(tool) for tool in found.values()]


def main() -> None:
    module_name, path = sys.argv[1], json.loads(sys.argv[2])
    answer_to = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)  # the module's own prints never reach the answer
    sys.stdout = sys.stderr
    sys.path[:] = path
    try:
        answer: dict[str, Any] = {"tools": _discover(module_name)}
        text = json.dumps(answer, allow_nan=False)
    except BaseException as exc:  # every failure, SystemExit included, is the answer
        message = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        text = json.dumps({"error": message[:_MAX_ERROR]})
    answer_to.write(text)
    answer_to.flush()
    # Threads or exit hooks the module started do not hold the answer back.
    os._exit(0)


if __name__ == "__main__":
    main()
