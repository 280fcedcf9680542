"""The spool keeps samples briefly while the controller is away; the poster sends the oldest
first and treats each controller answer as FORMAT.md says."""

from __future__ import annotations

import asyncio
import json

import httpx

from switch_agents.posting import Poster, Spool


def sample(i: int) -> dict[str, object]:
    return {"switch": "leaf0", "t_us": 1_000_000 + i, "ports": []}


def test_spool_drops_the_oldest_beyond_its_size_and_age() -> None:
    spool = Spool(max_samples=3, max_age_s=10)
    assert spool.add([sample(i) for i in range(5)], now_s=0) == 2
    assert [s["t_us"] for s in spool.peek(10)] == [1_000_002, 1_000_003, 1_000_004]
    spool.add([sample(9)], now_s=8)
    assert spool.expire(now_s=10.5) == 2  # the three from t=0, less one already pushed out
    assert [s["t_us"] for s in spool.peek(10)] == [1_000_009]
    assert spool.oldest_age_s(11) == 3


def run(answers: list[httpx.Response | Exception], spool: Spool, posts: int) -> tuple[list, list[dict]]:  # type: ignore[type-arg]
    seen: list[dict] = []  # type: ignore[type-arg]

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append({"params": dict(request.url.params), "auth": request.headers["authorization"],
                     "body": json.loads(request.content)})
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    async def go() -> list:  # type: ignore[type-arg]
        poster = Poster("http://c4:8000/", "tok", 1.0, 2, httpx.AsyncClient(transport=httpx.MockTransport(handler)))
        outcomes = [await poster.post_one(spool) for _ in range(posts)]
        await poster.close()
        return outcomes

    return asyncio.run(go()), seen


def test_posts_oldest_first_and_keeps_what_did_not_arrive() -> None:
    spool = Spool(100, 100)
    spool.add([sample(i) for i in range(5)], 0)
    outcomes, seen = run([httpx.ConnectError("refused"), httpx.Response(503, json={}),
                          httpx.Response(202, json={"accepted": 2, "ignored": [{"field": "samples[0].ports[1].port",
                                                                                "message": "no linked port 'eth0'"}]}),
                          httpx.Response(202, json={"accepted": 2})], spool, 4)
    assert [o.sent for o in outcomes] == [0, 0, 2, 2]
    assert outcomes[0].error and "ConnectError" in outcomes[0].error and outcomes[1].status == 503
    assert outcomes[2].ignored == ("samples[0].ports[1].port: no linked port 'eth0'",)
    assert [[s["t_us"] for s in r["body"]["samples"]] for r in seen] == [[1_000_000, 1_000_001]] * 3 + [[1_000_002, 1_000_003]]
    assert seen[0]["params"] == {"unknown": "ignore"} and seen[0]["auth"] == "Bearer tok"
    assert len(spool) == 1


def test_an_invalid_batch_is_dropped_and_an_unauthorised_one_kept() -> None:
    spool = Spool(100, 100)
    spool.add([sample(i) for i in range(4)], 0)
    outcomes, _ = run([httpx.Response(401, json={}), httpx.Response(404, json={}),
                       httpx.Response(422, json={"error": {}}), httpx.Response(202, json={"accepted": 2})], spool, 4)
    assert (outcomes[0].dropped, outcomes[0].sent, outcomes[0].status) == (0, 0, 401)
    assert (outcomes[1].dropped, outcomes[1].status) == (0, 404)  # no fabric stored yet: wait
    assert (outcomes[2].dropped, outcomes[2].status) == (2, 422)
    assert outcomes[3].sent == 2 and len(spool) == 0
