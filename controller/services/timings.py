"""How long c4's background work takes, as Prometheus histograms (labels bounded and fixed):

- `c4_planner_duration_seconds{operation}`: `plan` (one pending job's plan, stored),
  `reoptimize` (the periodic joint re-plan), `refresh` (one job's summary refresh),
  `link_replan` (a link PATCH's re-plan, inside its transaction);
- `c4_detector_duration_seconds`: one run of the detectors (drain the telemetry queue,
  evaluate every job's window, store the alarm events).
"""

from __future__ import annotations

from prometheus_client import Histogram

PLANNER_OPERATIONS = ("plan", "reoptimize", "refresh", "link_replan")
PLANNER_SECONDS = Histogram(
    "c4_planner_duration_seconds", "Time the planner took, by operation (plan, reoptimize, refresh, link_replan)",
    ["operation"], buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120))
DETECTOR_SECONDS = Histogram(
    "c4_detector_duration_seconds", "Time one run of the detectors took (drain, evaluate, store)",
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10))
for _operation in PLANNER_OPERATIONS:  # every series exists from the start (0 counts), so rate() sees them
    PLANNER_SECONDS.labels(_operation)
