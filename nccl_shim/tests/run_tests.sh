#!/bin/sh
# run_tests.sh: runs every C suite of the shim against the build in $B and prints one PASS or
# FAIL line per case and a summary; exit status 1 if anything failed. Each fake_nccl case is
# its own process because the shim reads its environment once per process, as in production.
set -u
B=${B:-build}
LIB=$B/libnccl-net-c4.so
DIR=$(cd "$(dirname "$0")/.." && pwd)
cd "$DIR" || exit 1
# Every connection of these suites stays on this host: the shim's device is loopback.
export C4_SHIM_ADDR=127.0.0.1
pass=0; fail=0; failed=""

run() { # name, command...
  name=$1; shift
  out=$("$@" 2>&1); rc=$?
  if [ $rc -eq 0 ]; then pass=$((pass+1)); echo "$out" | grep '^PASS' || echo "PASS $name"
  else fail=$((fail+1)); failed="$failed $name"; echo "$out" | tail -5; echo "FAIL $name (rc=$rc)"; fi
}

# Only the plugin's entry points may be exported.
check_exports() {
  got=$(nm -D --defined-only "$1" | awk '{print $3}' | sort | tr '\n' ' ')
  [ "$got" = "$2" ] || { echo "exported: $got"; echo "expected: $2"; return 1; }
}
run exports-net check_exports "$LIB" "ncclNetPlugin_v10 ncclNetPlugin_v11 ncclNetPlugin_v12 ncclNetPlugin_v8 ncclNetPlugin_v9 ncclProfiler_v4 ncclProfiler_v5 ncclProfiler_v6 "

run units "$B/test_units" examples
run abi "$B/fake_nccl" "$LIB" abi
for v in 12 11 10 9 8; do run "loopback-v$v" "$B/fake_nccl" "$LIB" loopback $v; done
# Two processes on one address without an agent: rank 0 takes the fixed port, rank 1 falls back
# to an ephemeral one.
run tworank-fixed-port env C4_SHIM_PORT=47931 C4_AGENT_SOCKET=off "$B/fake_nccl" "$LIB" tworank 4 40 200000
run tworank-v8 env C4_SHIM_PORT=0 C4_AGENT_SOCKET=off "$B/fake_nccl" "$LIB" tworank 2 30 100000 8
if grep -qi '^0\{31\}1 ' /proc/net/if_inet6 2>/dev/null; then
  run loopback-ipv6 env C4_SHIM_ADDR=::1 C4_SHIM_PORT=0 C4_AGENT_SOCKET=off "$B/fake_nccl" "$LIB" loopback 12
else
  echo "SKIP loopback-ipv6: no ::1 on this host"
fi
run weights env C4_SHIM_PORT=0 C4_LOOKUP_TIMEOUT_MS=2000 C4_REFRESH_MS=100 C4_WATCHDOG_MS=100 "$B/fake_nccl" "$LIB" weights
run profiler-v6 "$B/fake_nccl" "$LIB" profiler 6
run profiler-v5 "$B/fake_nccl" "$LIB" profiler 5
run profiler-v4 "$B/fake_nccl" "$LIB" profiler 4
run ring-overflow "$B/fake_nccl" "$LIB" overflow
run peer-close env C4_SHIM_PORT=0 "$B/fake_nccl" "$LIB" peer-close
for f in absent slow garbage dies busyport; do run "fault-$f" env C4_SHIM_PORT=0 "$B/fake_nccl" "$LIB" fault $f; done
# The host's fixed port owned by an agent: handed over, refused, or nobody there.
for m in ok refuse absent; do run "handoff-$m" "$B/fake_nccl" "$LIB" handoff $m; done
run handoff-tworank "$B/fake_nccl" "$LIB" handoff-tworank
run backlog "$B/fake_nccl" "$LIB" backlog
run identity "$B/fake_nccl" "$LIB" identity
run netclock "$B/fake_nccl" "$LIB" netclock
run pci-path "$B/fake_nccl" "$LIB" pci

if [ "${HAVE_VERBS:-}" = 1 ]; then
  run exports-verbs check_exports "$B/libc4-ibverbs.so" "IBVERBS_1.1 ibv_modify_qp@@IBVERBS_1.1 "
  # The stub libibverbs/libmlx5 come first on the search path, so the interposer's DT_NEEDED
  # libibverbs.so.1 resolves to the recording stub, not to the system library.
  run verbs env LD_LIBRARY_PATH="$B/stub" "$B/test_verbs" "$B/libc4-ibverbs.so"
else
  echo "SKIP verbs: /usr/include/infiniband/verbs.h not found (apt-get install libibverbs-dev)"
fi

echo "== shim C suites: $pass passed, $fail failed${failed:+ (}${failed# }${failed:+)}"
[ $fail -eq 0 ]
