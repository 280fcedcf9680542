"""What import-linter cannot see: services/ hold no SQL of their own. Every query lives in a
repository in controller/store/ (ARCHITECTURE.md; the brief's "no raw SQL in services/")."""

from __future__ import annotations

import ast
from pathlib import Path

SERVICES = Path(__file__).resolve().parents[2] / "controller" / "services"
# What services may take from SQLAlchemy: types and event hooks, never a statement builder.
ALLOWED = {"Connection", "Engine", "event", "Session", "sessionmaker"}
QUERIES = {"execute", "scalars", "scalar", "query", "get", "add", "add_all", "delete", "merge"}


def _offences(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), str(path))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("sqlalchemy"):
            out += [f"{path.name}:{node.lineno} imports {a.name} from {node.module}"
                    for a in node.names if a.name not in ALLOWED and not node.module.startswith("sqlalchemy.exc")]
        elif isinstance(node, ast.Import):
            out += [f"{path.name}:{node.lineno} imports {a.name}" for a in node.names
                    if a.name.startswith("sqlalchemy")]
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr in QUERIES and isinstance(node.func.value, ast.Name)
              and (node.func.value.id in ("s", "db", "conn", "connection", "c") or "session" in node.func.value.id)):
            out.append(f"{path.name}:{node.lineno} calls {node.func.value.id}.{node.func.attr}")
    return out


def test_services_hold_no_queries_of_their_own() -> None:
    offences = [o for path in sorted(SERVICES.glob("*.py")) for o in _offences(path)]
    assert offences == [], "move these into a repository in controller/store/:\n" + "\n".join(offences)


def test_the_check_sees_a_query(tmp_path: Path) -> None:
    probe = tmp_path / "service.py"
    probe.write_text("from sqlalchemy import select\n\ndef f(session):\n    return session.scalars(select(1))\n")
    assert len(_offences(probe)) == 2
