"""People at browser seats (docs/humans.md): one role each, over the run's bus.

In-process (the run and its embedded dashboard in the test's event loop, a seat's page played
by an aiohttp WebSocket client): a turn left unanswered ends the episode ``aborted``
(``turn_timeout``); a person who closes the page opens the seat again with the same link and
finishes, one who stays away past ``rejoin_s`` ends it ``aborted`` (``human_left``); human
turns are recorded like a model's (latency, reply, ``player: human``) and the report shows
human pairs beside model and built-in ones.

In a real browser (Playwright driving Debian's chromium; ``parley run --dashboard`` as a
process, which prints a link per seat): a person solves COMMA's wire puzzle with the scripted
expert by reading its instruction and clicking the action; two people play the Reference game
in two browser contexts; a person plays Tic-Tac-Toe against minimax by clicking cells; a seat's
token opens no other seat, and the expert's browser never receives the solver's picture, PIN
or feedback (checked on the WebSocket frames each browser received).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml

from parley.agents.backends.simserver import SimServerProcess
from parley.bus.broker import free_port
from parley.observability.dashboard import Dashboard, Hub
from parley.observability.dashboard.embed import start_embedded
from parley.observability.dashboard.seats import Seat
from parley.records import RecordedRun
from parley.runtime.config import ConfigError, PlayerSpec, load_config
from parley.runtime.report import build_report
from parley.runtime.scheduler import RunOutcome, run_experiment
from tests.observability.conftest import KEY_ENV, SECRET, model_entry
from tests.observability.test_dashboard import Process, records

WAIT_MS = 60_000
SEAT_LINE = re.compile(r"^seat: (\S+) of (\S+): (http\S+)$")


# --- a person at a seat, in-process ---------------------------------------------------------


class SeatedRun:
    """A run in this event loop with its embedded dashboard; ``seats[(game, role)]`` are the
    planned seats and ``link(seat)`` their join links."""

    def __init__(self) -> None:
        self.dashboard: Any = None
        self.seats: dict[tuple[str, str], list[Seat]] = {}
        self.task: asyncio.Task[RunOutcome] | None = None

    def link(self, seat: Seat) -> tuple[str, str]:
        """The seat's WebSocket URL and its token query."""
        path, query = self.dashboard.seats.link(seat).split("?")
        return f"{path}/ws?{query}", query

    async def outcome(self) -> RunOutcome:
        assert self.task is not None
        return await asyncio.wait_for(self.task, 60)


@contextlib.asynccontextmanager
async def seated_run(config: dict[str, Any], out: Path) -> AsyncIterator[SeatedRun]:
    run = SeatedRun()
    ready = asyncio.Event()

    def on_start(scheduler: Any) -> None:
        async def serve() -> None:
            run.dashboard = await start_embedded(scheduler, out, port=0)
            for seat in run.dashboard.seats.plan(scheduler.options.run, scheduler.specs):
                run.seats.setdefault((seat.game, seat.role), []).append(seat)
            ready.set()

        asyncio.get_running_loop().create_task(serve())

    run.task = asyncio.create_task(
        run_experiment(load_config({"name": "seats", **config}), out, on_start=on_start)
    )
    try:
        await asyncio.wait_for(ready.wait(), 30)
        yield run
    finally:
        if not run.task.done():
            run.task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await run.task
        if run.dashboard is not None:
            await run.dashboard.stop()


async def next_frame(ws: aiohttp.ClientWebSocketResponse, kind: str) -> dict[str, Any]:
    """The next frame of ``kind`` the seat's page receives (others are passed over)."""
    while True:
        msg = await asyncio.wait_for(ws.receive(), 30)
        assert msg.type == aiohttp.WSMsgType.TEXT, msg
        frame = json.loads(msg.data)
        if frame["type"] == kind:
            return frame


def wire_description(observation: str) -> str:
    """What a person reading the text variant's wire module tells the expert."""
    colours = re.findall(r"wire \d: (\w+)", observation)
    serial = re.search(r"Serial number: (\w+)", observation)
    assert colours and serial, observation
    return (
        f"I see {len(colours)} wires. From top to bottom they are: {', '.join(colours)}. "
        f"The serial number is {serial.group(1)}."
    )


