"""What a stranger on the broker receives: private facts only on private topics, and results an
observer can tell from forged ones.

Real runs over a real Mosquitto, watched by raw MQTT clients (aiomqtt), as a program on the
same host would. A client subscribed to the public topics (events, states, results, statuses)
must receive no ATM PIN (neither written out nor typed key by key), no telehealth identity and
no picture the solver was shown; a client subscribed to ``parley/#`` receives them all on the
private topics, so the check can fail. The dashboard's hub, fed from the same broker, takes the
run's signed results and drops forged ones (docs/bus.md, "What travels where").
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import shutil
import stat
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import aiomqtt
import pytest

from parley.bus import topics
from parley.bus.codec import decode, is_batch
from parley.bus.local import LocalBus
from parley.bus.messages import EpisodeFinished, Outcome, RunStatus
from parley.bus.signing import KEY_FILE, RunKey, read_public_key, verify
from parley.observability.dashboard import Dashboard, Hub
from parley.runtime.config import load_config
from parley.runtime.scheduler import run_experiment
from tests.fixtures.broker import MqttBroker

if TYPE_CHECKING:
    from parley.bus.secure import SecureSetup  # the secure_broker fixture's (helper B's)

pytestmark = pytest.mark.anyio

PUBLIC = ("parley/+/+/events", "parley/+/+/state", "parley/+/results", "parley/+/status/+")
EVERYTHING = ("parley/#",)
# Leaves that are ids, hashes or keys, not content: digits in them are not a PIN.
NOT_CONTENT = frozenset({"id", "run", "episode", "folder", "traceparent", "signature", "run_key"})
PRESS = re.compile(r"\bpress_(\d)\b")
# A telehealth patient's identity (the profile's other facts, e.g. sex or age, are too short
# to look for in text).
IDENTITY = ("name", "date_of_birth", "address", "ssn", "phone")


@dataclass
class Tap:
    """A raw MQTT client's catch: every (topic, payload) it received on its filters."""

    filters: tuple[str, ...]
    received: list[tuple[str, bytes]] = field(default_factory=list)

    def of_run(self, run: str) -> list[tuple[str, bytes]]:
        return [(t, p) for t, p in self.received if t.startswith(f"parley/{run}/") and p]

    def final_status_of(self, run: str) -> bool:
        for topic, payload in self.of_run(run):
            if topic == topics.status(run, "main") and json.loads(payload).get("final"):
                return True
        return False


@contextlib.asynccontextmanager
async def tap(
    broker: MqttBroker | None, filters: Iterable[str], credentials: Path | None = None
) -> AsyncIterator[Tap]:
    """A client subscribed to ``filters`` from before the run until the end of the block: on
    ``broker`` anonymously, or with a secure broker's ``credentials`` file (TLS, a password)."""
    caught = Tap(tuple(filters))
    if credentials is not None:
        data = json.loads(credentials.read_text())
        url = urlsplit(data["url"])
        options: dict[str, Any] = {
            "hostname": url.hostname,
            "port": url.port,
            "username": data["username"],
            "password": data["password"],
            "tls_params": aiomqtt.TLSParameters(ca_certs=data["ca"]),
        }
    else:
        assert broker is not None
        options = {"hostname": broker.host, "port": broker.port}
    async with aiomqtt.Client(**options, protocol=aiomqtt.ProtocolVersion.V5) as client:
        for topic_filter in caught.filters:
            await client.subscribe(topic_filter, qos=1)

        async def listen() -> None:
            async for message in client.messages:
                payload = message.payload
                data = payload if isinstance(payload, bytes) else str(payload).encode()
                if is_batch(data):  # a batch of messages on one topic: each on its own
                    for item in json.loads(data):
                        caught.received.append((str(message.topic), json.dumps(item).encode()))
                    continue
                caught.received.append((str(message.topic), data))

        task = asyncio.create_task(listen())
        try:
            yield caught
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


async def until(predicate: Any, what: str, timeout: float = 20.0) -> None:
    for _ in range(int(timeout / 0.05)):
        if predicate():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"never happened: {what}")


@dataclass
class Found:
    """What one payload gives away: its text leaves, its keys typed, its image hashes."""

    texts: list[str] = field(default_factory=list)
    presses: str = ""
    images: set[str] = field(default_factory=set)


