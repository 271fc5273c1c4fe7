"""The deep check's pure parts: the pairing schedule, nccl-tests' figures, the result line read
defensively, and the decisions (slow link, slow GPU, dcgmi's verdict). The GPU figures' arithmetic
runs here on a stand-in for torch: no GPU was used."""

from __future__ import annotations

import ast
import json
from itertools import combinations
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from ddptui.remote.checks import fabric
from ddptui.remote.host import fabric as worker

GB, MB = 1e9, 1e6
NAMES = [f"gpu{k:02d}" for k in range(8)]


# -- the schedule ----------------------------------------------------------------------------


def test_rounds_are_disjoint_pairs_that_never_repeat() -> None:
    for n in range(1, 130):
        rounds = worker.pair_rounds(n)
        assert len(rounds) <= worker.ROUNDS  # O(1) rounds, whatever n
        met = [frozenset(p) for pairs in rounds for p in pairs]
        assert len(met) == len(set(met)), n  # no pair twice
        for pairs in rounds:
            hosts = [h for p in pairs for h in p]
            assert len(hosts) == len(set(hosts)) and all(0 <= h < n for h in hosts), n
            assert len(pairs) == n // 2, n  # everyone plays, but one when n is odd


def test_every_host_meets_at_least_two_partners() -> None:
    for n in range(3, 130):
        partners: dict[int, set[int]] = {k: set() for k in range(n)}
        for a, b in (p for pairs in worker.pair_rounds(n) for p in pairs):
            partners[a].add(b)
            partners[b].add(a)
        assert min(len(p) for p in partners.values()) >= 2, n  # one slow partner hides none


def test_odd_counts_sit_out_a_different_host_each_round() -> None:
    resting = [set(range(7)) - {h for p in pairs for h in p} for pairs in worker.pair_rounds(7)]
    assert all(len(r) == 1 for r in resting) and len(set.union(*resting)) == 3


def test_few_hosts() -> None:
    assert worker.pair_rounds(1) == [] and worker.pair_rounds(0) == []
    assert worker.pair_rounds(2) == [[(0, 1)]]
    four = {frozenset(p) for pairs in worker.pair_rounds(4) for p in pairs}
    assert four == {frozenset(p) for p in combinations(range(4), 2)}  # 3 rounds: all of them


# -- nccl-tests' figures ---------------------------------------------------------------------


def test_algbw_and_busbw_as_nccl_tests_defines_them() -> None:
    size = fabric.Size(nbytes=1 << 30, iters=20, seconds=0.1, ranks=8)
    assert size.algbw == pytest.approx((1 << 30) / 0.1)
    assert size.busbw == pytest.approx(size.algbw * 2 * 7 / 8)
    assert worker.bus_factor(2) == 1.0 and worker.bus_factor(1) == 0.0
    assert worker.bus_factor(4) == 1.5


def test_sizes_grow_fourfold_from_a_mebibyte() -> None:
    assert worker.reduce_sizes(64 << 20) == [1 << 20, 4 << 20, 16 << 20, 64 << 20]
    assert worker.reduce_sizes(1 << 19) == [1 << 19]


def test_sizes_take_a_sixth_of_the_phase_and_the_last_what_is_left() -> None:
    assert worker.reduce_plan(warm=0.01, room=8.0, phase=8.0, largest=False) == (100, False)
    assert worker.reduce_plan(warm=0.1, room=8.0, phase=8.0, largest=False) == (13, False)
    # the next size (~4x: 3 x 2.4 s) would not fit after this one's share: all that is left
    assert worker.reduce_plan(warm=0.6, room=6.0, phase=8.0, largest=False) == (10, True)
    assert worker.reduce_plan(warm=0.1, room=3.0, phase=8.0, largest=True) == (30, True)
    assert worker.reduce_plan(warm=2.0, room=3.0, phase=8.0, largest=False) == (0, True)
    assert worker.reduce_plan(warm=1.4, room=3.0, phase=8.0, largest=False) == (2, True)