def expert_instruction(history: list[dict[str, Any]]) -> str | None:
    """The action the expert's latest message names (``Cut wire 2.`` → ``cut_wire_2``)."""
    said = [e for e in history if e["speaker"] == "expert"]
    if not said:
        return None
    found = re.search(r"Cut wire (\d)", said[-1]["parts"][0]["text"])
    return f"cut_wire_{found.group(1)}" if found else None


def wire(solver: Any, seeds: list[int], **settings: Any) -> dict[str, Any]:
    return {
        "game": "comma.wire",
        "seeds": seeds,
        "pairings": [{"solver": solver, "expert": "scripted"}],
        "settings": {"variant": "text", **settings},
    }


def test_human_players_in_a_config() -> None:
    """``human-browser`` is a browser seat; a human's settings leave every other player's form
    (and so its episodes' ids) as it was; settings that do not apply are refused by name."""
    seat = PlayerSpec.model_validate("human-browser")
    assert (seat.kind, seat.via, seat.seat) == ("human", "browser", True)
    assert not PlayerSpec.model_validate("human").seat
    for name in ("scripted", "human"):
        assert set(PlayerSpec.model_validate(name).model_dump()) == {
            "kind",
            "model",
            "name",
            "params",
        }
    timed = {"kind": "human", "via": "browser", "turn_timeout_s": 30, "rejoin_s": 60}
    assert PlayerSpec.model_validate(timed).model_dump(mode="json")["rejoin_s"] == 60
    games = [
        {"game": "comma.wire", "seeds": [0], "pairings": [{"solver": {}, "expert": "scripted"}]}
    ]
    for player, field in (
        ({"kind": "scripted", "rejoin_s": 5}, "games.0.pairings.0.solver"),
        ({"kind": "human", "turn_timeout_s": 5}, "games.0.pairings.0.solver"),
        ({"kind": "human", "via": "phone"}, "games.0.pairings.0.solver.via"),
    ):
        games[0]["pairings"][0]["solver"] = player
        with pytest.raises(ConfigError) as caught:
            load_config({"games": games})
        assert caught.value.problems[0][0] == field, caught.value


@pytest.mark.anyio
async def test_an_unanswered_turn_ends_the_episode_at_the_seats_timeout(tmp_path: Path) -> None:
    """Nobody opens the seat: after ``turn_timeout_s`` the episode is aborted, with the
    reason, and without a main score (the game did not end it)."""
    solver = {"kind": "human", "via": "browser", "turn_timeout_s": 0.5}
    outcome = await asyncio.wait_for(
        run_experiment(load_config({"name": "t", "games": [wire(solver, [3])]}), tmp_path), 60
    )
    (record,) = outcome.records
    assert record["outcome"] == "aborted"
    assert record["reason_code"] == "turn_timeout"
    assert "solver" in record["reason"] and "turn 1" in record["reason"]
    assert record["main_score"] is None and record["turns"] == 0
    # The request carried the deadline the seat's page counts down to.
    (request,) = [
        m
        for m in RecordedRun(tmp_path).iter_transcript(record["episode"])
        if m["kind"] == "turn_request"
    ]
    assert request["deadline"] is not None and request["deadline"] > record["started_at"]


@pytest.mark.anyio
async def test_half_a_character_from_a_page_is_recorded_as_a_replacement_character(
    tmp_path: Path,
) -> None:
    """A page may send a lone surrogate (half an emoji pasted, a client's bug): the reply is
    recorded with U+FFFD in its place, and the episode's record and transcript are kept."""
    solver = {"kind": "human", "via": "browser", "turn_timeout_s": 3.0}
    async with seated_run({"games": [wire(solver, [3])]}, tmp_path) as run:
        (seat,) = run.seats[("comma.wire", "solver")]
        async with aiohttp.ClientSession() as http:
            url, _ = run.link(seat)
            async with http.ws_connect(url) as ws:
                turn = await next_frame(ws, "turn")
                # Sent as JSON text: the escaped half-pair is what a page's JSON.stringify sends.
                await ws.send_str(
                    f'{{"type": "reply", "turn": {turn["turn"]}, "text": "cut \\ud800 one"}}'
                )
                await next_frame(ws, "sent")
                # The next turn goes unanswered: the episode ends at the seat's timeout.
                await next_frame(ws, "finished")
        outcome = await run.outcome()
    (record,) = outcome.records
    assert (record["outcome"], record["reason_code"]) == ("aborted", "turn_timeout")
    said = [
        m["text"]
        for m in RecordedRun(tmp_path).iter_transcript(record["episode"])
        if m["kind"] == "turn_response" and m["role"] == "solver"
    ]
    assert said == ["cut \ufffd one"]


