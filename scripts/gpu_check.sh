#!/usr/bin/env bash
# The GPU path, checked on a machine with an NVIDIA GPU and torch built for CUDA (CI has none).
# Run from the repository root: bash scripts/gpu_check.sh OUT.tar.gz (everything it saw, packed)
#
# 1. nvidia-smi's answers to the queries ddptui asks (tests/data/nvidia-smi/README.md), idle and
#    with a process holding the GPU: recordings for the tests.
# 2. `check` on this host (transport: local): the GPU as the checks pane shows it.
# 3. examples/train.py on NCCL, one node; then two nodes on this one host. NCCL refuses two ranks
#    on one GPU within a host ("Duplicate GPU detected"), so each node gets its own NCCL_HOSTID
#    and NCCL treats them as two hosts talking over its socket transport.
# 4. The deep check on NCCL: one node, then across those two nodes.
# 5. A stall on NCCL (tests/data/stall.py, rank 1 stalls): `stacks --json` with NCCL's real
#    flight recorder; then Ctrl-C, and nothing of the run left on the GPU.
# 6. The dashboard during a run on those two nodes: its SVG screenshot.
# 7. Which container runtimes and GPU plumbing the machine has.
set -u
packed=$(realpath "${1:?usage: gpu_check.sh OUT.tar.gz}")
work=$(mktemp -d)
out=$work/out
mkdir -p "$out"
py=${PYTHON:-python3}
step() { echo; echo "=== $* ($(date +%T))"; }

GPUS="--query-gpu=index,uuid,name,memory.total,memory.used,utilization.gpu,temperature.gpu,driver_version"
APPS="--query-compute-apps=gpu_uuid,pid,used_memory,process_name"
CSV="--format=csv,noheader,nounits"
record() {  # record DIR: what nvidia-smi says to each query, as the stand-in serves it
    mkdir -p "$1"
    nvidia-smi >"$1/nvidia-smi.txt"
    nvidia-smi -L >"$1/list.txt"
    nvidia-smi $GPUS $CSV >"$1/query-gpu.csv"
    nvidia-smi $APPS $CSV >"$1/query-compute-apps.csv"
}

step "1. nvidia-smi, idle"
record "$out/smi-idle"
cat "$out/smi-idle/query-gpu.csv" "$out/smi-idle/list.txt"
"$py" - >"$work/holder.log" 2>&1 <<'EOF' &
import time, torch
x = torch.empty(24 << 30, dtype=torch.uint8, device="cuda")  # 24 GiB held
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
print("holder: busy", flush=True)
end = time.time() + 20
while time.time() < end:
    a @ a
torch.cuda.synchronize()
EOF
holder=$!
for _ in $(seq 60); do  # until it holds the memory and multiplies
    grep -q busy "$work/holder.log" 2>/dev/null && break
    kill -0 $holder 2>/dev/null || break
    sleep 1
done
sleep 3
step "1. nvidia-smi, one process holding 24 GiB and multiplying"
record "$out/smi-busy"
cat "$out/smi-busy/query-gpu.csv" "$out/smi-busy/query-compute-apps.csv"
wait $holder

cat >"$work/one.yaml" <<EOF
defaults: {transport: local, python: $py, workdir: $PWD}
hosts: [{host: localhost, name: gpu0}]
job:
  script: examples/train.py
  args: ["--epochs", "2"]
  nproc_per_node: auto
  master_port: 29611
EOF
cat >"$work/two.yaml" <<EOF
defaults: {transport: local, python: $py, workdir: $PWD}
hosts:
  - {host: localhost, name: gpu0, env: {NCCL_HOSTID: ddptui-gpu0}}
  - {host: localhost, name: gpu1, env: {NCCL_HOSTID: ddptui-gpu1}}
job:
  script: examples/train.py
  args: ["--epochs", "2"]
  nproc_per_node: 1
  master_port: 29612
  nccl: {debug: WARN}
