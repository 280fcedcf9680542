"""End-to-end planner timings through the real API (in-process TestClient, SQLite file):
POST /v1/jobs -> status `planned`, and PATCH /v1/links/{name} down -> response (re-plan inside),
2 s after the job was planned (a failure under a running job, not during the planner's
post-plan work: reading row ids, refreshing the summary).

    .venv/bin/python -m bench.plan.api                # PATCH: a used link in the middle of the list
    .venv/bin/python -m bench.plan.api --spine-core   # PATCH: a used spine-core link (the worst case)
    .venv/bin/python -m bench.plan.api --alltoall     # POST -> planned of the all-to-all series

The all-to-all runs also record the phases the job record showed while it was pending
(`progress`, polled at 20 Hz like `status`).
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

from fastapi.testclient import TestClient

from bench.plan.scenarios import (
    ALLTOALL_RANKS,
    SCALE_SERIES,
    alltoall_fabric,
    alltoall_job,
    scale_fabric,
    scale_job,
)
from controller.api.app import create_app
from controller.services.jobs import spec_to_document
from controller.settings import Settings
from controller.store.migrate import upgrade
from controller.topology.document import to_document

TOKEN = "bench-admin"


def alltoall() -> None:
    print(f"{'fabric':10} {'ranks':>5} {'flows':>6} {'POST->planned s':>15} {'max util':>8} {'bound':>6} {'ratio':>6}  phases seen")
    for kind in ("leaf-spine", "clos3"):
        for ranks in ALLTOALL_RANKS:
            fabric = alltoall_fabric(kind, ranks)
            with tempfile.TemporaryDirectory() as tmp:
                url = f"sqlite:///{Path(tmp) / 'c4.db'}"
                upgrade(url)
                settings = Settings(database_url=url, admin_token=TOKEN, data_dir=Path(tmp))
                with TestClient(create_app(settings), headers={"Authorization": f"Bearer {TOKEN}"}) as client:
                    assert client.put("/v1/topology", json=to_document(fabric)).status_code == 200
                    spec = spec_to_document(alltoall_job(fabric, ranks))
                    for t in spec["traffic"]:
                        del t["pairs"]
                    phases: list[str] = []
                    t0 = time.monotonic()
                    assert client.post("/v1/jobs", json=spec).status_code == 202
                    while (job := client.get("/v1/jobs/moe").json())["status"] == "pending":
                        phase = (job.get("progress") or {}).get("phase")
                        if phase and (not phases or phases[-1] != phase):
                            phases.append(phase)
                        time.sleep(0.05)
                    planned_s = time.monotonic() - t0
                    assert job["status"] == "planned", job
                    plan = job["plan"]
                    print(f"{kind:10} {ranks:>5} {plan['flows']:>6} {planned_s:>15.2f} {plan['max_link_utilization']:>8.3f} "
                          f"{plan['lower_bound']:>6.3f} {plan['max_link_utilization'] / plan['lower_bound']:>6.3f}  "
                          f"{','.join(phases) or '-'}", flush=True)


def main() -> None:
    if "--alltoall" in sys.argv[1:]:
        alltoall()
        return
    fabric = scale_fabric()
    print(f"{'flows':>6} {'POST->planned s':>15} {'PATCH down s':>12} {'replanned':>9} {'max util':>8} {'bound':>6}")
    for n_hosts, channels, qps in SCALE_SERIES:
        with tempfile.TemporaryDirectory() as tmp:
            url = f"sqlite:///{Path(tmp) / 'c4.db'}"
            upgrade(url)
            settings = Settings(database_url=url, admin_token=TOKEN, data_dir=Path(tmp))
            with TestClient(create_app(settings), headers={"Authorization": f"Bearer {TOKEN}"}) as client:
                assert client.put("/v1/topology", json=to_document(fabric)).status_code == 200
                spec = spec_to_document(scale_job(fabric, n_hosts, channels, qps))
                for t in spec["traffic"]:
                    del t["pairs"]
                t0 = time.monotonic()
                assert client.post("/v1/jobs", json=spec).status_code == 202
                while (job := client.get("/v1/jobs/big").json())["status"] == "pending":
                    time.sleep(0.05)  # a scheduler polling at 20 Hz
                planned_s = time.monotonic() - t0
                assert job["status"] == "planned", job
                links = client.get("/v1/jobs/big/assignments").json()["assignments"]
                used = sorted({name for a in links for name in a["links"][1:-1]})
                if "--spine-core" in sys.argv[1:]:
                    used = [name for name in used if name.startswith("core")]
                time.sleep(2.0)  # a failure under a running job: the planner's post-plan work is done
                t1 = time.monotonic()
                r = client.patch(f"/v1/links/{used[len(used) // 2]}", json={"state": "down"})
                patch_s = time.monotonic() - t1
                plan = job["plan"]
                print(f"{plan['flows']:>6} {planned_s:>15.2f} {patch_s:>12.3f} {r.json()['replanned_flows']:>9} "
                      f"{plan['max_link_utilization']:>8.3f} {plan['lower_bound']:>6.3f}")


if __name__ == "__main__":
    main()
