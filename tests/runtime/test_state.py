"""The game's state on the bus: retained while the episode runs, in step order, images once,
the ``state`` switch, and what is private stays off the agents' inboxes."""

from __future__ import annotations

import asyncio
import io
import random
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import aiomqtt
import pytest
from PIL import Image

from parley.bus import topics
from parley.bus.base import Bus, Delivery
from parley.bus.codec import decode
from parley.bus.messages import ImagePart, StateUpdate, TextPart, TurnRequest, Visibility
from parley.environments.base import GameMaster, Observation, ObserverView, Scores, View
from parley.environments.registry import GameInfo, register
from parley.runtime.config import load_config
from parley.runtime.scheduler import Scheduler, run_experiment
from tests.bus.test_contract import nothing_more, take
from tests.fixtures.broker import MqttBroker

pytestmark = pytest.mark.anyio


class BoardMaster(GameMaster):
    """Count to ``target``; the board is a picture of the count so far: a new one every
    ``every`` counts, in a colour of the episode's own unless ``shared``."""

    roles = ("counter",)

    def __init__(self, instance: dict[str, Any], settings: dict[str, Any] | None = None) -> None:
        super().__init__(instance, settings)
        self.next = 1
        self.target = int(self.settings.get("target", 5))
        self.every = int(self.settings.get("every", 1))
        self.shared = bool(self.settings.get("shared", False))

    def system_prompt(self, role: str) -> str:
        return "Count upwards from 1."

    def whose_turn(self) -> str | None:
        return "counter"

    def observe(self, role: str) -> Observation:
        return Observation(text=f"say {self.next}", data={"next": self.next})

    def handle_reply(self, role: str, text: str) -> None:
        if text.strip() != str(self.next):
            self.violation(role, f"expected {self.next}")
            return
        self.next += 1
        if self.next > self.target:
            self.end("success", "counted")

    def scores(self) -> Scores:
        return Scores(main=100.0 * (self.next - 1) / self.target)

    def observer_view(self, images: bool = True) -> ObserverView:
        pictures = []
        if images:
            out = io.BytesIO()
            n = (self.next - 1) // self.every + 1
            colour = (n * 20 % 256, 0 if self.shared else self.instance["seed"] * 60 % 256, 0)
            Image.new("RGB", (4 * n, 4), colour).save(out, "PNG")
            pictures.append(out.getvalue())
        return ObserverView(
            text=f"counted to {self.next - 1}",
            images=pictures,
            progress=(self.next - 1) / self.target,
        )


def slow_counter(view: View, rng: random.Random) -> str:
    time.sleep(0.15)  # a worker thread (offload_players): long enough to be watched mid-episode
    return str((view.data or {})["next"])


# Holds ``gated`` episodes at their third count until a test opens it (a late subscriber must
# find them running, however loaded the machine).
GATE = threading.Event()


def gated_counter(view: View, rng: random.Random) -> str:
    if (view.data or {})["next"] >= 3:
        GATE.wait(60)
    return str((view.data or {})["next"])


def fast_counter(view: View, rng: random.Random) -> str:
    return str((view.data or {})["next"])


register(
    GameInfo(
        name="test.board",
        family="test",
        roles=("counter",),
        game_master=BoardMaster,
        instance=lambda seed, settings: {"seed": seed},
        players={"counter": {"slow": slow_counter, "fast": fast_counter, "gated": gated_counter}},
        text_only=False,
        default_settings={"target": 5, "every": 1, "shared": False},
        offload_players=True,
        offload_game_master=True,  # the picture is drawn in a worker thread
    )
)


def board_config(
    count: int, player: str = "fast", settings: dict[str, Any] | None = None, **extra: Any
) -> Any:
    return load_config(
        {
            "name": "board",
            "concurrency": 4,
            "tracing": {"enabled": False},
            "games": [
                {
                    "game": "test.board",
                    "seeds": {"start": 0, "count": count},
                    "pairings": [{"counter": {"kind": "scripted", "name": player}}],
                    "settings": settings or {},
                }
            ],
            **extra,
        }
    )


