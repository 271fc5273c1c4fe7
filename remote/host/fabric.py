"""The deep check, host side: its worker, the fabric measured by the job's own world.

Started like a training job (torchrun, the job's hosts, processes per host, interface settings
and master), with the job's interpreter, torch and backend. Within a time budget it measures:
- an all-reduce across every rank at a few sizes, as nccl-tests does;
- each host's links: one process per host (local rank 0) sends to and receives from a partner,
  in rounds of disjoint pairs (pair_rounds), so every host is covered in a few rounds;
- each rank's GPU, where there is one: a matmul and a device-to-host copy; `dcgmi diag -r 1`
  once per host where DCGM is installed.
Global rank 0 prints progress lines (PROGRESS ...) and, last, the result: MARK + JSON, which
remote/checks/fabric.py reads. Figures are raw (bytes, seconds, flop/s): the launcher judges them.

python3 >= 3.8 and the standard library at import (torch is imported inside main), so the
launcher can share the mark and the schedule.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import traceback
from datetime import timedelta

TYPE_CHECKING = False  # typing costs import time on every host, for nothing there
if TYPE_CHECKING:
    from typing import Any

MARK = "DDPTUI-FABRIC "  # the result line: MARK + one JSON object, on global rank 0, last
PROGRESS = "fabric: "  # progress lines, rank 0 only
VERSION = 1
ROUNDS = 3  # rounds of host pairs: every host meets 2-3 partners, so a slow one stands out
MIB = 1 << 20
MAX_TEXT = 16 * 1024  # dcgmi's output kept per host (its table for 8 GPUs is a few KiB)
MAX_FIELD = 200  # a host name, a GPU's model or an error, as sent
DCGM_ARGV = ("dcgmi", "diag", "-r", "1")

# Parts of the budget (--seconds), each capped: on 4 hosts the whole check takes ~15 s.
GPU_SHARE, GPU_CAP = 0.15, 3.0  # matmul 2/3, device-to-host 1/3
LINK_SHARE, LINK_CAP = 0.3, 1.0  # the cap is per round and direction
REDUCE_SHARE, REDUCE_CAP = 0.3, 8.0
LINK_FIRST = 64 * 1024  # a link transfer starts here and doubles while it is quick
LINK_MAX = 64 * MIB
REDUCE_FIRST = MIB  # all-reduce sizes: 1 MiB, 4 MiB, ... up to --max-mib
REDUCE_MIN_ITERS, REDUCE_MAX_ITERS = 2, 100


def pair_rounds(n: int, rounds: int = ROUNDS) -> list[list[tuple[int, int]]]:
    """Rounds of disjoint pairs of hosts 0..n-1 (the circle method): every round pairs each
    host with a partner it has not met, so `rounds` rounds give each up to `rounds` partners.
    Odd n: one host sits out each round, a different one each time."""
    seats = list(range(n + n % 2))  # odd n: seat n is nobody, and whoever faces it sits out
    m = len(seats)
    out = []
    for r in range(min(rounds, m - 1)):
        ring = [seats[0], *seats[1 + r :], *seats[1 : 1 + r]]  # seat 0 stays, the rest turn
        pairs = [(ring[i], ring[m - 1 - i]) for i in range(m // 2)]
        out.append([(a, b) for a, b in pairs if a < n and b < n])
    return [pairs for pairs in out if pairs]


def bus_factor(ranks: int) -> float:
    """nccl-tests' all-reduce bus bandwidth over its algorithm bandwidth: 2(n-1)/n."""
    return 2.0 * (ranks - 1) / ranks if ranks > 0 else 0.0


def reduce_sizes(max_bytes):
    size, out = REDUCE_FIRST, []
    while size <= max_bytes:
        out.append(size)
        size *= 4
    return out or [max_bytes]


