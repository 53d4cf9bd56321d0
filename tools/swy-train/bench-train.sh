#!/usr/bin/env bash
# Runs swy-train on the emulated cluster (NODES nodes x RANKS_PER_NODE
# ranks, default 2 x 2, LINK 1gbit; root) for each configuration REPS
# times, configurations interleaved so that machine noise hits all alike,
# and prints each run's --json line. RANKS_PER_NODE=1 gives every rank a
# core of the 2-core VM (the pipeline benchmark).
#
#   BUILD_DIR=build-train REPS=5 tools/swy-train/bench-train.sh \
#       "--policy lina" "--policy fair" "--policy fifo" -- [common flags] \
#       | tools/swy-train/train-ratio.py
#
# Each argument before "--" is one configuration's flags; the flags after
# "--" go to every run. train-ratio.py prints the medians and each
# configuration's ratio to the first; pipeline-eff.py the pipelining
# efficiency. Summaries: docs/performance.md ("train", "pipeline").
set -euo pipefail
build=${BUILD_DIR:-build-train}
# The library compiles in no build-tree path: name the build's plugins.
export SWY_PLUGIN_PATH=${SWY_PLUGIN_PATH:-$(cat "$build/plugin-path" 2>/dev/null || true)}
reps=${REPS:-5}
link=${LINK:-1gbit}
nodes=${NODES:-2}
rpn=${RANKS_PER_NODE:-2}
configs=()
while (($#)) && [[ $1 != -- ]]; do configs+=("$1"); shift; done
(($#)) && shift
for ((r = 1; r <= reps; r++)); do
    for c in "${configs[@]}"; do
        # shellcheck disable=SC2086
        "$build/tools/swy-run/swy-run" --nodes "$nodes" --ranks-per-node "$rpn" \
            --link "$link" --timeout 600 --no-prefix \
            "$build/tools/swy-train/swy-train" $c "$@" --json |
            sed -n "s|^{|{\"rep\":$r,\"config\":\"$c\",|p"
    done
done
