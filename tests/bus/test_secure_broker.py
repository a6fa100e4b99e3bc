"""The secure broker (``parley broker --secure``): real Mosquitto, real TLS, real ACLs.

What a message may reach is asserted without waiting for silence: after the messages a client
must not receive, a message it may receive is published (by the same client, or after the
broker has acknowledged the others), and Mosquitto delivers in order, so by the time that
last one arrives anything allowed before it would have arrived too.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import ssl
import stat
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import aiomqtt
import paho.mqtt.client as paho
import pytest
from paho.mqtt.properties import Properties

from parley.bus import connect, topics
from parley.bus.broker import PROJECT_CONFIG, find_mosquitto, free_port, port_open
from parley.bus.messages import Control
from parley.bus.secure import (
    PRINCIPALS,
    SecureError,
    SecureSetup,
    _check_reachable,
    bus_url,
    create_secure_dir,
    job_group,
    load_setup,
    password_hash,
    render_secure_config,
    running_pid,
)
from tests.conftest import require

pytestmark = pytest.mark.anyio

NOT_AUTHORIZED = 135  # MQTT 5 reason code 0x87, in CONNACK and PUBACK
RUN, EP = "r1", "e1"


def login(setup: SecureSetup, principal: str) -> tuple[str, str]:
    data = json.loads(setup.credentials(principal).read_text())
    return data["username"], data["password"]


@asynccontextmanager
async def client(
    setup: SecureSetup,
    principal: str | None,
    *,
    password: str | None = None,
    cafile: Path | bool | None = True,
    **options: object,
) -> AsyncIterator[aiomqtt.Client]:
    """An MQTT 5 client over TLS as ``principal`` (None: anonymous)."""
    username = None
    if principal is not None:
        username, real = login(setup, principal)
        password = password or real
    context = ssl.create_default_context(cafile=str(setup.ca_path) if cafile is True else None)
    async with aiomqtt.Client(
        setup.connect_host,
        setup.port,
        protocol=aiomqtt.ProtocolVersion.V5,
        tls_context=context,
        username=username,
        password=password,
        **options,  # type: ignore[arg-type]
    ) as mqtt:
        yield mqtt


async def received_until(mqtt: aiomqtt.Client, last_topic: str) -> list[str]:
    """The topics ``mqtt`` receives up to and including the first message on ``last_topic``."""
    seen: list[str] = []
    async with asyncio.timeout(15):
        async for message in mqtt.messages:
            seen.append(message.topic.value)
            if message.topic.value == last_topic:
                return seen
    return seen


async def dropped_after(
    connecting: contextlib.AbstractAsyncContextManager[aiomqtt.Client],
    topic: str,
    drop: Callable[[], object],
) -> None:
    """Connect, subscribe to ``topic``, call ``drop``, and see the broker disconnect the
    client within 15 s."""
    with pytest.raises(aiomqtt.MqttError) as dropped:
        async with connecting as mqtt:
            await mqtt.subscribe(topic, qos=1)
            drop()
            async with asyncio.timeout(15):
                async for _ in mqtt.messages:
                    pass
    # Iterating ends with aiomqtt's "Disconnected during message iteration". aiomqtt before
    # 2.5 then raises the disconnection once more on leaving the client's block (an
    # MqttCodeError with the disconnect's reason code), over that first error; later releases
    # do not. Either way the client was dropped, which is what the caller checks.
    error = dropped.value
    assert "Disconnected" in f"{error} {error.__context__}", repr(error)


def reason(error: aiomqtt.MqttCodeError) -> int:
    """The reason code of a refused CONNECT."""
    code = error.rc
    return code if isinstance(code, int) else code.value  # type: ignore[union-attr]


def publish_reason(setup: SecureSetup, principal: str, topic: str, payload: bytes) -> int:
    """Publish at QoS 1 with paho and return the PUBACK's reason code (aiomqtt hides it)."""
    username, password = login(setup, principal)
    codes: list[int] = []
    mqtt = paho.Client(paho.CallbackAPIVersion.VERSION2, protocol=paho.MQTTv5)
    mqtt.username_pw_set(username, password)
    mqtt.tls_set(ca_certs=str(setup.ca_path))
    mqtt.on_publish = lambda c, u, mid, code, props: codes.append(code.value)
    mqtt.connect(setup.connect_host, setup.port)
    try:
        mqtt.publish(topic, payload, qos=1)
        deadline = time.monotonic() + 15
        while not codes and time.monotonic() < deadline:
            mqtt.loop(timeout=0.05)
        assert codes, "no PUBACK"
    finally:
        mqtt.disconnect()
    return codes[0]


