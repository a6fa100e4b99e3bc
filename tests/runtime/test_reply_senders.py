"""A reply counts only from the seat that was asked.

A run on a real Mosquitto whose solver is a person at a seat held by a dashboard on the broker
(the game master's inbox then listens on the broker too): while the person thinks, a program
on the broker puts well-formed replies into the game master's inbox that name the solver and
the turn being waited on, one as a stranger and one as the expert (another role's player
answering for the solver). The episode refuses both, counts them in its record and notes each
in its transcript, and ends as the same run without them does; the report says so.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from parley.bus import topics
from parley.bus.codec import encode
from parley.bus.messages import TextPart, TranscriptEvent, TurnResponse
from parley.observability.dashboard import Dashboard, Hub
from parley.observability.dashboard.seats import Seat
from parley.records import RecordedRun, read_records
from parley.runtime.config import load_config
from parley.runtime.report import build_report
from parley.runtime.scheduler import run_experiment
from tests.fixtures.broker import MqttBroker
from tests.observability.test_human_seats import (
    expert_instruction,
    next_frame,
    wire,
    wire_description,
)

pytestmark = pytest.mark.anyio

# Who else writes into the game master's inbox, and the wrong wire each of them names.
# Who forges the solver's reply, and on which seat's topic (None: the game master's inbox).
FORGERS = (("intruder", None), ("expert", None), ("solver", "expert"))


@contextlib.asynccontextmanager
async def seat_on_the_broker(
    broker: MqttBroker, out: Path
) -> AsyncIterator[tuple[asyncio.Task[Any], Seat, str]]:
    """A COMMA wire run (seed 3) on ``broker`` whose solver sits at a seat of a dashboard with
    a connection of its own: the run's task, the seat and its WebSocket URL."""
    dashboard = Dashboard(Hub(), port=0)
    links: list[tuple[Seat, str]] = []
    dashboard.seats.announce = lambda seat, link: links.append((seat, link))
    solver = {"kind": "human", "via": "browser"}
    async with broker.bus() as watching:
        await dashboard.watch(watching)
        await dashboard.start()
        try:
            config = load_config({"name": "senders", "games": [wire(solver, [3])]})
            run = asyncio.create_task(run_experiment(config, out, bus_url=broker.url))
            for _ in range(600):
                if links or run.done():
                    break
                await asyncio.sleep(0.05)
            ((seat, link),) = links
            path, query = link.split("?")
            yield run, seat, f"{path}/ws?{query}"
            await asyncio.wait_for(run, 60)
        finally:
            if not run.done():
                run.cancel()
            await dashboard.stop()


async def play_the_solver(
    broker: MqttBroker, out: Path, *, forged: bool
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Play seed 3 as the person would; with ``forged``, the forgers answer the first turn
    before the person does. The record and the transcript."""
    async with (
        seat_on_the_broker(broker, out) as (_run, seat, ws_url),
        aiohttp.ClientSession() as http,
        http.ws_connect(ws_url) as ws,
    ):
        turn = await next_frame(ws, "turn")
        if forged:
            await forge(broker, seat, turn["turn"])
        said = wire_description(turn["observation"][0]["text"])
        await ws.send_json({"type": "reply", "turn": turn["turn"], "text": said})
        turn = await next_frame(ws, "turn")
        action = expert_instruction(turn["history"])
        await ws.send_json({"type": "reply", "turn": turn["turn"], "text": action})
        assert (await next_frame(ws, "finished"))["outcome"] == "success"
    (record,) = read_records(out)
    return record.json_dict(), list(RecordedRun(out).iter_transcript(record.episode))


async def forge(broker: MqttBroker, seat: Seat, turn: int) -> None:
    """Each forger's reply for the solver's ``turn``, put into the game master's inbox; back
    once the game master has refused them all (its notes are on the public events topic)."""
    notes: list[str] = []
    async with broker.bus() as bus, bus.subscribe(topics.events(seat.run, seat.episode)) as sub:
        await sub.ready()
        for n, (sender, via) in enumerate(FORGERS, 1):
            reply = TurnResponse(
                run=seat.run,
                episode=seat.episode,
                sender=sender,
                recipient="gm",
                turn=turn,
                role="solver",
                text=f"cut_wire_{n}",
                model="human",
                raw={"player": "human", "via": "browser"},
            )
            topic = (
                topics.gm_inbox(seat.run, seat.episode)
                if via is None
                else topics.seat_replies(seat.run, seat.episode, via)
            )
            await broker.publish_raw(topic, encode(reply))
        while len(notes) < len(FORGERS):
            message = (await asyncio.wait_for(sub.get(), 30)).message
            if isinstance(message, TranscriptEvent) and message.event == "note":
                text = "".join(p.text for p in message.content if isinstance(p, TextPart))
                if text.startswith("refused a reply"):
                    notes.append(text)
    assert all("'solver'" in note for note in notes), notes
    assert sorted(n.split(" sent by ")[1].split(":")[0] for n in notes) == sorted(
        repr(s) + ("" if via is None else f" on the seat topic of {via!r}") for s, via in FORGERS
    )


async def test_replies_from_others_than_the_asked_seat_are_refused_and_counted(
    mqtt5_broker: MqttBroker, tmp_path: Path
) -> None:
    clean, _ = await play_the_solver(mqtt5_broker, tmp_path / "clean", forged=False)
    record, transcript = await play_the_solver(mqtt5_broker, tmp_path / "forged", forged=True)
    same = ("outcome", "reason_code", "main_score", "turns", "role_results")
    assert {k: record[k] for k in same} == {k: clean[k] for k in same}
    assert (record["outcome"], record["turns"]) == ("success", 3)
    assert record["refused_replies"] == len(FORGERS) and "refused_replies" not in clean
    # Only the person's replies are in the transcript; each refusal is a note.
    replies = [m for m in transcript if m["kind"] == "turn_response"]
    assert all(m["role"] == m["sender"] for m in replies)
    assert sum(m["role"] == "solver" for m in replies) == 2
    notes = [m for m in transcript if m["kind"] == "transcript_event" and m["event"] == "note"]
    assert sum(n["content"][0]["text"].startswith("refused a reply") for n in notes) == len(FORGERS)
    report = build_report(tmp_path / "forged")
    assert "## Replies refused" in report and f"{len(FORGERS)} replies in 1 episodes" in report
    assert "## Replies refused" not in build_report(tmp_path / "clean")
