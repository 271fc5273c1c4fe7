"""The inventory's `container:`: defaults merged with each host's keys, key by key (as env),
and each mistake named by file, line and key."""

from __future__ import annotations

from pathlib import Path

import pytest

from remote import inventory, plan
from remote.inventory import Container, InventoryError

TEXT = """\
defaults:
  python: /usr/bin/python3
  container:
    runtime: docker
    image: nvcr.io/nvidia/pytorch:24.05-py3
    mounts: [/data, "/scratch:/mnt/scratch:ro"]
    cap_add: [SYS_PTRACE]
hosts:
  - host: a
    container: {image: "team/train:7", gpus: all, ipc: private, shm_size: 16g}
  - host: b
    container: {ulimits: {memlock: -1, nofile: "1024:65536"}, devices: []}
  - host: c
job: {script: train.py}
"""


def parse(text: str) -> inventory.Inventory:
    return inventory.parse(text, Path("inventory.yaml"))


def error(text: str) -> InventoryError:
    with pytest.raises(InventoryError) as info:
        parse(text)
    return info.value


def test_host_keys_merge_over_defaults_key_by_key() -> None:
    a, b, c = parse(TEXT).hosts
    assert a.container == Container(
        runtime="docker",
        image="team/train:7",
        mounts=("/data", "/scratch:/mnt/scratch:ro"),
        cap_add=("SYS_PTRACE",),
        gpus="all",
        ipc="private",
        shm_size="16g",
        ulimits={"memlock": "-1:-1"},
    )
    assert b.container is not None and c.container is not None
    assert b.container.image == c.container.image == "nvcr.io/nvidia/pytorch:24.05-py3"
    assert b.container.ulimits == {"memlock": "-1:-1", "nofile": "1024:65536"}
    assert (b.container.devices, c.container.devices) == ((), None)  # None: IB where present
    assert a.python == "/usr/bin/python3"  # the host's, for the agent
    assert a.container.python == "python3"  # the job's, in the image


def test_defaults_of_a_container() -> None:
    text = "hosts:\n  - host: a\n    container: {runtime: podman, image: x}\njob: {script: t}\n"
    spec = parse(text).hosts[0].container
    assert spec is not None
    assert spec.spec() == {
        "runtime": "podman", "image": "x", "pull": "never", "python": "python3", "mounts": (),
        "gpus": "auto", "ipc": "host", "shm_size": None, "ulimits": {"memlock": "-1:-1"},
        "devices": None, "cap_add": (), "user": "login", "args": (),
    }  # fmt: skip


def test_no_container_section_runs_on_the_host() -> None:
    assert parse("hosts: [{host: a}]\njob: {script: t}\n").hosts[0].container is None


def test_apptainer_and_enroot_take_their_own_keys() -> None:
    text = TEXT.replace('{ulimits: {memlock: -1, nofile: "1024:65536"}, devices: []}', "{}")
    text = text.replace("{image: \"team/train:7\", gpus: all, ipc: private, shm_size: 16g}",
                        "{runtime: apptainer, image: /images/train.sif, ipc: private}")  # fmt: skip
    a, _, _ = parse(text).hosts
    assert a.container is not None
    assert (a.container.runtime, a.container.ulimits, a.container.ipc) == (
        "apptainer",
        {},
        "private",
    )


def line_of(text: str, needle: str) -> int:
    return text[: text.index(needle)].count("\n") + 1


@pytest.mark.parametrize(
    ("old", "new", "at", "words"),
    [
        ("cap_add: [SYS_PTRACE]", "args: [--shm-size=1g, --network=none]", "args",
         ["defaults.container.args[1]", "'--network=none'", "always the host's"]),
        ("cap_add: [SYS_PTRACE]", "args: [--net, bridge]", "args",
         ["defaults.container.args[0]", "always the host's"]),
        ("cap_add: [SYS_PTRACE]", "args: [-d]", "args", ["args[0]", "attached"]),
        ("cap_add: [SYS_PTRACE]", "args: [--name=x]", "args", ["args[0]", "names each"]),
        ("gpus: all", "gpus: 2", "gpus", ["hosts[0].container.gpus", "'auto', 'all' or 'none'"]),
        ("runtime: docker", "runtime: lxc", "runtime", ["defaults.container.runtime", "'lxc'"]),
        ("    runtime: docker\n", "", "container:", ["defaults.container.runtime", "required"]),
        ("    image: nvcr.io/nvidia/pytorch:24.05-py3\n", "", "container:",
         ["defaults.container.image", "required for hosts[1]"]),
        ("memlock: -1", "memlock: lots", "memlock", ["ulimits.memlock", "'lots'", "-1"]),
        ("memlock: -1", "memlok: -1", "memlok", ["ulimits.memlok", "'memlock'"]),
        ("shm_size: 16g", "shm_size: 16x", "shm_size", ["hosts[0].container.shm_size", "16g"]),
        ("ipc: private, ", "", "shm_size", ["hosts[0].container.shm_size", "`ipc: private`"]),
        ("/data,", "data,", "mounts", ["defaults.container.mounts[0]", "'data'"]),
        ("/data,", "/data:data,", "mounts", ["mounts[0]", "container_path"]),
        ("devices: []", "devices: [ib0]", "devices", ["hosts[1].container.devices[0]", "'ib0'"]),
        ("[SYS_PTRACE]", "[SYS PTRACE]", "cap_add", ["cap_add[0]", "'SYS PTRACE'"]),
        ("gpus: all", "gpu: all", "gpu", ["unknown key `gpu`", "hosts[0].container"]),
    ],
)  # fmt: skip
def test_each_mistake_names_line_and_key(old: str, new: str, at: str, words: list[str]) -> None:
    assert old in TEXT
    text = TEXT.replace(old, new, 1)
    err = error(text)
    assert err.line == line_of(text, at), str(err)
    assert str(err).startswith(f"inventory.yaml:{err.line}: ")
    for word in words:
        assert word in str(err)


@pytest.mark.parametrize(
    ("runtime", "key", "value", "words"),
    [
        ("apptainer", "pull", "missing", "not for apptainer, the runtime of hosts[0]"),
        ("enroot", "ipc", "private", "not for enroot"),
        ("apptainer", "user", "image", "only for docker, podman"),
        ("enroot", "devices", "[/dev/infiniband]", "not for enroot"),
        ("apptainer", "ulimits", "{memlock: -1}", "not for apptainer"),
        ("enroot", "cap_add", "[SYS_PTRACE]", "only for docker, podman, apptainer"),
    ],
)
def test_keys_another_runtime_would_ignore_are_refused(
    runtime: str, key: str, value: str, words: str
) -> None:
    text = (
        f"defaults:\n  container:\n    runtime: {runtime}\n    image: /i.sif\n"
        f"hosts:\n  - host: a\n    container:\n      {key}: {value}\njob: {{script: t}}\n"
    )
    err = error(text)
    assert (err.line, words in str(err)) == (8, True), str(err)
    assert f"hosts[0].container.{key}" in str(err)


def test_the_job_runs_on_the_images_python() -> None:
    inv = parse(TEXT.replace("    cap_add:", "    python: /opt/conda/bin/python\n    cap_add:"))
    built = plan.build(inv, run_id="r", addrs=["10.0.0.1", "10.0.0.2", "10.0.0.3"], nprocs=[1] * 3)
    assert [n.argv[0] for n in built.nodes] == ["/opt/conda/bin/python"] * 3
    assert inv.hosts[0].python == "/usr/bin/python3"  # the host's, for ddptui's own part
