"""The inventory: defaults, overrides, and an error naming file, line and key for each mistake."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from ddptui.remote import inventory
from ddptui.remote.inventory import Container, InventoryError
from ddptui.remote.run import plan

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
        ("  restarts: -1", ["job.restarts", "greater than or equal to 0"]),
        ("  restart_delay: -1", ["job.restart_delay", "greater than or equal to 0"]),
        (
            "  restart_on: [oom]",
            ["job.restart_on", "'oom' is neither an exit code nor one of hang"],
        ),
        ("  restart_on: [gpu, 0]", ["job.restart_on", "0 is no failing exit code (1 to 255)"]),
        ("  restart_on: gpu", ["job.restart_on", "list"]),
        ("  notify: {command: x, on: [failed]}", ["job.notify", "`on:` reads as `true`"]),
        ("  notify: {command: x, events: [oops]}", ["job.notify.events[0]", "'failed'"]),
        ("  notify: {events: [failed]}", ["job.notify.command", "required"]),
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
        ("gpu[01-03]", "gpu[01-08", "host", ["hosts[0].host", "unclosed range", "character 4"]),
        ("gpu[01-03]", "gpu[c-d]", "host", ["hosts[0].host", "numeric", "character 5"]),
        ("gpu[01-03]", "node[]", "host", ["hosts[0].host", "empty range"]),
        ("gpu[01-03]", "node[1-]", "host", ["hosts[0].host", "no end"]),
        ("gpu[01-03]", "node[1-9/2]", "host", ["hosts[0].host", "numeric", "character 9"]),
        ("gpu[01-03]", "node[[1-2]]", "host", ["hosts[0].host", "a range inside a range"]),
        ("gpu[01-03]", "n[1-1000000000]", "host", ["hosts[0].host", "more than 100,000"]),
        ("gpu[01-03]", "n[1-" + "9" * 5000 + "]", "host", ["hosts[0].host", "12 digits"]),
        ("n[8-9]", "n[x]", "name", ["hosts[1].name", "numeric", "character 3"]),
    ],
)
def test_range_mistakes_name_the_line(old: str, new: str, key: str, words: list[str]) -> None:
    text = RANGES.replace(old, new, 1)
    err = error(text)
    assert err.line == line_of(text, new), str(err)
    for word in words:
        assert word in str(err)


def test_ssh_config_is_a_path_beside_the_inventory(tmp_path: Path) -> None:
    text = "defaults: {ssh_config: cluster.conf}\nhosts:\n  - host: a\n  - host: b\n"
    text += "    ssh_config: /etc/other.conf\njob: {script: t}\n"
    inv = inventory.parse(text, tmp_path / "inv.yaml")
    assert [h.ssh_config for h in inv.hosts] == [str(tmp_path / "cluster.conf"), "/etc/other.conf"]


# -- containers -------------------------------------------------------------------

CONTAINERS = """\
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


def test_host_keys_merge_over_defaults_key_by_key() -> None:
    a, b, c = parse(CONTAINERS).hosts
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


def test_network_host_may_be_said() -> None:
    text = CONTAINERS.replace("cap_add: [SYS_PTRACE]", "network: host")
    assert all(h.container is not None and "network" not in h.container.spec()
               for h in parse(text).hosts)  # fmt: skip


def test_no_container_section_runs_on_the_host() -> None:
    assert parse("hosts: [{host: a}]\njob: {script: t}\n").hosts[0].container is None


def test_apptainer_and_enroot_take_their_own_keys() -> None:
    text = CONTAINERS.replace('{ulimits: {memlock: -1, nofile: "1024:65536"}, devices: []}', "{}")
    text = text.replace("{image: \"team/train:7\", gpus: all, ipc: private, shm_size: 16g}",
                        "{runtime: apptainer, image: /images/train.sif, ipc: private}")  # fmt: skip
    a, _, _ = parse(text).hosts
    assert a.container is not None
    assert (a.container.runtime, a.container.ulimits, a.container.ipc) == (
        "apptainer",
        {},
        "private",
    )


