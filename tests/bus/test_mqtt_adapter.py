"""The MQTT transport's hold on aiomqtt's and paho's internals (parley.bus.mqtt_adapter): the
installed versions have everything it touches, in the shape it expects, and a connection
through a real broker uses them as intended. Fails loudly on an incompatible upgrade."""

from __future__ import annotations

import ast
import asyncio
from pathlib import Path
from types import SimpleNamespace

import aiomqtt
import paho.mqtt.client as paho_mqtt
import pytest

from parley.bus import mqtt_adapter
from parley.bus.mqtt import MqttBus
from tests.fixtures.broker import MqttBroker

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[2]


async def test_the_installed_aiomqtt_and_paho_have_what_the_transport_uses() -> None:
    client = aiomqtt.Client("127.0.0.1")
    assert mqtt_adapter.problems(client) == []
    assert isinstance(mqtt_adapter.paho_of(client), paho_mqtt.Client)
    assert not mqtt_adapter.disconnected(client).done()
    mqtt_adapter.ensure_compatible(client)  # raises on any problem


async def test_a_client_of_another_shape_is_refused_naming_what_is_missing() -> None:
    stranger = SimpleNamespace(_client=object(), _misc_task="x")
    found = mqtt_adapter.problems(stranger)
    assert any("_client" in p for p in found)
    assert any("_disconnected" in p for p in found)
    assert any("_misc_task" in p for p in found)
    assert any("_misc_loop" in p for p in found)
    with pytest.raises(mqtt_adapter.IncompatibleMqttLibrary, match=r"aiomqtt \d.*_disconnected"):
        mqtt_adapter.ensure_compatible(stranger)


async def test_a_live_connection_through_the_adapter(mqtt5_broker: MqttBroker) -> None:
    async with MqttBus(mqtt5_broker.host, mqtt5_broker.port) as bus:
        conn = bus._conn
        assert conn is not None
        paho = mqtt_adapter.paho_of(conn.client)
        assert paho.is_connected() and paho.socket() is not None
        ending = mqtt_adapter.disconnected(conn.client)
        assert not ending.done()
        # The keepalive task runs once the socket is open (started from paho's callback).
        for _ in range(100):
            if conn.client._misc_task is not None:
                break
            await asyncio.sleep(0.01)
        assert conn.client._misc_task is not None and not conn.client._misc_task.done()
    assert ending.done()  # closing the bus ended the connection


def test_only_the_adapter_reaches_into_aiomqtt_and_paho() -> None:
    """Private attributes of aiomqtt's client and paho's are named in mqtt_adapter.py only."""
    private = {"_client", "_disconnected", "_misc_task", "_misc_loop", "_sock", "_topic"}
    for path in sorted((ROOT / "bus").glob("*.py")):
        if path.name == "mqtt_adapter.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Attribute) and node.attr in private:
                owner = ast.unparse(node.value)
                assert owner == "self", f"{path.name}:{node.lineno}: {owner}.{node.attr}"