@pytest.mark.anyio
async def test_a_person_rejoins_with_the_same_link_or_leaves_the_episode_aborted(
    tmp_path: Path,
) -> None:
    """Seed 3: the person answers, closes the page, opens the same link again, finds the
    conversation and the turn waiting, and solves the puzzle. Seed 4: the person closes the
    page and does not come back within ``rejoin_s``: aborted, ``human_left``."""
    solver = {"kind": "human", "via": "browser", "rejoin_s": 1.0}
    async with seated_run({"games": [wire(solver, [3, 4])], "concurrency": 2}, tmp_path) as run:
        stays, leaves = sorted(run.seats[("comma.wire", "solver")], key=lambda s: s.episode)
        assert "-s3-" in stays.episode and "-s4-" in leaves.episode
        async with aiohttp.ClientSession() as http:
            url, _ = run.link(leaves)
            async with http.ws_connect(url) as ws:
                await next_frame(ws, "turn")  # seen, then the page is closed for good
            url, _ = run.link(stays)
            async with http.ws_connect(url) as ws:
                hello = await next_frame(ws, "seat")
                assert (hello["role"], hello["episode"]) == ("solver", stays.episode)
                turn = await next_frame(ws, "turn")
                said = wire_description(turn["observation"][0]["text"])
                await ws.send_json({"type": "reply", "turn": turn["turn"], "text": said})
                assert (await next_frame(ws, "sent"))["text"] == said
            # Closed; the expert answers meanwhile. The same link opens the seat again.
            async with http.ws_connect(url) as ws:
                turn = await next_frame(ws, "turn")
                assert turn["history"][0] == {
                    "speaker": "solver",
                    "own": True,
                    "parts": [{"text": said}],
                }
                action = expert_instruction(turn["history"])
                assert action in turn["legal_actions"]
                # A reply for a turn that is not the one waiting is refused, and changes nothing.
                await ws.send_json({"type": "reply", "turn": turn["turn"] + 1, "text": "x"})
                assert (await next_frame(ws, "error"))["error"] == "it is not your turn"
                await ws.send_json({"type": "reply", "turn": turn["turn"], "text": action})
                finished = await next_frame(ws, "finished")
                assert finished["outcome"] == "success"
        outcome = await run.outcome()
    by_episode = {r["episode"]: r for r in outcome.records}
    assert by_episode[stays.episode]["outcome"] == "success"
    left = by_episode[leaves.episode]
    assert (left["outcome"], left["reason_code"]) == ("aborted", "human_left")
    assert "stayed empty for 1 s" in left["reason"] and left["main_score"] is None


