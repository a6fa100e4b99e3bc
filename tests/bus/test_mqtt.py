"""What only the MQTT transport has to prove: several processes, the broker's behaviour, TLS,
reconnects, and the fault test (the broker restarted or killed while messages flow)."""

from __future__ import annotations

import asyncio
import datetime
import ipaddress
import os
import subprocess
import tempfile
from pathlib import Path

import aiomqtt
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from parley.bus import connect, topics
from parley.bus.broker import PROJECT_CONFIG, free_port, start_mosquitto
from parley.bus.codec import CONTENT_TYPE, encode
from parley.bus.messages import ImagePart, StateUpdate
from parley.bus.mqtt import MqttBus, MqttConnectError
from tests.bus.support import event, numbers, take
from tests.conftest import require
from tests.fixtures.broker import MqttBroker

pytestmark = pytest.mark.anyio

RUN = "mqtt"
TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


# -- configuration ----------------------------------------------------------------------------


def test_from_url_reads_credentials_port_and_options() -> None:
    bus = MqttBus.from_url(
        "mqtt://al%40ice:s3cr%2Ft@broker.example:1999?client_id=worker-7&keepalive=15"
        "&session_expiry=60&max_inflight=50&receive_maximum=20&protocol=3.1.1"
    )
    assert (bus.host, bus.port, bus.tls) == ("broker.example", 1999, False)
    assert (bus.username, bus.password) == ("al@ice", "s3cr/t")
    assert bus.client_id == "worker-7"
    assert (bus.keepalive, bus.session_expiry, bus.max_inflight, bus.receive_maximum) == (
        15,
        60,
        50,
        20,
    )
    assert bus.protocol == aiomqtt.ProtocolVersion.V311
    assert bus.url == "mqtt://broker.example:1999"


def test_from_url_tls_defaults_and_overrides() -> None:
    bus = MqttBus.from_url("mqtts://broker.example?ca=/etc/ca.pem&cert=c.pem&key=k.pem&insecure=1")
    assert (bus.port, bus.tls, bus.tls_ca, bus.tls_cert, bus.tls_key, bus.tls_insecure) == (
        8883,
        True,
        "/etc/ca.pem",
        "c.pem",
        "k.pem",
        True,
    )
    assert MqttBus.from_url("mqtt://h", client_id="x").client_id == "x"  # keywords win
    assert MqttBus.from_url("mqtt://h").port == 1883


