# Open MPI inside the emulated cluster, for the benchmark scripts (sourced
# by bench-interference.sh and bench-hier.sh). mpirun starts its remote
# daemon through an rsh agent: swy-run starts one exec relay per node
# (mpi-relay.py, serving a unix socket under the output folder: a path
# socket is reachable from every network namespace, and the nodes share
# /tmp); mpirun runs in node0 through node0's relay, and its rsh agent
# runs orted in the other nodes through theirs. The ranks thus sit in the
# same namespaces, behind the same shaped link, as Switchyard's ranks.
#
#   mpi_relay_files OUT                 copy the relay and the agent there
#   mpi_relays_start OUT SWY_RUN LINK [NODES]
#                                       start the relays (sets
#                                       mpi_relay_pid); non-zero when they
#                                       do not come up
#   mpi_relay_run OUT MPIRUN_ARGS...    mpirun in node0 with these
#                                       arguments over the nodes' eth0

mpi_python=/usr/bin/python3
mpi_relay_pid=

mpi_relay_files() {
    local out=$1 here
    here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
    cp "$here/mpi-relay.py" "$out/relay.py"
    cat >"$out/agent.sh" <<AGENT
#!/bin/sh
exec $mpi_python $out/relay.py agent $out "\$@"
AGENT
    chmod +x "$out/agent.sh"
}

mpi_relays_start() {
    local out=$1 swy_run=$2 link=$3 nodes=${4:-2} n ready
    rm -f "$out"/node*.sock "$out"/node*.ready
    "$swy_run" --nodes "$nodes" --ranks-per-node 1 --link "$link" \
        "$mpi_python" "$out/relay.py" serve "$out" >"$out/relay.log" 2>&1 &
    mpi_relay_pid=$!
    for _ in $(seq 100); do
        ready=1
        for ((n = 0; n < nodes; n++)); do
            [[ -e $out/node$n.ready ]] || ready=0
        done
        ((ready)) && return 0
        sleep 0.1
    done
    echo "mpi-cluster: relays did not start:" >&2
    cat "$out/relay.log" >&2
    return 1
}

mpi_relay_run() {
    local out=$1 cmd
    shift
    cmd="mpirun --allow-run-as-root --oversubscribe"
    cmd+=" --mca plm_rsh_agent $out/agent.sh"
    cmd+=" --mca btl_tcp_if_include eth0 --mca oob_tcp_if_include eth0"
    cmd+=" $*"
    timeout 600 "$mpi_python" "$out/relay.py" run "$out" 0 "$cmd" </dev/null
}
