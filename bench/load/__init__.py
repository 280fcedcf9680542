"""bench/load: the controller on PostgreSQL under load (issue 18): `churn` (the planner: job
bursts, churn, assignment reads) and `telemetry` (1 and 2 replicas side by side)."""
