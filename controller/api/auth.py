"""Bearer-token auth with four roles.

- `admin`: everything; `scheduler`: jobs, hosts, webhooks; `agent`: telemetry and probe
  ingest, reading assignments and topology; `viewer`: GET only.
- Every role may GET; writes name the roles they allow (admin always may).
- `C4_ADMIN_TOKEN`, if set, is an admin token. Database tokens are cached for a few seconds
  so ingest does not pay a query per request; a revoked token stops working within that.
"""

from __future__ import annotations

import hmac
import threading
import time
from collections.abc import Callable

from fastapi import Request

from controller.api.errors import ApiError
from controller.services.runtime import Runtime
from controller.store import tokens_repo

CACHE_TTL_S = 5.0


class TokenCache:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._roles: dict[str, tuple[str | None, float]] = {}

    def role(self, rt: Runtime, token: str) -> str | None:
        admin = rt.settings.admin_token
        if admin is not None and hmac.compare_digest(token.encode(), admin.get_secret_value().encode()):
            return "admin"
        now = time.monotonic()
        with self._lock:
            hit = self._roles.get(token)
        if hit is not None and now - hit[1] < CACHE_TTL_S:
            return hit[0]
        with rt.sessions() as session:
            role = tokens_repo.role_of(session, token)
        with self._lock:
            if len(self._roles) > 10_000:
                self._roles.clear()
            self._roles[token] = (role, now)
        return role


def _bearer(request: Request) -> str:
    header = request.headers.get("authorization", "")
    scheme, _, value = header.partition(" ")
    if scheme.lower() != "bearer" or not value.strip():
        raise ApiError(401, "unauthorized", "missing bearer token", headers={"WWW-Authenticate": "Bearer"})
    return value.strip()


def require(*roles: str, any_role_may_read: bool = True) -> Callable[[Request], str]:
    """A dependency that admits admin, the given roles, and (by default) any role on GET."""

    def dependency(request: Request) -> str:
        token = _bearer(request)
        rt: Runtime = request.app.state.runtime
        cache: TokenCache = request.app.state.token_cache
        role = cache.role(rt, token)
        if role is None:
            raise ApiError(401, "unauthorized", "invalid or revoked token", headers={"WWW-Authenticate": "Bearer"})
        reading = request.method in ("GET", "HEAD") and any_role_may_read
        if role == "admin" or role in roles or reading:
            request.state.role = role
            return role
        raise ApiError(403, "forbidden", f"role {role!r} may not {request.method} {request.url.path}")

    return dependency


ANY = require()
ADMIN = require(any_role_may_read=False)
