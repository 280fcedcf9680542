"""API tokens (admin only): list them and revoke one. Values are never shown again; a new
token is made with `c4 token create` on the controller's database."""

from __future__ import annotations

from typing import Any

from fastapi import Depends, Request

from controller.api.auth import ADMIN, TokenCache
from controller.api.routes import PublicRouter
from controller.api.schemas.common import RowIdInPath
from controller.api.schemas.diagnosis import EmptyBody
from controller.api.schemas.public.diagnosis import TokenPublic, TokensPublic
from controller.api.state import runtime_of
from controller.services import tokens

router = PublicRouter(prefix="/v1", tags=["tokens"])


@router.get("/tokens", dependencies=[Depends(ADMIN)], response_model=TokensPublic,
            summary="Every API token's id, name, role and dates (never its value)")
def list_tokens(request: Request) -> dict[str, Any]:
    return {"tokens": tokens.list_all(runtime_of(request))}


@router.post("/tokens/{token_id}/revoke", dependencies=[Depends(ADMIN)], response_model=TokenPublic,
             summary="Revoke a token: it stops working at once here, within 5 s in other processes")
def revoke_token(request: Request, token_id: RowIdInPath, body: EmptyBody | None = None) -> dict[str, Any]:
    row = tokens.revoke(runtime_of(request), token_id)
    cache: TokenCache = request.app.state.token_cache
    cache.clear()
    return row
