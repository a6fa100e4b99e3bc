"""The dashboard's server side without a browser: the hub fed contract-shaped messages on a
LocalBus, the episode index at 100,000 episodes, run folders read by byte range (leak flags
included), the token, the update rate per view, control messages, and the static export."""

from __future__ import annotations

import asyncio
import json
import random
import statistics
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from scipy import stats as scipy_stats

from parley.bus import topics
from parley.bus.local import LocalBus
from parley.bus.messages import (
    Control,
    EpisodeFinished,
    EpisodeStarted,
    ImagePart,
    RunStatus,
    StateUpdate,
    TextPart,
    TranscriptEvent,
)
from parley.observability.dashboard import Dashboard, Hub
from parley.observability.dashboard.index import QueryError
from parley.runtime.cli import main as cli_main
from tests.observability.dashboard_game import XSS, square

pytestmark = pytest.mark.anyio
RUN = "r1"


def started(episode: str, pairing: str = "scripted") -> EpisodeStarted:
    spec = {"players": {"painter": {"kind": "scripted", "name": pairing}}}
    return EpisodeStarted(run=RUN, episode=episode, sender="gm", game="test.paint", spec=spec)


def finished(episode: str, outcome: str, main: float | None) -> EpisodeFinished:
    return EpisodeFinished(
        run=RUN,
        episode=episode,
        sender="gm",
        game="test.paint",
        outcome=outcome,  # type: ignore[arg-type]
        main_score=main,
        turns=3,
    )


def status(**fields: Any) -> RunStatus:
    base = {
        "run": RUN,
        "sender": "main",
        "process": "main",
        "pid": 1,
        "name": "paint",
        "started_at": time.time(),
        "updated_at": time.time(),
        "planned": 10,
        "loop_lag_ms": {"p50": 1.0, "p99": 4.0, "max": 9.0},
    }
    return RunStatus.model_validate({**base, **fields})


async def settle(hub: Hub, predicate: Any) -> None:
    for _ in range(200):
        if predicate():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the hub never got there")


async def test_hub_aggregates_contract_messages_from_a_bus() -> None:
    bus = LocalBus()
    dashboard = Dashboard(Hub())
    await dashboard.watch(bus)
    hub = dashboard.hub
    image = ImagePart.from_bytes(square(1))
    await bus.publish(topics.status(RUN, "main"), status(running=2), retain=True)
    await bus.publish(topics.events(RUN, "e1"), started("e1"))
    await bus.publish(topics.events(RUN, "e2"), started("e2", "slow"))
    await bus.publish(
        topics.events(RUN, "e1"),
        TranscriptEvent(
            run=RUN,
            episode="e1",
            sender="gm",
            turn=1,
            event="utterance",
            from_role="painter",
            to_role="gm",
            visibility="private",  # type: ignore[arg-type]
            content=[TextPart(text=XSS)],
        ),
    )
    # The image inline once, then by reference: the hub serves it from its cache either way.
    for step, part in enumerate((image, image.by_reference())):
        state = StateUpdate(
            run=RUN, episode="e1", sender="gm", turn=step, content=[TextPart(text="a"), part]
        )
        await bus.publish(topics.state(RUN, "e1"), state)
    await settle(hub, lambda: RUN in hub.runs and len(hub.runs[RUN].live_episodes) == 2)
    await settle(hub, lambda: len(hub.runs[RUN].live_episodes["e1"].states) == 2)

    view = hub.episode_view(RUN, "e1")
    assert view is not None and view["live"] and view["roles"] == ["painter"]
    said = [i for i in view["items"] if i["kind"] == "utterance"]
    assert said[0]["parts"] == [{"text": XSS}] and said[0]["visibility"] == "private"
    assert said[0]["column"] == "painter"
    assert [s["images"] for s in view["states"]] == [[image.sha256], [image.sha256]]
    assert hub.image(image.sha256) == square(1)

    scores = [random.Random(i).uniform(0, 100) for i in range(7)]
    for i, score in enumerate(scores):
        await bus.publish(topics.events(RUN, f"p{i}"), started(f"p{i}"))
        await bus.publish(topics.results(RUN), finished(f"p{i}", "success", score))
    await bus.publish(topics.results(RUN), finished("e2", "lost", 0.0))
    await settle(hub, lambda: hub.runs[RUN].index.outcomes.get("success") == 7)
    run = hub.run_view(RUN)
    assert run is not None
    assert run["outcomes"] == {"running": 1, "success": 7, "lost": 1}
    assert run["status"]["planned"] == 10 and run["status"]["running"] == 2
    assert run["processes"][0]["loop_lag_ms"]["p99"] == 4.0
    rows = {r["pairing"]: r for r in run["pairings"]}
    assert rows["painter=slow"]["episodes"] == 1 and rows["painter=slow"]["success_pct"] == 0
    mine = rows["painter=scripted"]
    low, high = scipy_stats.t.interval(
        0.95, len(scores) - 1, statistics.fmean(scores), scipy_stats.sem(scores)
    )
    assert mine["main"] == pytest.approx(statistics.fmean(scores))
    assert (mine["low"], mine["high"]) == (pytest.approx(low), pytest.approx(high))
    await dashboard.stop()
    await bus.close()


