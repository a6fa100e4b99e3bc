"""The MQTT accelerator (bus/paho_fast.py) against paho's public path: the same traffic, sent
once through each by a process of its own, arrives at a real Mosquitto's subscriber as the same
messages in the same order, every one acknowledged; and no other module reaches beneath paho's
or aiomqtt's API."""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from parley.bus import paho_fast, topics
from tests.bus.support import take
from tests.fixtures.broker import MqttBroker

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[2]
RUN = "fast"
COUNT = 600

# A sender of its own: small and large events, a retained state, then close (which waits for
# every PUBACK); it prints which path it took and what its bus counted.
SENDER = """
import asyncio, json, sys
from parley.bus import connect, paho_fast, topics
from parley.bus.messages import TextPart, TranscriptEvent

async def main(url, count):
    bus = await connect(url).start()
    for i in range(count):
        text = "x" * (i % 7) * (2000 if i % 50 == 0 else 1)
        event = TranscriptEvent(run="fast", episode="e1", sender="gm", event="note",
                                from_role="gm", content=[TextPart(text=text)], data={"i": i})
        await bus.publish(topics.events("fast", "e1"), event)
    await bus.close()
    print(json.dumps({"fast": paho_fast.enabled(), "pending": bus.pending}))

asyncio.run(main(sys.argv[1], int(sys.argv[2])))
"""


def _send(url: str, accelerator: str) -> dict[str, object]:
    env = {**os.environ, paho_fast.ENV: accelerator}
    done = subprocess.run(
        [sys.executable, "-c", SENDER, url, str(COUNT)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


async def test_both_paths_deliver_the_same_messages_in_order(mqtt_broker: MqttBroker) -> None:
    received: dict[str, list[tuple[int, str]]] = {}
    used: dict[str, object] = {}
    for accelerator in ("1", "0"):
        async with mqtt_broker.bus() as receiver:
            sub = receiver.subscribe(topics.events(RUN, "e1"), maxsize=COUNT + 10)
            await sub.ready()
            sent = _send(mqtt_broker.url, accelerator)
            assert sent["pending"] == 0  # every PUBACK was taken before close returned
            used[accelerator] = sent["fast"]
            got = await take(sub, COUNT)
            received[accelerator] = [
                (d.message.data["i"], d.message.content[0].text)  # type: ignore[union-attr]
                for d in got
            ]
    # Turned off, the public path; on a paho the check passes, the default takes the fast one.
    assert used["0"] is False
    assert used["1"] is (not paho_fast.problems())
    assert [i for i, _ in received["1"]] == list(range(COUNT))
    assert received["1"] == received["0"]


# Private names of paho's client and aiomqtt's that only the accelerator may use.
PRIVATE = re.compile(
    r"\._(out_packet|last_mid|sock\b|in_packet|packet_read|handle_puback|misc_loop|misc_task|"
    r"out_packet_mutex|callback_mutex)|from paho\.mqtt\.client import _|"
    r"decode_puback|paho\.mqtt\._"
)


def test_no_module_but_the_accelerator_reaches_beneath_paho() -> None:
    found = []
    for path in sorted((ROOT / "bus").glob("*.py")):
        if path.name == "paho_fast.py":
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if PRIVATE.search(line):
                found.append(f"{path.name}:{n}: {line.strip()}")
    assert found == []


def test_an_untested_paho_is_the_public_path_said_at_debug_level(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    def check(env: str | None, installed: str) -> list[int]:
        if env is None:
            monkeypatch.delenv(paho_fast.ENV, raising=False)
        else:
            monkeypatch.setenv(paho_fast.ENV, env)
        monkeypatch.setattr(paho_fast, "installed_paho", lambda: installed)
        monkeypatch.setattr(paho_fast, "_checked", None)
        caplog.clear()
        with caplog.at_level(logging.DEBUG, logger="parley.bus.mqtt"):
            assert paho_fast.enabled() is False
            assert paho_fast.enabled() is False  # decided once
        return [r.levelno for r in caplog.records]

    # A supported paho the accelerator was not written against is an ordinary install.
    assert check(None, "9.9.9") == [logging.DEBUG]
    assert "9.9.9" in caplog.records[0].getMessage()
    # Asked for by name, the same is one warning.
    assert check("1", "9.9.9") == [logging.WARNING]
    # A tested release without an internal the accelerator reads is unexpected: a warning.
    monkeypatch.setattr(paho_fast, "problems", lambda: ["paho Client._sock is missing"])
    assert check(None, paho_fast.TESTED_PAHO[0]) == [logging.WARNING]
    assert "_sock is missing" in caplog.records[0].getMessage()
    # Turned off: nothing to say.
    assert check("0", "9.9.9") == []
