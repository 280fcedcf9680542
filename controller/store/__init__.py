"""Persistence: SQLAlchemy tables, engines and sessions, and repositories.

Only this package (and `migrations/`) talks SQL. Repositories take a `Session` and
return domain values; they never commit — the service that opened the session does.
"""
