#!/usr/bin/env bash
# Start test_env under each launcher convention swy_comm_init_env accepts.
# Usage: launchers.sh MODE SWY_RUN TEST_ENV   (MODE: swy-run, mpirun,
# torchrun, slurm). Exits 77 when the launcher is not installed.
set -u
mode=$1 swy_run=$2 prog=$3
n=3
free_port() {
    /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}
# Start n ranks with per-rank variables from a function; all must pass.
start_ranks() {
    local pids=() rc=0
    for ((r = 0; r < n; r++)); do
        env $("$1" "$r") "$prog" &
        pids+=($!)
    done
    for p in "${pids[@]}"; do wait "$p" || rc=1; done
    return $rc
}
case $mode in
swy-run)
    exec "$swy_run" -n $n --timeout 60 "$prog" ;;
mpirun)
    command -v mpirun >/dev/null || exit 77
    exec timeout 60 mpirun --allow-run-as-root --oversubscribe -np $n \
        --mca btl self,vader "$prog" ;;
torchrun)
    port=$(free_port)
    vars() { echo "RANK=$1 WORLD_SIZE=$n MASTER_ADDR=127.0.0.1 MASTER_PORT=$port"; }
    start_ranks vars ;;
slurm)
    port=$(free_port)
    vars() { echo "SLURM_PROCID=$1 SLURM_NTASKS=$n SLURM_JOB_ID=42 SWY_ROOT=127.0.0.1:$port"; }
    start_ranks vars ;;
*)
    echo "unknown mode $mode" >&2; exit 2 ;;
esac
