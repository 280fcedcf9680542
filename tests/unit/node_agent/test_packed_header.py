"""The packed telemetry form's header (controller.domain.coll_packed): a header nested too deep
is a refusal naming `header` (the JSON path's 422), not a RecursionError (a 500, which an agent
takes for "controller away" and retries for ever)."""

from __future__ import annotations

import pytest

from controller.domain import coll_packed


def test_a_header_nested_too_deep_is_refused_naming_the_header() -> None:
    doc = b'{"host":"host3","shapes":' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    with pytest.raises(coll_packed.PackedError) as err:
        coll_packed.decode_header(coll_packed.HEAD.pack(coll_packed.MAGIC, coll_packed.VERSION, len(doc)) + doc)
    assert err.value.loc == ("header",) and "nested" in err.value.msg
