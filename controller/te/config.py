"""Planner settings: time limits, solver switches, sampling sizes and the move budget.

One frozen value passed into every planning call; the service builds it from
`controller.settings`, which this package must not import.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Config:
    time_limit_s: float = 2.0
    search_depth: int = 2
    cpsat_time_limit_s: float = 1.0
    cpsat_max_variables: int = 20_000
    lp_time_limit_s: float = 5.0
    ecmp_draws: int = 16
    sim_ecmp_draws: int = 2
    # A plan of several jobs at once (a batch of new jobs, a joint re-plan) leaves their
    # `ecmp_predicted_busbw_fraction` (max-min simulations of ECMP draws over every active
    # flow: the part of a summary that grows with the active jobs) as None, for a later
    # refresh of the summary to fill (issue 18: planning first). Everything else is computed.
    ecmp_simulation_later: bool = False
    seed: int = 0
    move_budget: int | None = None
    with_bound: bool = True
    with_ecmp: bool = True
    with_simulation: bool = True
    # An instance with more routes than this (every equal-cost path of every up port pair of
    # every group) gets some paths per pair only (`instance.build_instance`); 200k routes
    # build in ~0.3 s and leave the greedy a choice of about a dozen routes per flow.
    max_routes: int = 200_000
    routes_per_flow: int = 8  # ... or more than this many per flow (an all-to-all: 8 of 32 to 64 per NIC pair)
    # A new job's plan may move other jobs' flows (`planner.plan_global`) when all the jobs'
    # flows together are at most this many (the joint plan redoes every job's summary).
    max_joint_flows: int = 20_000
    # New jobs in independent parts of the fabric (`te.parts`) are planned part by part by
    # the caller's runner (parallel processes) when they have at least this many flows in
    # all: below it, shipping the parts costs more than it saves.
    parallel_min_flows: int = 256
