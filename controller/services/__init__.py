"""Use cases: open a transaction, call the store and the pure core, decide what to apply.

Services raise the errors of `services.errors` for expected refusals; the API maps them to
HTTP statuses in one place. They never import FastAPI.
"""
