"""The inventory's JSON Schema, generated from its pydantic model (remote/inventory/model.py), for
editors: yaml-language-server (VS Code's YAML extension, Neovim's yamlls) completes keys, shows
each one's description and default, and marks a typo as it is typed.

The schema ships with the package beside this module (inventory.schema.json, package-data); a
test keeps it equal to what the model generates (`ddptui schema > remote/inventory.schema.json`
after changing the model). An inventory names it on its first line, a modeline:

    # yaml-language-server: $schema=<where the schema is>

The bundled inventory.yaml names it by a path relative to itself (the checkout's own file); the
inventories `ddptui init` writes name the installed file by its file:// URL, which holds
wherever the inventory lives. Rules the model checks across keys (a host range's count of
names, a container's runtime and image merged over defaults, names given twice) stay ddptui's:
`ddptui check` says them, with file and line.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic.json_schema import GenerateJsonSchema

from ddptui.remote.inventory.model import _File

FILE = Path(__file__).with_name("inventory.schema.json")
MODELINE = "# yaml-language-server: $schema="
DIALECT = "https://json-schema.org/draft/2020-12/schema"


class _ForEditors(GenerateJsonSchema):
    """pydantic's generator, less what reads badly in an editor's hover: a title on every key
    after its name (`Identity File`), and no default where the model makes one by a factory
    (`env: {}`, `nccl: {...}`)."""

    def field_title_should_be_set(self, schema: Any) -> bool:
        return False

    def get_default_value(self, schema: Any) -> Any:
        factory = schema.get("default_factory")
        if factory is not None and not schema.get("default_factory_takes_data"):
            return factory()
        return super().get_default_value(schema)


def generate() -> dict[str, Any]:
    """The schema of an inventory file, from the model."""
    schema = _File.model_json_schema(by_alias=True, schema_generator=_ForEditors)
    out: dict[str, Any] = _one_line_descriptions({"$schema": DIALECT, **schema})
    return out


def _one_line_descriptions(node: Any) -> Any:
    """Docstrings' line breaks out of the descriptions (an editor wraps them itself)."""
    if isinstance(node, dict):
        return {
            k: " ".join(v.split()) if k == "description" and isinstance(v, str)
            else _one_line_descriptions(v)
            for k, v in node.items()
        }  # fmt: skip
    if isinstance(node, list):
        return [_one_line_descriptions(v) for v in node]
    return node


def text() -> str:
    """As shipped: stable key order, a newline at the end."""
    return json.dumps(generate(), indent=2, ensure_ascii=False) + "\n"


def modeline(target: str | Path | None = None) -> str:
    """The first line that points an editor at the schema: the installed file's URL, or
    `target` (a path relative to the inventory, as the bundled one's)."""
    return MODELINE + (str(target) if target is not None else FILE.as_uri())