def test_default_client_ids_are_unique_and_readable() -> None:
    a, b = MqttBus(), MqttBus()
    assert a.client_id != b.client_id
    assert a.client_id.startswith("parley-") and str(os.getpid()) in a.client_id


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("mqtt://h?colour=blue", "unknown option 'colour'"),
        ("mqtt://h?keepalive=soon", "keepalive='soon'"),
        ("http://h", "not an mqtt"),
        ("mqtt://h?protocol=4", "unknown MQTT protocol"),
    ],
)
def test_from_url_errors_name_the_problem(url: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        MqttBus.from_url(url)


def test_connect_picks_the_transport_from_the_url() -> None:
    bus = connect("mqtt://127.0.0.1:1999")
    assert isinstance(bus, MqttBus) and bus.port == 1999


async def test_an_unreachable_broker_fails_fast_and_cleanly() -> None:
    bus = MqttBus(port=free_port(), connect_timeout=0.5)
    with pytest.raises(MqttConnectError, match="no connection"):
        async with bus:
            pass
    assert bus.closed
    assert bus._runner is not None and bus._runner.done()


async def test_a_missing_tls_file_fails_at_once() -> None:
    bus = MqttBus.from_url(f"mqtts://127.0.0.1:{free_port()}?ca=/nonexistent/ca.pem")
    with pytest.raises(FileNotFoundError):
        async with bus:
            pass
    assert bus.closed


# -- two processes ----------------------------------------------------------------------------


async def test_two_buses_see_each_others_messages(mqtt_broker: MqttBroker) -> None:
    async with mqtt_broker.bus() as a, mqtt_broker.bus() as b:
        at_a = a.subscribe(topics.gm_inbox(RUN, "e1"))
        at_b = b.subscribe(topics.agent_inbox(RUN, "e1", "+"))
        await at_a.ready()
        await at_b.ready()
        await a.publish(topics.agent_inbox(RUN, "e1", "solver"), event(1))
        await b.publish(topics.gm_inbox(RUN, "e1"), event(2))
        assert numbers(await take(at_b, 1)) == [1]
        assert numbers(await take(at_a, 1)) == [2]
        assert a.stats.delivered == 1 and b.stats.delivered == 1


async def test_a_process_receives_its_own_messages_once(mqtt_broker: MqttBroker) -> None:
    async with mqtt_broker.bus() as a, mqtt_broker.bus() as b:
        mine = a.subscribe(f"parley/{RUN}/#")
        theirs = b.subscribe(f"parley/{RUN}/#")
        await mine.ready()
        await theirs.ready()
        for i in range(50):
            await a.publish(topics.events(RUN, "e1"), event(i))
        assert numbers(await take(theirs, 50)) == list(range(50))  # all went through the broker
        assert numbers(await take(mine, 50)) == list(range(50))
        await asyncio.sleep(0.3)
        assert len(mine.mailbox) == 0  # no second copy came back from the broker
        assert a.stats.delivered == 50


async def test_a_redelivered_message_reaches_the_application_once(
    mqtt_broker: MqttBroker,
) -> None:
    """The same message (same id) arriving twice, as a QoS 1 redelivery would."""
    async with mqtt_broker.bus() as bus:
        sub = bus.subscribe(topics.gm_inbox(RUN, "e1"))
        other = bus.subscribe(topics.gm_inbox(RUN, "e2"))
        await sub.ready()
        await other.ready()
        message = event(5)
        payload = encode(message)
        for _ in range(3):
            await mqtt_broker.publish_raw(topics.gm_inbox(RUN, "e1"), payload)
        # the same message on another topic is another delivery, not a duplicate
        await mqtt_broker.publish_raw(topics.gm_inbox(RUN, "e2"), payload)
        await mqtt_broker.publish_raw(topics.gm_inbox(RUN, "e1"), encode(event(6)))
        assert numbers(await take(sub, 2)) == [5, 6]
        assert numbers(await take(other, 1)) == [5]
        assert bus.stats.duplicates == 2


async def test_overlapping_subscriptions_deliver_once_to_each(mqtt_broker: MqttBroker) -> None:
    async with mqtt_broker.bus() as a, mqtt_broker.bus() as b:
        wide = b.subscribe(f"parley/{RUN}/#")
        narrow = b.subscribe(topics.events(RUN, "e1"))
        await wide.ready()
        await narrow.ready()
        for i in range(20):
            await a.publish(topics.events(RUN, "e1"), event(i))
        assert numbers(await take(wide, 20)) == list(range(20))
        assert numbers(await take(narrow, 20)) == list(range(20))
        await asyncio.sleep(0.2)
        assert len(wide.mailbox) == len(narrow.mailbox) == 0


async def test_user_properties_carry_traceparent_and_content_type(
    mqtt5_broker: MqttBroker,
) -> None:
    topic = topics.events(RUN, "traced")
    async with aiomqtt.Client(
        mqtt5_broker.host, mqtt5_broker.port, protocol=aiomqtt.ProtocolVersion.V5
    ) as raw:
        await raw.subscribe(topic, qos=1)
        # Unbatched: a batch carries its own content type (tests/bus/test_batching.py).
        async with mqtt5_broker.bus(batch=False) as bus:
            traced = event(1).model_copy(update={"traceparent": TRACEPARENT})
            await bus.publish(topic, traced)
            await bus.publish(topic, event(2))
            received = []
            async with asyncio.timeout(5):
                async for message in raw.messages:
                    received.append(message)
                    if len(received) == 2:
                        break
    first, second = (m.properties for m in received)
    assert first.ContentType == CONTENT_TYPE
    assert ("traceparent", TRACEPARENT) in first.UserProperty
    assert second.ContentType == CONTENT_TYPE
    assert not getattr(second, "UserProperty", [])


async def test_closing_one_of_two_subscriptions_keeps_the_other(mqtt_broker: MqttBroker) -> None:
    topic = topics.agent_inbox(RUN, "e1", "expert")
    async with mqtt_broker.bus() as a, mqtt_broker.bus() as b:
        first = b.subscribe(topic)
        second = b.subscribe(topic)
        assert first._ready is second._ready  # one broker subscription for both
        await first.ready()
        await a.publish(topic, event(0))
        await first.close()
        await a.publish(topic, event(1))
        assert numbers(await take(second, 2)) == [0, 1]
        await second.close()  # returns at UNSUBACK
        await a.publish(topic, event(2))  # nobody here wants it now
        async with b.subscribe(topic) as again:
            await a.publish(topic, event(3))
            got = numbers(await take(again, 1))
            if mqtt_broker.mqtt5 or got != [2]:  # amqtt may still route one after UNSUBACK
                assert got == [3]


async def test_qos0_messages_are_delivered(mqtt_broker: MqttBroker) -> None:
    """max_queued_messages 0 must not drop QoS 0 messages (a Mosquitto 2.0.2 regression)."""
    async with mqtt_broker.bus() as a, mqtt_broker.bus() as b:
        sub = b.subscribe(topics.state(RUN, "e1"))
        await sub.ready()
        for i in range(100):
            await a.publish(topics.state(RUN, "e1"), event(i), qos=0)
        assert numbers(await take(sub, 100)) == list(range(100))


async def test_images_by_reference_are_resolved_by_the_receiver(mqtt_broker: MqttBroker) -> None:
    image = ImagePart.from_bytes(os.urandom(200_000))
    store = {image.sha256: image.data}
    message = StateUpdate(run=RUN, episode="e1", sender="gm", content=[image])
    async with (
        mqtt_broker.bus(inline_images=False) as a,
        mqtt_broker.bus(resolve_image=store.get) as b,
        mqtt_broker.bus() as c,
    ):
        with_store = b.subscribe(topics.state(RUN, "e1"))
        without = c.subscribe(topics.state(RUN, "e1"))
        await with_store.ready()
        await without.ready()
        await a.publish(topics.state(RUN, "e1"), message)
        (delivery,) = await take(with_store, 1)
        assert delivery.message == message
        (reference,) = await take(without, 1)  # no store: the image comes without bytes
        assert reference.message.content[0].data is None  # type: ignore[union-attr]
        assert reference.message.content[0].sha256 == image.sha256  # type: ignore[union-attr]


# -- flow control -----------------------------------------------------------------------------


async def test_a_lagging_remote_subscriber_loses_nothing_and_holds_a_bounded_backlog(
    mqtt_broker: MqttBroker,
) -> None:
    n = 3000  # more than Mosquitto's default queue (1000): the project config must not drop
    topic = topics.events(RUN, "flood")
    async with (
        # One message a PUBLISH: the backlog counts PUBLISHes, and a batch is one.
        mqtt_broker.bus(batch=False) as a,
        mqtt_broker.bus(receive_maximum=20, max_backlog=100) as b,
    ):
        sub = b.subscribe(topic, maxsize=50)
        await sub.ready()
        for i in range(n):
            await a.publish(topic, event(i))
        for _ in range(100):  # the subscriber reads nothing yet: its mailbox fills up
            if len(sub.mailbox) == 50 and b.backlog >= 50:
                break
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.3)
        assert len(sub.mailbox) == 50
        assert 50 <= b.backlog <= b.max_backlog + 1  # it stopped taking more from the broker
        got = await take(sub, n, timeout=30)
        assert numbers(got) == list(range(n))
        assert b.stats.duplicates == 0