EOF
sed -e 's#examples/train.py#tests/data/stall.py#' -e 's/29612/29613/' \
    -e 's/NCCL_HOSTID: ddptui-gpu\([01]\)/NCCL_HOSTID: ddptui-gpu\1, STALL_RANK: "1"/' \
    -e 's/nccl: {debug: WARN}/nccl: {flight_recorder: true}\n  hang_after: 15\n  stop_grace: 2/' \
    "$work/two.yaml" >"$work/stall.yaml"

step "2. check, one host"
timeout 120 "$py" -m ddptui.tui.cli --headless check -i "$work/one.yaml"; echo "exit $?"
timeout 120 "$py" -m ddptui.tui.cli --headless check --json -i "$work/one.yaml" \
    >"$out/check-one.json"; echo "exit $?"

step "3. launch on NCCL, one node"
timeout 180 "$py" -m ddptui.tui.cli --headless launch -i "$work/one.yaml" \
    --run-dir "$work/run-one"; echo "exit $?"
step "3. launch on NCCL, two nodes on one GPU"
timeout 180 "$py" -m ddptui.tui.cli --headless launch -i "$work/two.yaml" \
    --run-dir "$work/run-two"; echo "exit $?"

step "4. the deep check on NCCL, one node"
timeout 150 "$py" -m ddptui.tui.cli --headless check --deep --deep-seconds 40 -i "$work/one.yaml"
echo "exit $?"
step "4. the deep check on NCCL, two nodes"
timeout 150 "$py" -m ddptui.tui.cli --headless check --deep --deep-seconds 45 -i "$work/two.yaml"
echo "exit $?"

step "5. a stall on NCCL: stacks with the flight recorder, then Ctrl-C"
"$py" -m ddptui.tui.cli --headless launch -i "$work/stall.yaml" \
    --run-dir "$work/run-stall" >"$work/stall.log" 2>&1 &
launcher=$!
for _ in $(seq 120); do
    [ "$(grep -c 'all_reduce done' "$work/stall.log")" -ge 2 ] && break
    kill -0 $launcher 2>/dev/null || break
    sleep 1
done
timeout 120 "$py" -m ddptui.tui.cli stacks "$work/run-stall" -i "$work/stall.yaml" --json \
    >"$out/stacks-stall.json"; echo "stacks exit $?"
"$py" -c 'import json,sys; d=json.load(open(sys.argv[1])); print(json.dumps(
    {k: d.get(k) for k in ("elapsed_s", "flight_recorder")}, indent=1)[:3000])' \
    "$out/stacks-stall.json"
for _ in $(seq 60); do
    grep -q "stack saved to" "$work/stall.log" && break
    kill -0 $launcher 2>/dev/null || break
    sleep 1
done
nvidia-smi $APPS $CSV | sed 's/^/GPU process during the stall: /'
kill -INT $launcher; wait $launcher; echo "launcher exit $?"
cat "$work/stall.log"
sleep 1
echo "GPU processes after Ctrl-C: [$(nvidia-smi $APPS $CSV)]"
echo "ranks left: $(pgrep -fc 'tests/data/stall.py')"
echo "flight recorder deprecation warnings: $(grep -c 'is deprecated; use TORCH_FR' "$work/stall.log")"

step "6. the dashboard on two NCCL nodes, its screenshot"
timeout 180 "$py" scripts/screenshot_dashboard.py --inventory "$work/two.yaml" --settle 3 \
    --out "$out/dashboard-gpu.svg"; echo "exit $?"

step "7. container runtimes and GPU plumbing"
for tool in docker podman apptainer singularity enroot nvidia-ctk nvidia-container-cli; do
    printf '%s: %s\n' "$tool" "$(command -v $tool || echo absent)"
done
ls -d /etc/cdi /var/run/cdi /dev/infiniband /dev/nvidia* 2>&1

tar -C "$work" -czf "$packed" --exclude='*.pipe' . 2>/dev/null
echo "done $(date +%T)"