@pytest.mark.parametrize(
    ("old", "new", "at", "words"),
    [
        ("cap_add: [SYS_PTRACE]", "args: [--shm-size=1g, --network=none]", "args",
         ["defaults.container.args[1]", "'--network=none'", "always the host's"]),
        ("cap_add: [SYS_PTRACE]", "args: [--net, bridge]", "args",
         ["defaults.container.args[0]", "always the host's"]),
        ("cap_add: [SYS_PTRACE]", "network: bridge", "network",
         ["defaults.container.network", "'bridge'", "always the host's"]),
        ("gpus: all", "network: none", "network", ["hosts[0].container.network", "host's"]),
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
def test_each_container_mistake_names_line_and_key(
    old: str, new: str, at: str, words: list[str]
) -> None:
    assert old in CONTAINERS
    text = CONTAINERS.replace(old, new, 1)
    err = error(text)
    assert err.line == text[: text.index(at)].count("\n") + 1, str(err)
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
    inv = parse(
        CONTAINERS.replace("    cap_add:", "    python: /opt/conda/bin/python\n    cap_add:")
    )
    built = plan.build(inv, run_id="r", addrs=["10.0.0.1", "10.0.0.2", "10.0.0.3"], nprocs=[1] * 3)
    assert [n.argv[0] for n in built.nodes] == ["/opt/conda/bin/python"] * 3
    assert inv.hosts[0].python == "/usr/bin/python3"  # the host's, for ddptui's own part


# -- restarts, spares, exclusions ------------------------------------------------------------

SPARES = """\
defaults: {user: root, workdir: /srv/p}
hosts:
  - host: gpu[01-03]
  - host: gpu04
    skip: true
  - host: gpu[05-06]
    spare: true
  - host: gpu07
job:
  script: t.py
  restarts: 3
  restart_delay: 0
  restart_on: [gpu, lost, 137]
  master_port: auto
  notify: {command: "curl -d @- https://chat.example/hook"}
"""


def test_spares_wait_after_the_nodes_and_skipped_hosts_are_not_listed() -> None:
    inv = parse(SPARES)
    assert [(h.name, h.node_rank) for h in inv.hosts] == [
        ("gpu01", 0), ("gpu02", 1), ("gpu03", 2), ("gpu07", 3),
    ]  # fmt: skip
    assert [(h.name, h.node_rank) for h in inv.spares] == [("gpu05", 4), ("gpu06", 5)]
    assert inv.everyone == inv.hosts + inv.spares == inv.hosts + inv.usable_spares
    job = inv.job
    assert (job.restarts, job.restart_delay, job.master_port) == (3, 0, "auto")
    assert job.restart_on == ["gpu", "lost", 137] and parse(GOOD).job.restart_on is None
    assert job.notify is not None and job.notify.events == list(inventory.NOTIFY_DEFAULT)
    assert "succeeded" not in job.notify.events


def test_a_run_needs_a_host_that_is_no_spare() -> None:
    text = SPARES.replace("  - host: gpu[01-03]\n", "").replace("  - host: gpu07\n", "")
    err = error(text)
    assert "every host is a spare or skipped" in str(err) and err.line == 2


def test_exclude_closes_the_node_ranks_up() -> None:
    inv = inventory.without(parse(SPARES), "gpu02,gpu[05,07]")
    assert [(h.name, h.node_rank) for h in inv.hosts] == [("gpu01", 0), ("gpu03", 1)]
    assert [(h.name, h.node_rank) for h in inv.spares] == [("gpu06", 2)]
    assert inv.excluded == ("gpu02", "gpu07", "gpu05")  # nodes first, then spares
    by_address = inventory.without(parse(GOOD), "10.0.0.11")
    assert [h.name for h in by_address.hosts] == ["gpu-b", "here"]


@pytest.mark.parametrize(
    ("hosts", "words"),
    [
        ("gpu09", "no host 'gpu09'"),
        ("gpu04", "no host 'gpu04'"),  # skipped: not in the run to leave out
        ("gpu[01-03,07]", "leaves no host to run on"),
        ("gpu[3-1]", "goes backwards"),
    ],
)
def test_exclude_mistakes_are_one_line(hosts: str, words: str) -> None:
    with pytest.raises(InventoryError, match=re.escape(words)):
        inventory.without(parse(SPARES), hosts)


def test_a_spare_takes_a_lost_nodes_place_and_rank() -> None:
    inv = inventory.swap_in(parse(SPARES), 1, "gpu05", since=2)
    assert [(h.name, h.node_rank, h.since) for h in inv.hosts] == [
        ("gpu01", 0, 0), ("gpu05", 1, 2), ("gpu03", 2, 0), ("gpu07", 3, 0),
    ]  # fmt: skip
    assert [h.name for h in inv.spares] == ["gpu02", "gpu06"]  # the fleet's slots kept
    assert [h.name for h in inv.usable_spares] == ["gpu06"]  # a lost host is never a spare
    with pytest.raises(InventoryError, match="no spare 'gpu02'"):
        inventory.swap_in(inv, 2, "gpu02", since=3)


def test_a_synced_spare_needs_a_workdir() -> None:
    text = SPARES.replace("defaults: {user: root, workdir: /srv/p}", "defaults: {user: root}")
    text = text.replace("  - host: gpu07", "  - host: gpu07\n    workdir: /w").replace(
        "  - host: gpu[01-03]", "  - host: gpu[01-03]\n    workdir: /w"
    )
    assert parse(text).spares
    with pytest.raises(InventoryError, match=r"hosts\[4\] \(gpu05\) has none"):
        parse(text.replace("job:\n", "job:\n  sync: true\n"))


def test_job_progress_must_be_a_regex_with_named_groups() -> None:
    base = "hosts:\n  - host: a\njob:\n  script: t.py\n  progress: "
    assert parse(base + "'it (?P<step>\\d+)'\n").job.progress == "it (?P<step>\\d+)"
    bad = str(error(base + "'it (?P<step>\\d+'\n"))
    assert "inventory.yaml:5" in bad and "job.progress" in bad and "not a regular expression" in bad
    assert "names no group" in str(error(base + "'it \\d+'\n"))
    assert parse(base + "false\n").job.progress is False  # no line read for progress
    assert parse(base + "true\n").job.progress is None
