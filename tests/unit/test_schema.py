"""The inventory's JSON Schema keeps in step with the model: the shipped file is what the model
generates, every example in the docs passes both or neither, and every mistake the model's tests
make (tests/unit/test_inventory.py, read from its own cases) the schema refuses too, but for the
rules it cannot say, each named below."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import test_inventory as cases
import yaml

from ddptui.remote import inventory, schema

REPO = Path(__file__).resolve().parents[2]
VALIDATOR = jsonschema.Draft202012Validator(schema.generate())


def refused_by_schema(text: str) -> bool:
    return not VALIDATOR.is_valid(yaml.safe_load(text))


def test_the_shipped_schema_is_the_models() -> None:
    shipped = schema.FILE.read_text()
    assert shipped == schema.text(), "regenerate it: ddptui schema > remote/inventory.schema.json"
    jsonschema.Draft202012Validator.check_schema(json.loads(shipped))


def test_every_key_says_what_it_is() -> None:
    generated = schema.generate()
    models = [generated, *generated["$defs"].values()]

    def described(prop: dict[str, Any]) -> bool:  # or the section it refers to is
        ref = prop.get("$ref", "").rpartition("/")[2]
        return bool(prop.get("description") or generated["$defs"].get(ref, {}).get("description"))

    missing = [
        f"{model.get('title')}.{key}"
        for model in models
        for key, prop in model.get("properties", {}).items()
        if not described(prop)
    ]
    assert not missing
    job = generated["$defs"]["Job"]["properties"]
    assert job["master_port"]["default"] == 29500
    assert job["nccl"]["default"]["socket_ifname"] == "auto"
    assert set(generated["$defs"]["ContainerFields"]["properties"]) >= {"runtime", "image"}


def test_the_bundled_inventory_names_the_schema() -> None:
    first = (REPO / "inventory.yaml").read_text().splitlines()[0]
    assert first == schema.modeline("remote/inventory.schema.json")
    assert (REPO / first.partition("$schema=")[2]).resolve() == schema.FILE


# -- every example ---------------------------------------------------------------------------


def examples() -> Iterator[tuple[str, str]]:
    """(where, YAML) of the repo's inventories and of every yaml block in its markdown."""
    for path in sorted(REPO.glob("*.yaml")) + sorted(REPO.glob("examples/**/*.yaml")):
        yield path.name, path.read_text()
    for doc in sorted(REPO.glob("*.md")) + sorted(REPO.glob("docs/**/*.md")):
        text = doc.read_text()
        for m in re.finditer(r"^```yaml\n(.*?)^```", text, re.S | re.M):
            yield f"{doc.relative_to(REPO)}:{text[: m.start()].count(chr(10)) + 1}", m[1]


def whole(block: dict[str, Any]) -> dict[str, Any]:
    """A fragment of an inventory (a `job:`, a `notify:`) made whole with the least around it."""
    if not set(block) <= {"defaults", "hosts", "slurm", "job"}:
        block = {"job": block}
    where = {} if "slurm" in block else {"hosts": [{"host": "a"}]}
    return {**where, **block, "job": {"script": "t.py", **block.get("job", {})}}


@pytest.mark.parametrize(("where", "text"), list(examples()), ids=lambda v: v[:40])
def test_every_example_passes_the_schema_as_it_passes_the_model(
    where: str, text: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SLURM_JOB_NODELIST", raising=False)  # outside any allocation
    doc = whole(yaml.safe_load(text))
    assert VALIDATOR.is_valid(doc), [f"{where}: {e.message}" for e in VALIDATOR.iter_errors(doc)]
    try:
        inventory.parse(yaml.safe_dump(doc), Path(where))
    except inventory.InventoryError as exc:  # one the schema could not have seen, at most
        assert any(gap in str(exc) for gap in GAPS), str(exc)


# -- every mistake ---------------------------------------------------------------------------

# What the schema cannot say: rules across keys or hosts, and values JSON has no word for.
GAPS = {
    "appears twice": "names unique across hosts, ranges unfolded",
    "NUL byte": "a NUL anywhere (every string would carry the pattern)",
    "finite": ".inf and .nan are YAML's; JSON numbers are finite",
    "name(s) but host": "a name range counts as many as its host range",
    "goes backwards": "range arithmetic",
    "more than 100,000": "range arithmetic",
    "is required for hosts[": "a container's runtime and image, merged over defaults",
    "needs `ipc: private`": "merged over defaults",
    "the runtime of hosts[": "the keys of another runtime, merged over defaults",
    "every host is a spare or skipped": "across hosts",
    "has none (set `workdir:`": "job.sync needs every host's workdir, across sections",
    "SLURM_JOB_NODELIST is not set": "hosts: slurm reads the allocation's environment",
}


def params(test: Any) -> list[Any]:
    """The cases of one of test_inventory's parametrized tests, as it lists them."""
    [mark] = [m for m in test.pytestmark if m.name == "parametrize"]
    return list(mark.args[1])


def mistakes() -> Iterator[str]:
    """Each inventory that test_inventory.py shows the model refusing, built as it builds it."""
    for old, new, _, _ in params(cases.test_each_mistake_names_line_and_key):
        yield cases.GOOD.replace(old, new, 1)
    for text, _ in params(cases.test_structural_mistakes):
        yield text
    for new, _ in params(cases.test_job_mistakes_name_the_line):
        text = cases.GOOD.replace("  master_port: 29500", f"  master_port: 29500\n{new}")
        yield text.replace('  args: ["--epochs", "3"]\n', "") if "args" in new else text
    for old, new, _, _ in params(cases.test_range_mistakes_name_the_line):
        yield cases.RANGES.replace(old, new, 1)
    for old, new, _, _ in params(cases.test_each_container_mistake_names_line_and_key):
        yield cases.CONTAINERS.replace(old, new, 1)
    for runtime, key, value, _ in params(cases.test_keys_another_runtime_would_ignore_are_refused):
        yield (
            f"defaults:\n  container:\n    runtime: {runtime}\n    image: /i.sif\n"
            f"hosts:\n  - host: a\n    container:\n      {key}: {value}\njob: {{script: t}}\n"
        )
    yield "hosts:\n  - host: a\n    env: {'A=B': x}\njob: {script: t.py}\n"
    yield cases.SPARES.replace("  - host: gpu[01-03]\n", "").replace("  - host: gpu07\n", "")
    yield "hosts: slurm\njob: {script: t.py}\n"
    yield cases.SPARES.replace("defaults: {user: root, workdir: /srv/p}", "defaults: {}").replace(
        "job:\n", "job:\n  sync: true\n"
    )


def model_error(text: str) -> str:
    try:
        inventory.parse(text, Path("inventory.yaml"))
    except inventory.InventoryError as exc:
        return str(exc)
    raise AssertionError(f"the model takes it:\n{text}")


def test_the_schema_refuses_what_the_model_refuses(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SLURM_JOB_NODELIST", raising=False)  # outside any allocation
    passed = []
    for text in mistakes():
        message = model_error(text)
        if not refused_by_schema(text):
            passed.append(message)
    gaps = {next((gap for gap in GAPS if gap in m), m) for m in passed}
    assert gaps == set(GAPS), "\n".join(passed)  # the schema lets through these rules alone


def test_a_typo_is_refused_where_it_is() -> None:
    doc = yaml.safe_load(cases.GOOD.replace("  port: 22\n", "  prot: 22\n", 1))
    [err] = VALIDATOR.iter_errors(doc)
    assert list(err.absolute_path) == ["defaults"] and "'prot'" in err.message