def read_payload(payload: bytes) -> Found:
    found = Found()
    try:
        value = json.loads(payload)
    except ValueError:
        found.texts.append(payload.decode("utf-8", "replace"))  # not JSON: all of it is text
        return found

    def walk(node: Any, key: str = "") -> None:
        if isinstance(node, dict):
            if node.get("type") == "image":  # its bytes are base64, not text
                found.images.add(str(node.get("sha256")))
                return
            for k, v in node.items():
                if key == "images" and isinstance(v, str):  # a JobResult's images by sha
                    found.images.add(k)
                    continue
                walk(v, k)
        elif isinstance(node, list):
            for item in node:
                walk(item, key)
        elif isinstance(node, str) and key not in NOT_CONTENT:
            found.texts.append(node)
            found.presses += "".join(PRESS.findall(node))

    walk(value)
    return found


def by_episode(received: list[tuple[str, bytes]]) -> dict[str, list[tuple[str, Found]]]:
    """What was received, per episode (run-level topics under ``""``), in order of arrival."""
    out: dict[str, list[tuple[str, Found]]] = {}
    for topic, payload in received:
        found = read_payload(payload)
        try:
            episode = json.loads(payload).get("episode") or ""
        except (ValueError, AttributeError):
            episode = ""
        out.setdefault(episode, []).append((topic, found))
    return out


def disclosed(
    items: list[tuple[str, Found]], secrets: Iterable[str], pin: str | None = None
) -> list[tuple[str, str]]:
    """(topic, secret) for each secret found in the items' text, or (for a PIN) typed in them
    key by key, in the order the keys arrived."""
    hits = []
    for topic, found in items:
        for secret in secrets:
            if any(secret in text for text in found.texts):
                hits.append((topic, secret))
    if pin is not None:
        typed = "".join(found.presses for _, found in items)
        if pin in typed:
            hits.append(("(keys typed, in order)", pin))
    return hits


def comma_config(game: str, mirror: str, count: int = 10) -> Any:
    return load_config(
        {
            "name": f"privacy-{game.split('.')[1]}",
            "concurrency": 10,
            "bus_mirror": mirror,
            "tracing": {"enabled": False},
            "games": [
                {
                    "game": game,
                    "seeds": {"start": 0, "count": count},
                    "pairings": [
                        {
                            "solver": {"kind": "scripted", "name": "scripted"},
                            "expert": {"kind": "scripted", "name": "scripted"},
                        }
                    ],
                }
            ],
        }
    )


async def watched_run(
    broker: MqttBroker, config: Any, out: Path
) -> tuple[Any, list[tuple[str, bytes]], list[tuple[str, bytes]]]:
    """Play ``config`` over ``broker``; what a public-topics client and a ``parley/#`` client
    received of it."""
    async with tap(broker, PUBLIC) as public, tap(broker, EVERYTHING) as everything:
        outcome = await run_experiment(config, out, bus_url=broker.url)
        run = outcome.run_id
        # The final status is the run's last publish: once both have it, they have it all.
        await until(lambda: public.final_status_of(run), "the public client's final status")
        await until(lambda: everything.final_status_of(run), "the # client's final status")
    return outcome, public.of_run(run), everything.of_run(run)


def solver_images(everything: list[tuple[str, bytes]], run: str) -> set[str]:
    """The pictures shown to the solver (its inbox; with ``bus_mirror: all`` it crosses)."""
    shown: set[str] = set()
    for topic, payload in everything:
        parsed = topics.parse(topic)
        if parsed.channel == "agent" and parsed.role == "solver":
            shown |= read_payload(payload).images
    return shown


@pytest.mark.parametrize("mirror", ["events", "all"])
async def test_no_atm_pin_on_public_topics(
    mqtt5_broker: MqttBroker, tmp_path: Path, mirror: str
) -> None:
    outcome, public, everything = await watched_run(
        mqtt5_broker, comma_config("comma.atm", mirror), tmp_path / "run"
    )
    records = outcome.records
    assert len(records) == 10 and all(r["outcome"] == "success" for r in records)
    public_by, all_by = by_episode(public), by_episode(everything)
    private_hits = 0
    for record in records:
        facts = record["private_facts"]["solver"]
        pin, balance = facts["pin"], facts["balance"]
        episode = record["episode"]
        assert public_by.get(episode), f"the public client saw nothing of {episode}"
        assert disclosed(public_by[episode], [pin, balance], pin) == [], episode
        # The same check finds the PIN where it does travel: the private topics.
        hits = disclosed(all_by[episode], [pin], pin)
        assert hits, f"the # client never saw the PIN of {episode}: the check cannot fail"
        assert all(
            topic.startswith("(") or topics.parse(topic).channel != "events" for topic, _ in hits
        )
        private_hits += any(
            not t.startswith("(") and topics.parse(t).channel in ("private", "private_state")
            for t, _ in hits
        )
    assert private_hits == 10
    # The solver's pictures (the screen it reads its balance from) stay on its own topics.
    shown = solver_images(everything, outcome.run_id)
    if mirror == "all":
        assert shown, "with bus_mirror: all the solver's requests cross the broker"
    seen_publicly = set().union(*(read_payload(p).images for _, p in public))
    assert not shown & seen_publicly


