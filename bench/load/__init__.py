"""`bench/load`: the controller on PostgreSQL with uvicorn workers under load (issue 18)."""
