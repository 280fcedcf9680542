"""What a request handler reads from the application: the process's `Runtime`."""

from __future__ import annotations

from fastapi import Request

from controller.services.runtime import Runtime


def runtime_of(request: Request) -> Runtime:
    runtime: Runtime = request.app.state.runtime
    return runtime
