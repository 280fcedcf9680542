"""The `c4` command as operators run it: generate a document, make tokens, list settings."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from fastapi.testclient import TestClient

C4 = [sys.executable, "-m", "controller.cli"]


def _run(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(C4 + args, capture_output=True, text=True, env={**os.environ, **env}, timeout=120)


def test_topology_generate_prints_a_document_the_api_accepts(client: TestClient) -> None:
    out = _run(["topology", "generate", "clos3", "pods=2", "leaves_per_pod=2", "spines_per_pod=2", "cores=2"], {})
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert len(doc["hosts"]) == 2 * 2 * 4
    assert client.put("/v1/topology", json=doc).status_code == 200


def test_topology_generate_refuses_bad_parameters() -> None:
    out = _run(["topology", "generate", "leaf-spine", "leaves=3"], {})
    assert out.returncode == 2 and "leaves" in out.stderr


def test_token_create_prints_a_working_token_once(database_url: str, tmp_path: Path, client: TestClient) -> None:
    env = {"C4_DATABASE_URL": database_url, "C4_DATA_DIR": str(tmp_path)}
    out = _run(["token", "create", "--role", "viewer"], env)
    assert out.returncode == 0, out.stderr
    token = out.stdout.strip()
    assert token.startswith("c4_")
    assert client.get("/healthz").status_code == 200
    r = client.get("/v1/topology", headers={"Authorization": f"Bearer {token}"})
    assert r.status_code == 404  # authenticated; no fabric yet
    r = client.put("/v1/topology", json={}, headers={"Authorization": f"Bearer {token}"})
    assert r.status_code in (403, 422)
    bad = _run(["token", "create", "--role", "root"], env)
    assert bad.returncode == 2 and "role" in bad.stderr


def test_settings_lists_every_variable() -> None:
    out = _run(["settings"], {})
    assert out.returncode == 0
    for var in ("C4_DATABASE_URL", "C4_DATA_DIR", "C4_ADMIN_TOKEN", "C4_HANG_TIMEOUT_S", "C4_AUTO_ISOLATE"):
        assert var in out.stdout


def test_readme_documents_every_setting() -> None:
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    from controller.settings import Settings

    for name in Settings.model_fields:
        assert f"`C4_{name.upper()}`" in readme, f"C4_{name.upper()} is not in the README's table"
