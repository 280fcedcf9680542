"""The ring's bus bandwidth on the testbed: plain ECMP against hand-pinned ports, side by side.

    .venv/bin/python -m bench.testbed                        # 4x4x4 at 50 Mbit/s, seeds 1..5
    .venv/bin/python -m bench.testbed --shapes 4x4x4,8x2x2 --seeds 5  # what `make bench-testbed` runs

Root only. Physics: the kernel's ECMP (5-tuple, a hash seed per switch), real TCP sockets
through the c4 shim, links shaped by HTB; c4's own models play no part. For each fabric shape
(leaves x spines x hosts per leaf, non-blocking: every link at the same rate) and seed:

1. bring the fabric up (timed: the 4x4x4 bring-up target is 10 s) with that seed, which sets
   every switch's `fib_multipath_hash_seed`;
2. run the NCCL-like ring all-reduce over every host, ranks interleaved over the leaves so
   every ring connection crosses the spines, with plain ECMP: no agent, the shim's default
   ephemeral source ports, the kernel's hash decides (the leaf uplink byte counters show how
   unevenly);
3. probe the kernel's hash with TTL-limited SYNs of the flows' own 5-tuples and pin every flow
   on a spine of its own (an equitable edge colouring of the leaf-to-leaf flows), served to
   the shim by the static agent; run the same ring again;
4. tear down (timed).

Bus bandwidth is nccl-tests' (2(n-1)/n x bytes / iteration time), as a fraction of the ideal
(the shaped link rate). The machine's CPU use during each run is printed: a run near 100 %
was CPU-bound (on a shared 2-core machine, by other work too), and its figure says more about
the machine than about hashing. 50 Mbit/s links keep the testbed's own load near half a core.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys

from testbed import FabricSpec, Testbed
from testbed.scenarios.workloads import compare_ecmp_pinned
from testbed.workload import JobSpec, default_hosts, ensure_built


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shapes", default="4x4x4", help="LEAVESxSPINESxHOSTS, comma-separated")
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--rate-mbit", type=int, default=50)
    ap.add_argument("--bytes", type=int, default=8 << 20)
    ap.add_argument("--chunk-bytes", type=int, default=32 << 10)
    ap.add_argument("--channels", type=int, default=2)
    ap.add_argument("--iters", type=int, default=3)
    ap.add_argument("--prefix", default=f"bt{os.getpid() % 100000}")
    a = ap.parse_args()
    if os.geteuid() != 0:
        print("bench.testbed: needs root (network namespaces)", file=sys.stderr)
        return 2
    ensure_built()
    print(subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())
    print(f"ring all-reduce, {a.bytes / (1 << 20):g} MiB per rank, {a.channels} channels, {a.chunk_bytes >> 10} KiB chunks, "
          f"{a.iters} iterations after 1 warm-up; links {a.rate_mbit} Mbit/s\n")
    print(f"{'shape':>7} {'seed':>4} {'up s':>6} {'down s':>6} {'ecmp':>6} {'pinned':>6} {'uplink max/mean':>15} "
          f"{'cpu ecmp':>8} {'cpu pin':>8} {'verified':>8}")
    rows = []
    for shape in a.shapes.split(","):
        leaves, spines, hosts = (int(x) for x in shape.split("x"))
        for seed in range(1, a.seeds + 1):
            tb = Testbed(a.prefix)
            try:
                up = tb.up(FabricSpec(leaves=leaves, spines=spines, hosts_per_leaf=hosts, rate_mbit=a.rate_mbit, seed=seed))
                spec = JobSpec(name="bench", bytes=a.bytes, iters=a.iters, warmup=1, channels=a.channels,
                               chunk_bytes=a.chunk_bytes, hosts=default_hosts(tb.plan), verify="first",
                               timeout_s=120)
                out = compare_ecmp_pinned(tb, spec)
            finally:
                down = tb.down()
            ecmp, pinned = out["ecmp"], out["pinned"]
            ok = ecmp.ok and pinned.ok and ecmp.verified() and pinned.verified()
            cpu = out["cpu_busy"]
            rows.append((shape, seed, ecmp.fraction_of_ideal, pinned.fraction_of_ideal, up.total_s))
            print(f"{shape:>7} {seed:>4} {up.total_s:>6.2f} {down.elapsed_s:>6.2f} {ecmp.fraction_of_ideal:>6.3f} "
                  f"{pinned.fraction_of_ideal:>6.3f} {out['ecmp_uplink_imbalance']:>15.2f} {cpu['ecmp']:>8.0%} {cpu['pinned']:>8.0%} "
                  f"{'yes' if ok else 'NO'}", flush=True)
    print()
    for shape in a.shapes.split(","):
        mine = [r for r in rows if r[0] == shape]
        e = [r[2] for r in mine]
        p = [r[3] for r in mine]
        print(f"{shape}: ecmp mean {statistics.mean(e):.3f} (min {min(e):.3f}, max {max(e):.3f}); "
              f"pinned mean {statistics.mean(p):.3f} (min {min(p):.3f}); bring-up max {max(r[4] for r in mine):.2f} s")
    print(subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())
    e_all = statistics.mean(r[2] for r in rows)
    p_all = statistics.mean(r[3] for r in rows)
    print(f"testbed: pinned {p_all:.2f} ecmp {e_all:.2f} of ideal over {len(rows)} runs; "
          f"4x4x4 up in {max((r[4] for r in rows if r[0] == '4x4x4'), default=float('nan')):.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