async def collect_states(
    config: Any, tmp_path: Path, inbox_filter: bool = False
) -> tuple[list[StateUpdate], list[Delivery], Any]:
    """Run ``config`` on the local bus; every state published, and (optionally) every message
    on an agent inbox."""
    states: list[StateUpdate] = []
    inboxes: list[Delivery] = []
    tasks: list[asyncio.Task[None]] = []

    async def watch(bus: Bus, topic_filter: str, into: list[Any], whole: bool) -> None:
        async for delivery in bus.subscribe(topic_filter, maxsize=100_000):
            into.append(delivery if whole else delivery.message)

    def on_start(scheduler: Any) -> None:
        assert isinstance(scheduler, Scheduler)
        run = scheduler.options.run
        for states_filter in (topics.all_states(run), topics.all_private_states(run)):
            tasks.append(asyncio.create_task(watch(scheduler.bus, states_filter, states, False)))
        if inbox_filter:
            inbox = f"parley/{run}/+/agent/+"
            tasks.append(asyncio.create_task(watch(scheduler.bus, inbox, inboxes, True)))

    outcome = await run_experiment(config, tmp_path / "run", on_start=on_start)
    await asyncio.sleep(0.05)
    for task in tasks:
        task.cancel()
    return states, inboxes, outcome


async def test_retained_messages_reach_later_subscribers_until_cleared(
    bus_pair: tuple[Bus, Bus],
) -> None:
    publisher, subscriber = bus_pair
    topic = topics.state("r1", "e1")
    for n in (1, 2):
        state = StateUpdate(run="r1", episode="e1", sender="gm", step=n)
        await publisher.publish(topic, state, retain=True)
    await asyncio.sleep(0.3)  # through the broker, where there is one
    async with subscriber.subscribe(topics.all_states("r1")) as sub:
        (delivery,) = await take(sub, 1)
        assert delivery.topic == topic and delivery.message.step == 2  # only the latest
        await publisher.clear_retained(topic)
        await nothing_more(sub)  # a clear delivers nothing, not even a malformed message
    await asyncio.sleep(0.3)
    async with subscriber.subscribe(topics.all_states("r1")) as sub:
        await nothing_more(sub, 0.5)
    assert subscriber.stats.malformed == 0


async def test_states_arrive_in_step_order_and_the_last_is_final_with_the_scores(
    tmp_path: Path,
) -> None:
    states, _, outcome = await collect_states(board_config(3), tmp_path)
    records = {r["episode"]: r for r in outcome.records}
    by_episode: dict[str, list[StateUpdate]] = {}
    for state in states:
        by_episode.setdefault(state.episode, []).append(state)
    assert set(by_episode) == set(records)
    for episode, seq in by_episode.items():
        # the start, one after each reply that did not end the game (4), and the final one
        assert [s.step for s in seq] == list(range(len(seq))) == list(range(6))
        assert [s.final for s in seq] == [False] * 5 + [True]
        assert [s.progress for s in seq] == [n / 5 for n in range(6)]
        # In-process nothing crosses a broker: every picture comes whole, also to a late
        # subscriber (the embedded dashboard); the final state shows the last board again.
        pictures = [p for s in seq for p in s.content if isinstance(p, ImagePart)]
        assert len(pictures) == 6 and all(p.data is not None for p in pictures)
        assert len({p.sha256 for p in pictures}) == 6  # a new board at every count
        final = seq[-1]
        assert final.scores["main"] == records[episode]["main_score"] == 100.0
        assert final.game == "test.board" and final.visibility == Visibility.PUBLIC
        text = final.content[0]
        assert isinstance(text, TextPart) and text.text == "counted to 5"


@pytest.mark.parametrize("publish", ["off", "end"])
async def test_the_state_switch(tmp_path: Path, publish: str) -> None:
    config = board_config(2, state={"publish": publish, "images": False})
    states, _, outcome = await collect_states(config, tmp_path)
    assert all(r["outcome"] == "success" for r in outcome.records)
    if publish == "off":
        assert states == []
        return
    assert sorted(s.episode for s in states) == sorted(r["episode"] for r in outcome.records)
    assert all(s.final and s.step == 0 for s in states)
    assert all(not any(isinstance(p, ImagePart) for p in s.content) for s in states)


@pytest.mark.parametrize("game", ["comma.atm", "comma.telehealth"])
async def test_private_states_are_marked_and_never_reach_an_agent_inbox(
    tmp_path: Path, game: str
) -> None:
    config = load_config(
        {
            "name": "private",
            "concurrency": 2,
            "tracing": {"enabled": False},
            "games": [
                {
                    "game": game,
                    "seeds": {"start": 0, "count": 2},
                    "pairings": [{"solver": "scripted", "expert": "scripted"}],
                }
            ],
        }
    )
    states, inboxes, outcome = await collect_states(config, tmp_path, inbox_filter=True)
    assert states and all(s.visibility == Visibility.PRIVATE for s in states)
    facts = {r["episode"]: r["private_facts"]["solver"] for r in outcome.records}
    for state in states:
        text = state.content[0]
        assert isinstance(text, TextPart)
        # the observer's view shows the private facts, which is why it is marked private
        assert all(str(v) in text.text for v in facts[state.episode].values())
    views = {s.content[0].text for s in states if isinstance(s.content[0], TextPart)}
    assert inboxes, "the turn requests were not watched"
    for delivery in inboxes:
        assert isinstance(delivery.message, TurnRequest)
        shown = [p.text for p in delivery.message.observation if isinstance(p, TextPart)]
        assert not views.intersection(shown)