async def test_close_waits_for_publishes_in_flight(mqtt_broker: MqttBroker) -> None:
    topic = topics.results(RUN)
    async with mqtt_broker.bus() as receiver:
        sub = receiver.subscribe(topic, maxsize=5000)
        await sub.ready()
        sender = await mqtt_broker.bus().start()
        for i in range(2000):
            await sender.publish(topic, event(i))
        assert sender.pending > 0  # publish does not wait for each PUBACK
        await sender.close()
        assert sender.pending == 0
        assert numbers(await take(sub, 2000)) == list(range(2000))


# -- the broker goes away ---------------------------------------------------------------------


def fast(broker: MqttBroker) -> dict[str, float]:
    return {"reconnect_min": 0.02, "reconnect_max": 0.3}


async def test_publishes_made_while_the_broker_is_down_are_sent_when_it_returns(
    mosquitto_broker: MqttBroker,
) -> None:
    topic = topics.gm_inbox(RUN, "offline")
    async with (
        mosquitto_broker.bus(**fast(mosquitto_broker)) as a,
        mosquitto_broker.bus(**fast(mosquitto_broker)) as b,
    ):
        sub = b.subscribe(topic)
        await sub.ready()
        await asyncio.to_thread(mosquitto_broker.stop)
        for i in range(20):
            await asyncio.wait_for(a.publish(topic, event(i)), 2)  # queued, not lost
        assert a.pending == 20 and not a.connected
        await asyncio.to_thread(mosquitto_broker.start)
        assert numbers(await take(sub, 20)) == list(range(20))
        assert a.stats.reconnects >= 1 and b.stats.reconnects >= 1
        assert a.pending == 0


