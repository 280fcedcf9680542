"""docs/API-EXTENSIONS.md lists every route the controller serves, each marked as API.md's or an
extension: a route added (or removed) without its row fails here."""
from __future__ import annotations

import re
from pathlib import Path

from controller.api.app import create_app
from controller.settings import Settings

DOC = Path(__file__).resolve().parents[2] / "docs" / "API-EXTENSIONS.md"
ROW = re.compile(r"^\| (GET|POST|PUT|PATCH|DELETE) \| (/\S*) \| (yes|extension) \|", re.M)


def test_every_served_route_has_one_row(tmp_path: Path) -> None:
    rows = ROW.findall(DOC.read_text())
    documented = [(method, path) for method, path, _ in rows]
    assert len(documented) == len(set(documented)), "a route is listed twice"
    app = create_app(Settings(database_url=f"sqlite:///{tmp_path}/c4.db"))
    served = {(method.upper(), path) for path, ops in app.openapi()["paths"].items() for method in ops}
    assert served - set(documented) == set(), "routes served but not in docs/API-EXTENSIONS.md"
    assert set(documented) - served == set(), "routes in docs/API-EXTENSIONS.md the app does not serve"
