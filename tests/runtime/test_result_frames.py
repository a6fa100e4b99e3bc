"""A finished episode's frame from a worker to the parent: the record the parent reads back is
the record the worker sent, values that orjson refuses included."""

from __future__ import annotations

import math

from parley.runtime.results import EncodedResult
from parley.runtime.workers import pack_result, unpack_result


def test_the_record_comes_back_as_sent_nan_and_huge_integers_included() -> None:
    record = {
        "episode": "e1",
        "outcome": "success",
        "score": 0.1 + 0.2,
        "text": "caf\u00e9 \U0001f600",
        "nested": {"list": [1, -0.0, None, True], "big": 1 << 70},
    }
    back = unpack_result(pack_result(EncodedResult(record, b"", {})))
    assert back.record == record
    odd = {"episode": "e2", "score": float("nan"), "worst": float("-inf")}
    back = unpack_result(pack_result(EncodedResult(odd, b"line\n", {}, {"m": 1})))
    assert math.isnan(back.record["score"]) and back.record["worst"] == float("-inf")
    assert (back.transcript, back.metrics) == (b"line\n", {"m": 1})
