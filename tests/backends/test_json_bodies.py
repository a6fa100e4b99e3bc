"""Request and response bodies: orjson, with the standard library for what orjson refuses, so
that every body reads as the standard library reads it; a body that is not JSON is a
BadResponse."""

from __future__ import annotations

import json
import math

import pytest

from parley.agents.backends.formats import BadResponse, load_body
from parley.agents.backends.transport import _dumps


def _loads(data: bytes) -> object:
    value, repaired = load_body(data)
    assert repaired == 0
    return value


def test_json_bodies_read_as_the_standard_library_reads_them() -> None:
    body = {"model": "m", "logit_bias": {50256: -100}, "big": 2**70, "text": "héllo"}
    assert json.loads(_dumps(body)) == json.loads(json.dumps(body))
    assert _loads(b'{"a": [1, 2.5, null, "\\u00e9"]}') == {"a": [1, 2.5, None, "é"]}
    assert math.isnan(_loads(b'{"x": NaN}')["x"])
    with pytest.raises(BadResponse, match="not JSON"):
        _loads(b"<html>not json</html>")
    # Bytes that are not UTF-8 are read as U+FFFD and counted.
    assert load_body(b'{"a": "x\xff\xfey"}') == ({"a": "x\ufffd\ufffdy"}, 2)