# -- authentication and TLS ----------------------------------------------------------------------


async def test_an_anonymous_client_is_refused(secure_broker: SecureSetup) -> None:
    with pytest.raises(aiomqtt.MqttCodeError) as refused:
        async with client(secure_broker, None):
            pass
    assert reason(refused.value) == NOT_AUTHORIZED


async def test_a_wrong_password_is_refused(secure_broker: SecureSetup) -> None:
    with pytest.raises(aiomqtt.MqttCodeError) as refused:
        async with client(secure_broker, "worker", password="not-the-password"):
            pass
    assert reason(refused.value) == NOT_AUTHORIZED
    async with client(secure_broker, "worker") as mqtt:  # the right one is let in
        await mqtt.publish(topics.worker(RUN, "w0"), b"up", qos=1)


async def test_a_client_without_the_ca_fails_the_tls_handshake(secure_broker: SecureSetup) -> None:
    # The system's CAs only: the broker's certificate comes from a CA the client does not know.
    with pytest.raises(aiomqtt.MqttError, match="CERTIFICATE_VERIFY_FAILED"):
        async with client(secure_broker, "worker", cafile=None):
            pass


async def test_plain_mqtt_cannot_connect_to_the_tls_port(secure_broker: SecureSetup) -> None:
    username, password = login(secure_broker, "worker")
    with pytest.raises(aiomqtt.MqttError):
        async with aiomqtt.Client(
            secure_broker.connect_host,
            secure_broker.port,
            protocol=aiomqtt.ProtocolVersion.V5,
            username=username,
            password=password,
            timeout=1,  # no CONNACK comes: the broker waits for a TLS handshake
        ):
            pass


async def test_parley_buses_connect_with_the_urls(secure_broker: SecureSetup) -> None:
    coordinator = await connect(secure_broker.url("coordinator")).start()
    worker = await connect(bus_url(secure_broker.credentials("worker"))).start()
    try:
        inbox = await worker.subscribe(topics.control(RUN)).ready()
        sent = Control(run=RUN, sender="main", command="pause")
        await coordinator.publish(topics.control(RUN), sent)
        async with asyncio.timeout(15):
            delivery = await inbox.get()
        assert delivery.message.id == sent.id
    finally:
        await worker.close()
        await coordinator.close()


# -- ACLs -------------------------------------------------------------------------------------------


async def test_a_worker_subscribed_to_everything_receives_only_what_it_may_read(
    secure_broker: SecureSetup,
) -> None:
    async with (
        client(secure_broker, "worker") as worker,
        client(secure_broker, "coordinator") as coordinator,
    ):
        granted = await worker.subscribe("#", qos=1)
        # Mosquitto 2.0's ACL file never refuses a SUBSCRIBE (its check grants every one and
        # filters at delivery), so the broker answers "granted QoS 1"; what matters is below.
        assert [code.value for code in granted] == [1]
        forbidden = [
            topics.private(RUN, EP, "solver"),
            topics.private_state(RUN, EP),
            topics.events(RUN, EP),
            topics.state(RUN, EP),
            topics.results(RUN),
        ]  # status it reads: a coordinator's final status ends the run on its workers
        for topic in forbidden:
            await coordinator.publish(topic, b"secret", qos=1)
        await coordinator.publish(topics.control(RUN), b"pause", qos=1)
        assert await received_until(worker, topics.control(RUN)) == [topics.control(RUN)]