@pytest.mark.parametrize("mirror", ["events", "all"])
async def test_no_patient_identity_on_public_topics(
    mqtt5_broker: MqttBroker, tmp_path: Path, mirror: str
) -> None:
    outcome, public, everything = await watched_run(
        mqtt5_broker, comma_config("comma.telehealth", mirror), tmp_path / "run"
    )
    assert len(outcome.records) == 10
    public_by, all_by = by_episode(public), by_episode(everything)
    for record in outcome.records:
        facts = record["private_facts"]["solver"]
        identity = [facts[k] for k in IDENTITY]
        episode = record["episode"]
        assert public_by.get(episode)
        assert disclosed(public_by[episode], identity) == [], episode
        found = {secret for _, secret in disclosed(all_by[episode], identity)}
        assert found == set(identity), "the # client must see the identity (on private topics)"
    shown = solver_images(everything, outcome.run_id)
    if mirror == "all":
        assert shown
    seen_publicly = set().union(*(read_payload(p).images for _, p in public))
    assert not shown & seen_publicly


def forged(run: str, episode: str, outcome: Outcome, key: RunKey | None) -> bytes:
    message = EpisodeFinished(
        run=run,
        episode=episode,
        sender="gm",
        game="comma.atm",
        outcome=outcome,
        main_score=100.0 if outcome == Outcome.SUCCESS else 0.0,
        turns=1,
        reason="forged",
    )
    if key is not None:
        key.signed(message)
    return message.model_dump_json().encode()


async def test_the_hub_drops_forged_results_and_takes_the_runs_own(
    mqtt5_broker: MqttBroker, tmp_path: Path
) -> None:
    # A dashboard watching the broker from before the run (it follows the run's folder, and
    # trusts the key it finds there).
    watcher = mqtt5_broker.bus()
    dashboard = Dashboard(Hub())
    async with watcher:
        await dashboard.watch(watcher)
        outcome = await run_experiment(
            comma_config("comma.atm", "events", count=6), tmp_path / "run", bus_url=mqtt5_broker.url
        )
        run, hub = outcome.run_id, dashboard.hub
        episodes = sorted(r["episode"] for r in outcome.records)
        await until(
            lambda: (
                run in hub.runs
                and all(
                    (live := hub.runs[run].live_episodes.get(e)) and live.finished for e in episodes
                )
            ),
            "every genuine result taken from the bus",
        )
        state = hub.runs[run]
        assert state.key_from == "folder" and state.key == read_public_key(tmp_path / "run")
        # Outsiders: an unsigned result for an episode the run never had, and a result signed
        # by another key that turns one of the run's wins into a loss.
        await mqtt5_broker.publish_raw(
            topics.results(run), forged(run, "comma.atm-s99-r0-forged", Outcome.SUCCESS, None)
        )
        await mqtt5_broker.publish_raw(
            topics.results(run), forged(run, episodes[0], Outcome.LOST, RunKey.generate())
        )
        await until(lambda: state.forged == 2, "both forgeries counted")
        view = hub.run_view(run)
        assert view is not None
        assert view["results"] == {
            "verified": True,
            "key": state.key,
            "key_from": "folder",
            "forged": 2,
            "unverified": 0,
            "waiting": 0,
        }
        assert view["outcomes"] == {"success": 6}
        assert state.index.get("comma.atm-s99-r0-forged") is None
        kept = state.live_episodes[episodes[0]].finished
        assert kept is not None and kept.outcome == Outcome.SUCCESS and kept.reason != "forged"
        await dashboard.stop()

    # A dashboard that cannot read the run's folder (another host): it trusts the key in the
    # run's retained main status. The run's own results, replayed from its transcripts by an
    # outsider, verify; the forgeries do not.
    shutil.move(tmp_path / "run", tmp_path / "elsewhere")
    genuine = [
        line
        for line in (tmp_path / "elsewhere" / "transcripts.jsonl").read_bytes().splitlines()
        if b'"kind":"episode_finished"' in line
    ]
    assert len(genuine) == 6 and all(json.loads(g)["signature"] for g in genuine)
    remote = Dashboard(Hub())
    other = mqtt5_broker.bus()
    async with other:
        await remote.watch(other)
        hub = remote.hub
        await until(lambda: run in hub.runs and hub.runs[run].key is not None, "the status key")
        state = hub.runs[run]
        assert state.key_from == "status" and state.key == read_public_key(tmp_path / "elsewhere")
        assert state.folder is None
        await mqtt5_broker.publish_raw(
            topics.results(run), forged(run, "comma.atm-s98-r0-forged", Outcome.SUCCESS, None)
        )
        for line in genuine:
            await mqtt5_broker.publish_raw(topics.results(run), line)
        await mqtt5_broker.publish_raw(
            topics.results(run), forged(run, episodes[1], Outcome.LOST, RunKey.generate())
        )
        await until(lambda: state.forged == 2 and len(state.index) == 6, "results sorted out")
        assert dict(state.index.outcomes) == {"success": 6}
        assert all(verify(decode(line), state.key) for line in genuine)
        await remote.stop()


