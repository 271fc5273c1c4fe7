"""The runtime's command line for a node in a container (remote/host/container.py): docker,
podman, apptainer and enroot, the GPUs and InfiniBand flags, the sweep, a failed start named."""

from __future__ import annotations

import os
from typing import Any

import pytest

from ddptui.remote.host import container
from ddptui.remote.inventory import Container

# A GPU host with InfiniBand, seen by root; each test changes what it needs.
HOST: dict[str, Any] = {
    "uid": 1000, "gid": 1000, "login": "ada", "rootless": False, "gpus": True,
    "gpu_via": "gpus", "devices": ["/dev/infiniband"], "cuda_visible_devices": None,
}  # fmt: skip
ARGV = ["python3", "-m", "torch.distributed.run", "--nnodes", "2", "train.py"]
ENV = {"DDPTUI_RUN_ID": "r1", "DDPTUI_NODE": "1", "MASTER_ADDR": "10.0.0.1"}
SHIM = [
    "python3", "-S", "/run/p/ddptui_shim.py", "--cwd", "/srv/job",
    "--ready", "/run/p/container.started", "--grace", "5.0", "--", *ARGV,
]  # fmt: skip


CDI = "nvidia.com/gpu="
IMAGE = "nvcr.io/nvidia/pytorch:24.05-py3"


def spec(**keys: Any) -> dict[str, Any]:
    """The inventory's merged spec, as the host is handed it."""
    keys = {"runtime": "docker", "image": IMAGE, **keys}
    return Container(**keys).spec() | ({} if "ulimits" in keys else {"ulimits": {}})


def launch(
    s: dict[str, Any], env: dict[str, str] = ENV, environ: dict[str, str] | None = None, **host: Any
) -> tuple[list[str], dict[str, str]]:
    """(argv, the client's environment) on a host whose own environment is `environ` (none)."""
    return container.command(
        s, ARGV, env, "r1", 1, "/srv/job", "/run/p", host={**HOST, **host}, environ=environ or {}
    )


def command(s: dict[str, Any], env: dict[str, str] = ENV, **host: Any) -> list[str]:
    return launch(s, env, **host)[0]


def job_env(argv: list[str], client: dict[str, str], flag: str = "-e") -> dict[str, str]:
    """What the job gets: each `-e NAME=VALUE`, and each `-e NAME` from the client's own."""
    out = {}
    for word in pairs(argv, flag):
        name, eq, value = word.partition("=")
        out[name] = value if eq else client[name]
    return out


def pairs(argv: list[str], flag: str) -> list[str]:
    return [argv[i + 1] for i, a in enumerate(argv[:-1]) if a == flag]


def test_docker_run_on_a_gpu_host_with_infiniband() -> None:
    argv = command(spec(ulimits={"memlock": "-1:-1"}, cap_add=("SYS_PTRACE",)))
    assert argv == [
        "docker", "run", "-i", "--rm", "--init", "--name", "ddptui-r1-n1",
        "--label", "ddptui.run=r1", "--network", "host", "--pull", "never",
        "--log-driver", "none", "--user", "1000:1000", "--ipc", "host", "--gpus", "all",
        "--ulimit", "memlock=-1:-1", "--device", "/dev/infiniband", "--cap-add", "SYS_PTRACE",
        "-v", "/srv/job:/srv/job", "-v", "/run/p:/run/p",
        "-e", "DDPTUI_NODE=1", "-e", "DDPTUI_RUN_ID=r1", "-e", "LOGNAME",
        "-e", "MASTER_ADDR", "-e", "USER",
        "nvcr.io/nvidia/pytorch:24.05-py3", *SHIM,
    ]  # fmt: skip


@pytest.mark.security
def test_values_stay_out_of_ps_and_tags_out_of_the_clients_environment() -> None:
    """A value on the command line (an API token) is in `ps` for every user of the host: it
    rides in the client's environment, the name alone on the line; but the tags go by value
    (rootless podman's pause process keeps the first client's environment for good), and a
    variable the client has a value of its own for keeps it (a job's PATH is not the runtime's)."""
    env = {**ENV, "WANDB_API_KEY": "s3cret", "PATH": "/opt/job/bin"}
    argv, client = launch(spec(), env, environ={"PATH": "/usr/bin", "DDPTUI_RUN_ID": "x"})
    assert not any("s3cret" in word for word in argv)
    assert client["WANDB_API_KEY"] == "s3cret" and client["PATH"] == "/usr/bin"
    assert "DDPTUI_RUN_ID" not in client and "DDPTUI_NODE" not in client
    assert job_env(argv, client)["PATH"] == "/opt/job/bin"  # by value: the client's is its own
    assert job_env(argv, client) == {**env, "USER": "ada", "LOGNAME": "ada"}