async def test_a_seat_reads_its_own_inbox_and_not_another_roles(
    secure_broker: SecureSetup,
) -> None:
    seat = secure_broker.issue_seat(RUN, EP, "solver")
    user = json.loads(seat.read_text())["username"]
    async with (
        client(secure_broker, user) as solver,
        client(secure_broker, "coordinator") as coordinator,
    ):
        await solver.subscribe(f"parley/{RUN}/#", qos=1)
        for topic in (
            topics.agent_inbox(RUN, EP, "expert"),  # another role's turn requests
            topics.private(RUN, EP, "expert"),  # and its private events
            topics.private_state(RUN, EP),
            topics.agent_inbox(RUN, "e2", "solver"),  # the same role of another episode
            topics.agent_inbox(RUN, EP, "solver"),  # its own inbox
            topics.private(RUN, EP, "solver"),  # its own private events
            topics.events(RUN, EP),
        ):
            await coordinator.publish(topic, b"x", qos=1)
        assert await received_until(solver, topics.events(RUN, EP)) == [
            topics.agent_inbox(RUN, EP, "solver"),
            topics.private(RUN, EP, "solver"),
            topics.events(RUN, EP),
        ]
    # It answers its game master on its own role's topic (accepted: 16 is "no matching
    # subscribers", a success), never on another role's or the game master's own inbox, and
    # may not speak for the game.
    code = await asyncio.to_thread(
        publish_reason, secure_broker, user, topics.seat_replies(RUN, EP, "solver"), b"move"
    )
    assert code < 128
    for topic in (topics.seat_replies(RUN, EP, "expert"), topics.gm_inbox(RUN, EP)):
        code = await asyncio.to_thread(publish_reason, secure_broker, user, topic, b"move")
        assert code == NOT_AUTHORIZED, topic
    code = await asyncio.to_thread(
        publish_reason, secure_broker, user, topics.events(RUN, EP), b"forged"
    )
    assert code == NOT_AUTHORIZED


async def test_the_dashboard_reads_public_topics_only(secure_broker: SecureSetup) -> None:
    async with (
        client(secure_broker, "dashboard") as dashboard,
        client(secure_broker, "coordinator") as coordinator,
        client(secure_broker, "worker") as worker,
    ):
        await dashboard.subscribe("parley/#", qos=1)
        for topic in (topics.job_results(RUN), topics.worker(RUN, "w0")):
            await worker.publish(topic, b"private", qos=1)
        for topic in (
            topics.private(RUN, EP, "solver"),
            topics.private_state(RUN, EP),
            topics.agent_inbox(RUN, EP, "solver"),
            topics.gm_inbox(RUN, EP),
            topics.jobs(RUN),
            topics.control(RUN),
        ):
            await coordinator.publish(topic, b"private", qos=1)
        public = [
            topics.events(RUN, EP),
            topics.state(RUN, EP),
            topics.status(RUN, "main"),
            topics.results(RUN),
        ]
        for topic in public:
            await coordinator.publish(topic, b"public", qos=1)
        assert await received_until(dashboard, topics.results(RUN)) == public


async def test_the_dashboard_cannot_forge_results(secure_broker: SecureSetup) -> None:
    async with (
        client(secure_broker, "operator") as operator,
        client(secure_broker, "coordinator") as coordinator,
    ):
        await operator.subscribe("parley/#", qos=1)
        for topic in (topics.results(RUN), topics.events(RUN, EP)):
            code = await asyncio.to_thread(
                publish_reason, secure_broker, "dashboard", topic, b"forged"
            )
            assert code == NOT_AUTHORIZED
        # The refusals were acknowledged before this is sent: the operator, who reads every
        # topic, sees the real result only.
        await coordinator.publish(topics.results(RUN), b"real", qos=1)
        async with asyncio.timeout(15):
            message = await anext(aiter(operator.messages))
        assert (message.topic.value, message.payload) == (topics.results(RUN), b"real")