def test_rates_read_as_people_write_them() -> None:
    assert worker.rate_text(2.7e6) == "2.7 MB/s" and worker.rate_text(1.5e9) == "1.5 GB/s"
    assert worker.rate_text(812) == "812 B/s" and worker.rate_text(12.34e9) == "12.3 GB/s"
    assert worker.size_text(64 << 20) == "64 MiB" and worker.size_text(256 << 10) == "256 KiB"


# -- the result line -------------------------------------------------------------------------


def rank(k: int, node: int | None = None, gpu: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"rank": k, "node": k if node is None else node, "local": 0, "host": f"h{k}", "gpu": gpu}


def links(rates: dict[tuple[int, int], float]) -> list[dict[str, Any]]:
    """Link records moving `rate` bytes/s, one second each."""
    return [
        {"round": 0, "src": a, "dst": b, "bytes": int(r), "seconds": 1.0, "sent": int(r)}
        for (a, b), r in rates.items()
    ]


def line(**over: Any) -> str:
    doc: dict[str, Any] = {
        "v": worker.VERSION,
        "backend": "gloo",
        "world": 4,
        "nodes": 4,
        "seconds": 9.5,
        "allreduce": [
            {"bytes": 1 << 20, "iters": 50, "warmup": 1, "seconds": 0.004},
            {"bytes": 64 << 20, "iters": 9, "warmup": 1, "seconds": 0.12},
        ],
        "links": [],
        "dcgm": [],
        "ranks": [rank(k) for k in range(4)],
    }
    doc.update(over)
    return "[r0 node0] " + worker.MARK + json.dumps(doc)


def test_a_whole_line_is_read() -> None:
    report = fabric.parse(line())
    assert (report.backend, report.world, report.nodes) == ("gloo", 4, 4)
    assert report.headline == fabric.Size(64 << 20, 9, 0.12, 4)
    assert report.hostnames == {0: "h0", 1: "h1", 2: "h2", 3: "h3"}


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("fabric: done in 3 s", "no result line"),
        (worker.MARK + "{not json", "not JSON"),
        (worker.MARK + "[1, 2]", "not a JSON object"),
        (worker.MARK + '{"v": 99, "world": 4}', "version 99"),
        (worker.MARK + '{"v": 1, "world": 0}', "names no ranks"),
        (worker.MARK + '{"v": 1, "world": true}', "names no ranks"),
        (worker.MARK + "[" * 100_000 + "]" * 100_000, "nested too deep"),
        (worker.MARK + " " * (fabric.MAX_LINE + 1), "over"),
    ],
)
def test_garbage_is_refused_with_a_reason(text: str, why: str) -> None:
    with pytest.raises(fabric.BadResult, match=why):
        fabric.parse(text)


def test_malformed_entries_are_dropped_not_trusted() -> None:
    report = fabric.parse(
        line(
            allreduce=[
                {"bytes": 1 << 20, "iters": 5, "seconds": 0.01},
                {"bytes": -1, "iters": 5, "seconds": 0.01},
                {"bytes": 1 << 20, "iters": 5, "seconds": 0},  # would divide by zero
                {"bytes": 1 << 20, "iters": True, "seconds": 0.01},
                {"bytes": "1", "iters": 5, "seconds": 0.01},
                "size",
                None,
            ],
            links=[
                {"round": 0, "src": 0, "dst": 1, "bytes": 10, "seconds": float("inf")},
                {"round": 0, "src": 0, "dst": 1, "bytes": 10},
                {"round": 0, "src": 0, "dst": 1, "bytes": 10, "seconds": 1.0},
            ],
            ranks=[rank(0), {"rank": 1}, 7, rank(2, gpu="A100"), rank(3, gpu={"matmul": "x"})],
            dcgm=[{"node": 0, "rc": 0}, {"node": "0", "out": ""}, {"node": 1, "out": "x"}],
        )
    )
    assert [s.nbytes for s in report.allreduce] == [1 << 20]
    assert report.links == (fabric.Link(0, 0, 1, 10, 1.0),)
    [gpu] = report.gpus
    assert (gpu.node, gpu.name, gpu.matmul) == (3, "unknown GPU", None)
    assert report.dcgm == (fabric.Dcgm(1, None, "x"),)