@pytest.mark.anyio
async def test_human_turns_are_recorded_like_model_turns_and_reported_beside_them(
    sim: SimServerProcess, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A person's replies are TurnResponses in the transcript like a model's (the reply, its
    latency, ``model: human``, ``raw.player: human``, the prompt they were shown); the report
    puts the human pairing beside the model's and the scripted one's."""
    monkeypatch.setenv(KEY_ENV, SECRET)
    config = {
        "games": [
            {
                "game": "comma.wire",
                "seeds": [3],
                "pairings": [
                    {"solver": "human-browser", "expert": "scripted"},
                    {"solver": "m", "expert": "scripted"},
                    {"solver": "scripted", "expert": "scripted"},
                ],
                "settings": {"variant": "text", "max_turns": 2},
            }
        ],
        "models": {"m": model_entry(sim, "plain-model")},
    }
    async with seated_run(config, tmp_path) as run:
        (seat,) = run.seats[("comma.wire", "solver")]
        async with aiohttp.ClientSession() as http, http.ws_connect(run.link(seat)[0]) as ws:
            turn = await next_frame(ws, "turn")
            await asyncio.sleep(0.3)  # a person takes a moment
            said = wire_description(turn["observation"][0]["text"])
            await ws.send_json({"type": "reply", "turn": turn["turn"], "text": said})
            turn = await next_frame(ws, "turn")
            await ws.send_json(
                {"type": "reply", "turn": turn["turn"], "text": expert_instruction(turn["history"])}
            )
            assert (await next_frame(ws, "finished"))["outcome"] == "success"
        outcome = await run.outcome()
    human = next(r for r in outcome.records if r["pairing"]["solver"] == "human")
    assert human["spec"]["players"]["solver"] == {
        "kind": "human",
        "model": None,
        "name": None,
        "params": {},
        "via": "browser",
    }
    replies = [
        m
        for m in RecordedRun(tmp_path).iter_transcript(human["episode"])
        if m["kind"] == "turn_response" and m["role"] == "solver"
    ]
    assert [r["text"] for r in replies] == [said, replies[1]["text"]]
    assert replies[1]["text"].startswith("cut_wire_")
    for reply in replies:
        assert reply["model"] == "human"
        assert reply["raw"] == {"player": "human", "via": "browser"}
        assert reply["latency_s"] > 0
        # The prompt the person was shown, as a model's is recorded.
        assert reply["prompt"][0]["role"] == "system"
    assert replies[0]["latency_s"] >= 0.3
    assert human["model_time_s"] >= sum(r["latency_s"] for r in replies) - 1e-6
    report = build_report(tmp_path)
    section = report.split("## Human and model pairs", 1)[1].split("\n## ", 1)[0]
    rows = {
        line.split(" | ")[1]: line for line in section.splitlines() if line.startswith("| comma")
    }
    assert set(rows) == {
        "solver=human, expert=scripted",
        "solver=m, expert=scripted",
        "solver=scripted, expert=scripted",
    }
    assert "solver: human, expert: built-in | 1 | 100.0" in rows["solver=human, expert=scripted"]
    assert "solver: model, expert: built-in | 1 | 0.0" in rows["solver=m, expert=scripted"]
    assert rows["solver=scripted, expert=scripted"].endswith("| – |")  # no human turns


@pytest.mark.anyio
async def test_a_seat_held_by_a_dashboard_on_the_broker(mqtt5_broker: Any, tmp_path: Path) -> None:
    """The run on an MQTT bus (turns stay in its process but for the seat's), the seat held by
    a dashboard with a connection of its own (``parley dashboard --bus``): the turn reaches
    it through the broker, retained, and the person's reply reaches the game master the same
    way. Timed out meanwhile, a turn would have ended the episode: it did not."""
    dashboard = Dashboard(Hub(), port=0)
    links: list[tuple[Seat, str]] = []
    dashboard.seats.announce = lambda seat, link: links.append((seat, link))
    solver = {"kind": "human", "via": "browser", "turn_timeout_s": 30}
    async with mqtt5_broker.bus() as watching:
        await dashboard.watch(watching)
        await dashboard.start()
        try:
            run = asyncio.create_task(
                run_experiment(
                    load_config({"name": "mqtt-seat", "games": [wire(solver, [3])]}),
                    tmp_path,
                    bus_url=mqtt5_broker.url,
                )
            )
            for _ in range(600):
                if links or run.done():
                    break
                await asyncio.sleep(0.05)
            ((seat, link),) = links
            assert seat.role == "solver" and link.startswith(dashboard.base + "seat/")
            path, query = link.split("?")
            async with aiohttp.ClientSession() as http, http.ws_connect(f"{path}/ws?{query}") as ws:
                turn = await next_frame(ws, "turn")
                assert turn["deadline"] is not None
                said = wire_description(turn["observation"][0]["text"])
                await ws.send_json({"type": "reply", "turn": turn["turn"], "text": said})
                turn = await next_frame(ws, "turn")
                action = expert_instruction(turn["history"])
                await ws.send_json({"type": "reply", "turn": turn["turn"], "text": action})
                assert (await next_frame(ws, "finished"))["outcome"] == "success"
            outcome = await asyncio.wait_for(run, 60)
        finally:
            await dashboard.stop()
    (record,) = outcome.records
    assert (record["outcome"], record["turns"]) == ("success", 3)


# --- in a real browser ------------------------------------------------------------------------


class Frames:
    """Every WebSocket frame a page received, as parsed JSON (``page.on("websocket")``)."""

    def __init__(self, page: Any) -> None:
        self.frames: list[dict[str, Any]] = []
        self.raw: list[str] = []
        page.on("websocket", self._socket)

    def _socket(self, ws: Any) -> None:
        ws.on("framereceived", self._frame)

    def _frame(self, payload: Any) -> None:
        text = payload if isinstance(payload, str) else payload.decode("utf-8", "replace")
        self.raw.append(text)
        with contextlib.suppress(json.JSONDecodeError):
            self.frames.append(json.loads(text))

    @property
    def text(self) -> str:
        """The frames' content as text (JSON, characters unescaped)."""
        return "\n".join(json.dumps(f, ensure_ascii=False) for f in self.frames)

    def before(self, kind: str) -> str:
        """The frames' text up to the first frame of ``kind``."""
        out = []
        for frame in self.frames:
            if frame.get("type") == kind:
                break
            out.append(json.dumps(frame, ensure_ascii=False))
        return "\n".join(out)

    def kinds(self) -> set[str]:
        return {f.get("type", "") for f in self.frames}


def seat_page(browser: Any) -> tuple[Any, Any, Frames]:
    """A browser context of its own (one person), its page, and the frames it receives."""
    # Playwright's waits evaluate script the pages' Content-Security-Policy forbids.
    context = browser.new_context(viewport={"width": 1100, "height": 900}, bypass_csp=True)
    page = context.new_page()
    page.set_default_timeout(WAIT_MS)
    return context, page, Frames(page)


def start_run(tmp_path: Path, games: list[dict[str, Any]]) -> tuple[Process, Path]:
    config = tmp_path / "humans.yaml"
    config.write_text(yaml.safe_dump({"name": "humans", "concurrency": 4, "games": games}))
    run_dir = tmp_path / "run"
    process = Process(
        ["run", str(config), "--out", str(run_dir), "--quiet", "--dashboard", str(free_port())],
        tmp_path / "run.log",
    )
    return process, run_dir


def seat_links(process: Process, count: int, timeout_s: float = 60.0) -> dict[str, str]:
    """``role -> link`` from the ``seat: ROLE of EPISODE: LINK`` lines the run prints."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = {}
        for line in list(process.lines):
            match = SEAT_LINE.match(line.strip())
            if match:
                found[match.group(1)] = match.group(3)
        if len(found) >= count:
            return found
        if process.proc.poll() is not None:
            break
        time.sleep(0.1)
    raise AssertionError(f"no seat links printed; output:\n{''.join(process.lines)}")


def record_of(run_dir: Path, process: Process) -> dict[str, Any]:
    assert process.wait() == 0, "".join(process.lines)
    (record,) = records(run_dir).values()
    return record


def test_a_person_solves_the_wire_puzzle_with_the_scripted_expert(
    browser: Any, tmp_path: Path
) -> None:
    process, run_dir = start_run(tmp_path, [wire("human-browser", [3])])
    context, page, frames = seat_page(browser)
    try:
        link = seat_links(process, 1)["solver"]
        # The dashboard's episode list says whom the game waits for, with the join link.
        dashboard = context.new_page()
        dashboard.set_default_timeout(WAIT_MS)
        dashboard.goto(process.url())  # the printed link: it carries the token
        dashboard.locator("#runs a").first.click()
        dashboard.goto(dashboard.url + "/episodes")
        waiting = dashboard.locator("a.seat-waiting[data-role=solver]")
        waiting.wait_for()
        assert waiting.inner_text() == "waiting for solver"
        assert waiting.get_attribute("href") == link
        dashboard.screenshot(path=tmp_path / "waiting.png", full_page=True)

        page.goto(link)
        page.wait_for_selector("#turn:not([hidden])")
        assert "solver" in page.locator("#who").inner_text()
        observation = page.locator("#observation").inner_text()
        page.fill("#reply", wire_description(observation))
        page.click("#send")
        # The expert's answer arrives in the conversation; the person clicks what it says.
        instruction = page.locator("#history .msg", has_text="Cut wire")
        instruction.wait_for()
        action = "cut_wire_" + re.search(r"Cut wire (\d)", instruction.inner_text()).group(1)
        page.wait_for_selector(f"#actions button[data-action={action}]:not([disabled])")
        page.screenshot(path=tmp_path / "solver.png", full_page=True)
        page.click(f"#actions button[data-action={action}]")
        record = record_of(run_dir, process)
    finally:
        context.close()
        process.stop()
    assert (record["outcome"], record["reason_code"]) == ("success", "solved")
    assert record["pairing"] == {"solver": "human", "expert": "scripted"}
    replies = [
        m
        for m in RecordedRun(run_dir).iter_transcript(record["episode"])
        if m["kind"] == "turn_response" and m["role"] == "solver"
    ]
    assert replies[-1]["text"] == action and replies[-1]["raw"]["player"] == "human"
    # The button sent the action as the whole reply, as a model would write it.
    sent = [f for f in frames.frames if f["type"] == "sent"]
    assert [f["text"] for f in sent][-1] == action


def _reference_target(observation: str) -> str:
    """The describer's target grid, as the text variant shows it (the block after the
    target's label)."""
    block = observation.split("is the target:", 1)[1].split("The second", 1)[0]
    return " / ".join(line.strip() for line in block.strip().splitlines() if line.strip())


def test_two_people_play_the_reference_game(browser: Any, tmp_path: Path) -> None:
    """Describer and guesser, each in a browser context of their own. The describer sees which
    grid is the target; the guesser's browser never receives that, only the expression."""
    game = {
        "game": "clem.reference",
        "seeds": [2],
        "pairings": [{"describer": "human-browser", "guesser": "human-browser"}],
        "settings": {"variant": "text"},
    }
    process, run_dir = start_run(tmp_path, [game])
    describer_ctx, describer, describer_frames = seat_page(browser)
    guesser_ctx, guesser, guesser_frames = seat_page(browser)
    try:
        links = seat_links(process, 2)
        describer.goto(links["describer"])
        guesser.goto(links["guesser"])
        describer.wait_for_selector("#turn:not([hidden])")
        observation = describer.locator("#observation").inner_text()
        target = _reference_target(observation)
        expression = f"Expression: the grid that reads {target}"
        describer.fill("#reply", expression)
        describer.click("#send")
        guesser.wait_for_selector("#turn:not([hidden])")
        heard = guesser.locator("#history .msg", has_text="Expression:").inner_text()
        assert target in heard
        seen = guesser.locator("#observation").inner_text()
        blocks = re.split(r"(First|Second|Third) grid:", seen)
        places = {blocks[i].lower(): blocks[i + 1] for i in range(1, len(blocks) - 1, 2)}
        flat = {
            place: " / ".join(line.strip() for line in text.strip().splitlines() if line.strip())
            for place, text in places.items()
        }
        answer = next(place for place, grid in flat.items() if grid.startswith(target))
        guesser.fill("#reply", f"Answer: {answer}")
        guesser.click("#send")
        guesser.wait_for_selector("#outcome")
        guesser.screenshot(path=tmp_path / "guesser.png", full_page=True)
        record = record_of(run_dir, process)
    finally:
        describer_ctx.close()
        guesser_ctx.close()
        process.stop()
    assert record["outcome"] == "success"
    assert record["pairing"] == {"describer": "human", "guesser": "human"}
    # Information flow, on the frames each browser received: the describer was told the
    # target; the guesser was not, and got the describer's expression as it was written.
    assert "is the target" in describer_frames.text
    # (Until the end: the result, public to anyone watching, says whether it was the target.)
    assert "target" not in guesser_frames.before("finished").lower()
    assert expression in guesser_frames.text
    assert observation.split("\n", 1)[0] not in guesser_frames.text
    # Each page received its own role's turns and the end, nothing else.
    for frames, role in ((describer_frames, "describer"), (guesser_frames, "guesser")):
        assert frames.kinds() <= {"seat", "turn", "waiting", "sent", "finished"}
        assert {f["role"] for f in frames.frames if f["type"] == "seat"} == {role}
    assert f"Answer: {answer}" not in describer_frames.text


def test_a_person_plays_tictactoe_against_minimax_by_clicking_cells(
    browser: Any, tmp_path: Path
) -> None:
    game = {
        "game": "playground.tictactoe.e2e",
        "seeds": [0],
        "pairings": [{"player": "human-browser", "opponent": "scripted"}],
    }
    process, run_dir = start_run(tmp_path, [game])
    context, page, frames = seat_page(browser)
    clicked: list[str] = []
    try:
        page.goto(seat_links(process, 1)["player"])
        while True:
            page.wait_for_selector("#actions button:not([disabled]), #outcome")
            if page.locator("#outcome").count():
                break
            # The board's picture is there, served to this seat only.
            page.wait_for_function(
                "(() => { const i = document.querySelector('#observation img');"
                " return i && i.complete && i.naturalWidth > 0; })()"
            )
            cells = page.locator("#actions button:not([disabled])").all_inner_texts()
            page.screenshot(path=tmp_path / f"move{len(clicked)}.png", full_page=True)
            cell = cells[len(clicked) % len(cells)]
            clicked.append(cell)
            page.click(f"#actions button[data-action='{cell}']")
            page.wait_for_function(
                f"document.querySelectorAll('#history .msg.own').length >= {len(clicked)}"
                " || !!document.querySelector('#outcome')"
            )
        record = record_of(run_dir, process)
    finally:
        context.close()
        process.stop()
    assert record["reason_code"] == "game_over", record
    assert record["outcome"] in ("success", "lost")
    assert record["role_results"]["player"] in ("win", "loss", "draw")
    assert record["role_results"]["player"] != "win"  # minimax does not lose
    moves = [
        m["data"].get("action")
        for m in RecordedRun(run_dir).iter_transcript(record["episode"])
        if m["kind"] == "transcript_event" and m["event"] == "action" and m["from_role"] == "player"
    ]
    assert moves == clicked
    assert [f["text"] for f in frames.frames if f["type"] == "sent"] == clicked


def test_a_seat_token_opens_its_own_seat_only_and_the_expert_never_receives_the_solvers_secrets(
    browser: Any, tmp_path: Path
) -> None:
    """COMMA's ATM (the solver holds a PIN) with both roles at seats. The solver's token opens
    neither the expert's page nor its WebSocket (403), nor does a made-up one. Then both play
    until the turn limit; the expert's browser never received the solver's picture, PIN or
    feedback, all of which the solver's browser did."""
    game = {
        "game": "comma.atm",
        "seeds": [0],
        "pairings": [{"solver": "human-browser", "expert": "human-browser"}],
        "settings": {"max_turns": 2},
    }
    process, run_dir = start_run(tmp_path, [game])
    solver_ctx, solver, solver_frames = seat_page(browser)
    expert_ctx, expert, expert_frames = seat_page(browser)
    try:
        links = seat_links(process, 2)
        solver_token = links["solver"].split("token=")[1]
        expert_path = links["expert"].split("?")[0]
        assert expert.goto(f"{expert_path}?token={solver_token}").status == 403
        assert expert.goto(f"{expert_path}?token=not-a-seat-token").status == 403
        assert expert.goto(expert_path).status == 403
        assert solver.goto(links["solver"]).status == 200
        solver.wait_for_selector("#turn:not([hidden])")
        ws_url = expert_path.replace("http://", "ws://") + "/ws?token=" + solver_token
        refused = solver.evaluate(
            """url => new Promise(done => {
                 const ws = new WebSocket(url);
                 ws.onopen = () => done("opened");
                 ws.onerror = () => done("refused");
               })""",
            ws_url,
        )
        assert refused == "refused"
        assert expert.goto(links["expert"]).status == 200
        # The solver presses a key (feedback comes back to it), the expert answers, the
        # solver talks: its second turn is the last (max_turns: 2).
        solver.wait_for_selector("#actions button:not([disabled])")
        solver.locator("#actions button:not([disabled])").first.click()
        expert.wait_for_selector("#turn:not([hidden])")
        expert.fill("#reply", "Tell me what the screen shows.")
        expert.click("#send")
        solver.wait_for_selector("#feedback:not([hidden])")
        solver.fill("#reply", "What should I do next?")
        solver.click("#send")
        solver.wait_for_selector("#outcome")
        expert.wait_for_selector("#outcome")
        expert.screenshot(path=tmp_path / "expert.png", full_page=True)
        record = record_of(run_dir, process)
    finally:
        solver_ctx.close()
        expert_ctx.close()
        process.stop()
    assert record["reason_code"] == "turn_limit"
    solver_requests = [
        m
        for m in RecordedRun(run_dir).iter_transcript(record["episode"])
        if m["kind"] == "turn_request" and m["role"] == "solver"
    ]
    pictures = {
        p["sha256"] for r in solver_requests for p in r["observation"] if p["type"] == "image"
    }
    feedback = [r["feedback"] for r in solver_requests if r["feedback"]]
    pin = record["private_facts"]["solver"]["pin"]
    assert pictures and feedback and pin
    for secret in [*pictures, *feedback, pin]:
        assert secret in solver_frames.text, secret
        assert secret not in expert_frames.text, secret
    assert "turn" in expert_frames.kinds() and "finished" in expert_frames.kinds()
