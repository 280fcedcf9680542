"""Bearer-token auth with four roles.

- `admin`: everything; `scheduler`: jobs, hosts, webhooks; `agent`: telemetry and probe
  ingest, reading assignments and topology; `viewer`: GET only.
- Every role may GET unless a route says otherwise (`any_role_may_read=False`: tokens,
  assignments, probe requests); writes name the roles they allow (admin always may).
- `api.guard` applies a route's `Requirement` before the body is read; the dependency
  applies it again (docs/SECURITY.md).
- `C4_ADMIN_TOKEN`, if set, is an admin token. Database tokens are cached for a few seconds
  so ingest does not pay a query per request; a token revoked through another process stops
  working within that (through this one, at once).
- The token is read through FastAPI's `HTTPBearer`, so `/openapi.json` declares the `bearer`
  security scheme on every `/v1` operation and Swagger UI's "Authorize" works; refusals keep
  API.md's error body (401 `unauthorized`, 403 `forbidden`).
"""

from __future__ import annotations

import hmac
import threading
import time

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.concurrency import run_in_threadpool

from controller.api.errors import ApiError
from controller.services.runtime import Runtime
from controller.store import tokens_repo

CACHE_TTL_S = 5.0
BEARER = HTTPBearer(auto_error=False, scheme_name="bearer",
                    description="An API token: `C4_ADMIN_TOKEN`, or one from `c4 token create --role ROLE`.")


class TokenCache:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._roles: dict[str, tuple[str | None, float]] = {}

    def cached(self, rt: Runtime, token: str) -> tuple[bool, str | None]:
        """(known, role) without touching the database: the admin token, or a fresh cache entry."""
        admin = rt.settings.admin_token
        if admin is not None and hmac.compare_digest(token.encode(), admin.get_secret_value().encode()):
            return True, "admin"
        with self._lock:
            hit = self._roles.get(token)
        if hit is not None and time.monotonic() - hit[1] < CACHE_TTL_S:
            return True, hit[0]
        return False, None

    def role(self, rt: Runtime, token: str) -> str | None:
        known, role = self.cached(rt, token)
        if known:
            return role
        now = time.monotonic()
        with rt.sessions() as session:
            role = tokens_repo.role_of(session, token)
        with self._lock:
            if len(self._roles) > 10_000:
                self._roles.clear()
            self._roles[token] = (role, now)
        return role

    def clear(self) -> None:
        """Forget every cached role (after a token is revoked)."""
        with self._lock:
            self._roles.clear()


MAX_TOKEN_CHARS = 512  # tokens c4 makes are 43; longer is refused before any lookup


def _bearer(credentials: HTTPAuthorizationCredentials | None) -> str:
    if credentials is None or credentials.scheme.lower() != "bearer" or not credentials.credentials.strip():
        raise ApiError(401, "unauthorized", "missing bearer token", headers={"WWW-Authenticate": "Bearer"})
    token = credentials.credentials.strip()
    if len(token) > MAX_TOKEN_CHARS:
        raise ApiError(401, "unauthorized", "invalid or revoked token", headers={"WWW-Authenticate": "Bearer"})
    return token


def bearer_of(authorization: str | None) -> str | None:
    """The token of an `Authorization` header value, or None (what `HTTPBearer` accepts)."""
    if not authorization:
        return None
    scheme, _, value = authorization.partition(" ")
    value = value.strip()
    if scheme.lower() != "bearer" or not value or len(value) > MAX_TOKEN_CHARS:
        return None
    return value


class Requirement:
    """A route's auth dependency; its attributes say which roles it admits (for the docs)."""

    def __init__(self, roles: tuple[str, ...], any_role_may_read: bool) -> None:
        self.roles = roles
        self.any_role_may_read = any_role_may_read

    def may_refuse(self, method: str) -> bool:
        """Whether some valid token gets 403 from this requirement on `method`."""
        return not (self.any_role_may_read and method in ("GET", "HEAD"))

    def admits(self, role: str, method: str) -> bool:
        return role == "admin" or role in self.roles or (self.any_role_may_read and method in ("GET", "HEAD"))

    def refusal(self, role: str, method: str, path: str) -> ApiError:
        return ApiError(403, "forbidden", f"role {role!r} may not {method} {path}")

    async def __call__(self, request: Request,
                       credentials: HTTPAuthorizationCredentials | None = Depends(BEARER)) -> str:
        # async: a cached token costs no thread (a sync dependency runs in the threadpool, on
        # every request); only a lookup in the database does
        token = _bearer(credentials)
        rt: Runtime = request.app.state.runtime
        cache: TokenCache = request.app.state.token_cache
        known, role = cache.cached(rt, token)
        if not known:
            role = await run_in_threadpool(cache.role, rt, token)
        if role is None:
            raise ApiError(401, "unauthorized", "invalid or revoked token", headers={"WWW-Authenticate": "Bearer"})
        if self.admits(role, request.method):
            request.state.role = role
            return role
        raise self.refusal(role, request.method, request.url.path)


def require(*roles: str, any_role_may_read: bool = True) -> Requirement:
    """A dependency that admits admin, the given roles, and (by default) any role on GET."""
    return Requirement(roles, any_role_may_read)


ANY = require()
ADMIN = require(any_role_may_read=False)
