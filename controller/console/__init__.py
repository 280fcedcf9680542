"""The web console for network operators, served by the API under `/console`.

A single page (Preact + htm, vendored; no build step, no CDN) that reads and acts only
through the REST API with the operator's token, plus three read endpoints of its own
(`/console/api/...`). Decisions and layout: README.md beside this file.
"""

from controller.console.routes import router

__all__ = ["router"]
