# A stand-in for nvidia-smi on the ssh test hosts. The tests put `data=<recording dir>` above
# these lines. It answers the queries ddptui asks with the output recorded there and, like the
# real tool, refuses anything else (exit 2). A recording with an `exit-code` file fails every
# query with that code and its stdout.txt (a driver that is not loaded: exit 9). The health query
# (remote/host/health.py) is answered by health.csv (a driver that names clocks_event_reasons) or
# health-throttle.csv (an older one: clocks_throttle_reasons); a name the recording's driver does
# not know fails as the real tool does. A recording with a `hang` file never answers.
# GPU UUIDs: see below.
GPUS="--query-gpu=index,uuid,name,memory.total,memory.used,utilization.gpu,temperature.gpu,driver_version"
APPS="--query-compute-apps=gpu_uuid,pid,used_memory,process_name"
CSV="--format=csv,noheader,nounits"
ERRORS="index,pci.bus_id,ecc.errors.uncorrected.volatile.total,ecc.errors.corrected.volatile.total,retired_pages.pending,remapped_rows.pending,remapped_rows.failure"
REASONS="hw_slowdown hw_thermal_slowdown hw_power_brake_slowdown sw_thermal_slowdown"
HEALTH="--query-gpu=$ERRORS$(for r in $REASONS; do printf ,clocks_event_reasons.%s "$r"; done)"
THROTTLE="--query-gpu=$ERRORS$(for r in $REASONS; do printf ,clocks_throttle_reasons.%s "$r"; done)"
[ -f "$data/hang" ] && exec sleep 600
case "$*" in
    "") file=nvidia-smi.txt ;;
    "-L") file=list.txt ;;
    "$GPUS $CSV") file=query-gpu.csv ;;
    "$APPS $CSV") file=query-compute-apps.csv ;;
    "$HEALTH $CSV") file=health.csv field=clocks_event_reasons.hw_slowdown ;;
    "$THROTTLE $CSV") file=health-throttle.csv field=clocks_throttle_reasons.hw_slowdown ;;
    *) echo "stand-in nvidia-smi: no recording for: $*" >&2; exit 2 ;;
esac
if [ -n "$field" ] && [ ! -f "$data/$file" ] && [ ! -f "$data/exit-code" ]; then
    echo "Field \"$field\" is not a valid field to query." && exit 2
fi
[ -f "$data/$file" ] || file=stdout.txt
# Installed as a file (a test host's, a test's bin dir), it gives its GPUs UUIDs of their own:
# the recorded ones with their first 8 hex digits from its path (or `self`, a copy's for a
# second user of the same host), so no two hosts share a GPU (hosts that share /dev/shm share
# the leases' directory, keyed by UUID).
case "${self:-$0}" in
    /*) salt=$(printf '%s' "${self:-$0}" | cksum | { read -r sum _; printf '%08x' "$sum"; }) ;;
    *) salt= ;;
esac
if [ -n "$salt" ]; then
    sed -e "s/GPU-[0-9a-f]\{8\}/GPU-$salt/g" -e "s/MIG-[0-9a-f]\{8\}/MIG-$salt/g" "$data/$file"
else
    cat "$data/$file"
fi
[ -f "$data/exit-code" ] && exit "$(cat "$data/exit-code")"
exit 0