def synthetic_run(folder: Path, count: int) -> list[dict[str, Any]]:
    """A run folder of ``count`` records (no transcripts), as a runtime would write them."""
    folder.mkdir()
    rng = random.Random(7)
    records = []
    games = ("comma.wire", "comma.atm", "clem.reference")
    outcomes = ("success", "lost", "aborted", "error")
    for i in range(count):
        records.append(
            {
                "schema": 2,
                "run": "big",
                "episode": f"ep-{i:06d}",
                "game": games[i % 3],
                "seed": i,
                "pairing": {"solver": rng.choice(("a", "b")), "expert": "scripted"},
                "outcome": outcomes[rng.randrange(4)],
                "main_score": rng.choice((None, rng.uniform(0, 100))),
                "scores": {},
                "turns": rng.randrange(1, 20),
                "started_at": 1000.0 + rng.random() * 1000,
                "duration_s": rng.random() * 10,
            }
        )
    with (folder / "episodes.jsonl").open("w") as f:
        for record in records:
            f.write(json.dumps(record) + "\n")
    (folder / "run.json").write_text(json.dumps({"run": "big", "name": "big"}))
    return records


async def test_episode_index_at_100000_episodes(tmp_path: Path) -> None:
    records = synthetic_run(tmp_path / "big", 100_000)
    hub = Hub()
    state = hub.follow(tmp_path / "big")
    while hub.poll_folder(hub.folders[(tmp_path / "big").resolve()]):
        pass  # a large folder is read in steps
    assert state is not None and len(state.index) == 100_000
    dashboard = Dashboard(hub, port=0)
    await dashboard.start()
    url = dashboard.base
    async with aiohttp.ClientSession(headers={"X-Parley-Token": dashboard.token}) as http:
        query = "game=comma.atm&outcome=lost&pairing=solver%3Db%2C%20expert%3Dscripted"
        async with http.get(f"{url}api/runs/big/episodes?{query}&sort=main_score&desc=1") as r:
            assert r.status == 200
            page = await r.json()
        want = [
            x
            for x in records
            if x["game"] == "comma.atm" and x["outcome"] == "lost" and x["pairing"]["solver"] == "b"
        ]
        assert page["total"] == len(want) and len(page["rows"]) == 50
        top = sorted(
            want, key=lambda x: (x["main_score"] is not None, x["main_score"] or 0, x["episode"])
        )
        assert [r["episode"] for r in page["rows"]] == [x["episode"] for x in top[::-1][:50]]
        assert page["outcomes"]["lost"] == sum(x["outcome"] == "lost" for x in records)
        async with http.get(f"{url}api/runs/big/episodes?sort=turns&offset=99990&limit=20") as r:
            tail = await r.json()
        assert tail["total"] == 100_000 and len(tail["rows"]) == 10
        async with http.get(f"{url}api/runs/big/episodes?sort=colour") as r:
            assert r.status == 400 and "sort 'colour' is not one of" in await r.text()
        # An episode's page reads one record by its byte offset.
        async with http.get(f"{url}api/runs/big/episodes/ep-054321") as r:
            view = await r.json()
        assert view["seed"] == 54321 and view["source"] == "folder"
    await dashboard.stop()
    with pytest.raises(QueryError, match="limit 1"):
        state.index.query(limit=0)


async def test_damaged_lines_of_a_followed_folder_are_read_past(tmp_path: Path) -> None:
    records = synthetic_run(tmp_path / "run", 5)
    episodes = tmp_path / "run" / "episodes.jsonl"
    lines = episodes.read_bytes().splitlines()
    # Not UTF-8, JSON that is no record, a record without an outcome: between whole records.
    damaged = [b"\xff\xfe\x00", b"[1, 2]", b'{"episode": "ep-x"}']
    episodes.write_bytes(b"\n".join([*lines[:2], *damaged, *lines[2:]]) + b"\n")
    (tmp_path / "run" / "run.json").write_text("[1]")  # JSON, but no run's description
    hub = Hub()
    state = hub.follow(tmp_path / "run")
    assert state is not None and state.run == "run"  # named after its folder
    assert sorted(row["episode"] for row in state.index.query()["rows"]) == sorted(
        r["episode"] for r in records
    )
    view = hub.episode_view(state.run, records[3]["episode"])
    assert view is not None and view["seed"] == records[3]["seed"]