async def test_only_the_coordinator_may_publish_a_runs_status(secure_broker: SecureSetup) -> None:
    """The shared worker credential cannot claim a run's status (a forged "run finished" would
    end the run on every worker); jobs and control are the coordinator's too."""
    async with (
        client(secure_broker, "operator") as operator,
        client(secure_broker, "coordinator") as coordinator,
    ):
        await operator.subscribe("parley/#", qos=1)
        refused = [topics.status(RUN, "main"), topics.status(RUN, "w0"), topics.jobs(RUN)]
        refused += [topics.control(RUN), topics.episode_control(RUN, EP)]
        for topic in refused:
            code = await asyncio.to_thread(
                publish_reason, secure_broker, "worker", topic, b"forged"
            )
            assert code == NOT_AUTHORIZED, topic
        # The coordinator's own status goes through, and is the only thing the operator sees.
        await coordinator.publish(topics.status(RUN, "main"), b"real", qos=1)
        async with asyncio.timeout(15):
            message = await anext(aiter(operator.messages))
        assert (message.topic.value, message.payload) == (topics.status(RUN, "main"), b"real")


async def test_the_operator_reads_everything_and_writes_nothing(
    secure_broker: SecureSetup,
) -> None:
    async with (
        client(secure_broker, "operator") as operator,
        client(secure_broker, "coordinator") as coordinator,
    ):
        await operator.subscribe("parley/#", qos=1)
        sent = [topics.private(RUN, EP, "solver"), topics.agent_inbox(RUN, EP, "expert")]
        for topic in sent:
            await coordinator.publish(topic, b"x", qos=1)
        assert await received_until(operator, sent[-1]) == sent
    code = await asyncio.to_thread(
        publish_reason, secure_broker, "operator", topics.control(RUN), b"pause"
    )
    assert code == NOT_AUTHORIZED


async def test_workers_share_the_jobs_and_report_results(secure_broker: SecureSetup) -> None:
    shared = topics.shared_jobs()  # $share/parley-workers/parley/+/jobs
    async with (
        client(secure_broker, "worker", identifier="w1") as w1,
        client(secure_broker, "worker", identifier="w2") as w2,
        client(secure_broker, "coordinator") as coordinator,
    ):
        for worker in (w1, w2):
            assert [c.value for c in await worker.subscribe(shared, qos=1)] == [1]
        await coordinator.subscribe(topics.job_results(RUN), qos=1)
        jobs = [f"job-{i}".encode() for i in range(8)]
        for job in jobs:
            await coordinator.publish(topics.jobs(RUN), job, qos=1)
        taken: list[bytes] = []

        async def take(worker: aiomqtt.Client) -> None:
            # A worker the broker drops once its jobs are done does no harm (seen on a loaded
            # machine over TLS); one dropped earlier loses jobs, and the wait below fails.
            with contextlib.suppress(aiomqtt.MqttError):
                async for message in worker.messages:
                    assert isinstance(message.payload, bytes)
                    taken.append(message.payload)
                    await worker.publish(topics.job_results(RUN), b"done " + message.payload, qos=1)

        tasks = [asyncio.create_task(take(worker)) for worker in (w1, w2)]
        try:
            results = []
            async with asyncio.timeout(15):
                async for message in coordinator.messages:
                    results.append(message.payload)
                    if len(results) == len(jobs):
                        break
        except aiomqtt.MqttError as exc:
            broker = secure_broker.process
            alive = broker is not None and broker.running
            tail = broker.log_tail(40) if broker is not None else ""
            raise AssertionError(f"{exc}; broker running: {alive}; its log:\n{tail}") from exc
        finally:
            for task in tasks:
                task.cancel()
        assert sorted(taken) == sorted(jobs)  # each job went to one worker, once
        assert sorted(results) == sorted(b"done " + job for job in jobs)