# Game-master notes for transcript readers that hold what a player must find out: the
# reference game's target, whether matchit's pictures are the same, MapWorld's whole map with
# its target room. A seat reads its episode's events topic (bus/secure.py, seat_policy), so
# these belong on the game master's private topic, never on the events topic.
ANSWER_NOTES = [
    ("clem.reference", ("describer", "guesser"), "instance", "target_for_guesser"),
    ("clem.matchit", ("player_a", "player_b"), "instance", "same"),
    ("clem.mapworld_g2x", ("navigator",), "map", "target"),
]


def answer_notes(received: list[tuple[str, bytes]], note: str, key: str) -> list[str]:
    """The topics on which a note ``note`` whose data names ``key`` arrived."""
    out = []
    for topic, payload in received:
        message = json.loads(payload)
        if (
            message.get("kind") == "transcript_event"
            and message.get("event") == "note"
            and (message.get("content") or [{}])[0].get("text") == note
            and key in (message.get("data") or {})
        ):
            out.append(topic)
    return out


@pytest.mark.parametrize(("game", "roles", "note", "key"), ANSWER_NOTES)
async def test_no_answers_in_public_notes(
    mqtt5_broker: MqttBroker,
    tmp_path: Path,
    game: str,
    roles: tuple[str, ...],
    note: str,
    key: str,
) -> None:
    config = load_config(
        {
            "name": "answers",
            "concurrency": 3,
            "tracing": {"enabled": False},
            "games": [
                {
                    "game": game,
                    "seeds": {"start": 0, "count": 3},
                    "pairings": [
                        {role: {"kind": "scripted", "name": "scripted"} for role in roles}
                    ],
                    "settings": {"variant": "text"},
                }
            ],
        }
    )
    outcome, public, everything = await watched_run(mqtt5_broker, config, tmp_path / "run")
    assert len(outcome.records) == 3
    # The notes are there (the check can fail) ...
    seen = answer_notes(everything, note, key)
    assert len(seen) == 3
    # ... but only on the game master's private topic.
    assert answer_notes(public, note, key) == []
    assert all(topics.parse(t).channel == "private" and topics.parse(t).role == "gm" for t in seen)


async def test_the_secure_brokers_dashboard_credential_gets_no_pin(
    secure_broker: SecureSetup, tmp_path: Path
) -> None:
    """Through ``parley broker --secure``'s ACLs (bus/secure.py): the spectator's credential,
    subscribed to everything it can name, receives no PIN, no private topic and no inbox, even
    with ``bus_mirror: all``; the operator's receives the PINs."""
    setup = secure_broker
    config = comma_config("comma.atm", "all")
    async with (
        tap(None, ["parley/#", "#"], setup.credentials("dashboard")) as dashboard,
        tap(None, ["parley/#"], setup.credentials("operator")) as operator,
    ):
        outcome = await run_experiment(config, tmp_path / "run", bus_url=setup.url("coordinator"))
        run = outcome.run_id
        await until(lambda: dashboard.final_status_of(run), "the dashboard's final status")
        await until(lambda: operator.final_status_of(run), "the operator's final status")
    records = outcome.records
    assert len(records) == 10 and all(r["outcome"] == "success" for r in records)
    spectator, everything = dashboard.of_run(run), operator.of_run(run)
    # Only the public channels reach the spectator; everything reaches the operator.
    assert {topics.parse(t).channel for t, _ in spectator} <= {
        "events",
        "state",
        "results",
        "status",
    }
    assert {"private", "private_state", "agent", "gm"} <= {
        topics.parse(t).channel for t, _ in everything
    }
    spectator_by, operator_by = by_episode(spectator), by_episode(everything)
    for record in records:
        facts = record["private_facts"]["solver"]
        episode = record["episode"]
        assert spectator_by.get(episode), f"the dashboard saw nothing of {episode}"
        assert (
            disclosed(spectator_by[episode], [facts["pin"], facts["balance"]], facts["pin"]) == []
        )
        assert disclosed(operator_by[episode], [facts["pin"]], facts["pin"])


