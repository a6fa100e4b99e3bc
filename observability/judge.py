"""An optional model judge for the error categories, through any model of the registry.

Seed 001 classifies failed conversations with a calibrated model judge; this is the same idea
with a prompt written here and versioned (:data:`PROMPT_VERSION`, recorded with every verdict),
so verdicts of different prompt versions are never mixed silently. The judge sees the whole
conversation, the game master's feedback and, where recorded, the state the acting role saw
(the ground truth the paper gave its judge), and answers with one JSON object. A reply that is
not one is recorded as ``unparsed`` with the reason, never a crash.

The rule-based detectors (:mod:`parley.observability.errors`) are the primary analysis; the judge is a
second opinion for what rules cannot see.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from parley.observability.errors import SHARE_CATEGORIES, ErrorFinding, steps_of, text_of
from parley.records import EpisodeRecord, read_records, transcripts

PROMPT_VERSION = "errors-judge/1"

SYSTEM = """\
You review one conversation of a two-player cooperative puzzle. One player (the solver) sees \
the puzzle and acts on it; the other (the expert) cannot see it and holds the manual. The \
puzzle was not solved. Decide which ONE of these explains the failure best:

- roleplay: a player acts as if it had the other's role — the expert describes the puzzle as \
if it could see it or writes the solver's part; the solver recites the manual's rules as if it \
held the manual, or acts as if it could not see the puzzle.
- misinterpretation: the solver misreads the puzzle's state or a signal (its description \
contradicts the state shown below), and that leads to wrong actions.
- repetition: the solver repeats an action that already failed in the same situation.
- miscommunication: a player ignores or departs from what the other just said (the solver \
does something other than the expert's instruction, or the expert ignores the solver's \
description or question).
- other: none of the above (for example the expert's manual reasoning is wrong, or time ran out).

Answer with one JSON object and nothing else:
{"category": "<one of: roleplay, misinterpretation, repetition, miscommunication, other>", \
"turn": <the turn where it first shows, or null>, "evidence": "<a short quote>"}"""


def render(
    record: EpisodeRecord, messages: Iterable[dict[str, Any]], max_chars: int = 24_000
) -> str:
    """The conversation as the judge reads it: turns, what each player said, actions and their
    feedback, and the state the acting player saw (when the game records it)."""
    lines = [f"Game: {record.game}; outcome: {record.outcome} ({record.reason})"]
    for step in steps_of(messages):
        view = step.request.get("view")
        if step.request.get("legal_actions") and view is not None:
            lines.append(
                f"[turn {step.turn}] state seen by the {step.role}: {json.dumps(view, sort_keys=True)}"
            )
        lines.append(f"[turn {step.turn}] {step.role}: {step.reply.strip()}")
        for event in step.events:
            kind = event.get("event")
            if kind == "action":
                data = event.get("data") or {}
                outcome = "MISTAKE" if data.get("mistake") else data.get("feedback", "done")
                lines.append(
                    f"[turn {step.turn}] environment: {data.get('action', text_of(event))} -> {outcome}"
                )
            elif kind in ("violation", "note"):
                lines.append(f"[turn {step.turn}] game master: {text_of(event)}")
    text = "\n".join(lines)
    if len(text) > max_chars:  # keep the start and the end, where failures show
        text = text[: max_chars // 2] + "\n[…]\n" + text[-max_chars // 2 :]
    return text


@dataclass
class Verdict:
    """What the judge said about one episode."""

    episode: str
    category: str
    turn: int | None
    evidence: str
    prompt_version: str = PROMPT_VERSION
    model: str = ""
    error: str | None = None

    def finding(self, record: EpisodeRecord) -> ErrorFinding:
        return ErrorFinding(
            record.episode,
            record.game,
            self.category,
            self.turn or 0,
            "",
            self.evidence,
            f"judge:{self.model}",
        )


def parse_verdict(text: str) -> tuple[str, int | None, str]:
    """(category, turn, evidence) from a judge reply; raises ValueError when it is not one."""
    match = re.search(r"\{.*\}", text, re.DOTALL)
    if not match:
        raise ValueError("no JSON object in the reply")
    try:
        data = json.loads(match.group(0))
    except json.JSONDecodeError as exc:
        raise ValueError(f"not JSON: {exc.msg}") from None
    if not isinstance(data, dict):
        raise ValueError("the JSON is not an object")
    category = str(data.get("category", "")).strip().lower()
    aliases = {"communication": "miscommunication", "interpretation": "misinterpretation"}
    category = aliases.get(category, category)
    if category not in SHARE_CATEGORIES:
        raise ValueError(f"unknown category {category!r}")
    turn = data.get("turn")
    try:
        turn = int(turn) if turn is not None else None
    except (TypeError, ValueError):
        turn = None
    return category, turn, str(data.get("evidence") or "")[:500]


async def judge_episode(
    client: Any, params: Any, record: EpisodeRecord, messages: list[dict[str, Any]]
) -> Verdict:
    """Ask the judge about one episode (``client``: a parley.agents.backends ModelClient)."""
    from parley.agents.backends.client import ModelUnavailable
    from parley.bus.messages import PromptMessage, TextPart

    prompt = [
        PromptMessage(role="system", content=[TextPart(text=SYSTEM)]),
        PromptMessage(role="user", content=[TextPart(text=render(record, messages))]),
    ]
    try:
        done = await client.complete(prompt, params)
    except ModelUnavailable as exc:
        return Verdict(record.episode, "unjudged", None, "", model=client.name, error=str(exc))
    try:
        category, turn, evidence = parse_verdict(done.reply.text)
    except ValueError as exc:
        return Verdict(
            record.episode,
            "unparsed",
            None,
            done.reply.text[:200],
            model=client.name,
            error=str(exc),
        )
    return Verdict(record.episode, category, turn, evidence, model=client.name)


async def judge_run(
    run_dir: str | Path,
    model: str,
    specs: dict[str, Any],
    *,
    records: list[EpisodeRecord] | None = None,
    failed_only: bool = True,
    concurrency: int = 8,
) -> list[Verdict]:
    """Judge a run's (failed) episodes with ``model`` from ``specs`` (name → ModelSpec)."""
    from parley.agents.backends.pool import ModelPool

    run = Path(run_dir)
    chosen = [
        r
        for r in (records if records is not None else read_records(run))
        if r.outcome in (("lost", "aborted") if failed_only else ("success", "lost", "aborted"))
    ]
    verdicts: list[Verdict] = []
    limit = asyncio.Semaphore(concurrency)
    async with ModelPool(specs) as pool:
        client = pool.client(model)
        params = client.spec.params.merged({"temperature": 0.0})

        async def one(record: EpisodeRecord, messages: list[dict[str, Any]]) -> None:
            try:
                verdicts.append(await judge_episode(client, params, record, messages))
            finally:
                limit.release()

        async with asyncio.TaskGroup() as tg:
            for record, messages in transcripts(run, chosen):
                await limit.acquire()  # at most ``concurrency`` transcripts held at once
                tg.create_task(one(record, messages))
    order = {r.episode: i for i, r in enumerate(chosen)}
    verdicts.sort(key=lambda v: order.get(v.episode, 0))
    return verdicts


def write_verdicts(run_dir: str | Path, verdicts: list[Verdict]) -> Path:
    path = Path(run_dir) / "errors_judge.jsonl"
    with path.open("w", encoding="utf-8") as f:
        for v in verdicts:
            f.write(json.dumps(asdict(v), ensure_ascii=False) + "\n")
    return path