def test_the_job_environment_goes_by_e_alone_and_args_before_the_image() -> None:
    s = spec(args=("--security-opt", "seccomp=unconfined"), pull="missing", python="/opt/py")
    argv, client = launch(s, env={"A": "1 2", "B": "x=y"})
    assert pairs(argv, "-e")[:2] == ["A", "B"]
    assert job_env(argv, client) == {"A": "1 2", "B": "x=y", "USER": "ada", "LOGNAME": "ada"}
    image = argv.index(s["image"])
    assert argv[image - 2 : image + 2] == [
        "--security-opt",
        "seccomp=unconfined",
        s["image"],
        "/opt/py",
    ]
    assert pairs(argv, "--pull") == ["missing"]


def test_client_environment_keeps_the_tags_out() -> None:
    env = {"PATH": "/bin", "DDPTUI_RUN_ID": "r1", "DDPTUI_NODE": "0", "DOCKER_HOST": "unix:///x"}
    assert container.client_env(env) == {"PATH": "/bin", "DOCKER_HOST": "unix:///x"}


@pytest.mark.parametrize(
    ("gpus", "visible", "via", "flags", "nvidia"),
    [
        ("auto", None, "gpus", ["--gpus", "all"], None),
        ("auto", "2,3", "gpus", ["--gpus", '"device=2,3"'], None),  # docker's CSV needs quotes
        ("auto", "GPU-1a2b", "gpus", ["--gpus", '"device=GPU-1a2b"'], None),
        ("all", "2,3", "gpus", ["--gpus", "all"], None),
        ("none", None, "gpus", [], "void"),  # NGC images say NVIDIA_VISIBLE_DEVICES=all
        ("auto", "", "gpus", [], "void"),
        ("auto", "-1", "gpus", [], "void"),
        ("auto", "0,1", "cdi", ["--device", CDI + "0", "--device", CDI + "1"], None),
        ("all", None, "cdi", ["--device", CDI + "all"], None),
        ("auto", "0, 1", "env", [], "0,1"),
        ("all", None, "env", [], "all"),
    ],
)  # fmt: skip
def test_gpus(
    gpus: str, visible: str | None, via: str, flags: list[str], nvidia: str | None
) -> None:
    env = {**ENV, "CUDA_VISIBLE_DEVICES": visible} if visible is not None else ENV
    argv, client = launch(spec(gpus=gpus), env=env, gpu_via=via, devices=[])
    assert argv[argv.index("--ipc") + 2 : argv.index("-v")] == flags
    e = job_env(argv, client)
    assert e.get("NVIDIA_VISIBLE_DEVICES") == nvidia
    # The runtime exposes them numbered from 0: the host's numbering must not reach the job.
    assert "CUDA_VISIBLE_DEVICES" not in e or nvidia == "void"


def test_cuda_visible_devices_of_the_host_is_honoured_by_auto() -> None:
    argv = command(spec(), cuda_visible_devices="1")
    assert pairs(argv, "--gpus") == ['"device=1"']


def test_a_cpu_host_gets_no_gpu_flags() -> None:
    argv, client = launch(spec(), gpus=False, devices=[])
    assert "--gpus" not in argv and "--device" not in argv
    assert job_env(argv, client)["NVIDIA_VISIBLE_DEVICES"] == "void"


def test_devices_ipc_ulimits_and_user() -> None:
    s = spec(
        ipc="private", shm_size="16g", devices=("/dev/infiniband", "/dev/fuse:/dev/fuse:rwm"),
        ulimits={"stack": "67108864:67108864", "memlock": "-1:-1"}, user="image",
        mounts=("~/data", "/scratch:/mnt:ro"),
    )  # fmt: skip
    argv, client = launch(s, devices=[])
    assert pairs(argv, "--ipc") == ["private"] and pairs(argv, "--shm-size") == ["16g"]
    assert pairs(argv, "--device") == ["/dev/infiniband", "/dev/fuse:/dev/fuse:rwm"]
    assert pairs(argv, "--ulimit") == ["memlock=-1:-1", "stack=67108864:67108864"]
    assert "--user" not in argv and "USER" not in job_env(argv, client)
    home = os.path.expanduser("~")
    assert pairs(argv, "-v")[2] == f"{home}/data:{home}/data"  # ~ is the host's home; a path
    # alone is the same path inside (docker's `-v path` would be an empty anonymous volume)
    assert pairs(argv, "-v")[3] == "/scratch:/mnt:ro"