async def test_worker_processes_and_a_resumed_run_sign_with_the_folders_key(
    tmp_path: Path,
) -> None:
    out = tmp_path / "run"
    first = comma_config("comma.atm", "events", count=4)
    first.workers = 2  # played in two child processes, which get the key in their job
    await run_experiment(first, out)
    key = read_public_key(out)
    assert key is not None
    assert stat.S_IMODE((out / KEY_FILE).stat().st_mode) == 0o600

    statuses: list[RunStatus] = []
    tasks: list[asyncio.Task[None]] = []

    async def watch(bus: Any, run: str) -> None:
        async for delivery in bus.subscribe(topics.status(run, "main")):
            statuses.append(delivery.message)

    def on_start(scheduler: Any) -> None:
        tasks.append(asyncio.create_task(watch(scheduler.bus, scheduler.options.run)))

    # Resumed with more seeds (another config: forced): the four played are skipped, four
    # more played in this process.
    outcome = await run_experiment(
        comma_config("comma.atm", "events", count=8), out, force_resume=True, on_start=on_start
    )
    for task in tasks:
        task.cancel()
    assert read_public_key(out) == key  # the same key: observers keep trusting it
    assert statuses and {s.run_key for s in statuses} == {key}
    finished = [
        decode(line)
        for line in (out / "transcripts.jsonl").read_bytes().splitlines()
        if b'"kind":"episode_finished"' in line
    ]
    assert len(finished) == len(outcome.records) == 8
    assert all(verify(message, key) for message in finished)


def main_status(run: str, key: str | None) -> RunStatus:
    return RunStatus(
        run=run,
        sender="main",
        process="main",
        pid=1,
        name=run,
        started_at=0.0,
        updated_at=0.0,
        run_key=key,
    )


async def test_results_before_the_key_wait_for_it_and_a_later_key_does_not_replace_it() -> None:
    bus = LocalBus()
    dashboard = Dashboard(Hub())
    await dashboard.watch(bus)
    hub, key, intruder = dashboard.hub, RunKey.generate(), RunKey.generate()
    run = "r-early"
    genuine = [forged(run, f"e{i}", Outcome.SUCCESS, key) for i in range(3)]
    for payload in [*genuine, forged(run, "e-x", Outcome.SUCCESS, None)]:
        await bus.publish(topics.results(run), decode(payload))
    await until(lambda: run in hub.runs and len(hub.runs[run].pending) == 4, "results held")
    state = hub.runs[run]
    assert len(state.index) == 0  # nothing counted while the key is unknown
    await bus.publish(topics.status(run, "main"), main_status(run, key.public_b64), retain=True)
    await until(lambda: len(state.index) == 3 and state.forged == 1, "the held results checked")
    # A second main status naming another key (an intruder's) does not make its results count.
    await bus.publish(topics.status(run, "main"), main_status(run, intruder.public_b64))
    await bus.publish(topics.results(run), decode(forged(run, "e-y", Outcome.LOST, intruder)))
    await until(lambda: state.forged == 2, "the intruder's result dropped")
    assert state.key == key.public_b64 and state.key_from == "status"
    # A run whose status names no key (a parley from before signing): taken, marked unverified.
    old = "r-unsigned"
    await bus.publish(topics.status(old, "main"), main_status(old, None))
    await bus.publish(topics.results(old), decode(forged(old, "e0", Outcome.SUCCESS, None)))
    await until(lambda: old in hub.runs and len(hub.runs[old].index) == 1, "the unsigned result")
    view = hub.run_view(old)
    assert view is not None and view["results"]["verified"] is False
    assert view["results"]["unverified"] == 1 and view["results"]["forged"] == 0
    await dashboard.stop()
    await bus.close()