def test_host_text_is_bounded_and_on_one_line() -> None:
    gpu = {"index": 0, "name": "H100\x1b[31m\n" + "x" * 5000, "matmul": 1e15, "error": "e\rr"}
    report = fabric.parse(line(ranks=[rank(0, gpu=gpu)]))
    [g] = report.gpus
    assert g.name.startswith("H100?[31m?x") and len(g.name) == fabric.MAX_TEXT
    assert g.error == "e?r"


# -- the decisions ---------------------------------------------------------------------------


def judged(text: str, check: str | None = None) -> list[tuple[str, str, str | None]]:
    found = fabric.findings(fabric.parse(text), NAMES)
    return [(f.level, f.message, f.host) for f in found if check in (None, f.check)]


def healthy(n: int, rate: float = 1.5 * GB) -> dict[tuple[int, int], float]:
    """Both directions of pair_rounds(n)'s pairs at `rate`."""
    pairs = [p for r in worker.pair_rounds(n) for p in r]
    return {**{p: rate for p in pairs}, **{(b, a): rate for a, b in pairs}}


def test_the_all_reduce_headline_is_the_largest_size() -> None:
    [(level, message, host)] = judged(line(), "fabric-allreduce")
    assert level == "ok" and host is None
    assert message == (
        "all-reduce of 64 MiB across 4 ranks (gloo): 120 ms, algbw 559 MB/s, busbw 839 MB/s "
        "(sizes 1 MiB, 64 MiB)"
    )


def test_no_all_reduce_is_a_warning() -> None:
    [(level, message, _)] = judged(line(allreduce=[]), "fabric-allreduce")
    assert level == "warning" and "no all-reduce was measured" in message


def test_a_slow_host_is_named_alone_with_its_figure_against_the_median() -> None:
    rates = healthy(8)
    for a, b in rates:
        if 7 in (a, b):
            rates[a, b] = 2.7 * MB
    assert judged(line(links=links(rates)), "slow-link") == [
        (
            "warning",
            "2.7 MB/s against a median of 1.5 GB/s "
            "(send 2.7 MB/s, receive 2.7 MB/s, best of 3 peers)",
            "gpu07",
        )
    ]


def test_a_host_slow_one_way_is_named_by_its_worse_direction() -> None:
    rates = healthy(5)
    for a, b in rates:
        if a == 2:
            rates[a, b] = 100 * MB  # only its sending is slow
    [(level, message, host)] = judged(line(links=links(rates)), "slow-link")
    assert (level, host) == ("warning", "gpu02")
    assert message.startswith("100 MB/s against") and "receive 1.5 GB/s" in message


def test_healthy_links_name_none() -> None:
    rates = healthy(6)
    rates[0, 5] = 0.8 * GB  # noise: above half the median
    assert judged(line(links=links(rates)), "slow-link") == [
        ("ok", "6 hosts' links, median 1.5 GB/s", None)
    ]


def test_two_hosts_cannot_tell_which_is_slow() -> None:
    found = judged(line(links=links({(0, 1): 3 * MB, (1, 0): 3 * MB})), "slow-link")
    assert found == [("ok", "3 MB/s between the two hosts", None)]
    assert judged(line(links=[]), "slow-link") == []  # one host: no links at all


def gpu(index: int, name: str = "NVIDIA H100 80GB HBM3", **figures: Any) -> dict[str, Any]:
    return {"index": index, "name": name, "uuid": f"GPU-{index}", **figures}


