"""The API's routers, one module per resource."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter


class PublicRouter(APIRouter):
    """An `APIRouter` whose routes answer with exactly what the service returned, typed by the
    route's `*Public` response model: fields the service left out stay out
    (`response_model_exclude_unset`), fields the model does not declare pass through
    (`schemas.public.base.Public`)."""

    def add_api_route(self, path: str, endpoint: Any, **kwargs: Any) -> None:
        kwargs["response_model_exclude_unset"] = True
        super().add_api_route(path, endpoint, **kwargs)
