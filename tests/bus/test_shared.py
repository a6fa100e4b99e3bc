"""Shared subscriptions (``$share/<group>/<filter>``): what workers take jobs through.

Within a group each message goes to exactly one subscription (for MQTT: of all the group's
subscribers on the broker, dealt by Mosquitto), while other groups and plain subscriptions get
their own copies; deliveries carry the real topic. The MQTT tests use real Mosquitto.
"""

from __future__ import annotations

import asyncio
import re
import signal
import subprocess
import sys
from collections.abc import Iterable

import pytest

from parley.bus import topics
from parley.bus.base import Bus, Delivery, Subscription
from parley.bus.local import LocalBus
from parley.bus.messages import TextPart, TranscriptEvent
from parley.bus.mqtt import MqttBus
from parley.bus.topics import TopicError
from tests.fixtures.broker import MqttBroker

pytestmark = pytest.mark.anyio

RUN = "shared"
N = 300


def job(i: int, run: str = RUN) -> TranscriptEvent:
    return TranscriptEvent(
        run=run,
        episode="e1",
        sender="coordinator",
        from_role="gm",
        event="note",
        content=[TextPart(text=f"job {i}")],
        data={"i": i},
    )


def numbers(deliveries: Iterable[Delivery]) -> list[int]:
    return [d.message.data["i"] for d in deliveries]  # type: ignore[union-attr]


async def share_out(
    subs: list[Subscription], n: int, timeout: float = 15.0, *, topic: str | None = None
) -> list[list[int]]:
    """Read every subscription until ``n`` deliveries (on ``topic``, when given: others are
    skipped) arrived among them all; what each got."""
    got: list[list[Delivery]] = [[] for _ in subs]
    arrived = asyncio.Event()

    async def read(k: int) -> None:
        while True:
            delivery = await subs[k].get()
            if topic is None or delivery.topic == topic:
                got[k].append(delivery)
            if sum(map(len, got)) >= n:
                arrived.set()

    readers = [asyncio.create_task(read(k)) for k in range(len(subs))]
    try:
        await asyncio.wait_for(arrived.wait(), timeout)
    except TimeoutError:
        pytest.fail(f"{[len(g) for g in got]}: {sum(map(len, got))} of {n} arrived in {timeout} s")
    finally:
        for reader in readers:
            reader.cancel()
        await asyncio.gather(*readers, return_exceptions=True)
    await asyncio.sleep(0.3)  # anything more (a second copy) would arrive now
    assert all(len(sub.mailbox) == 0 for sub in subs), [len(s.mailbox) for s in subs]
    return [numbers(g) for g in got]


def assert_dealt(shares: list[list[int]], expected: Iterable[int]) -> None:
    """Each message went to exactly one of the subscriptions, none was lost."""
    everything = [i for share in shares for i in share]
    assert sorted(everything) == sorted(expected), [len(s) for s in shares]
    for share in shares:
        assert share == sorted(share)  # each member gets its share in order


async def publish(bus: Bus, numbers: Iterable[int], topic: str = topics.jobs(RUN)) -> None:
    for i in numbers:
        await bus.publish(topic, job(i))


# -- names --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("bad", "says"),
    [
        ("$share", "group name and a filter"),
        ("$share/", "empty group name"),
        ("$share//parley/+/jobs", "empty group name"),
        ("$share/work+ers/parley/+/jobs", "may not hold"),
        ("$share/+/parley/+/jobs", "may not hold"),
        ("$share/w#/parley/+/jobs", "may not hold"),
        ("$share/workers", "no filter"),
        ("$share/workers/", "no filter"),
        ("$share/workers/parley/#/jobs", "# must be a whole, last level"),
        ("$share/workers/parley/run+/jobs", "+ must fill a whole level"),
        ("$share/workers/$share/inner/parley/#", "shares a shared subscription"),
    ],
)
async def test_bad_shared_filters_raise_topic_errors(bad: str, says: str) -> None:
    with pytest.raises(TopicError, match=re.escape(says)):
        topics.check_filter(bad)
    async with LocalBus() as bus:
        with pytest.raises(TopicError, match=re.escape(says)):
            bus.subscribe(bad)
        assert len(bus.router) == 0
    bus = MqttBus()  # refused before anything is sent: no broker needed
    with pytest.raises(TopicError, match=re.escape(says)):
        bus.subscribe(bad)
    assert len(bus.router) == 0