def gpu_ranks(figures: list[dict[str, Any]], per_host: int = 4) -> list[dict[str, Any]]:
    return [rank(k, node=k // per_host, gpu=g) for k, g in enumerate(figures)]


def test_a_slow_gpu_is_named_against_the_median_of_its_model() -> None:
    figures = [gpu(k % 4, matmul=650e12, d2h=24e9) for k in range(8)]
    figures[6]["matmul"] = 210e12  # gpu01's GPU 2
    figures[3]["d2h"] = 3.1e9  # gpu00's GPU 3: a PCIe link at x4
    assert judged(line(ranks=gpu_ranks(figures)), "slow-gpu") == [
        (
            "warning",
            "GPU 3 (NVIDIA H100 80GB HBM3, rank 3): device-to-host 3.1 GB/s against a median of "
            "24 GB/s",
            "gpu00",
        ),
        (
            "warning",
            "GPU 2 (NVIDIA H100 80GB HBM3, rank 6): matmul 210 TFLOP/s against a median of "
            "650 TFLOP/s",
            "gpu01",
        ),
    ]


def test_gpus_are_compared_within_their_model() -> None:
    figures = [gpu(k, matmul=650e12, d2h=24e9) for k in range(4)]
    figures += [gpu(k, "NVIDIA A100-SXM4-40GB", matmul=230e12, d2h=20e9) for k in range(4)]
    assert judged(line(ranks=gpu_ranks(figures)), "slow-gpu") == [
        (
            "ok",
            "4x NVIDIA H100 80GB HBM3: matmul median 650 TFLOP/s, device-to-host median 24 GB/s",
            None,
        ),
        (
            "ok",
            "4x NVIDIA A100-SXM4-40GB: matmul median 230 TFLOP/s, device-to-host median 20 GB/s",
            None,
        ),
    ]


def test_a_lone_gpu_has_nothing_to_be_compared_with_but_its_figures_tell() -> None:
    found = judged(line(ranks=gpu_ranks([gpu(0, matmul=607e12, d2h=55e9)])), "slow-gpu")
    assert found == [
        ("ok", "1x NVIDIA H100 80GB HBM3: matmul 607 TFLOP/s, device-to-host 55 GB/s", None)
    ]


def test_one_rank_has_no_all_reduce_to_measure() -> None:
    # seen on an H200: a 1-rank "all-reduce" of 1 GiB took 0.016 ms, "algbw 68,600 GB/s"
    one = [{"bytes": 1 << 30, "iters": 2, "warmup": 1, "seconds": 1.57e-5}]
    found = judged(line(world=1, nodes=1, allreduce=one), "fabric-allreduce")
    assert found == [("ok", "one rank: no all-reduce to measure", None)]


def test_a_gpu_whose_test_raised_fails() -> None:
    figures = [gpu(0, matmul=650e12, d2h=24e9), gpu(1, error="RuntimeError: CUDA error: ECC")]
    assert judged(line(ranks=gpu_ranks(figures)), "gpu-test") == [
        (
            "failure",
            "GPU 1 (NVIDIA H100 80GB HBM3, rank 1): the test failed: RuntimeError: CUDA error: ECC",
            "gpu00",
        )
    ]


def test_figures_per_host_for_json() -> None:
    rates = healthy(4)
    figures = [gpu(0, matmul=650e12, d2h=24e9) for _ in range(4)]
    out = fabric.figures(fabric.parse(line(links=links(rates), ranks=gpu_ranks(figures, 1))), NAMES)
    assert out["headline"] == {
        "bytes": 64 << 20,
        "iters": 9,
        "seconds": 0.12,
        "algbw": (64 << 20) / 0.12,
        "busbw": (64 << 20) / 0.12 * 1.5,
    }
    assert list(out["hosts"]) == NAMES[:4]
    assert out["hosts"]["gpu01"] == {
        "hostname": "h1",
        "link_send": 1.5 * GB,
        "link_receive": 1.5 * GB,
        "link_peers": 3,
        "gpus": [
            {
                "index": 0,
                "rank": 1,
                "name": "NVIDIA H100 80GB HBM3",
                "uuid": "GPU-0",
                "matmul_flops": 650e12,
                "d2h_bytes_per_s": 24e9,
                "error": None,
            }
        ],
        "dcgm": None,
    }
    json.dumps(out)  # --json can print it as is


def test_no_report_at_all_fails() -> None:
    f = fabric.failed("rank 3 exited with 1")
    assert (f.level, f.check) == ("failure", "fabric")
    assert f.message == "the deep check gave no result: rank 3 exited with 1"


# -- dcgmi diag -r 1 -------------------------------------------------------------------------


def table(*rows: tuple[str, str]) -> str:
    """dcgmi's table as its stencil prints it: `| name(25) | value(46) |`, a message wrapped
    every 45 characters (dcgmi/Diag.cpp, DIAG_DATA and DisplayVerboseInfo)."""
    rule = "+---------------------------+------------------------------------------------+"
    out = ["Successfully ran diagnostic for group.", rule]
    out += ["| Diagnostic                | Result                                         |"]
    out += [rule.replace("-", "=")]
    for name, value in rows:
        if name.startswith("--"):
            out.append(f"|-----  {name[2:]}  ".ljust(28, "-") + "+" + "-" * 48 + "|")
            continue
        chunks = [value[i : i + 45] for i in range(0, len(value), 45)] or [""]
        for i, chunk in enumerate(chunks):
            out.append(f"| {name if i == 0 else '':<25} | {chunk:<46} |")
    return "\n".join([*out, rule, ""])


META = [("--Metadata", ""), ("DCGM Version", "3.3.5"), ("Driver Version Detected", "535.161.08")]
PERSISTENCE = "Persistence mode for GPU 0 is disabled. Enable persistence mode by running"


def test_dcgm3_all_passed() -> None:
    out = table(*META, ("--Deployment", ""), ("Denylist", "Pass"), ("NVML Library", "Pass"))
    assert fabric.dcgm_verdict(0, out) == fabric.DcgmVerdict("ok", "dcgmi diag -r 1: Pass")


def test_dcgm3_failure_with_its_wrapped_warning() -> None:
    rows = [("Persistence Mode", "Fail"), ("Warning", "GPU 0 " + PERSISTENCE)]
    out = table(*META, ("--Deployment", ""), ("Denylist", "Pass"), *rows, ("Inforom", "Skip"))
    assert fabric.dcgm_verdict(226, out) == fabric.DcgmVerdict(
        "failure", f"dcgmi diag -r 1: Persistence Mode: Fail (GPU 0 {PERSISTENCE})"
    )


def test_dcgm4_per_gpu_results() -> None:
    rows = [("software", "Fail"), ("", "GPU0: Pass"), ("", "GPU1: Fail")]
    rows += [("Warning: GPU1", "Page retirement: 3 pages pending retirement on GPU 1")]
    rows += [("", "GPU2: Warn"), ("Warning: GPU2", "row remap pending")]
    out = table(*META, ("--Deployment", ""), *rows)
    assert fabric.dcgm_verdict(226, out) == fabric.DcgmVerdict(
        "failure",
        "dcgmi diag -r 1: software: Fail; software GPU1: Fail; software GPU2: Warn "
        "(GPU1: Page retirement: 3 pages pending retirement on GPU 1 / GPU2: row remap pending)",
    )


def test_dcgm4_warning_only() -> None:
    out = table(*META, ("software", "Warn"), ("", "GPU0: Warn"), ("Warning: GPU0", PERSISTENCE))
    verdict = fabric.dcgm_verdict(0, out)
    assert verdict.level == "warning" and PERSISTENCE in verdict.message


def test_dcgmi_that_did_not_run_or_finish() -> None:
    refused = "Error: unable to establish a connection to the specified host: localhost\n"
    assert fabric.dcgm_verdict(255, refused) == fabric.DcgmVerdict(
        "warning",
        "dcgmi diag -r 1 did not run: Error: unable to establish a connection to the specified "
        "host: localhost",
    )
    assert fabric.dcgm_verdict(None, "").message == "dcgmi diag -r 1 did not finish in time"


def test_dcgm_findings_name_their_host() -> None:
    dcgm = [
        {"node": 0, "rc": 0, "out": table(("Denylist", "Pass"))},
        {"node": 2, "rc": 226, "out": table(("Persistence Mode", "Fail"))},
        {"node": 3, "rc": None, "out": ""},
    ]
    assert judged(line(dcgm=dcgm), "dcgm") == [
        ("ok", "dcgmi diag -r 1: Pass", "gpu00"),
        ("failure", "dcgmi diag -r 1: Persistence Mode: Fail", "gpu02"),
        ("warning", "dcgmi diag -r 1 did not finish in time", "gpu03"),
    ]


# -- the GPU figures' arithmetic, on a stand-in for torch (no GPU here) ------------------------


class FakeCuda:
    """torch.cuda as the figures use it; each synchronize takes half a second of a fake clock."""

    def __init__(self, clock: list[float]) -> None:
        self.clock = clock

    def synchronize(self, device: object) -> None:
        self.clock[0] += 0.5

    def get_device_properties(self, device: object) -> SimpleNamespace:
        return SimpleNamespace(total_memory=80 * 2**30)

    def is_bf16_supported(self) -> bool:
        return True

    def mem_get_info(self, device: object) -> tuple[int, int]:
        return (79 * 2**30, 80 * 2**30)


def fake_torch(clock: list[float], steps: list[str]) -> SimpleNamespace:
    tensor = SimpleNamespace(copy_=lambda src, non_blocking: steps.append("copy"))
    return SimpleNamespace(
        cuda=FakeCuda(clock),
        bfloat16="bf16",
        float16="fp16",
        uint8="u8",
        randn=lambda *a, **k: tensor,
        empty=lambda *a, **k: tensor,
        mm=lambda a, b, out: steps.append("mm"),
    )


def test_matmul_and_copy_figures(monkeypatch: pytest.MonkeyPatch) -> None:
    clock, steps = [0.0], []
    monkeypatch.setattr(worker.time, "monotonic", lambda: clock[0])
    torch = fake_torch(clock, steps)
    # 2 warm-ups, then batches of 4 until a second has passed: 2 batches, 1.0 s
    assert worker.matmul_flops(torch, "cuda:0", 1.0) == 2 * 8192**3 * 8 / 1.0
    assert steps.count("mm") == 10
    assert worker.d2h_bandwidth(torch, "cuda:0", 1.0) == 256 * 2**20 * 8 / 1.0


def test_backend_as_the_job_would_pick_it() -> None:
    def torch(gpus: int) -> SimpleNamespace:
        cuda = SimpleNamespace(is_available=lambda: gpus > 0, device_count=lambda: gpus)
        return SimpleNamespace(cuda=cuda)

    dist = SimpleNamespace(is_nccl_available=lambda: True)
    assert worker.pick_backend("auto", torch(8), dist) == "nccl"
    assert worker.pick_backend("auto", torch(0), dist) == "gloo"
    assert worker.pick_backend("gloo", torch(8), dist) == "gloo"
    no_nccl = SimpleNamespace(is_nccl_available=lambda: False)
    assert worker.pick_backend("auto", torch(8), no_nccl) == "gloo"


def test_the_worker_is_python_3_8() -> None:
    ast.parse(Path(worker.__file__).read_text(), feature_version=(3, 8))  # it runs on the hosts