def test_the_workers_group_is_a_secret_of_their_credentials(secure_broker: SecureSetup) -> None:
    group = job_group(secure_broker.credentials("worker"))
    assert group and group != topics.JOB_GROUP and len(group) > 20
    topics.check_filter(topics.shared_jobs(group=group))
    for principal in ("coordinator", "dashboard", "operator"):
        assert job_group(secure_broker.credentials(principal)) is None
    again = create_secure_dir(secure_broker.dir, port=secure_broker.port)
    assert job_group(again.credentials("worker")) == group  # kept when the folder is reused


async def test_only_workers_receive_jobs_from_the_shared_subscription(
    secure_broker: SecureSetup,
) -> None:
    # Mosquitto checks a shared subscription when it delivers, against the job's own topic:
    # a dashboard that joins the workers' group is granted the subscription but gets no job.
    async with (
        client(secure_broker, "dashboard") as dashboard,
        client(secure_broker, "coordinator") as coordinator,
    ):
        await dashboard.subscribe(topics.shared_jobs(), qos=1)
        await dashboard.subscribe(topics.results(RUN), qos=1)
        await coordinator.publish(topics.jobs(RUN), b"job", qos=1)
        await coordinator.publish(topics.results(RUN), b"result", qos=1)
        assert await received_until(dashboard, topics.results(RUN)) == [topics.results(RUN)]


async def test_a_seat_issued_while_the_broker_runs_works_without_a_restart(
    secure_broker: SecureSetup,
) -> None:
    assert secure_broker.process is not None and secure_broker.process.process is not None
    pid = secure_broker.process.process.pid
    assert running_pid(secure_broker.pid_path) == pid
    path = secure_broker.issue_seat(RUN, EP, "guesser")
    user = json.loads(path.read_text())["username"]
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert bus_url(path) == secure_broker.url(user)
    # issue_seat returns once the broker has reloaded: the seat works at once.
    async with (
        client(secure_broker, user) as seat,
        client(secure_broker, "coordinator") as coordinator,
    ):
        await seat.subscribe(topics.agent_inbox(RUN, EP, "guesser"), qos=1)
        await coordinator.publish(topics.agent_inbox(RUN, EP, "guesser"), b"turn", qos=1)
        received = await received_until(seat, topics.agent_inbox(RUN, EP, "guesser"))
    assert received == [topics.agent_inbox(RUN, EP, "guesser")]
    assert secure_broker.process.process.pid == pid  # the same broker, never restarted


async def test_a_rotated_password_locks_the_old_one_out(secure_broker: SecureSetup) -> None:
    _, old = login(secure_broker, "dashboard")
    # On reload Mosquitto checks its clients again: the one logged in with the old password
    # is disconnected.
    await dropped_after(
        client(secure_broker, "dashboard"),
        topics.results(RUN),
        lambda: secure_broker.rotate("dashboard"),
    )
    assert login(secure_broker, "dashboard")[1] != old
    with pytest.raises(aiomqtt.MqttCodeError) as refused:
        async with client(secure_broker, "dashboard", password=old):
            pass
    assert reason(refused.value) == NOT_AUTHORIZED
    async with client(secure_broker, "dashboard") as mqtt:
        await mqtt.subscribe(topics.results(RUN), qos=1)


async def test_a_revoked_seat_is_disconnected_and_refused(secure_broker: SecureSetup) -> None:
    path = secure_broker.issue_seat(RUN, EP, "expert")
    user = json.loads(path.read_text())["username"]
    _, password = login(secure_broker, user)
    await dropped_after(
        client(secure_broker, user),
        topics.agent_inbox(RUN, EP, "expert"),
        lambda: secure_broker.revoke_seat(user),
    )
    assert not path.exists()
    assert user not in secure_broker.seats()
    assert f"user {user}" not in (secure_broker.dir / "acl").read_text()
    with pytest.raises(SecureError):
        secure_broker.credentials(user)
    with pytest.raises(aiomqtt.MqttCodeError) as refused:
        async with aiomqtt.Client(
            secure_broker.connect_host,
            secure_broker.port,
            protocol=aiomqtt.ProtocolVersion.V5,
            tls_context=ssl.create_default_context(cafile=str(secure_broker.ca_path)),
            username=user,
            password=password,
        ):
            pass
    assert reason(refused.value) == NOT_AUTHORIZED