async def test_publish_waits_when_its_window_is_full(mosquitto_broker: MqttBroker) -> None:
    topic = topics.gm_inbox(RUN, "window")
    async with (
        mosquitto_broker.bus(max_inflight=10, **fast(mosquitto_broker)) as a,
        mosquitto_broker.bus(**fast(mosquitto_broker)) as b,
    ):
        sub = b.subscribe(topic)
        await sub.ready()
        await asyncio.to_thread(mosquitto_broker.stop)
        for i in range(10):
            await a.publish(topic, event(i))
        blocked = asyncio.create_task(a.publish(topic, event(10)))
        await asyncio.sleep(0.3)
        assert not blocked.done()
        await asyncio.to_thread(mosquitto_broker.start)
        await asyncio.wait_for(blocked, 10)
        assert numbers(await take(sub, 11)) == list(range(11))


async def _flow_through_a_broker_fault(broker: MqttBroker, *, hard: bool) -> dict:
    n = 6000
    topic = topics.events(RUN, "fault")
    options = fast(broker)
    pub = await broker.bus(**options).start()
    sub_bus = await broker.bus(**options).start()
    sub = sub_bus.subscribe(topic, maxsize=n)
    await sub.ready()
    if hard:
        # Mosquitto saves its database every autosave_interval: a subscription older than
        # that survives a crash. Save now instead of waiting.
        await asyncio.to_thread(broker.save)
    received: list[int] = []
    published = 0
    marks: dict[str, int] = {}

    async def consume() -> None:
        async for delivery in sub:
            received.append(delivery.message.data["i"])  # type: ignore[union-attr]
            if received[-1] == n - 1:
                return

    async def produce() -> None:
        nonlocal published
        for i in range(n):
            await pub.publish(topic, event(i))
            published += 1
            if i % 5 == 0:
                await asyncio.sleep(0.001)  # spread the flow over the fault

    consumer = asyncio.create_task(consume())
    producer = asyncio.create_task(produce())
    while published < n // 4:
        await asyncio.sleep(0.005)
    marks["fault"] = published
    if hard:
        await asyncio.to_thread(broker.kill)
        marks["killed"] = published  # none of these can have been acknowledged
        await asyncio.sleep(0.3)
        await asyncio.to_thread(broker.start)
    else:
        await asyncio.to_thread(broker.restart, downtime=0.3)
    await sub_bus.wait_connected(10)
    await asyncio.sleep(0.3)  # the subscriber's filters are subscribed again
    marks["back"] = published
    await asyncio.wait_for(producer, 30)
    try:
        await asyncio.wait_for(consumer, 30)
    finally:
        await pub.close()
        await sub_bus.close()
    print(
        f"{'kill' if hard else 'restart'}: {len(received)} of {n} received, "
        f"{len(received) - len(set(received))} twice; publisher resent {pub.stats.resent}; "
        f"subscriber dropped {sub_bus.stats.duplicates} duplicates; "
        f"reconnects {pub.stats.reconnects}/{sub_bus.stats.reconnects}; marks {marks}"
    )
    return {
        "received": received,
        "marks": marks,
        "pub": pub.stats,
        "sub": sub_bus.stats,
        "n": n,
    }


