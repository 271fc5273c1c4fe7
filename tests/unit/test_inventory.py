"""The inventory: defaults, overrides, and an error naming file, line and key for each mistake."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from remote import inventory
from remote.inventory import InventoryError

GOOD = """\
defaults:
  user: root
  port: 22
  python: /opt/venv/bin/python
  workdir: /srv/project
  env: {NCCL_IB_DISABLE: "1", OMP_NUM_THREADS: 4, FLAG: true}
hosts:
  - host: 10.0.0.11
    name: gpu-a
    env: {EXTRA: x}
  - host: gpu-b
    port: 2222
    user: alice
  - host: localhost
    name: here
    transport: local
job:
  script: train.py
  args: ["--epochs", "3"]
  nproc_per_node: 2
  master_port: 29500
  rdzv_backend: static
  nccl: {socket_ifname: auto, ib_disable: false, debug: null}
"""


def parse(text: str) -> inventory.Inventory:
    return inventory.parse(text, Path("inventory.yaml"))


def error(text: str) -> InventoryError:
    with pytest.raises(InventoryError) as info:
        parse(text)
    return info.value


def test_defaults_apply_and_hosts_override() -> None:
    inv = parse(GOOD)
    a, b, here = inv.hosts
    assert [h.node_rank for h in inv.hosts] == [0, 1, 2]
    assert (a.name, a.user, a.port, a.workdir) == ("gpu-a", "root", 22, "/srv/project")
    assert (b.name, b.user, b.port) == ("gpu-b", "alice", 2222)
    assert a.env == {"NCCL_IB_DISABLE": "1", "OMP_NUM_THREADS": "4", "FLAG": "1", "EXTRA": "x"}
    assert "EXTRA" not in b.env
    assert (a.transport, here.transport) == ("ssh", "local")
    assert inv.master is a
    assert inv.job.args == ["--epochs", "3"]


def test_python_defaults_to_python3_remotely_and_this_interpreter_locally() -> None:
    inv = parse("hosts:\n  - host: a\n  - host: b\n    transport: local\njob:\n  script: t.py\n")
    assert inv.hosts[0].python == "python3"
    assert inv.hosts[1].python == sys.executable


def test_bundled_inventory_is_valid() -> None:
    inv = inventory.load(Path(__file__).parents[2] / "inventory.yaml")
    assert len(inv.hosts) == 2
    assert all(h.transport == "local" for h in inv.hosts)


def line_of(text: str, needle: str) -> int:
    return text[: text.rindex(needle)].count("\n") + 1


@pytest.mark.parametrize(
    ("old", "new", "line", "words"),
    [
        ("  port: 2222", "  port: abc", 0, ["hosts[1].port", "integer", "'abc'"]),
        ("  port: 22\n", "  prot: 22\n", 0, ["unknown key `prot`", "defaults"]),
        ("    name: gpu-a", "    nmae: gpu-a", 0, ["unknown key `nmae`", "hosts[0]"]),
        ("  nproc_per_node: 2", "  nproc_per_node: lots", 0, ["nproc_per_node", "integer"]),
        ("  nproc_per_node: 2", "  nproc_per_node: 0", 0, ["nproc_per_node", "at least 1"]),
        ("  rdzv_backend: static", "  rdzv_backend: etcd", 0, ["'static' or 'c10d'"]),
        ("  master_port: 29500", "  master_port: 99999", 0, ["master_port", "65535"]),
        ("    transport: local", "    transport: mosh", 0, ["transport", "'mosh'"]),
        ("  script: train.py\n", "", 17, ["job.script", "required"]),
        ('  args: ["--epochs", "3"]', "  args: --epochs", 0, ["job.args", "list"]),
        ("debug: null}", "debug: null, bogus: 1}", 0, ["unknown key `bogus`", "job.nccl"]),
        ("{EXTRA: x}", "{EXTRA: [x]}", 0, ["hosts[0].env.EXTRA", "string"]),
        ("    name: here", "    name: gpu-a", 0, ["'gpu-a' appears twice"]),
        ("{EXTRA: x}", '{EXTRA: "x\\0y"}', 0, ["hosts[0].env.EXTRA", "NUL byte"]),
        ("_THREADS: 4", '_THREADS: "\\0"', 0, ["defaults.env.OMP_NUM_THREADS", "NUL byte"]),
        ("  - host: gpu-b", "  - host: root@gpu-b", 0, ["hosts[1].host", "`user: root`"]),
        ("debug: null}", "flight_recorder: maybe}", 0, ["flight_recorder", "true or false"]),
    ],
)
def test_each_mistake_names_line_and_key(old: str, new: str, line: int, words: list[str]) -> None:
    assert old in GOOD
    text = GOOD.replace(old, new, 1)
    line = line or line_of(text, new.strip())
    err = error(text)
    assert err.line == line, str(err)
    assert str(err).startswith(f"inventory.yaml:{line}: ")
    for word in words:
        assert word in str(err)
    assert "\n" not in str(err)


def test_yaml_syntax_error_names_the_line() -> None:
    err = error("hosts:\n  - host: a\n   bad: [\njob: {script: t.py}\n")
    assert err.line is not None and "invalid YAML" in str(err)


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("", "mapping"),
        ("- a\n- b\n", "mapping"),
        ("hosts: []\njob: {script: t.py}\n", "must not be empty"),
        ("hosts:\n  - host: a\n", "`job` is required"),
        ("hosts:\n  - name: x\njob: {script: t.py}\n", "hosts[0].host"),
        ("hostz: []\njob: {script: t.py}\n", "unknown key `hostz`"),
    ],
)
def test_structural_mistakes(text: str, words: str) -> None:
    assert words in str(error(text))


def test_missing_file_is_an_inventory_error(tmp_path: Path) -> None:
    with pytest.raises(InventoryError, match="cannot read inventory"):
        inventory.load(tmp_path / "nope.yaml")


def test_env_names_are_checked() -> None:
    err = error("hosts:\n  - host: a\n    env: {'A=B': x}\njob: {script: t.py}\n")
    assert "not a valid environment variable name" in str(err)
    assert err.line == 3


def test_scalars_in_args_reach_the_script_as_written() -> None:
    inv = parse(
        GOOD.replace('["--epochs", "3"]', "[--epochs, 3, --lr, 0.0010, --amp, on, -n, 007]")
    )
    assert inv.job.args == ["--epochs", "3", "--lr", "0.0010", "--amp", "on", "-n", "007"]


def test_new_job_keys_have_defaults() -> None:
    job = parse(GOOD).job
    assert (job.link_timeout, job.spool_max_mb, job.hang_after) == (60, 1024, 600)
    assert job.nccl.flight_recorder is False
    keys = "link_timeout: 5\n  spool_max_mb: 0.5\n  hang_after: null\n  script: train.py"
    job = parse(
        GOOD.replace("script: train.py", keys).replace("debug: null", "flight_recorder: true")
    ).job
    assert (job.link_timeout, job.spool_max_mb, job.hang_after) == (5, 0.5, None)
    assert job.nccl.flight_recorder is True


@pytest.mark.parametrize(
    ("new", "words"),
    [
        ("  stop_grace: .inf", ["job.stop_grace", "finite"]),
        ("  stop_grace: .nan", ["job.stop_grace", "finite"]),
        ("  stop_grace: -1", ["job.stop_grace", "greater than or equal to 0"]),
        ("  stop_grace: yes", ["job.stop_grace", "number"]),
        ("  link_timeout: 0", ["job.link_timeout", "greater than 0"]),
        ("  link_timeout: .inf", ["job.link_timeout", "finite"]),
        ("  link_timeout: soon", ["job.link_timeout", "number"]),
        ("  spool_max_mb: -5", ["job.spool_max_mb", "greater than 0"]),
        ("  hang_after: 0", ["job.hang_after", "greater than 0"]),
        ("  hang_after: .inf", ["job.hang_after", "finite"]),
        ("  args: [--epochs, null]", ["job.args[1]", "string"]),
        ('  args: [--name, "a\\0b"]', ["job.args[1]", "NUL byte"]),
    ],
)
def test_job_mistakes_name_the_line(new: str, words: list[str]) -> None:
    text = GOOD.replace("  master_port: 29500", f"  master_port: 29500\n{new}")
    text = text.replace('  args: ["--epochs", "3"]\n', "") if "args" in new else text
    err = error(text)
    assert err.line == line_of(text, new.strip()), str(err)
    for word in words:
        assert word in str(err)


# -- host ranges ----------------------------------------------------------------------------

RANGES = """\
defaults: {user: root, env: {A: "1"}}
hosts:
  - host: gpu[01-03]
    port: 2222
  - host: "10.0.0.[11-12]"
    name: n[8-9]
  - host: localhost
    name: "local[1-2]"
    transport: local