async def test_a_restart_keeps_sessions_and_queued_messages(secure_broker: SecureSetup) -> None:
    session = Properties(paho.PacketTypes.CONNECT)
    session.SessionExpiryInterval = 300
    options = {"identifier": "worker-1", "clean_start": False, "properties": session}
    async with client(secure_broker, "worker", **options) as worker:
        await worker.subscribe(topics.control(RUN), qos=1)
    async with client(secure_broker, "coordinator") as coordinator:
        await coordinator.publish(topics.control(RUN), b"queued", qos=1)
    assert secure_broker.process is not None
    secure_broker.process.restart()
    async with client(secure_broker, "worker", **options) as worker:
        async with asyncio.timeout(15):
            message = await anext(aiter(worker.messages))
        assert message.payload == b"queued"


# -- the folder -------------------------------------------------------------------------------------


def directives(text: str) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for line in text.splitlines():
        words = line.split()
        if words and not words[0].startswith("#"):
            found.setdefault(words[0], []).append(" ".join(words[1:]))
    return found


@pytest.fixture
def folder() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="parley-secure-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_the_config_keeps_the_projects_settings_behind_tls_and_passwords(folder: Path) -> None:
    setup = create_secure_dir(folder, host="0.0.0.0", port=18883, hostnames=["broker.lab"])
    config = directives(setup.config_path.read_text())
    project = directives(PROJECT_CONFIG.read_text())
    for name in (
        "max_queued_messages",
        "max_inflight_messages",
        "persistence",
        "autosave_interval",
    ):
        assert config[name] == project[name]
    assert config["listener"] == ["18883 0.0.0.0"]
    assert config["certfile"] == [str(folder / "server.pem")]
    assert config["allow_anonymous"] == ["false"]
    assert config["password_file"] == [str(folder / "passwd")]
    assert config["acl_file"] == [str(folder / "acl")]
    assert config["persistence_location"] == [f"{folder / 'data'}/"]
    assert setup.config_path.read_text() == render_secure_config(setup)
    # Clients dial the certificate's name, not the wildcard address.
    assert json.loads(setup.credentials("worker").read_text())["url"] == "mqtts://broker.lab:18883"


def test_the_folder_is_reused_and_its_secrets_are_private(folder: Path) -> None:
    first = create_secure_dir(folder, port=18884)
    ca = first.ca_path.read_bytes()
    passwords = {p: login(first, p)[1] for p in PRINCIPALS}
    server = (folder / "server.pem").read_bytes()
    again = create_secure_dir(folder)  # nothing given: what the folder has
    assert (again.port, again.host) == (18884, "127.0.0.1")
    assert again.ca_path.read_bytes() == ca
    assert (folder / "server.pem").read_bytes() == server
    assert {p: login(again, p)[1] for p in PRINCIPALS} == passwords
    assert len(set(passwords.values())) == len(PRINCIPALS)
    renamed = create_secure_dir(folder, hostnames=["localhost", "broker.lab"])
    assert (folder / "server.pem").read_bytes() != server  # a certificate for the new names
    assert renamed.ca_path.read_bytes() == ca  # from the same CA: clients keep trusting it
    assert load_setup(folder) == renamed
    for secret in (
        "ca.key",
        "server.key",
        "passwd",
        *(f"credentials/{p}.json" for p in PRINCIPALS),
    ):
        assert stat.S_IMODE((folder / secret).stat().st_mode) == 0o600, secret
    assert all(p not in (folder / "passwd").read_text() for p in passwords.values())