def rate_text(bps: float) -> str:
    for unit, scale in (("GB/s", 1e9), ("MB/s", 1e6), ("kB/s", 1e3)):
        if bps >= scale:
            return "%.3g %s" % (bps / scale, unit)
    return "%.3g B/s" % bps


def size_text(n: int) -> str:
    return "%d MiB" % (n // MIB) if n >= MIB else "%d KiB" % (n // 1024)


def parse_args(argv):
    p = argparse.ArgumentParser(description="ddptui's deep check, one rank of it")
    p.add_argument("--seconds", type=float, default=45.0, help="this worker's time budget")
    p.add_argument("--backend", choices=("auto", "gloo", "nccl"), default="auto")
    p.add_argument("--max-mib", type=int, default=0, help="largest all-reduce (0: by device)")
    p.add_argument("--rounds", type=int, default=ROUNDS, help="rounds of host pairs")
    return p.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    try:
        return Worker(args).run()
    except Exception:  # a bounded traceback and a status: torchrun names the failed rank
        sys.stderr.write(traceback.format_exc()[-4000:])
        return 1


class Worker:
    """One rank of the check. Every collective is entered by every rank in the same order;
    where timing decides how many there are, rank 0 decides and broadcasts (decide)."""

    def __init__(self, args):
        import torch
        import torch.distributed as dist

        self.torch, self.dist, self.args = torch, dist, args
        self.start = time.monotonic()
        self.rank = int(os.environ["RANK"])
        self.world = int(os.environ["WORLD_SIZE"])
        self.local = int(os.environ.get("LOCAL_RANK", "0"))
        self.node = int(os.environ.get("GROUP_RANK", os.environ.get("NODE_RANK", "0")))
        self.backend = pick_backend(args.backend, torch, dist)
        if self.backend == "nccl":
            self.device = torch.device("cuda", self.local % torch.cuda.device_count())
            torch.cuda.set_device(self.device)
        else:
            self.device = torch.device("cpu")

    # -- the run -------------------------------------------------------------------------------

    def run(self):
        dcgm = start_dcgm() if self.local == 0 else None  # meanwhile, once per host
        try:
            timeout = timedelta(seconds=self.args.seconds + 30)  # a lost peer ends it
            self.dist.init_process_group(self.backend, timeout=timeout)
            leaders = self.leaders()
            self.say(
                "%d hosts, %d ranks, %s, budget %.0f s"
                % (len(leaders), self.world, self.backend, self.args.seconds)
            )
            record = {
                "rank": self.rank,
                "node": self.node,
                "local": self.local,
                "host": socket.gethostname()[:MAX_FIELD],
            }
            record["gpu"] = self.gpu_test()
            self.barrier()
            record["links"] = self.link_test(leaders)
            reduce = self.allreduce_test() if self.world > 1 else []  # one rank: no fabric
            if dcgm is not None:
                record["dcgm"] = finish_dcgm(dcgm, self.left() - 2.0)
            records = self.gather(record)
            if self.rank == 0:
                self.report(records, reduce, len(leaders))
        finally:
            if dcgm is not None:
                stop(dcgm[0])
            if self.dist.is_initialized():
                self.dist.destroy_process_group()
        return 0

    def report(self, records, reduce, nodes):
        links: list[Any] = []
        dcgm: list[Any] = []
        for r in records:  # the per-host parts out of the rank records
            links.extend(r.pop("links", None) or ())
            if r.get("dcgm"):
                dcgm.append(dict(r.pop("dcgm"), node=r["node"]))
        result = {
            "v": VERSION,
            "backend": self.backend,
            "world": self.world,
            "nodes": nodes,
            "seconds": round(time.monotonic() - self.start, 3),
            "allreduce": reduce,
            "links": links,
            "dcgm": dcgm,
            "ranks": records,
        }
        self.say("done in %.1f s" % result["seconds"])
        print(MARK + json.dumps(result, separators=(",", ":")), flush=True)

    # -- helpers -------------------------------------------------------------------------------

    def say(self, text):
        if self.rank == 0:
            print(PROGRESS + text, flush=True)

    def left(self):
        return self.args.seconds - (time.monotonic() - self.start)

    def sync(self):
        if self.device.type == "cuda":
            self.torch.cuda.synchronize(self.device)

    def barrier(self):
        self.dist.all_reduce(self.torch.zeros(1, device=self.device))
        self.sync()

    def decide(self, *values):
        """Rank 0's values, on every rank: counts that timing chose, the same everywhere."""
        t = self.torch.tensor(values, dtype=self.torch.float64, device=self.device)
        self.dist.broadcast(t, 0)
        return t.tolist()

    def leaders(self):
        """node rank -> the global rank of its local rank 0, from every rank's (node, local)."""
        torch = self.torch
        mine = torch.tensor([self.node, self.local], dtype=torch.int64, device=self.device)
        every = [torch.zeros_like(mine) for _ in range(self.world)]
        self.dist.all_gather(every, mine)
        pairs = [t.tolist() for t in every]
        return {node: rank for rank, (node, local) in enumerate(pairs) if local == 0}

    def gather(self, record):
        """Every rank's record on rank 0, as JSON bytes (never pickle): bounded as its parts
        are (names, figures, a few links, dcgmi's last MAX_TEXT characters)."""
        torch = self.torch
        data = json.dumps(record, separators=(",", ":")).encode()
        size = torch.tensor([len(data)], dtype=torch.int64, device=self.device)
        self.dist.all_reduce(size, op=self.dist.ReduceOp.MAX)
        width = int(size.item())
        buf = torch.zeros(width, dtype=torch.uint8)
        buf[: len(data)] = torch.frombuffer(bytearray(data), dtype=torch.uint8)
        buf = buf.to(self.device)
        into = [torch.zeros_like(buf) for _ in range(self.world)] if self.rank == 0 else None
        self.dist.gather(buf, into, dst=0)
        if self.rank != 0:
            return []
        return [json.loads(tensor_bytes(t.cpu()).rstrip(b"\0")) for t in into or ()]

    # -- per GPU -------------------------------------------------------------------------------

    def gpu_test(self):
        torch = self.torch
        if not torch.cuda.is_available() or torch.cuda.device_count() == 0:
            return None
        seconds = min(GPU_SHARE * self.args.seconds, GPU_CAP)
        self.say("GPUs: matmul and device-to-host copy, %.1f s" % seconds)
        device = torch.device("cuda", self.local % torch.cuda.device_count())
        props = torch.cuda.get_device_properties(device)
        out = {
            "index": device.index,
            "name": str(props.name)[:MAX_FIELD],
            "uuid": str(getattr(props, "uuid", ""))[:MAX_FIELD],
        }
        try:
            out["matmul"] = matmul_flops(torch, device, seconds * 2 / 3)
            out["d2h"] = d2h_bandwidth(torch, device, seconds / 3)
        except Exception as exc:  # a GPU that cannot do this is a finding, not a hang
            out["error"] = ("%s: %s" % (type(exc).__name__, exc))[:MAX_FIELD]
        return out

    # -- links between hosts -------------------------------------------------------------------

    def link_test(self, leaders):
        """Rounds of disjoint host pairs, each direction in turn; the sender times its own."""
        nodes = sorted(leaders)
        rounds = pair_rounds(len(nodes), self.args.rounds)
        if not rounds:  # a single host
            return []
        per = min(LINK_SHARE * self.args.seconds / (2 * len(rounds)), LINK_CAP)
        buf = self.torch.zeros(LINK_MAX, dtype=self.torch.uint8, device=self.device)
        done = []
        for r, pairs in enumerate(rounds):
            self.say(
                "links: round %d of %d, %d hosts in pairs" % (r + 1, len(rounds), 2 * len(pairs))
            )
            for a, b in pairs + [(b, a) for a, b in pairs]:
                src, dst = leaders[nodes[a]], leaders[nodes[b]]
                if self.rank == src:
                    sent = self.send_for(buf, dst, per)
                    done.append(dict(sent, round=r, src=nodes[a], dst=nodes[b]))
                elif self.rank == dst:
                    self.receive_from(buf, src)
            self.barrier()  # after both directions: each pair once
        return done

    def send_for(self, buf, dst, seconds):
        """Send doubling sizes while a transfer is quick, then that size until `seconds`;
        the figure is the last size's bytes over its time, acknowledged by the receiver
        (`sent`: every byte, the growing ones too: what the wire carried)."""
        torch, dist = self.torch, self.dist
        head = torch.zeros(1, dtype=torch.int64, device=self.device)
        ack = torch.zeros(1, dtype=torch.int64, device=self.device)
        deadline = time.monotonic() + seconds
        size, moved, took, sent = LINK_FIRST, 0, 0.0, 0
        warm = True  # the first transfer sets the pair up (NCCL: a communicator): not timed
        while True:
            t0 = time.monotonic()
            head.fill_(size)
            dist.send(head, dst)
            dist.send(buf[:size], dst)
            dist.recv(ack, dst)
            self.sync()
            dt = time.monotonic() - t0
            moved, took, sent = moved + size, took + dt, sent + size
            if time.monotonic() >= deadline:
                break
            if warm:
                warm, moved, took = False, 0, 0.0
            elif dt < seconds / 10 and size < LINK_MAX:
                size, moved, took = size * 2, 0, 0.0  # still growing: not yet the figure
        head.fill_(0)
        dist.send(head, dst)
        return {"bytes": moved, "seconds": round(took, 6), "sent": sent}

    def receive_from(self, buf, src):
        torch, dist = self.torch, self.dist
        head = torch.zeros(1, dtype=torch.int64, device=self.device)
        ack = torch.ones(1, dtype=torch.int64, device=self.device)
        while True:
            dist.recv(head, src)
            size = int(head.item())
            if size <= 0:
                return
            dist.recv(buf[:size], src)
            dist.send(ack, src)

    # -- all-reduce ----------------------------------------------------------------------------

    def allreduce_test(self):
        """nccl-tests' way: per size a warm-up, then `iters` timed back to back, each rank's
        time averaged over the ranks; sizes grow 4x while the next one fits (reduce_plan)."""
        torch, dist = self.torch, self.dist
        phase = min(REDUCE_SHARE * self.args.seconds, REDUCE_CAP)
        deadline = self.left() - phase  # rank 0's budget left once this phase is over
        max_mib = self.args.max_mib or (1024 if self.device.type == "cuda" else 64)
        sizes = reduce_sizes(max_mib * MIB)
        out = []
        for size in sizes:
            t = torch.zeros(size // 4, dtype=torch.float32, device=self.device)
            warm = self.timed_allreduce(t, 1)
            plan = reduce_plan(warm, self.left() - deadline, phase, size == sizes[-1])
            iters, last = (int(x) for x in self.decide(*plan))
            if iters:
                took = self.timed_allreduce(t, iters)
                total = torch.tensor([took], dtype=torch.float64, device=self.device)
                dist.all_reduce(total)
                per = total.item() / self.world / iters
                out.append({"bytes": size, "iters": iters, "warmup": 1, "seconds": per})
                algbw, factor = size / per, bus_factor(self.world)
                self.say(
                    "all-reduce %s: algbw %s, busbw %s (%d iterations)"
                    % (size_text(size), rate_text(algbw), rate_text(algbw * factor), iters)
                )
            if last:
                break
        return out

    def timed_allreduce(self, t, iters):
        """Seconds this rank took for `iters` all-reduces of t, started together."""
        self.barrier()
        t0 = time.monotonic()
        for _ in range(iters):
            self.dist.all_reduce(t)
        self.sync()
        return time.monotonic() - t0


def reduce_plan(warm, room, phase, largest):
    """(timed all-reduces, whether this size is the last) for a size whose warm-up took
    `warm` s with `room` s of the phase left. A size gets a sixth of the phase; the last one
    (the largest allowed, or one after which the next, ~4x slower, would not fit) all that is
    left, so the headline is measured longest. (0, True): not even this one fits."""
    if warm * REDUCE_MIN_ITERS > room:
        return 0, True
    share = min(phase / 6, room)
    last = largest or 4 * warm * (1 + REDUCE_MIN_ITERS) > room - share
    iters = (room if last else share) / warm
    return int(min(max(iters, REDUCE_MIN_ITERS), REDUCE_MAX_ITERS)), last


def tensor_bytes(t):
    """A contiguous CPU uint8 tensor's bytes, without numpy (tolist is slow at megabytes)."""
    import ctypes

    return ctypes.string_at(t.data_ptr(), t.numel())


def pick_backend(asked, torch, dist):
    """What the job would use: NCCL where CUDA has GPUs and NCCL is built in, else gloo."""
    if asked != "auto":
        return asked
    cuda = torch.cuda.is_available() and torch.cuda.device_count() > 0
    return "nccl" if cuda and dist.is_nccl_available() else "gloo"


def matmul_flops(torch, device, seconds):
    """Square half-precision matmuls back to back: flop/s (2 n^3 per product)."""
    n = 8192 if torch.cuda.get_device_properties(device).total_memory > 16 * 2**30 else 4096
    dtype = torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    c = torch.empty(n, n, device=device, dtype=dtype)
    count, took = timed_loop(torch, device, seconds, lambda: torch.mm(a, b, out=c))
    return 2.0 * n**3 * count / took


def d2h_bandwidth(torch, device, seconds):
    """Copies from the GPU into pinned host memory: bytes/s."""
    free = torch.cuda.mem_get_info(device)[0]
    size = max(min(256 * MIB, free // 4), MIB)
    src = torch.empty(size, dtype=torch.uint8, device=device)
    dst = torch.empty(size, dtype=torch.uint8, pin_memory=True)
    count, took = timed_loop(torch, device, seconds, lambda: dst.copy_(src, non_blocking=True))
    return float(size) * count / took


def timed_loop(torch, device, seconds, step, batch=4):
    """Run step in batches until `seconds` pass: (steps, seconds), after 2 warm-up steps."""
    for _ in range(2):
        step()
    torch.cuda.synchronize(device)
    count, t0 = 0, time.monotonic()
    while True:
        for _ in range(batch):
            step()
        count += batch
        torch.cuda.synchronize(device)
        took = time.monotonic() - t0
        if took >= seconds:
            return count, took


# -- DCGM ------------------------------------------------------------------------------------


def start_dcgm():
    """`dcgmi diag -r 1` in the background, where DCGM is installed: (process, output file)."""
    if shutil.which(DCGM_ARGV[0]) is None:
        return None
    out = tempfile.TemporaryFile()  # noqa: SIM115 (finish_dcgm closes it)
    try:
        proc = subprocess.Popen(DCGM_ARGV, stdin=subprocess.DEVNULL, stdout=out, stderr=out)
    except OSError:
        out.close()
        return None
    return proc, out


def finish_dcgm(dcgm, seconds):
    """Its exit status (None: it did not finish within `seconds`) and its output's end."""
    proc, out = dcgm
    try:
        rc = proc.wait(max(seconds, 0.1))
    except subprocess.TimeoutExpired:
        rc = None
        stop(proc)
    out.seek(0, os.SEEK_END)
    out.seek(max(out.tell() - MAX_TEXT, 0))
    text = out.read().decode("utf-8", "replace")
    out.close()
    return {"rc": rc, "out": text}


def stop(proc):
    if proc.poll() is None:
        proc.kill()
        proc.wait()


if __name__ == "__main__":
    sys.exit(main())
