"""The API's routers, one module per resource."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from controller.api.bodies import C4Route


class PublicRouter(APIRouter):
    """An `APIRouter` whose routes answer with exactly what the service returned, typed by the
    route's `*Public` response model: fields the service left out stay out
    (`response_model_exclude_unset`), fields the model does not declare pass through
    (`schemas.public.base.Public`). Its routes are `bodies.C4Route`s: JSON bodies are parsed by
    c4 (strict UTF-8; heavy routes off the event loop), within the limits of `api.limits`."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("route_class", C4Route)
        super().__init__(*args, **kwargs)

    def add_api_route(self, path: str, endpoint: Any, **kwargs: Any) -> None:
        kwargs["response_model_exclude_unset"] = True
        super().add_api_route(path, endpoint, **kwargs)