def test_damaged_keys_are_refused_or_reissued_never_remade_quietly(folder: Path) -> None:
    first = create_secure_dir(folder, port=18886)
    ca, ca_key = first.ca_path.read_bytes(), (folder / "ca.key").read_bytes()
    server = (folder / "server.pem").read_bytes()
    # The broker's own key damaged: its certificate is issued again, from the same CA.
    (folder / "server.key").write_bytes(b"\xff\xfe not a key")
    again = create_secure_dir(folder)
    assert (folder / "server.pem").read_bytes() != server
    assert (
        again.ca_path.read_bytes() == ca and b"PRIVATE KEY" in (folder / "server.key").read_bytes()
    )
    # The CA's key or certificate damaged: refused, naming the file; nothing made anew.
    for name in ("ca.pem", "ca.key"):
        (folder / name).write_bytes(b"-----BEGIN damaged")
        with pytest.raises(SecureError, match=f"{name} is not the CA's .* restore it"):
            create_secure_dir(folder)
        assert (folder / name).read_bytes() == b"-----BEGIN damaged"
        (folder / name).write_bytes(ca if name == "ca.pem" else ca_key)
    assert create_secure_dir(folder).ca_path.read_bytes() == ca


def test_password_hashes_match_mosquitto_passwd(folder: Path) -> None:
    tool = shutil.which("mosquitto_passwd")
    require(tool is not None, "needs mosquitto_passwd (apt-get install mosquitto)")
    assert tool is not None
    path = folder / "pw"
    subprocess.run([tool, "-b", "-c", str(path), "someone", "s3cret pass"], check=True)
    entry = path.read_text().strip().split(":", 1)[1]
    _, kind, iterations, salt, _ = entry.split("$")
    import base64

    ours = password_hash("s3cret pass", salt=base64.b64decode(salt), iterations=int(iterations))
    assert (kind, ours) == ("7", entry)


def test_bad_input_gives_clear_errors(folder: Path) -> None:
    with pytest.raises(SecureError, match="no secure broker"):
        load_setup(folder)
    not_json = folder / "creds.json"
    not_json.write_text("mqtt://nope")
    with pytest.raises(SecureError, match="not a credentials file"):
        bus_url(not_json)
    with pytest.raises(SecureError, match="neither an IP address nor a host name"):
        create_secure_dir(folder, hostnames=["not a name"])
    setup = create_secure_dir(folder, port=18885)
    with pytest.raises(SecureError, match="cannot be a topic level"):
        setup.issue_seat(RUN, "a/b", "solver")
    with pytest.raises(SecureError, match="no credentials for 'nobody'"):
        setup.url("nobody")


def test_a_folder_the_brokers_user_cannot_enter_is_refused(folder: Path) -> None:
    folder.chmod(0o711)
    private = folder / "private"
    private.mkdir(mode=0o700)
    stranger = (os.getuid() + 4242, os.getgid() + 4242)  # owns nothing here
    with pytest.raises(SecureError, match=f"may not enter {private}"):
        _check_reachable(private / "broker", stranger)
    private.chmod(0o711)
    _check_reachable(private / "broker", stranger)


def test_seats_issued_at_once_are_all_kept(folder: Path) -> None:
    from concurrent.futures import ThreadPoolExecutor

    setup = create_secure_dir(folder, port=18887)
    roles = [f"role{i}" for i in range(12)]
    with ThreadPoolExecutor(6) as pool:
        paths = list(pool.map(lambda role: setup.issue_seat(RUN, EP, role), roles))
    assert sorted(setup.seats()) == sorted(f"seat-{RUN}-{EP}-{role}" for role in roles)
    passwd = (folder / "passwd").read_text()
    for path in paths:
        user = json.loads(path.read_text())["username"]
        assert f"\n{user}:$7$" in passwd
        assert f"user {user}\n" in (folder / "acl").read_text()