async def test_broker_restart_while_messages_flow_loses_and_repeats_nothing(
    mosquitto_broker: MqttBroker,
) -> None:
    """Mosquitto stopped (it saves sessions and queues) and started while messages flow:
    every QoS 1 message arrives exactly once, in order."""
    result = await _flow_through_a_broker_fault(mosquitto_broker, hard=False)
    assert result["received"] == list(range(result["n"]))
    assert result["marks"]["back"] < result["n"], "the fault came after the flow had ended"
    assert result["pub"].reconnects >= 1 and result["sub"].reconnects >= 1


async def test_broker_killed_while_messages_flow_loses_only_what_it_had_accepted(
    mosquitto_broker: MqttBroker,
) -> None:
    """SIGKILL: messages Mosquitto had acknowledged but not yet passed on die with it, and
    nothing else: every message the publisher still held is sent again after the restart, no
    message reaches the application twice, and the order holds."""
    result = await _flow_through_a_broker_fault(mosquitto_broker, hard=True)
    received, n, marks = result["received"], result["n"], result["marks"]
    assert len(received) == len(set(received)), "a message was delivered twice"
    assert received == sorted(received), "messages arrived out of order"
    assert marks["back"] < n, "the fault came after the flow had ended"
    missing = sorted(set(range(n)) - set(received))
    assert not missing or missing[-1] < marks["killed"], missing[-5:]
    assert result["pub"].reconnects >= 1 and result["sub"].reconnects >= 1


# -- TLS and credentials ----------------------------------------------------------------------


def _self_signed(folder: Path) -> tuple[Path, Path, Path]:
    """A test CA and a server certificate for localhost it signed: (ca.pem, server.pem,
    server.key). Made with ``cryptography`` (a dev dependency), so no openssl binary is needed
    and the TLS test runs wherever the tests do."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "parley test CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    paths = folder / "ca.pem", folder / "server.pem", folder / "server.key"
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    for path in (folder, *paths):
        path.chmod(0o755 if path.is_dir() else 0o644)  # Mosquitto may run as its own user
    return paths


@pytest.fixture
def broker_folder() -> Path:
    folder = Path(tempfile.mkdtemp(prefix="parley-test-broker-"))
    folder.chmod(0o755)
    yield folder
    subprocess.run(["rm", "-rf", str(folder)], check=False)


async def test_mqtts_with_a_ca_file_and_insecure(mqtt5_broker: MqttBroker, broker_folder) -> None:
    ca, cert, key = _self_signed(broker_folder)
    config = broker_folder / "tls.conf"
    config.write_text(f"{PROJECT_CONFIG.read_text()}\ncertfile {cert}\nkeyfile {key}\n")
    with start_mosquitto(config) as broker:
        url = f"mqtts://127.0.0.1:{broker.port}"
        async with (
            MqttBus.from_url(f"{url}?ca={ca}") as a,
            MqttBus.from_url(f"{url}?insecure=1") as b,
        ):
            sub = b.subscribe(topics.results(RUN))
            await sub.ready()
            await a.publish(topics.results(RUN), event(1))
            assert numbers(await take(sub, 1)) == [1]
        with pytest.raises(MqttConnectError):  # the system CAs do not know our test CA
            async with MqttBus.from_url(url, connect_timeout=1.0):
                pass


async def test_username_and_password(mqtt5_broker: MqttBroker, broker_folder) -> None:
    passwords = broker_folder / "passwords"
    done = subprocess.run(
        ["mosquitto_passwd", "-b", "-c", str(passwords), "gm", "pa:ss"], capture_output=True
    )
    require(done.returncode == 0, "mosquitto_passwd is needed to make a password file")
    passwords.chmod(0o644)
    config = broker_folder / "auth.conf"
    config.write_text(
        PROJECT_CONFIG.read_text().replace("allow_anonymous true", "allow_anonymous false")
        + f"\npassword_file {passwords}\n"
    )
    with start_mosquitto(config) as broker:
        async with MqttBus.from_url(f"mqtt://gm:pa%3Ass@127.0.0.1:{broker.port}") as bus:
            sub = bus.subscribe(topics.results(RUN))
            await sub.ready()
            await bus.publish(topics.results(RUN), event(3))
            assert numbers(await take(sub, 1)) == [3]
        with pytest.raises(MqttConnectError, match="no connection"):
            async with MqttBus.from_url(
                f"mqtt://gm:wrong@127.0.0.1:{broker.port}", connect_timeout=1.0
            ):
                pass
