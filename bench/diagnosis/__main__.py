"""Run the C4D detectors over simulated jobs and print how well and how fast they diagnose.

    .venv/bin/python -m bench.diagnosis                    # 10 seeds per fault, 2 clean seeds
    .venv/bin/python -m bench.diagnosis --seeds 2 --clean 1 --ablation 0

Physics: c4's own simulator (chunk-level NCCL physics: bounded slots per connection, rings
forwarding chunk by chunk so the slowest connection paces the ring, RDMA completions,
`t_first` at the proxy op's start, `net_us` per peer and per flow), not the testbed.

Per fault kind: detection latency (simulated seconds from onset to the alarm), whether the
alarm's kind and first suspect are right, and whether it came within target (hangs:
C4_HANG_TIMEOUT_S + 2 s; slowdowns: the end of the C4_SLOW_WINDOW-th collective after onset
+ 2 s). A run with two jobs is right when both open an alarm naming the element first. Then
false alarms over clean runs and the detector's CPU time per 1,000 records, evaluating every
0.5 s. The ablation reruns the faults with one physics or telemetry knob changed: socket
completions (network time until written, then until acknowledged as the shim's TCP transport
reports it), no per-flow `net_us`, no `net_us` at all (the span `t_last - t_first` only).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections import defaultdict
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor

from bench.diagnosis.scenarios import Case, cases, clean_cases
from controller.diagnosis.config import DiagnosisConfig
from controller.diagnosis.replay import nth_collective_end_us, replay
from controller.diagnosis.simphysics import Physics
from controller.diagnosis.simulator import SimRun, simulate

ONSET_S = 20.0
ABLATIONS: dict[str, dict[str, object]] = {
    "socket completions": {"physics": Physics(completion="socket")},
    # what the shim's TCP transport reports: net_us until the bytes are acknowledged
    # (TCP_INFO busy - rwnd_limited; nccl_shim/FORMAT.md "Network time in the transport")
    "socket completions, net_us until acked (shim TCP)": {
        "physics": Physics(completion="socket", socket_net_us="acked")},
    "no per-flow net_us": {"report_flows": False},
    "no net_us (span only)": {"report_net_us": False},
}


def _outcome(case: Case, config: DiagnosisConfig) -> dict[str, float]:
    runs = [simulate(cfg) for cfg in case.jobs]
    opened = replay(runs, config).opened()
    out: dict[str, float] = {"alarms": float(len(opened)) / len(runs)}
    expected = case.fault.expected(runs[0].config.fabric())
    if expected is None:
        out["silent"] = float(not opened)
        return out
    firsts = {}
    for e in opened:
        firsts.setdefault(e.alarm.job, e)
    if set(firsts) != {r.config.job for r in runs}:
        out["missed"] = 1.0
        return out
    onset_us = runs[0].config.start_us + int(case.fault.onset_s * 1_000_000)
    kind_ok = suspect_ok = in_time = True
    latency = 0.0
    for run in runs:
        first = firsts[run.config.job]
        kind_ok &= first.alarm.kind == expected[0]
        suspect_ok &= first.alarm.suspects[:1] == (expected[1],)
        latency = max(latency, (first.at_us - onset_us) / 1e6)
        in_time &= first.at_us <= _deadline_us(run, first.alarm.kind.value, first.alarm.comm,
                                               onset_us, config)
    out.update(latency=latency, kind_ok=float(kind_ok), suspect_ok=float(suspect_ok),
               in_time=float(in_time))
    return out


def _deadline_us(run: SimRun, kind: str, comm: str, onset_us: int, config: DiagnosisConfig) -> int:
    if "hang" in kind:
        return onset_us + int((config.hang_timeout_s + 2) * 1_000_000)
    end_us = nth_collective_end_us(run, comm, onset_us, config.slow_window)
    return (run.end_us if end_us is None else end_us) + 2_000_000


def _fault_job(args: tuple[int, dict[str, object], DiagnosisConfig]) -> list[tuple[str, dict[str, float]]]:
    seed, knobs, config = args
    return [(case.label, _outcome(case, config))
            for case in cases(seed, ONSET_S, config.hang_timeout_s, **knobs)]


def fault_rows(seeds: int, config: DiagnosisConfig, knobs: dict[str, object],
               pool: Callable[..., object]) -> list[str]:
    stats: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    order: list[str] = []
    for results in pool(_fault_job, [(seed, knobs, config) for seed in range(1, seeds + 1)]):  # type: ignore[attr-defined]
        for label, outcome in results:
            if label not in order:
                order.append(label)
            for key, value in outcome.items():
                stats[label][key].append(value)
    lines = [
        "| fault | runs | alarms per job | kind right | first suspect right | latency median / max (s) | within target |",
        "|---|---|---|---|---|---|---|",
    ]
    for label in order:
        row = stats[label]
        runs = len(row["alarms"])
        alarms = f"{statistics.mean(row['alarms']):.2f}"
        if row["silent"]:
            silent = int(sum(row["silent"]))
            lines.append(f"| {label} | {runs} | {alarms} | - | - | - | no alarm in {silent}/{runs} |")
            continue
        lat = row["latency"]
        latency = f"{statistics.median(lat):.1f} / {max(lat):.1f}" if lat else "-"
        lines.append(
            f"| {label} | {runs} | {alarms} | {int(sum(row['kind_ok']))}/{runs} | "
            f"{int(sum(row['suspect_ok']))}/{runs} | {latency} | {int(sum(row['in_time']))}/{runs} |"
        )
    return lines


def _clean_job(args: tuple[int, float, DiagnosisConfig]) -> list[tuple[str, str]]:
    seed, duration_s, config = args
    out = []
    for label, cfg in clean_cases(seed, duration_s):
        run = simulate(cfg)
        t0 = time.process_time()
        result = replay(run, config, tail_us=5_000_000)
        cpu_s = time.process_time() - t0
        per_k_ms = 1000 * cpu_s / max(1, result.records / 1000)
        alarms = "; ".join(f"{e.alarm.kind.value} {e.alarm.suspects[0].name if e.alarm.suspects else '-'}"
                           for e in result.opened())
        out.append((label, f"| {label} | {seed} | {run.config.duration_s:.0f} s | {run.collectives} | "
                           f"{result.records} | {len(result.opened())}{' (' + alarms + ')' if alarms else ''} | "
                           f"{per_k_ms:.1f} ms | {result.max_records_held} |"))
    return out


def clean_rows(seeds: int, duration_s: float, config: DiagnosisConfig,
               pool: Callable[..., object]) -> list[str]:
    lines = [
        "| clean run (±2 s clock skew) | seed | simulated | collectives | records | false alarms | detector CPU per 1,000 records | max records held |",
        "|---|---|---|---|---|---|---|---|",
    ]
    rows = [r for results in pool(_clean_job, [(s, duration_s, config) for s in range(100, 100 + seeds)])  # type: ignore[attr-defined]
            for r in results]
    lines += [line for _, line in sorted(rows, key=lambda r: r[0])]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=10, help="runs per fault kind")
    parser.add_argument("--clean", type=int, default=2, help="seeds per clean workload")
    parser.add_argument("--clean-s", type=float, default=120.0, help="simulated s per clean run")
    parser.add_argument("--ablation", type=int, default=3, help="seeds per fault in the ablation (0: none)")
    parser.add_argument("--jobs", type=int, default=1, help="worker processes")
    parser.add_argument("--only-ablation", default="", choices=["", *ABLATIONS],
                        help="run only this ablation (--ablation seeds), no faults or clean runs")
    args = parser.parse_args()
    config = DiagnosisConfig()
    with ProcessPoolExecutor(args.jobs) as executor:
        pool = executor.map if args.jobs > 1 else map
        print(f"C4D on c4's simulator (NCCL physics), 64 ranks; hang_timeout_s={config.hang_timeout_s:g}, "
              f"slow_factor={config.slow_factor:g}, slow_window={config.slow_window}, onset at "
              f"{ONSET_S:g} s\n", flush=True)
        started = time.monotonic()
        if not args.only_ablation:
            print("\n".join(fault_rows(args.seeds, config, {}, pool)), flush=True)
            print(flush=True)
            print("\n".join(clean_rows(args.clean, args.clean_s, config, pool)), flush=True)
        chosen = {k: v for k, v in ABLATIONS.items() if k == args.only_ablation or not args.only_ablation}
        for name, knobs in chosen.items() if args.ablation else ():
            print(f"\nablation: {name} ({args.ablation} seeds)\n", flush=True)
            print("\n".join(fault_rows(args.ablation, config, dict(knobs), pool)), flush=True)
        print(f"\nwall {time.monotonic() - started:.0f} s", flush=True)


if __name__ == "__main__":
    main()

