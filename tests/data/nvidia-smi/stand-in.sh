# A stand-in for nvidia-smi on the ssh test hosts. The tests put `data=<recording dir>` above
# these lines. It answers the queries ddptui asks with the output recorded there and, like the
# real tool, refuses anything else (exit 2). A recording with an `exit-code` file fails every
# query with that code and its stdout.txt (a driver that is not loaded: exit 9).
GPUS="--query-gpu=index,uuid,name,memory.total,memory.used,utilization.gpu,temperature.gpu,driver_version"
APPS="--query-compute-apps=gpu_uuid,pid,used_memory,process_name"
CSV="--format=csv,noheader,nounits"
case "$*" in
    "") file=nvidia-smi.txt ;;
    "-L") file=list.txt ;;
    "$GPUS $CSV") file=query-gpu.csv ;;
    "$APPS $CSV") file=query-compute-apps.csv ;;
    *) echo "stand-in nvidia-smi: no recording for: $*" >&2; exit 2 ;;
esac
[ -f "$data/$file" ] || file=stdout.txt
cat "$data/$file"
[ -f "$data/exit-code" ] && exit "$(cat "$data/exit-code")"
exit 0
