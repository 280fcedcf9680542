"""bench/load: the controller on PostgreSQL under load, 1 and 2 replicas side by side (issue 18)."""