async def test_a_late_mqtt_subscriber_sees_the_current_board(
    mqtt5_broker: MqttBroker, tmp_path: Path
) -> None:
    config = board_config(2, player="gated", concurrency=2)
    GATE.clear()
    box: dict[str, Any] = {}
    seen: list[tuple[str, bytes]] = []  # everything a subscriber from the start receives
    subscribed = asyncio.Event()

    async def watch_all() -> None:
        async with aiomqtt.Client("127.0.0.1", mqtt5_broker.port) as client:
            await client.subscribe("parley/+/+/state", qos=1)
            subscribed.set()
            async for message in client.messages:
                seen.append((str(message.topic), bytes(message.payload)))

    watcher = asyncio.create_task(watch_all())
    await subscribed.wait()
    run = asyncio.create_task(
        run_experiment(
            config,
            tmp_path / "run",
            bus_url=mqtt5_broker.url,
            on_start=lambda s: box.setdefault("scheduler", s),
        )
    )
    try:
        # The broker is shared with other tests, and a killed run's retained states stay on
        # it: only this run's states count.
        while "scheduler" not in box:
            await asyncio.sleep(0.02)
        run_id = box["scheduler"].options.run

        def ours() -> list[StateUpdate]:
            return [m for m in (decode(p) for _, p in seen if p) if m.run == run_id]

        while not any(m.step >= 2 for m in ours()):  # mid-episode
            await asyncio.sleep(0.02)
        episode = ours()[0].episode
        topic = topics.state(run_id, episode)

        async with aiomqtt.Client("127.0.0.1", mqtt5_broker.port) as late:
            await late.subscribe(topic, qos=1)
            message = await asyncio.wait_for(anext(late.messages), 10)
            assert message.retain
            current = decode(bytes(message.payload))
            assert isinstance(current, StateUpdate) and not current.final and current.step >= 2
            image = next(p for p in current.content if isinstance(p, ImagePart))
            assert image.data is not None
            picture = Image.open(io.BytesIO(image.data))
            assert picture.size == (4 * (current.step + 1), 4)  # this step's board
    finally:
        GATE.set()  # the episodes finish whatever happened above
    outcome = await run
    assert [r["outcome"] for r in outcome.records] == ["success", "success"]
    async with aiomqtt.Client("127.0.0.1", mqtt5_broker.port) as after:
        await after.subscribe(topic, qos=1)
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(anext(after.messages), 0.5)  # the retained state is gone
    watcher.cancel()

    states = [m for m in (decode(p) for _, p in seen if p) if m.run == run_id]
    assert any(not p for t, p in seen if t == topic)  # the clear went by (an empty payload)
    finals = [s for s in states if s.final]
    assert len(finals) == 2 and all(s.scores["main"] == 100.0 for s in finals)


async def test_each_image_crosses_the_broker_once(mqtt5_broker: MqttBroker, tmp_path: Path) -> None:
    # Boards that change every other count, the same in both episodes: most states repeat one.
    config = board_config(2, settings={"target": 6, "every": 2, "shared": True})
    seen: list[bytes] = []
    subscribed = asyncio.Event()

    async def watch_all() -> None:
        async with aiomqtt.Client("127.0.0.1", mqtt5_broker.port) as client:
            await client.subscribe("parley/+/+/state", qos=1)
            subscribed.set()
            async for message in client.messages:
                if message.payload:
                    seen.append(bytes(message.payload))

    watcher = asyncio.create_task(watch_all())
    await subscribed.wait()
    outcome = await run_experiment(config, tmp_path / "run", bus_url=mqtt5_broker.url)
    assert [r["outcome"] for r in outcome.records] == ["success", "success"]
    await asyncio.sleep(0.5)
    watcher.cancel()
    # Only this run's states: the broker is shared, and a killed run's retained states stay.
    ours = [s for s in map(decode, seen) if s.run == outcome.run_id]
    pictures = [p for s in ours for p in s.content if isinstance(p, ImagePart)]
    assert len(pictures) == 2 * 7  # the start, five steps and the final state, twice
    inline = Counter(p.sha256 for p in pictures if p.data is not None)
    assert set(inline) == {p.sha256 for p in pictures}  # every board arrived with its bytes...
    assert set(inline.values()) == {1}  # ...once: every other time by its sha only
    assert len(inline) == 4  # boards 1, 2, 3 (two counts each) and 4 (the count done)