job: {script: t.py}
"""


def test_host_ranges_expand_in_order_with_padding_names_and_keys() -> None:
    inv = parse(RANGES)
    assert [(h.node_rank, h.host, h.name) for h in inv.hosts] == [
        (0, "gpu01", "gpu01"), (1, "gpu02", "gpu02"), (2, "gpu03", "gpu03"),
        (3, "10.0.0.11", "n8"), (4, "10.0.0.12", "n9"),
        (5, "localhost", "local1"), (6, "localhost", "local2"),
    ]  # fmt: skip
    assert all(h.port == 2222 for h in inv.hosts[:3])
    assert inv.hosts[3].port is None
    assert all(h.env == {"A": "1"} and h.user == "root" for h in inv.hosts)
    assert [h.transport for h in inv.hosts[5:]] == ["local", "local"]


def test_128_hosts_as_one_line() -> None:
    inv = parse('hosts:\n  - host: "10.0.0.[11-138]"\n    name: node[0-127]\njob: {script: t}\n')
    assert len(inv.hosts) == 128
    assert (inv.hosts[-1].host, inv.hosts[-1].name) == ("10.0.0.138", "node127")


@pytest.mark.parametrize(
    ("old", "new", "key", "words"),
    [
        ("n[8-9]", "n[8-10]", "name", ["hosts[1].name", "3 name(s)", "2 hosts"]),
        ("n[8-9]", "gpu-x", "name", ["hosts[1].name", "1 name(s)", "2 hosts"]),
        ("gpu[01-03]", "gpu[03-01]", "host", ["hosts[0].host", "3-01 goes backwards"]),
        ("gpu[01-03]", "gpu[1-9999999]", "host", ["hosts[0].host", "more than 100,000"]),
        ("local[1-2]", "n[9-10]", "name", ["'n9' appears twice", "hosts[1]"]),
    ],
)
def test_range_mistakes_name_the_line(old: str, new: str, key: str, words: list[str]) -> None:
    text = RANGES.replace(old, new, 1)
    err = error(text)
    assert err.line == line_of(text, new), str(err)
    for word in words:
        assert word in str(err)