def test_shared_filters_split_and_match() -> None:
    assert topics.split_shared(topics.shared_jobs()) == ("parley-workers", "parley/+/jobs")
    assert topics.check_filter("$share/g/#") == "$share/g/#"
    assert topics.matches(topics.shared_jobs(), topics.jobs("run1"))
    assert not topics.matches(topics.shared_jobs(), topics.job_results("run1"))
    assert not topics.is_shared("$SYS/#") and topics.is_shared(topics.shared_jobs())
    with pytest.raises(TopicError, match="not a shared subscription"):
        topics.split_shared("parley/+/jobs")


async def test_mqtt_311_refuses_shared_subscriptions_clearly() -> None:
    bus = MqttBus(protocol="3.1.1")
    with pytest.raises(ValueError, match="needs MQTT 5"):
        bus.subscribe(topics.shared_jobs())
    assert len(bus.router) == 0


# -- the local bus --------------------------------------------------------------------------------


async def test_local_group_members_share_while_other_groups_and_plain_get_all() -> None:
    async with LocalBus() as bus:
        workers = [bus.subscribe(topics.shared_jobs(), maxsize=N) for _ in range(3)]
        others = bus.subscribe(topics.shared_jobs(group="auditors"), maxsize=N)
        plain = bus.subscribe(topics.jobs(RUN), maxsize=N)
        await publish(bus, range(N))
        shares = await share_out(workers, N)
        assert_dealt(shares, range(N))
        assert [len(s) for s in shares] == [N // 3] * 3  # round robin when none is full
        assert await share_out([others], N) == [list(range(N))]
        assert await share_out([plain], N) == [list(range(N))]
        assert all(d.topic == topics.jobs(RUN) for d in [*plain.mailbox._items])


async def test_local_group_skips_a_full_member_and_waits_only_when_all_are_full() -> None:
    async with LocalBus() as bus:
        busy = bus.subscribe(topics.shared_jobs(), maxsize=1)
        idle = bus.subscribe(topics.shared_jobs(), maxsize=20)
        await asyncio.wait_for(publish(bus, range(21)), 5)  # no one reads, nothing waits
        assert (len(busy.mailbox), len(idle.mailbox)) == (1, 20)
        late = asyncio.create_task(publish(bus, [21]))
        await asyncio.sleep(0.05)
        assert not late.done()  # every member is full: the publisher waits, nothing drops
        await busy.get()
        await asyncio.wait_for(late, 5)
        assert numbers([await busy.get()]) == [21]


async def test_local_member_closing_mid_stream_leaves_the_rest_to_the_others() -> None:
    async with LocalBus() as bus:
        a, b, c = (bus.subscribe(topics.shared_jobs(), maxsize=N) for _ in range(3))
        await publish(bus, range(30))
        first = await share_out([a, b, c], 30)
        await b.close()
        await publish(bus, range(30, 60))
        second = await share_out([a, c], 30)
        assert_dealt([*first, *second], range(60))
        assert second[0] and second[1]


async def test_local_shared_subscriptions_get_no_retained_messages() -> None:
    async with LocalBus() as bus:
        await bus.publish(topics.jobs(RUN), job(0), retain=True)
        shared = bus.subscribe(topics.shared_jobs())
        plain = bus.subscribe(topics.jobs(RUN))
        await bus.publish(topics.jobs(RUN), job(1))
        assert numbers([await plain.get(), await plain.get()]) == [0, 1]
        assert numbers([await shared.get()]) == [1]


# -- over Mosquitto -------------------------------------------------------------------------------


async def test_mqtt_group_members_get_disjoint_shares_of_everything(
    mqtt5_broker: MqttBroker,
) -> None:
    """Three processes in one group, one in another group, one plain subscriber."""
    run = "deal"
    async with (
        mqtt5_broker.bus() as pub,
        mqtt5_broker.bus() as w1,
        mqtt5_broker.bus() as w2,
        mqtt5_broker.bus() as w3,
        mqtt5_broker.bus() as watcher,
    ):
        workers = [w.subscribe(topics.shared_jobs(), maxsize=N) for w in (w1, w2, w3)]
        auditors = watcher.subscribe(topics.shared_jobs(group="auditors"), maxsize=N)
        plain = watcher.subscribe(topics.jobs(run), maxsize=N)
        for sub in [*workers, auditors, plain]:
            await sub.ready()
        await publish(pub, range(N), topics.jobs(run))
        shares = await share_out(workers, N)
        assert_dealt(shares, range(N))
        assert all(shares), [len(s) for s in shares]  # the broker deals to every member
        assert await share_out([auditors], N) == [list(range(N))]
        assert await share_out([plain], N) == [list(range(N))]
        assert watcher.stats.duplicates == 0  # the two copies were not taken for one


async def test_mqtt_member_in_the_publishers_process_gets_its_share_from_the_broker(
    mqtt5_broker: MqttBroker,
) -> None:
    """Not delivered locally (the broker deals), and the plain subscriber beside it still gets
    every message exactly once."""
    run = "own"
    async with mqtt5_broker.bus() as coordinator, mqtt5_broker.bus() as worker:
        mine = coordinator.subscribe(topics.shared_jobs(), maxsize=N)
        theirs = worker.subscribe(topics.shared_jobs(), maxsize=N)
        plain = coordinator.subscribe(topics.jobs(run), maxsize=N)
        for sub in (mine, theirs, plain):
            await sub.ready()
        await publish(coordinator, range(N), topics.jobs(run))
        shares = await share_out([mine, theirs], N)
        assert_dealt(shares, range(N))
        assert shares[0] and shares[1]
        assert await share_out([plain], N) == [list(range(N))]


async def test_mqtt_plain_and_shared_overlapping_in_one_process_each_get_their_copy(
    mqtt5_broker: MqttBroker,
) -> None:
    run = "overlap"
    async with mqtt5_broker.bus() as pub, mqtt5_broker.bus() as a, mqtt5_broker.bus() as b:
        plain = a.subscribe(f"parley/{run}/#", maxsize=N)
        narrow = a.subscribe(topics.jobs(run), maxsize=N)
        here = [a.subscribe(topics.shared_jobs(), maxsize=N) for _ in range(2)]  # one process
        there = b.subscribe(topics.shared_jobs(), maxsize=N)
        for sub in (plain, narrow, *here, there):
            await sub.ready()
        await publish(pub, range(N), topics.jobs(run))
        shares = await share_out([*here, there], N)
        assert_dealt(shares, range(N))
        assert all(shares), [len(s) for s in shares]
        assert await share_out([plain], N) == [list(range(N))]
        assert await share_out([narrow], N) == [list(range(N))]


@pytest.mark.parametrize("how", ["subscription", "bus"])
async def test_mqtt_member_leaving_mid_stream_leaves_the_rest_to_the_others(
    mqtt5_broker: MqttBroker, how: str
) -> None:
    run = f"leave-{how}"
    async with mqtt5_broker.bus() as pub, mqtt5_broker.bus() as a, mqtt5_broker.bus() as c:
        b = await mqtt5_broker.bus().start()
        try:
            subs = [bus.subscribe(topics.shared_jobs(), maxsize=N) for bus in (a, b, c)]
            for sub in subs:
                await sub.ready()
            await publish(pub, range(90), topics.jobs(run))
            first = await share_out(subs, 90)
            await (subs[1].close() if how == "subscription" else b.close())
            await publish(pub, range(90, 180), topics.jobs(run))
            second = await share_out([subs[0], subs[2]], 90)
        finally:
            await b.close()
        assert_dealt([*first, *second], range(180))
        assert all(first) and all(second)


async def test_mqtt_a_closed_bus_is_dealt_nothing_published_after_its_close(
    mqtt5_broker: MqttBroker,
) -> None:
    """``close()`` returns once the broker has stopped dealing to the bus (its shared
    subscriptions are unsubscribed before it disconnects), so each burst published right after
    a member closed goes whole to the members left. Without that, Mosquitto could deal a job
    of the burst to the member that had left, and it was lost: in 24 of 30 tries."""
    run = "closed"
    async with mqtt5_broker.bus() as pub:
        members = [await mqtt5_broker.bus().start() for _ in range(5)]
        try:
            subs = [bus.subscribe(topics.shared_jobs(), maxsize=N) for bus in members]
            for sub in subs:
                await sub.ready()
            dealt: list[list[int]] = []
            for k in range(4):
                await members[k].close()
                burst = range(30 * k, 30 * (k + 1))
                await publish(pub, burst, topics.jobs(run))
                dealt += await share_out(subs[k + 1 :], len(burst), timeout=5.0)
        finally:
            for bus in members:
                await bus.close()
        assert_dealt(dealt, range(120))


async def test_mqtt_a_hung_broker_holds_a_closing_member_up_only_briefly(
    mosquitto_broker: MqttBroker,
) -> None:
    """A broker that stopped answering (SIGSTOP) sends no UNSUBACK: the close waits for it a
    couple of seconds, not the bus's ``operation_timeout``, then disconnects as before."""
    bus = mosquitto_broker.bus(operation_timeout=60)
    await bus.start()
    sub = bus.subscribe(topics.shared_jobs(), maxsize=1)
    await sub.ready()
    assert mosquitto_broker.process is not None and mosquitto_broker.process.process is not None
    broker = mosquitto_broker.process.process
    broker.send_signal(signal.SIGSTOP)
    try:
        async with asyncio.timeout(30):  # half the operation_timeout: a hang, not a speed
            await bus.close()
    finally:
        broker.send_signal(signal.SIGCONT)
    assert bus.closed and not bus.connected


async def test_mqtt_a_small_mailbox_holds_its_share_back_and_loses_none(
    mqtt5_broker: MqttBroker,
) -> None:
    """A worker with one free slot: the broker's share for it waits unacknowledged."""
    run = "slots"
    async with mqtt5_broker.bus() as pub, mqtt5_broker.bus() as a, mqtt5_broker.bus() as b:
        busy = a.subscribe(topics.shared_jobs(), maxsize=1)
        free = b.subscribe(topics.shared_jobs(), maxsize=N)
        await busy.ready()
        await free.ready()
        await publish(pub, range(N), topics.jobs(run))
        shares = await share_out([busy, free], N)
        assert_dealt(shares, range(N))
        assert a.stats.duplicates == 0 and b.stats.duplicates == 0


async def test_mqtt_unsubscribed_member_gets_nothing_more(mqtt5_broker: MqttBroker) -> None:
    run = "unsub"
    async with mqtt5_broker.bus() as pub, mqtt5_broker.bus() as a, mqtt5_broker.bus() as b:
        gone = a.subscribe(topics.shared_jobs())
        stays = b.subscribe(topics.shared_jobs())
        await gone.ready()
        await stays.ready()
        await gone.close()  # returns at the UNSUBACK
        await publish(pub, range(40), topics.jobs(run))
        assert await share_out([stays], 40) == [list(range(40))]
        async with a.subscribe(topics.shared_jobs()) as back:  # and may join again
            await publish(pub, range(40, 80), topics.jobs(run))
            shares = await share_out([back, stays], 40)
        assert_dealt(shares, range(40, 80))
        assert shares[0]


async def test_mqtt_shared_subscriptions_are_made_again_after_the_session_is_lost(
    mosquitto_broker: MqttBroker,
) -> None:
    """``session_expiry=0``: the restarted broker has no session, so the bus must subscribe
    its shared filter again, with its own Subscription Identifier (else the messages it is
    dealt could not be routed to it)."""
    run = "again"
    fast = {"reconnect_min": 0.02, "reconnect_max": 0.3, "session_expiry": 0}
    async with (
        mosquitto_broker.bus(**fast) as pub,
        mosquitto_broker.bus(**fast) as a,
        mosquitto_broker.bus(**fast) as b,
    ):
        subs = [bus.subscribe(topics.shared_jobs(), maxsize=N) for bus in (a, b)]
        for sub in subs:
            await sub.ready()
        await asyncio.to_thread(mosquitto_broker.restart)
        for bus in (pub, a, b):
            await bus.wait_connected(10)
        # Probes until each member got one: both subscriptions are back on the broker.
        probed = [False, False]

        async def wait_for_probe(k: int) -> None:
            while (await subs[k].get()).topic != topics.jobs("probe"):
                pass
            probed[k] = True

        waiting = [asyncio.create_task(wait_for_probe(k)) for k in (0, 1)]
        async with asyncio.timeout(10):
            while not all(probed):
                await pub.publish(topics.jobs("probe"), job(-1))
                await asyncio.sleep(0.05)
        await asyncio.gather(*waiting)
        await publish(pub, range(N), topics.jobs(run))
        shares = await share_out(subs, N, topic=topics.jobs(run))
        assert_dealt(shares, range(N))
        assert all(shares)
        assert a.stats.reconnects >= 1 and b.stats.reconnects >= 1


async def test_mqtt_shared_subscriptions_get_no_retained_messages(
    mqtt5_broker: MqttBroker,
) -> None:
    run = "retained"
    async with mqtt5_broker.bus() as pub, mqtt5_broker.bus() as a:
        await pub.publish(topics.jobs(run), job(0), retain=True)
        try:
            plain = a.subscribe(topics.jobs(run))
            shared = a.subscribe(topics.shared_jobs())
            await plain.ready()
            await shared.ready()
            assert numbers([await asyncio.wait_for(plain.get(), 5)]) == [0]  # it is there
            await pub.publish(topics.jobs(run), job(1))
            assert await share_out([shared], 1) == [[1]]
        finally:
            await pub.clear_retained(topics.jobs(run))


async def test_mqtt_local_only_shared_subscriptions_share_this_process_s_messages(
    mqtt5_broker: MqttBroker,
) -> None:
    """``local=True``: no broker subscription; each message this process publishes goes to one
    of the group's local members, as on the local bus."""
    run = "local-only"
    async with mqtt5_broker.bus() as pub, mqtt5_broker.bus() as other:
        members = [pub.subscribe(topics.shared_jobs(), local=True) for _ in range(2)]
        remote = other.subscribe(topics.shared_jobs())
        await remote.ready()
        await publish(pub, range(20), topics.jobs(run))
        assert await share_out(members, 20) == [list(range(0, 20, 2)), list(range(1, 20, 2))]
        assert await share_out([remote], 20) == [list(range(20))]  # its own group, on the broker


async def test_mqtt_messages_dealt_to_a_closed_member_are_counted_as_orphaned(
    mqtt5_broker: MqttBroker,
) -> None:
    """What the broker had dealt a member and sent before its UNSUBSCRIBE, while the member
    took nothing (a full mailbox), is lost to the group (no MQTT way to hand it back): the bus
    counts it in ``stats.orphaned``, and the others get everything published after."""
    run = "orphans"
    async with mqtt5_broker.bus() as pub, mqtt5_broker.bus() as a, mqtt5_broker.bus() as b:
        full = a.subscribe(topics.shared_jobs(), maxsize=1)
        other = b.subscribe(topics.shared_jobs(), maxsize=N)
        await full.ready()
        await other.ready()
        await publish(pub, range(40), topics.jobs(run))
        got = await share_out([other], 20)  # the broker deals alternately: 20 each
        async with asyncio.timeout(10):
            # of its share of 20: one in the mailbox, one waiting for room there, and the rest
            # received, unacknowledged
            while a.backlog < 18:
                await asyncio.sleep(0.02)
        await full.close()
        async with asyncio.timeout(10):
            while a.backlog:
                await asyncio.sleep(0.02)
        assert a.stats.orphaned == 19  # all but the one it took into its mailbox
        assert len(full.mailbox) == 1
        await publish(pub, range(40, 60), topics.jobs(run))
        assert await share_out([other], 20) == [list(range(40, 60))]
        assert len(got[0]) == 20


MEMBER = """
import asyncio, sys
from parley.bus import topics
from parley.bus.mqtt import MqttBus

async def main():
    async with MqttBus("127.0.0.1", int(sys.argv[1]), session_expiry=0) as bus:
        async with bus.subscribe(topics.shared_jobs()) as jobs:
            print("ready", flush=True)
            async for _ in jobs:
                pass

asyncio.run(main())
"""


async def test_mqtt_a_killed_member_without_a_session_is_dealt_nothing_more(
    mqtt5_broker: MqttBroker,
) -> None:
    """A worker process killed outright: with ``session_expiry=0`` its session ends with its
    connection, and the broker deals everything to the members left (with a longer expiry it
    keeps dealing the dead session its share until the session expires: see docs/bus.md)."""
    run = "killed"
    member = subprocess.Popen(
        [sys.executable, "-c", MEMBER, str(mqtt5_broker.port)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert member.stdout is not None
        line = await asyncio.wait_for(asyncio.to_thread(member.stdout.readline), 15)
        assert line.strip() == "ready"
        async with mqtt5_broker.bus() as pub, mqtt5_broker.bus() as b:
            stays = b.subscribe(topics.shared_jobs(), maxsize=N)
            await stays.ready()
            await publish(pub, range(20), topics.jobs(run))
            first = await share_out([stays], 10)
            assert len(first[0]) == 10  # the member in the other process took the rest
            member.kill()
            await asyncio.to_thread(member.wait)
            # The broker sees the connection end a moment later: until then probes alternate.
            in_a_row = 0
            async with asyncio.timeout(10):
                while in_a_row < 3:
                    await pub.publish(topics.jobs("probe"), job(-1))
                    try:
                        await asyncio.wait_for(stays.get(), 0.5)
                        in_a_row += 1
                    except TimeoutError:
                        in_a_row = 0
            await publish(pub, range(20, 80), topics.jobs(run))
            assert await share_out([stays], 60, topic=topics.jobs(run)) == [list(range(20, 80))]
    finally:
        member.kill()
        member.wait()
