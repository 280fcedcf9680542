"""Run the C4D detectors over simulated jobs and print how well and how fast they diagnose.

    .venv/bin/python -m bench.diagnosis               # 5 seeds per fault, 3 clean runs
    .venv/bin/python -m bench.diagnosis --seeds 2 --clean 1

Per fault kind: detection latency (simulated seconds from onset to the alarm), whether the
alarm's kind and first suspect are right, and whether it came within target (hangs:
C4_HANG_TIMEOUT_S + 2 s; slowdowns: the end of the C4_SLOW_WINDOW-th collective after onset
+ 2 s). Then false alarms over clean runs (64 ranks, ±10% jitter, ±50 ms clock skew, one-off
3x stragglers) and the detector's CPU time per 1,000 records, evaluating every 0.5 s.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections import defaultdict

from bench.diagnosis.scenarios import base_config, cases
from controller.diagnosis.config import DiagnosisConfig
from controller.diagnosis.replay import nth_collective_end_us, replay
from controller.diagnosis.simulator import simulate

ONSET_S = 10.0


def fault_rows(seeds: int, config: DiagnosisConfig) -> list[str]:
    stats: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    order: list[str] = []
    for seed in range(1, seeds + 1):
        for case in cases(seed, ONSET_S, config.hang_timeout_s):
            if case.label not in order:
                order.append(case.label)
            run = simulate(base_config(seed, case.duration_s, (case.fault,)))
            opened = replay(run, config).opened()
            expected = case.fault.expected()
            row = stats[case.label]
            row["alarms"].append(len(opened))
            if expected is None or not opened:
                row["silent_ok" if expected is None else "missed"].append(float(not opened))
                continue
            first = opened[0]
            onset_us = run.config.start_us + int(ONSET_S * 1_000_000)
            row["latency_s"].append((first.at_us - onset_us) / 1e6)
            row["kind_ok"].append(float(first.alarm.kind == expected[0]))
            row["suspect_ok"].append(float(first.alarm.suspects[:1] == (expected[1],)))
            if "hang" in first.alarm.kind.value:
                deadline_us = onset_us + int((config.hang_timeout_s + 2) * 1_000_000)
            else:
                end_us = nth_collective_end_us(run, first.alarm.comm, onset_us,
                                               config.slow_window)
                deadline_us = (run.end_us if end_us is None else end_us) + 2_000_000
            row["in_time"].append(float(first.at_us <= deadline_us))
    lines = [
        "| fault | runs | alarms per run | kind right | first suspect right | latency median / max (s) | within target |",
        "|---|---|---|---|---|---|---|",
    ]
    for label in order:
        row = stats[label]
        runs = len(row["alarms"])
        alarms = f"{statistics.mean(row['alarms']):.2f}"
        if row["silent_ok"]:
            silent = int(sum(row["silent_ok"]))
            lines.append(f"| {label} | {runs} | {alarms} | - | - | - | no alarm in {silent}/{runs} |")
            continue
        lat = row["latency_s"]
        latency = f"{statistics.median(lat):.1f} / {max(lat):.1f}" if lat else "-"
        lines.append(
            f"| {label} | {runs} | {alarms} | {int(sum(row['kind_ok']))}/{runs} | "
            f"{int(sum(row['suspect_ok']))}/{runs} | {latency} | {int(sum(row['in_time']))}/{runs} |"
        )
    return lines


def clean_rows(runs: int, duration_s: float, config: DiagnosisConfig) -> list[str]:
    lines = [
        "| clean run | collectives | records | false alarms | detector CPU per 1,000 records | max records held |",
        "|---|---|---|---|---|---|",
    ]
    for seed in range(100, 100 + runs):
        run = simulate(base_config(seed, duration_s))
        t0 = time.process_time()
        result = replay(run, config)
        cpu_s = time.process_time() - t0
        per_k_ms = 1000 * cpu_s / (result.records / 1000)
        lines.append(f"| seed {seed}, {duration_s:.0f} s | {run.collectives} | {result.records} | "
                     f"{len(result.opened())} | {per_k_ms:.1f} ms | {result.max_records_held} |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5, help="runs per fault kind")
    parser.add_argument("--clean", type=int, default=3, help="clean runs")
    parser.add_argument("--clean-s", type=float, default=120.0, help="simulated s per clean run")
    args = parser.parse_args()
    config = DiagnosisConfig()
    print(f"C4D on 64 ranks; hang_timeout_s={config.hang_timeout_s:g}, "
          f"slow_factor={config.slow_factor:g}, slow_window={config.slow_window}, onset at "
          f"{ONSET_S:g} s\n")
    print("\n".join(fault_rows(args.seeds, config)))
    print()
    print("\n".join(clean_rows(args.clean, args.clean_s, config)))


if __name__ == "__main__":
    main()
