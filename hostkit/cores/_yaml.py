"""YAML with line numbers: ``agent.yaml`` parsed into plain data plus where each key was.

PyYAML's SafeLoader composes the node tree (no arbitrary tags); aliases are
refused before anything is constructed (no "billion laughs"), as are merge
keys, duplicate keys and non-scalar keys, each naming its line. The data is
built from the nodes here, so every value's path maps back to a line.
"""

from __future__ import annotations

from typing import Any

import yaml
from yaml.events import AliasEvent
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from hostkit.types import is_encodable

__all__ = ["MAX_YAML_NODES", "YamlProblem", "parse_yaml", "value_spans"]

# agent.yaml is written by hand: far more nodes than any real one has.
MAX_YAML_NODES = 20_000
MAX_YAML_DEPTH = 32
Path = tuple[str | int, ...]


class YamlProblem(Exception):
    """Why the document is not usable data, and the 1-based line where that was found."""

    def __init__(self, message: str, line: int | None, path: Path = ()) -> None:
        super().__init__(message)
        self.message = message
        self.line = line
        self.path = path


class _Loader(yaml.SafeLoader):
    """SafeLoader that refuses aliases and deep nesting while composing.

    Both before anything is built: the composer recurses once per level, so a
    short document of nested brackets would otherwise exhaust the interpreter's
    stack (``RecursionError``) before any later check could run.
    """

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: Node | None, index: int) -> Node | None:
        if self.check_event(AliasEvent):
            event = self.peek_event()  # type: ignore[no-untyped-call]
            raise YamlProblem("aliases (*name) are not allowed", event.start_mark.line + 1)
        if self._depth >= MAX_YAML_DEPTH:
            event = self.peek_event()  # type: ignore[no-untyped-call]
            raise YamlProblem(
                f"nested more than {MAX_YAML_DEPTH} levels deep", event.start_mark.line + 1
            )
        self._depth += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def parse_yaml(text: str) -> tuple[Any, dict[Path, int]]:
    """The document's data and the line of each path in it (keys: the key's line).

    Raises ``YamlProblem`` for invalid YAML, several documents, aliases, merge
    keys, duplicate or non-scalar keys, unknown tags, too many nodes or levels.
    """
    data, builder = _parse(text)
    return data, {} if builder is None else builder.lines


def value_spans(text: str) -> tuple[Any, dict[Path, tuple[int, int]]]:
    """The document's data and where each value is written in ``text`` (start, end: as
    written, quotes and escapes included). ``YamlProblem`` as ``parse_yaml``."""
    data, builder = _parse(text)
    return data, {} if builder is None else builder.spans


def _parse(text: str) -> tuple[Any, _Builder | None]:
    try:
        # The reader checks every character here, before any node is read.
        loader = _Loader(text)
    except yaml.YAMLError as exc:
        raise _unreadable(exc, text) from None
    try:
        root = loader.get_single_node()
    except YamlProblem:
        raise
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = None if mark is None else mark.line + 1
        raise YamlProblem(f"not valid YAML: {exc.problem or exc.context}", line) from None
    except yaml.YAMLError as exc:
        raise YamlProblem(f"not valid YAML: {exc}", None) from None
    except RecursionError:
        raise YamlProblem("nested too deeply to read", None) from None
    finally:
        loader.dispose()
    if root is None:
        return None, None
    builder = _Builder(loader)
    return builder.build(root, (), 0), builder


def _unreadable(exc: yaml.YAMLError, text: str) -> YamlProblem:
    """A character YAML does not allow (a NUL, a control character), with its line."""
    position = getattr(exc, "position", None)
    line = text.count("\n", 0, position) + 1 if isinstance(position, int) else None
    reason = getattr(exc, "reason", None) or "a character YAML does not allow"
    character = getattr(exc, "character", None)
    shown = f" (U+{ord(character):04X})" if isinstance(character, str) and character else ""
    return YamlProblem(f"not valid YAML: {reason}{shown}", line)


# What plain data is tagged with, explicitly or as the loader resolves it (a date included).
_PLAIN_TAGS = frozenset(
    f"tag:yaml.org,2002:{name}"
    for name in ("str", "int", "float", "bool", "null", "timestamp", "map", "seq")
)


class _Builder:
    def __init__(self, loader: _Loader) -> None:
        self._loader = loader
        self.lines: dict[Path, int] = {}
        self.spans: dict[Path, tuple[int, int]] = {}
        self._count = 0

    def build(self, node: Node, path: Path, depth: int) -> Any:
        line = node.start_mark.line + 1
        self._count += 1
        if self._count > MAX_YAML_NODES:
            raise YamlProblem(f"the document has more than {MAX_YAML_NODES} nodes", line, path)
        if depth > MAX_YAML_DEPTH:
            raise YamlProblem(f"nested more than {MAX_YAML_DEPTH} levels deep", line, path)
        self.lines.setdefault(path, line)
        self.spans[path] = (node.start_mark.index, node.end_mark.index)
        if node.tag not in _PLAIN_TAGS:
            # A tag on a mapping or sequence was ignored, and !!binary read as text.
            shown = node.tag.removeprefix("tag:yaml.org,2002:")
            raise YamlProblem(f"tag {shown[:80]!r} is not plain data", line, path)
        if isinstance(node, MappingNode):
            return self._mapping(node, path, depth)
        if isinstance(node, SequenceNode):
            items = []
            for index, item in enumerate(node.value):
                items.append(self.build(item, (*path, index), depth + 1))
            return items
        assert isinstance(node, ScalarNode)
        try:
            value = self._loader.construct_object(node, deep=True)
        except yaml.YAMLError as exc:
            problem = getattr(exc, "problem", None) or str(exc)
            raise YamlProblem(f"cannot read this value: {problem}", line, path) from None
        except (ValueError, OverflowError):
            # An integer past Python's digit limit, a float or date out of range.
            raise YamlProblem("cannot read this value: out of range", line, path) from None
        if isinstance(value, str) and not is_encodable(value):
            # A "\udcff" escape: wherever the value goes (a store, a command), it cannot.
            raise YamlProblem("a lone surrogate escape is not text", line, path)
        return value

    def _mapping(self, node: MappingNode, path: Path, depth: int) -> dict[str, Any]:
        result: dict[str, Any] = {}
        for key_node, value_node in node.value:
            line = key_node.start_mark.line + 1
            if key_node.tag == "tag:yaml.org,2002:merge":
                raise YamlProblem("merge keys (<<) are not allowed", line, path)
            if not isinstance(key_node, ScalarNode):
                raise YamlProblem("a key must be a plain string", line, path)
            key = self.build(key_node, (*path, "[key]"), depth + 1)
            if not isinstance(key, str):
                key = str(key) if isinstance(key, int | float | bool) else None
            if key is None:
                raise YamlProblem("a key must be a plain string", line, path)
            if key in result:
                raise YamlProblem(f"duplicate key {key[:80]!r}", line, (*path, key))
            self.lines[(*path, key)] = line
            result[key] = self.build(value_node, (*path, key), depth + 1)
        return result