def _folder_record(episode: str, **fields: Any) -> str:
    record = {
        "schema": 2,
        "episode": episode,
        "game": "comma.atm",
        "seed": 0,
        "turns": 1,
        "pairing": {"solver": "m", "expert": "m"},
        "outcome": "success",
        "main_score": 100.0,
        **fields,
    }
    return json.dumps(record) + "\n"


def test_a_record_that_cannot_be_shown_holds_up_neither_its_folder_nor_another(
    tmp_path: Path,
) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    for folder in (a, b):
        folder.mkdir()
        (folder / "run.json").write_text(json.dumps({"run": folder.name}))
        (folder / "episodes.jsonl").write_text(_folder_record("e0"))
    hub = Hub()
    assert hub.follow_all(tmp_path) == 2
    # A record of the right shape whose transcript cannot be read as one (a message's
    # fields of the wrong types), then lines of the wrong shape, then a good record.
    line = b'{"kind": "transcript_event", "event": "utterance", "episode": "e1", '
    line += b'"from_role": "solver", "to_role": "expert", "turn": "x", "content": 5}\n'
    (a / "transcripts.jsonl").write_bytes(line)
    leaky = {"private_facts": {"solver": {"pin": "4821"}}}
    with (a / "episodes.jsonl").open("a") as f:
        f.write(_folder_record("e1", transcript={"offset": 0, "length": len(line)}, **leaky))
        f.write(_folder_record("e2", pairing="solver=m"))
        f.write(_folder_record("e3", main_score="abc"))
        f.write(_folder_record("e4"))
    with (b / "episodes.jsonl").open("a") as f:
        f.write(_folder_record("e1"))
    hub.poll_folders()
    hub.poll_folders()
    rows = {run: {r["episode"] for r in hub.runs[run].index.query()["rows"]} for run in "ab"}
    assert rows["b"] == {"e0", "e1"}
    # e1 shows (its message of the wrong shape is left out); e2 and e3 are damaged lines.
    assert {"e0", "e1", "e4"} <= rows["a"] and not {"e2", "e3"} & rows["a"]
    with (a / "episodes.jsonl").open("a") as f:
        f.write(_folder_record("e5"))  # still read after all that
    hub.poll_folders()
    assert "e5" in {r["episode"] for r in hub.runs["a"].index.query()["rows"]}


def test_copies_of_one_run_folder_are_runs_of_their_own(tmp_path: Path) -> None:
    for name, episodes in (("first", ["e0", "e1"]), ("copy", ["e0"]), ("again", ["e2"])):
        folder = tmp_path / name
        folder.mkdir()
        (folder / "run.json").write_text(json.dumps({"run": "r1", "name": "exp"}))
        (folder / "episodes.jsonl").write_text("".join(_folder_record(e) for e in episodes))
    hub = Hub()
    assert hub.follow_all(tmp_path) == 3
    rows = {
        run: sorted(r["episode"] for r in state.index.query()["rows"])
        for run, state in hub.runs.items()
    }
    assert sorted(rows.values()) == [["e0"], ["e0", "e1"], ["e2"]]
    assert sorted(rows) == ["r1", "r1~2", "r1~3"]
    assert hub.follow(tmp_path / "copy") is hub.runs[next(r for r in rows if rows[r] == ["e0"])]


async def test_leak_flags_from_a_run_folder(tmp_path: Path) -> None:
    folder = tmp_path / "run"
    folder.mkdir()
    said = TranscriptEvent(
        run="x",
        episode="e1",
        sender="gm",
        event="utterance",
        from_role="solver",
        to_role="expert",
        content=[TextPart(text="my pin is 4 8 2 1, what next?")],
    )
    line = (said.model_dump_json() + "\n").encode()
    (folder / "transcripts.jsonl").write_bytes(b"{}\n" + line)
    facts = {"private_facts": {"solver": {"pin": "4821"}}}
    where = {"transcript": {"offset": 3, "length": len(line)}}
    (folder / "episodes.jsonl").write_text(_folder_record("e1", **facts, **where))
    hub = Hub()
    state = hub.follow(folder)
    assert state is not None
    run = hub.run_view(state.run)
    assert run is not None and run["leaks"]["count"] == 1
    assert run["leaks"]["latest"][0]["fact"] == "pin"
    assert state.index.query()["rows"][0]["leaks"] == 1
    view = hub.episode_view(state.run, "e1")
    assert view is not None
    marked = [i for i in view["items"] if i.get("disclosed")]
    assert len(marked) == 1 and marked[0]["disclosed"][0].startswith("pin")


