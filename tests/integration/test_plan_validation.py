"""Every plan the planning service stores passes the solver-free validator first: a plan that
breaks a rule (here: a source port that does not hash onto its path, as a planner bug would
produce) is refused, nothing of it is stored, the job fails visibly and the refusal is
counted in /metrics. Checked for a first plan and for a link change's re-plan."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from prometheus_client import REGISTRY

from controller.domain.fabric import Fabric, LinkState
from controller.domain.jobs import JobSpec, Pattern, RankSpec, TrafficSpec
from controller.services import jobs, planning, topology
from controller.services.runtime import Runtime
from controller.settings import Settings
from controller.store.migrate import upgrade
from controller.te import planner as te_planner
from controller.te import replan as te_replan
from controller.topology.generate import LeafSpineSpec, leaf_spine
from controller.topology.graph import FabricView
from controller.topology.hashing import ref_v1_path


def _runtime(tmp_path: Path) -> Runtime:
    url = f"sqlite:///{tmp_path / 'c4.db'}"
    upgrade(url)
    return Runtime.from_settings(Settings(database_url=url, data_dir=tmp_path))


def _with_job(tmp_path: Path, name: str) -> tuple[Runtime, planning.Planner]:
    """A runtime with its planner on a 4x4x2 fabric and an 8-rank ring job `name` posted."""
    rt = _runtime(tmp_path)
    planner = planning.install(rt)
    topology.replace(rt, leaf_spine(LeafSpineSpec(leaves=4, spines=4, hosts_per_leaf=2)))
    jobs.create(rt, _ring(name, range(8)))
    return rt, planner


def _ring(name: str, hosts: range) -> JobSpec:
    ranks = tuple(RankSpec(i, f"host{h}", "mlx5_0") for i, h in enumerate(hosts))
    return JobSpec(name, ranks, (TrafficSpec(Pattern.RING, tuple(range(len(ranks))), channels=2, qps_per_connection=2),))


def _corrupt(plans: dict[str, te_planner.JobPlan], fabric: Fabric) -> dict[str, te_planner.JobPlan]:
    """Every plan with one flow's source port replaced by the next one that `c4-ref-v1` puts on
    another path (the validator finds out; nothing else looks)."""
    view = FabricView(fabric)
    out = {}
    for name, p in plans.items():
        if not p.assignments:
            out[name] = p
            continue
        key = next(k for k in sorted(p.assignments) if len(view.equal_cost_paths(p.assignments[k].src_node,
                                                                                   p.assignments[k].dst_node)) > 1)
        a = p.assignments[key]
        sport = next(s for s in range(a.udp_sport + 1, 65536) if ref_v1_path(view, a.src_node, a.dst_node, s) != a.path)
        out[name] = replace(p, assignments={**p.assignments, key: replace(a, udp_sport=sport)})
    return out


def refused() -> float:
    return REGISTRY.get_sample_value("c4_plans_refused_total") or 0.0


def test_a_first_plan_that_fails_validation_is_not_stored(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    rt, planner = _with_job(tmp_path, "bad")
    real = te_planner.plan
    monkeypatch.setattr(te_planner, "plan", lambda fabric, *a, **k: _corrupt(real(fabric, *a, **k), fabric))
    before = refused()
    planner.step()
    got = jobs.get(rt, "bad")
    assert got["status"] == "failed" and "failed validation" in got["error"] and "c4-ref-v1" in got["error"]
    assert jobs.assignments(rt, "bad")["assignments"] == []
    assert refused() == before + 1
    monkeypatch.setattr(te_planner, "plan", real)  # the bug fixed: a good plan is stored
    jobs.delete_job(rt, "bad")
    jobs.create(rt, _ring("good", range(8)))
    planner.step()
    assert jobs.get(rt, "good")["status"] == "planned" and refused() == before + 1
    rt.engine.dispose()


def test_a_link_replan_that_fails_validation_is_not_stored(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    rt, planner = _with_job(tmp_path, "a")
    planner.step()
    planned = jobs.assignments(rt, "a")
    used = sorted({n for a in planned["assignments"] for n in a["links"][1:-1]})
    real = te_replan.replan_indexed

    def corrupt(fabric, *a, **k):  # type: ignore[no-untyped-def]
        result = real(fabric, *a, **k)
        return replace(result, plans=_corrupt(result.plans, fabric))

    monkeypatch.setattr(planning, "replan_indexed", corrupt)
    before = refused()
    _, replanned = topology.set_link_state(rt, used[0], LinkState.DOWN)
    got = jobs.get(rt, "a")
    assert got["status"] == "failed" and "failed validation" in got["error"]
    assert got["version"] == planned["version"] + 1  # agents see the assignments go
    assert jobs.assignments(rt, "a")["assignments"] == [] and replanned == 0
    assert refused() == before + 1
    rt.engine.dispose()


def test_a_long_plan_shows_its_phase_on_the_pending_job(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """While the planner works on a job (here: at once, instead of after half a second), the
    job stays `pending` and its record names the phase; the stored plan clears it."""
    rt, planner = _with_job(tmp_path, "a")
    monkeypatch.setattr(planning, "PROGRESS_AFTER_S", 0.0)
    seen: list[dict[str, object]] = []
    real = te_planner.plan

    def watched(*a, **k):  # type: ignore[no-untyped-def]
        progress = a[5] if len(a) > 5 else k["progress"]

        def spy(phase: str) -> None:
            progress(phase)
            seen.append(jobs.get(rt, "a"))

        return real(*a[:5], spy, **{n: v for n, v in k.items() if n != "progress"})

    monkeypatch.setattr(te_planner, "plan", watched)
    planner.step()
    phases = [j["progress"]["phase"] for j in seen]  # type: ignore[index]
    assert phases[:2] == ["routes", "placing"] and phases[-1] == "summary", phases
    assert all(j["status"] == "pending" for j in seen)
    assert {"since_us", "started_us", "flows"} <= set(seen[-1]["progress"])  # type: ignore[arg-type]
    done = jobs.get(rt, "a")
    assert done["status"] == "planned" and "progress" not in done
    rt.engine.dispose()


def test_one_name_for_one_count(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A link PATCH's `replanned_flows` is the sum of the `changed_flows` of the `job.replanned`
    events it emits (flows whose assignment changed), and each event's `moved_flows` (flows
    whose path changed) is at most its `changed_flows` and equals the job's `plan.moved_flows`."""
    rt, planner = _with_job(tmp_path, "a")
    jobs.create(rt, _ring("b", range(7, -1, -1)))
    planner.step()
    events: list[dict[str, object]] = []
    real = planning.emit
    monkeypatch.setattr(planning, "emit", lambda s, e, d, t: events.append({"event": e, **d}) or real(s, e, d, t))
    used = sorted({n for a in jobs.assignments(rt, "a")["assignments"] for n in a["links"][1:-1]})
    _, replanned = topology.set_link_state(rt, used[0], LinkState.DOWN)
    replans = [e for e in events if e["event"] == "job.replanned"]
    assert replans and replanned == sum(e["changed_flows"] for e in replans)  # type: ignore[misc]
    for e in replans:
        assert 0 <= e["moved_flows"] <= e["changed_flows"]  # type: ignore[operator]
        assert jobs.get(rt, str(e["job"]))["plan"]["moved_flows"] == e["moved_flows"]
    rt.engine.dispose()


