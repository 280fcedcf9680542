#!/bin/sh
# run.sh: the shim benchmarks, each comparison measured side by side in the same run.
#  1. telemetry cost per isend (shim code, telemetry off vs on) and per profiled collective;
#  2. one C4-Socket connection vs a plain TCP socket pair over loopback;
#  3. connection set-up with the agent not configured, configured but absent, and present
#     (a Python agent using node_agent.shim_protocol).
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
LIB=$ROOT/nccl_shim/build/libnccl-net-c4.so
PY=${PYTHON:-$ROOT/.venv/bin/python}
[ -x "$PY" ] || PY=python3
cd "$HERE"
echo "== bench/shim on $(nproc) CPUs, $(uname -r)"
export C4_SHIM_ADDR=127.0.0.1 # loopback only
./build/bench_telemetry 21 50000
env C4_AGENT_SOCKET=off C4_SHIM_PORT=0 ./build/bench_net "$LIB" throughput 0.5 9
N=300
env C4_AGENT_SOCKET=off C4_SHIM_PORT=0 ./build/bench_net "$LIB" setup "agent not configured" $N
env C4_AGENT_SOCKET=/nonexistent/c4.sock C4_SHIM_PORT=0 ./build/bench_net "$LIB" setup "agent absent" $N
SOCK=$(mktemp -u /tmp/c4-bench-agent-XXXXXX.sock)
PYTHONPATH=$ROOT "$PY" "$HERE/py_agent.py" "$SOCK" > /tmp/c4-bench-agent.log 2>&1 &
APID=$!
trap 'kill $APID 2>/dev/null; rm -f "$SOCK"' EXIT
i=0; while [ ! -S "$SOCK" ] && [ $i -lt 100 ]; do sleep 0.05; i=$((i+1)); done
env C4_AGENT_SOCKET="$SOCK" C4_SHIM_PORT=0 C4_LOOKUP_TIMEOUT_MS=50 ./build/bench_net "$LIB" setup "agent present (python)" $N