def test_devices_empty_passes_none_even_with_infiniband() -> None:
    assert "--device" not in command(spec(devices=()), gpu_via="gpus")


def test_podman_rootless_keeps_the_login_and_rootful_sets_it() -> None:
    s = spec(runtime="podman")
    rootless = command(s, rootless=True, gpu_via="cdi")
    assert rootless[:2] == ["podman", "run"]
    assert pairs(rootless, "--userns") == ["keep-id"] and "--user" not in rootless
    assert pairs(rootless, "--device") == ["nvidia.com/gpu=all", "/dev/infiniband"]
    assert pairs(command(s, rootless=False), "--user") == ["1000:1000"]


def test_apptainer_exec_is_an_ordinary_child() -> None:
    s = spec(runtime="apptainer", image="/images/train.sif", ipc="private", cap_add=("IPC_LOCK",))
    argv, client = launch(s, gpu_via="nv", cuda_visible_devices="2,3")
    assert argv == [
        "apptainer", "exec", "--cleanenv", "--nv", "--ipc", "--add-caps", "IPC_LOCK",
        "--bind", "/srv/job:/srv/job", "--bind", "/run/p:/run/p",
        "/images/train.sif", *SHIM,
    ]  # fmt: skip
    # apptainer takes APPTAINERENV_<name> from its client's environment, through --cleanenv
    inside = {k[len("APPTAINERENV_") :]: v for k, v in client.items()}
    assert inside == {
        **ENV, "LOGNAME": "ada", "USER": "ada",
        "CUDA_VISIBLE_DEVICES": "2,3",  # --nv shows every GPU: CUDA selects, as here
    }  # fmt: skip
    assert "--nv" not in command(s, gpus=False)


def test_enroot_start_with_mounts_and_env() -> None:
    s = spec(runtime="enroot", image="pytorch+24.05", mounts=("/data",))
    argv, client = launch(s, gpu_via="hook", cuda_visible_devices="0")
    assert argv == [
        "enroot", "start", "--mount", "/srv/job:/srv/job", "--mount", "/run/p:/run/p",
        "--mount", "/data:/data", "--env", "DDPTUI_NODE=1", "--env", "DDPTUI_RUN_ID=r1",
        "--env", "LOGNAME", "--env", "MASTER_ADDR", "--env", "NVIDIA_VISIBLE_DEVICES",
        "--env", "USER", "pytorch+24.05", *SHIM,
    ]  # fmt: skip
    assert job_env(argv, client, "--env")["NVIDIA_VISIBLE_DEVICES"] == "0"


def test_a_workdir_that_is_the_private_directory_is_mounted_once() -> None:
    argv, _ = container.command(spec(), ARGV, {}, "r1", 0, "/w", "/w", host=HOST)
    assert pairs(argv, "-v") == ["/w:/w"]


def test_shared_directories_are_mounted_at_their_paths() -> None:
    argv, _ = container.command(spec(), ARGV, {}, "r1", 0, "/w", "/p", shared=["/run/s"], host=HOST)
    assert pairs(argv, "-v") == ["/w:/w", "/p:/p", "/run/s:/run/s"]


def test_no_workdir_is_the_login_home() -> None:
    argv, _ = container.command(spec(), ARGV, {}, "r1", 0, None, "/p", host=HOST)
    home = os.path.expanduser("~")
    assert pairs(argv, "-v")[0] == f"{home}:{home}" and pairs(argv, "--cwd") == [home]


def test_sweep_lists_by_label_then_removes() -> None:
    assert container.sweep_commands("docker", "r1") == [
        "docker", "ps", "-aq", "--filter", "label=ddptui.run=r1",
    ]  # fmt: skip
    assert container.remove_command("docker", ["a1", "b2"]) == ["docker", "rm", "-f", "a1", "b2"]
    assert container.remove_command("podman", ["a1"]) == ["podman", "rm", "-f", "-t", "0", "a1"]
    assert container.sweep_commands("apptainer", "r1") is None  # the tag sweep has it