async def test_token_is_checked_on_every_request() -> None:
    dashboard = Dashboard(Hub(), host="0.0.0.0", port=0)
    await dashboard.start()
    assert dashboard.token and f"?token={dashboard.token}" in dashboard.url
    base = f"http://127.0.0.1:{dashboard.port}/"
    async with aiohttp.ClientSession() as http:
        for path in ("", "api/runs", "static/app.js", "images/" + "0" * 64):
            async with http.get(base + path) as r:
                assert r.status == 403, path
        async with http.get(base + "api/runs?token=wrong") as r:
            assert r.status == 403
        with pytest.raises(aiohttp.WSServerHandshakeError):
            await http.ws_connect(base + "ws")
        async with http.get(f"{base}api/runs?token={dashboard.token}") as r:
            assert r.status == 200
        async with http.ws_connect(f"{base}ws?token={dashboard.token}") as ws:
            assert json.loads((await ws.receive()).data)["type"] == "runs"
    await dashboard.stop()
    assert Dashboard(Hub()).token  # loopback too: any page can reach it


async def test_a_view_gets_a_few_updates_a_second_however_busy_the_run() -> None:
    bus = LocalBus()
    dashboard = Dashboard(Hub(), port=0)
    await dashboard.watch(bus)
    await dashboard.start()
    url = dashboard.base
    received = 0
    async with (
        aiohttp.ClientSession(headers={"X-Parley-Token": dashboard.token}) as http,
        http.ws_connect(url + "ws") as ws,
    ):
        await ws.send_str(json.dumps({"view": "run", "run": RUN}))
        begun = time.monotonic()

        async def publish() -> None:
            for i in range(3000):
                await bus.publish(topics.events(RUN, f"e{i}"), started(f"e{i}"))
                await bus.publish(topics.results(RUN), finished(f"e{i}", "success", 1.0))
                if i % 50 == 0:
                    await asyncio.sleep(0.005)

        task = asyncio.create_task(publish())
        last: dict[str, Any] = {}
        while not task.done() or last.get("status", {}).get("finished", 0) < 3000:
            message = json.loads((await asyncio.wait_for(ws.receive(), 10)).data)
            if message["type"] == "run":
                received += 1
                last = message
        elapsed = time.monotonic() - begun
    # 6,000 messages became a handful of updates: at most UPDATES_PER_S a second (+1 at start).
    assert received <= 4 * elapsed + 2, (received, elapsed)
    assert last["outcomes"] == {"success": 3000}
    await dashboard.stop()
    await bus.close()


async def test_an_episode_tab_opened_before_its_run_is_known_shows_the_episode() -> None:
    bus = LocalBus()
    dashboard = Dashboard(Hub(), port=0)
    await dashboard.watch(bus)
    await dashboard.start()
    url = dashboard.base
    async with (
        aiohttp.ClientSession(headers={"X-Parley-Token": dashboard.token}) as http,
        http.ws_connect(url + "ws") as ws,
    ):
        await ws.send_str(json.dumps({"view": "episode", "run": RUN, "episode": "e1"}))
        while True:  # the runs view comes first, then the asked view
            first = json.loads((await asyncio.wait_for(ws.receive(), 10)).data)
            if first["type"] != "runs":
                break
        assert first == {"type": "missing", "run": RUN}
        await bus.publish(topics.events(RUN, "e1"), started("e1"))
        while True:
            message = json.loads((await asyncio.wait_for(ws.receive(), 10)).data)
            if message["type"] == "episode":
                break
        assert message["reset"] is True and message["items_from"] == 0
    await dashboard.stop()
    await bus.close()


