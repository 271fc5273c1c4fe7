"""A mistake in the inventory, worded for the person who wrote it, at its file and line: pydantic's
error located in the YAML node tree and said in plain words."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml


class InventoryError(Exception):
    """A mistake in the inventory, worded for the person who wrote it."""

    def __init__(self, path: Path, line: int | None, message: str) -> None:
        self.path, self.line, self.message = path, line, message
        where = f"{path}:{line}" if line else str(path)
        super().__init__(f"{where}: {message}")


_MESSAGES = {
    "int_parsing": "must be an integer",
    "int_type": "must be an integer",
    "int_from_float": "must be an integer",
    "float_parsing": "must be a number",
    "float_type": "must be a number",
    "bool_parsing": "must be true or false",
    "bool_type": "must be true or false",
    "string_type": "must be a string",
    "list_type": "must be a list",
    "dict_type": "must be a mapping",
    "model_type": "must be a mapping",
    "model_attributes_type": "must be a mapping",
    "finite_number": "must be a finite number",
    "missing": "is required",
    "too_short": "must not be empty",
    "string_too_short": "must not be empty",
}


def describe(loc: tuple[Any, ...], err: Any) -> str:
    kind: str = err["type"]
    loc = _clean(loc)
    key = dotted(loc)
    if kind == "extra_forbidden":
        parent = dotted(loc[:-1]) or "the top level"
        return f"unknown key `{loc[-1]}` in {parent} (check the spelling)"
    if kind == "literal_error":
        return f"`{key}` must be one of {err['ctx']['expected']}, got {err['input']!r}"
    if kind in ("greater_than", "greater_than_equal", "less_than_equal"):
        return f"`{key}` {err['msg'].lower()}, got {err['input']!r}"
    if kind in _MESSAGES:
        got = "" if kind == "missing" else f", got {err['input']!r}"
        return f"`{key}` {_MESSAGES[kind]}{got}"
    if kind == "value_error":
        return f"`{key}`: {err['ctx']['error']}"
    return f"`{key}`: {err['msg']}"


def _clean(loc: tuple[Any, ...]) -> tuple[Any, ...]:
    """pydantic adds union branch names (`int`, `literal['auto']`, `list[_HostEntry]`) to
    locations."""
    tags, branches = ("int", "str", "float", "bool", "[key]"), ("literal[", "list[")
    return tuple(
        p for p in loc if not (isinstance(p, str) and (p in tags or p.startswith(branches)))
    )


def dotted(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def line_of(node: yaml.Node | None, loc: tuple[Any, ...]) -> int | None:
    """The 1-based line of a validation error's location (or of its nearest parent)."""
    return _walk(node, loc)[1]


def node_at(node: yaml.Node | None, loc: tuple[Any, ...]) -> yaml.Node | None:
    found, _ = _walk(node, loc)
    return found


def _walk(node: yaml.Node | None, loc: tuple[Any, ...]) -> tuple[yaml.Node | None, int | None]:
    """Walk the YAML node tree along a location: the node there (None if it is not in the
    tree) and the line of the deepest key or item found on the way."""
    line = node.start_mark.line + 1 if node else None
    for part in _clean(loc):
        if isinstance(node, yaml.MappingNode):
            match = [(k, v) for k, v in node.value if k.value == part]
            if not match:
                return None, line
            key, node = match[0]
            line = key.start_mark.line + 1
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int):
            if part >= len(node.value):
                return None, line
            node = node.value[part]
            line = node.start_mark.line + 1
        else:
            return None, line
    return node, line