def test_a_nodes_sweep_removes_its_own_containers_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """Nodes sharing one runtime (several on one machine): node 1's end must not remove node
    0's container while its job still runs (seen: node0 killed by SIGKILL in a docker run)."""
    listed = "c0 ddptui-r1-n0\nc1 ddptui-r1-n1\nc1k ddptui-r1-n1-check\nc10 ddptui-r1-n10\n"
    calls: list[list[str]] = []

    def run(argv: list[str], timeout: float = 0) -> tuple[int, str, str]:
        calls.append(argv)
        return 0, listed if argv[1] == "ps" else "", ""

    monkeypatch.setattr(container, "_run", run)
    assert container.sweep("docker", "r1", 1) == (["c1", "c1k"], None)
    assert calls[0] == ["docker", "ps", "--filter", "label=ddptui.run=r1", "-a", "--format",
                        "{{.ID}} {{.Names}}"]  # fmt: skip
    assert calls[1] == ["docker", "rm", "-f", "c1", "c1k"]


def test_podman_without_gpus_is_asked_its_version_not_its_info(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`podman info` costs 0.2 s of CPU on every host; only the GPU check needs what it says."""
    calls: list[list[str]] = []

    def run(argv: list[str], timeout: float = 0) -> tuple[int, str, str]:
        calls.append(argv)
        info = '{"version": {"Version": "4.3.1"}, "host": {"ociRuntime": {"name": "nvidia"}}}'
        return 0, info if argv[1] == "info" else "4.3.1\n", ""

    monkeypatch.setattr(container, "_run", run)
    monkeypatch.setattr(container.shutil, "which", lambda name: f"/usr/bin/{name}")
    found = container.runtime_info(spec(runtime="podman"), gpus=False)
    assert found["runtime_version"] == "4.3.1" and "oci_runtimes" not in found
    assert calls == [["podman", "version", "--format", "{{.Client.Version}}"]]
    assert container.runtime_info(spec(runtime="podman"))["oci_runtimes"] == ["nvidia"]


@pytest.mark.parametrize(
    ("err", "said"),
    [
        ("Error: inspecting object: x: image not known", f"image {IMAGE} not on this host"),
        ("Error: No such image: x", f"image {IMAGE} not on this host"),
        ("Error: stat /s/storage: permission denied",
         f"podman cannot look at image {IMAGE}: Error: stat /s/storage: permission denied"),
    ],
)  # fmt: skip
def test_an_image_that_cannot_be_looked_at_says_why(
    monkeypatch: pytest.MonkeyPatch, err: str, said: str
) -> None:
    monkeypatch.setattr(container, "_run", lambda argv, timeout=0: (125, "", err))
    assert container.image_info(spec(runtime="podman"))["image_error"].startswith(said)


def test_an_image_without_the_python_is_named_so() -> None:
    err = "ERROR (catatonit:6): failed to exec pid1: No such file or directory\n"
    why = container.start_failure(spec(runtime="podman", python="/opt/py"), 1, err, False)
    assert why == (
        "the container did not start: the container's command was not found (is /opt/py in the "
        f"image?) (image {IMAGE}, exit 1): {err.strip()}"
    )


@pytest.mark.parametrize(
    ("runtime", "code", "started", "words"),
    [
        ("docker", 125, False, ["did not start", "docker itself failed", "exit 125",
                                "Unable to find image"]),
        ("podman", 126, False, ["podman could not run the container's command"]),
        ("podman", 127, False, ["not found (is python3 in the image?)"]),
        ("podman", 1, False, ["podman exited 1"]),
        ("apptainer", 255, False, ["apptainer exited 255"]),  # its FATAL
        ("enroot", 1, False, ["enroot exited 1"]),
        ("enroot", -15, False, None),  # stopped
        ("docker", 127, True, None),  # the shim ran: the job's own exit
        ("docker", 143, False, None),  # stopped before the shim ran
        ("docker", 0, False, None),
    ],
)  # fmt: skip
def test_a_container_that_did_not_start_is_named_so(
    runtime: str, code: int, started: bool, words: list[str] | None
) -> None:
    err = "docker: Unable to find image 'x:1' locally\n"
    why = container.start_failure(spec(runtime=runtime), code, err, started)
    if words is None:
        assert why is None
        return
    assert why is not None and "image nvcr.io/nvidia/pytorch:24.05-py3" in why
    for word in words:
        assert word in why