def test_assignments_are_read_at_one_state_when_a_plan_commits_between_the_reads(
        tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The job's head and its flows are two statements: a change committed between them (here
    the flows deleted and the job failed, as a plan failure does) must not pair the old
    version and status with the new flows ("planned" with no assignments). A job that changes
    during every read is Unavailable; one that does not exist, NotFound."""
    import pytest
    from sqlalchemy import delete, update

    from controller.services.errors import NotFound, Unavailable
    from controller.store import flows_repo
    from controller.store.db import transaction
    from controller.store.tables import FlowRow, JobRow

    rt, planner = _with_job(tmp_path, "j")
    planner.step()
    planned = jobs.assignments(rt, "j")
    assert planned["status"] == "planned" and planned["assignments"]
    real, calls = flows_repo.documents_of, []
    always = []

    def interleaved(session, job_ids, host=None):  # type: ignore[no-untyped-def]
        if not calls or always:  # the first read: another process commits its change now
            with transaction(rt.sessions) as other:
                for job_id in job_ids:
                    other.execute(delete(FlowRow).where(FlowRow.job_id == job_id))
                    other.execute(update(JobRow).where(JobRow.id == job_id).values(
                        status="failed", version=JobRow.version + 1))
        calls.append(list(job_ids))
        return real(session, job_ids, host)

    monkeypatch.setattr(flows_repo, "documents_of", interleaved)
    head, docs = jobs.assignments_by_host(rt, "j")
    assert (head.version, head.status) == (planned["version"] + 1, "failed")
    assert docs[None]["status"] == "failed" and docs[None]["assignments"] == []
    assert len(calls) == 2  # read again once, at the new state
    calls.clear()
    one = jobs.assignments(rt, "j", "host0")  # the same read of one host's, and another commit
    assert (one["version"], one["status"], one["assignments"]) == (planned["version"] + 2, "failed", [])
    always.append(True)  # a change committed between the reads every time
    with pytest.raises(Unavailable):
        jobs.assignments(rt, "j")
    assert jobs.assignments_by_host_many(rt, ["j"]) == {}  # left out: its single read says why
    with pytest.raises(NotFound):
        jobs.assignments(rt, "nope")
    rt.engine.dispose()


def test_many_jobs_assignments_read_at_once_equal_their_single_reads_at_one_state(
        tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """`assignments_by_host_many` (the long-poll cache's cold fill): for every job the same
    documents as its own `assignments_by_host`; unknown names left out; and, as the single
    read, a job changed between its head and its flows is read again at the new state, not
    paired across the two (here: one job failed and its flows deleted mid-read)."""
    from sqlalchemy import delete, update

    from controller.store import flows_repo
    from controller.store.db import transaction
    from controller.store.tables import FlowRow, JobRow

    rt, planner = _with_job(tmp_path, "a")
    jobs.create(rt, _ring("b", range(7, -1, -1)))
    jobs.create(rt, _ring("c", range(0, 8, 2)))
    planner.step()
    single = {n: jobs.assignments_by_host(rt, n) for n in ("a", "b", "c")}
    assert all(docs[None]["status"] == "planned" and docs[None]["assignments"] for _, docs in single.values())
    assert jobs.assignments_by_host_many(rt, ["c", "nope", "a", "b", "a"]) == single

    real, calls = flows_repo.documents_of, []
    b_id = single["b"][0].id

    def interleaved(session, job_ids, host=None):  # type: ignore[no-untyped-def]
        if not calls:  # the first read: another process fails job b now
            with transaction(rt.sessions) as other:
                other.execute(delete(FlowRow).where(FlowRow.job_id == b_id))
                other.execute(update(JobRow).where(JobRow.id == b_id).values(
                    status="failed", version=JobRow.version + 1))
        calls.append(sorted(job_ids))
        return real(session, job_ids, host)

    monkeypatch.setattr(flows_repo, "documents_of", interleaved)
    got = jobs.assignments_by_host_many(rt, ["a", "b", "c"])
    assert len(calls) == 2 and calls[1] == [b_id]  # only b read again
    assert got["a"] == single["a"] and got["c"] == single["c"]
    head, docs = got["b"]
    assert (head.version, head.status) == (single["b"][0].version + 1, "failed")
    assert docs == {None: {"job": "b", "version": head.version, "status": "failed", "assignments": []}}
    rt.engine.dispose()


def test_a_plan_document_with_nan_fails_its_own_write_not_every_later_read(database_url: str) -> None:
    """SQLite stored NaN in a JSON column, and then its JSON functions failed on every later
    read that touched the row (`planned_maxima`, in every plan's transaction); PostgreSQL
    refuses it at insert. Both backends now refuse it at the write: the rest reads on."""
    import pytest
    from sqlalchemy.exc import StatementError

    from controller.services.clock import now_us
    from controller.store import jobs_repo
    from controller.store.db import make_engine, make_sessions, transaction
    from controller.store.tables import JobRow

    engine = make_engine(database_url)
    sessions = make_sessions(engine)
    with transaction(sessions) as s:
        s.add(JobRow(name="ok", spec={}, status="planned", version=1, plan={"max_link_utilization": 0.5},
                     created_at_us=now_us(), updated_at_us=now_us()))
    with pytest.raises((StatementError, ValueError)), transaction(sessions) as s:  # (psycopg: unwrapped)
        s.add(JobRow(name="nan", spec={}, status="planned", version=1,
                     plan={"max_link_utilization": float("nan")}, created_at_us=now_us(), updated_at_us=now_us()))
    with sessions() as s:
        assert {n: v for n, (_, v) in jobs_repo.planned_maxima(s).items()} == {"ok": 0.5}
    engine.dispose()
