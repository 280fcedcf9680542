"""What a request handler reads from the application (the process's `Runtime`), and the
fast JSON response of the bulk routes."""

from __future__ import annotations

from typing import Any

import pydantic_core
from fastapi import Request, Response

from controller.services.runtime import Runtime


def runtime_of(request: Request) -> Runtime:
    runtime: Runtime = request.app.state.runtime
    return runtime


def json_response(doc: Any, status_code: int = 200) -> Response:
    """`doc` as JSON, serialized by pydantic-core without validation: for bulk responses
    (assignments, links, the fabric) whose declared model is checked by the tests instead."""
    return Response(pydantic_core.to_json(doc), status_code=status_code, media_type="application/json")