def test_seat_users_never_collide(folder: Path) -> None:
    setup = create_secure_dir(folder, port=18886)
    one = json.loads(setup.issue_seat("a-b", "c", "d").read_text())["username"]
    two = json.loads(setup.issue_seat("a", "b-c", "d").read_text())["username"]
    three = json.loads(setup.issue_seat("run:1", "e", "d").read_text())["username"]
    assert one == "seat-a-b-c-d"
    assert len({one, two, three}) == 3
    assert ":" not in three  # the password file's separator
    acl = (folder / "acl").read_text()
    assert f"user {two}\ntopic read parley/a/b-c/agent/d" in acl


# -- the command ------------------------------------------------------------------------------------


def test_parley_broker_secure_serves_the_printed_credentials_and_stops_on_ctrl_c(
    folder: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from parley.runtime.cli import main as cli_main

    require(find_mosquitto() is not None, "needs Mosquitto (apt-get install mosquitto)")
    port = free_port()
    command = [sys.executable, "-m", "parley.runtime.cli", "broker", "--secure", str(folder)]
    process = subprocess.Popen(
        [*command, "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        printed: dict[str, str] = {}
        assert process.stdout is not None
        for line in process.stdout:
            words = line.split()
            if len(words) == 2 and words[0] in PRINCIPALS:
                printed[words[0]] = words[1]
            if line.startswith("mosquitto starts"):
                break
        assert set(printed) == set(PRINCIPALS)
        deadline = time.monotonic() + 15
        while not port_open("127.0.0.1", port):
            assert process.poll() is None, process.stderr.read() if process.stderr else ""
            assert time.monotonic() < deadline, "the broker did not listen"
            time.sleep(0.02)

        async def use() -> None:
            bus = await connect(bus_url(printed["worker"])).start()
            await bus.close()

        asyncio.run(use())
        # The other commands run in this process (the same parser and code; no second start).
        secure = ["broker", "--secure", str(folder)]
        assert cli_main([*secure, "--seat", f"{RUN}/{EP}/solver"]) == 0
        assert "reloaded" in capsys.readouterr().out
        assert cli_main([*secure, "--seat", "no-slashes"]) == 2
        assert "RUN/EPISODE/ROLE" in capsys.readouterr().err
        broker_pid = running_pid(folder / "mosquitto.pid")
        assert broker_pid is not None
        # A second broker from the same folder is refused before it changes anything.
        config = (folder / "mosquitto.conf").read_text()
        assert cli_main([*secure, "--port", str(free_port())]) == 1
        assert "already runs" in capsys.readouterr().err
        assert (folder / "mosquitto.conf").read_text() == config
        process.send_signal(signal.SIGINT)
        assert process.wait(15) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert not (folder / "mosquitto.pid").exists()
    with pytest.raises(ProcessLookupError):  # stopped and reaped by parley
        os.kill(broker_pid, 0)


def test_parley_dashboard_watches_through_a_credentials_file(secure_broker: SecureSetup) -> None:
    """``parley dashboard --credentials FILE``: the spectator's file gives the URL, user and CA
    (the password stays out of the process list); a file that is not there is one line."""
    command = [sys.executable, "-m", "parley.runtime.cli", "dashboard", "--port", "0"]
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "COLUMNS": "200"}
    missing = subprocess.run(
        [*command, "--credentials", str(secure_broker.dir / "nobody.json")],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert missing.returncode != 0 and "nobody.json" in missing.stderr + missing.stdout
    assert "Traceback" not in missing.stderr
    process = subprocess.Popen(
        [*command, "--credentials", str(secure_broker.credentials("dashboard"))],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    try:
        assert process.stdout is not None
        url = ""
        for line in process.stdout:
            if line.startswith("dashboard: "):
                url = line.split()[1]
                break
        assert url.startswith("http://127.0.0.1:"), "the dashboard did not start"
        with urllib.request.urlopen(url.replace("/?", "/api/runs?"), timeout=10) as answer:
            assert answer.status == 200
        password = json.loads(secure_broker.credentials("dashboard").read_text())["password"]
        assert password not in " ".join(map(str, process.args))  # not in the process list
    finally:
        process.send_signal(signal.SIGINT)
        process.wait(20)