async def test_control_from_a_bus_dashboard_is_a_control_message() -> None:
    bus = LocalBus()
    dashboard = Dashboard(Hub(), port=0)
    await dashboard.watch(bus)
    await dashboard.start()
    url = dashboard.base
    run_sub = bus.subscribe(topics.control(RUN))
    episode_sub = bus.subscribe(topics.episode_control(RUN, "e7"))
    control = f"{url}api/runs/{RUN}/control"
    async with aiohttp.ClientSession(headers={"X-Parley-Token": dashboard.token}) as http:
        async with http.post(control, json={"command": "pause"}) as r:
            assert r.status == 400 and "no run 'r1'" in await r.text()  # not heard of yet
        await bus.publish(topics.status(RUN, "main"), status(running=1), retain=True)
        await bus.publish(topics.events(RUN, "e7"), started("e7"))
        runs = dashboard.hub.runs
        await settle(dashboard.hub, lambda: RUN in runs and "e7" in runs[RUN].live_episodes)
        async with http.post(control, json={"command": "pause"}) as r:
            assert (await r.json())["via"] == "bus"
        body = {"command": "abort", "episode": "e7", "reason": "stuck"}
        async with http.post(control, json=body) as r:
            assert r.status == 200
        async with http.post(control, json={"command": "abort", "episode": "e8"}) as r:
            assert r.status == 400 and "'e8' is not playing" in await r.text()
        async with http.post(control, json={"command": "explode"}) as r:
            assert r.status == 400 and "pause, resume or abort" in await r.text()
        async with http.post(control, json={"command": "abort"}) as r:
            assert r.status == 400 and "needs the episode" in await r.text()
    pause = (await asyncio.wait_for(run_sub.get(), 5)).message
    abort = (await asyncio.wait_for(episode_sub.get(), 5)).message
    assert isinstance(pause, Control) and pause.command == "pause" and pause.run == RUN
    assert isinstance(abort, Control) and abort.command == "abort" and abort.reason == "stuck"
    with pytest.raises(TimeoutError):  # the refused pause was never published
        await asyncio.wait_for(run_sub.get(), 0.2)
    await dashboard.stop()
    await bus.close()


async def test_a_run_that_stops_sending_its_status_is_shown_silent_not_live() -> None:
    """A run killed outright (kill -9) cannot send a final status: once none came for
    SILENT_AFTER_S, the dashboard shows it silent, stops charting it, and refuses to control
    it; a status that comes again makes it live again."""
    from parley.observability.dashboard import hub as hub_module

    bus = LocalBus()
    dashboard = Dashboard(Hub(), port=0)
    await dashboard.watch(bus)
    hub = dashboard.hub
    await bus.publish(topics.status(RUN, "main"), status(running=2), retain=True)
    await settle(hub, lambda: RUN in hub.runs and hub.runs[RUN].live)
    state = hub.runs[RUN]
    hub.tick()
    assert state.live and hub.runs_view()[0]["silent_since"] is None
    state.heard_at -= hub_module.SILENT_AFTER_S + 1  # as if the last status came that long ago
    hub.tick()
    (row,) = hub.runs_view()
    assert not row["live"] and row["silent_since"] is not None
    charted, version = len(state.history), state.version
    hub.tick()
    assert (len(state.history), state.version) == (charted, version)  # not touched any more
    with pytest.raises(Exception, match=r"not playing \(no status since"):
        await dashboard.control(RUN, "pause")
    await bus.publish(topics.status(RUN, "main"), status(running=2), retain=True)
    await settle(hub, lambda: state.live)
    assert hub.runs_view()[0]["silent_since"] is None
    await bus.close()


def test_static_export_of_any_family(tmp_path: Path) -> None:
    """``parley dashboard --export``: a page per episode, model text escaped, states drawn."""
    from parley.runtime.config import load_config
    from parley.runtime.scheduler import run_experiment
    from tests.observability import dashboard_game  # noqa: F401  (registers test.paint)

    config = load_config(
        {
            "name": "x",
            "games": [
                {
                    "game": "test.paint",
                    "seeds": [0],
                    "pairings": [{"painter": {"kind": "scripted", "name": "xss"}}],
                    "settings": {"turns": 2, "delay_s": 0},
                },
                {
                    "game": "comma.wire",
                    "seeds": [0],
                    "pairings": [{"solver": "scripted", "expert": "scripted"}],
                },
            ],
        }
    )
    asyncio.run(run_experiment(config, tmp_path / "run"))
    assert cli_main(["dashboard", "--export", str(tmp_path / "run")]) == 0
    pages = {p.name: p.read_text() for p in (tmp_path / "run" / "html").glob("*.html")}
    assert len(pages) == 3  # the index and both episodes
    paint = next(v for k, v in pages.items() if k.startswith("test.paint"))
    assert "<script>window" not in paint and "&lt;script&gt;window.__parley_xss" in paint
    assert "<h2>States</h2>" in paint
    wire = next(v for k, v in pages.items() if k.startswith("comma.wire"))
    for sha in set(__import__("re").findall(r"\.\./images/([0-9a-f]{64})\.png", wire + paint)):
        assert (tmp_path / "run" / "images" / f"{sha}.png").exists()
    assert cli_main(["dashboard", "--export", str(tmp_path / "nothing")]) == 2
