"""``clem.reference`` with ``reference:``: clembench's own Reference game instances and prompts,
read from the copy of clembench in ../shared/data/reference/clembench and played through the
runtime. What each test expects is computed from clembench's instances file."""

from __future__ import annotations

import asyncio
import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from parley.runtime.config import ConfigError, load_config
from parley.runtime.scheduler import RunOutcome, run_experiment

CLEMBENCH = (
    Path(__file__).resolve().parents[2].parent / "shared" / "data" / "reference" / "clembench"
)
INSTANCES = CLEMBENCH / "referencegame" / "in" / "instances.json"
SCRIPTED = {"describer": "scripted", "guesser": "scripted"}


def clembench_instances() -> list[dict[str, Any]]:
    data = json.loads(INSTANCES.read_text(encoding="utf-8"))
    return [i for e in data["experiments"] for i in e["game_instances"]]


def config(path: Path, count: int) -> dict[str, Any]:
    block = {
        "game": "clem.reference",
        "seeds": {"count": count},
        "pairings": [SCRIPTED],
        "settings": {"variant": "text", "reference": str(path)},
    }
    return {"name": "clembench-ref", "tracing": {"enabled": False}, "games": [block]}


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[RunOutcome, Path]:
    out = tmp_path_factory.mktemp("clembench") / "run"
    outcome = asyncio.run(
        run_experiment(load_config(config(CLEMBENCH, len(clembench_instances()))), out)
    )
    return outcome, out


def turn_events(out: Path) -> dict[str, dict[str, Any]]:
    """Per episode: the describer's and guesser's turn requests and the describer's reply."""
    found: dict[str, dict[str, Any]] = {}
    with (out / "transcripts.jsonl").open(encoding="utf-8") as f:
        for line in f:
            event = json.loads(line)
            kind = event.get("kind")
            if kind in ("turn_request", "turn_response"):
                found.setdefault(event["episode"], {})[f"{kind}:{event['role']}"] = event
    return found


def test_recorded_prompts_are_clembenchs_filled_templates(run: tuple[RunOutcome, Path]) -> None:
    outcome, out = run
    instances = clembench_instances()
    events = turn_events(out)
    assert len(outcome.records) == len(instances)
    for record in outcome.records:
        item = instances[record.seed % len(instances)]
        turns = events[record.episode]
        describer = turns["turn_request:describer"]
        assert describer["observation"][0]["text"] == item["player_1_prompt_header"]
        assert not describer["system"]
        expression = turns["turn_response:describer"]["text"].strip()
        guesser = turns["turn_request:guesser"]["observation"][0]["text"]
        assert guesser == item["player_2_prompt_header"].replace("TARGET_EXPRESSION", expression)


def test_clembenchs_instances_play_to_sr_1(run: tuple[RunOutcome, Path]) -> None:
    outcome, _ = run
    assert {r.outcome for r in outcome.records} == {"success"}
    assert sorted(r.seed for r in outcome.records) == list(range(len(clembench_instances())))


def test_the_run_folder_names_clembench_and_hashes_its_file(run: tuple[RunOutcome, Path]) -> None:
    _, out = run
    (entry,) = json.loads((out / "run.json").read_text(encoding="utf-8"))["references"]
    assert entry["family"] == "clem"
    assert entry["path"] == str(CLEMBENCH.resolve())
    assert entry["commit"] is None
    digest = hashlib.sha256(INSTANCES.read_bytes()).hexdigest()
    assert entry["files"] == {"referencegame/in/instances.json": digest}


def test_a_reply_off_clembenchs_pattern_aborts() -> None:
    from parley.environments.registry import get

    info = get("clem.reference")
    values = info.resolve_settings({"variant": "text", "reference": str(CLEMBENCH)})
    game = info.game_master(info.instance(0, values), values)
    # The instances are strict: a second paragraph after the expression breaks the format.
    game.handle_reply("describer", "Expression: the letter T\n\nIt has a bar on top.")
    assert game.outcome == "aborted"


def _broken(tmp_path: Path, text: str) -> Path:
    root = tmp_path / "clembench"
    (root / "referencegame" / "in").mkdir(parents=True)
    (root / "referencegame" / "in" / "instances.json").write_text(text, encoding="utf-8")
    return root


@pytest.mark.parametrize(
    ("text", "said"),
    [
        (None, "no referencegame/in/instances.json"),
        ("{oops", "instances.json: not JSON"),
        ('{"experiments": [{"name": "x", "game_instances": [{}]}]}', "lacks player_1_prompt"),
    ],
)
def test_a_broken_clembench_reference_is_a_config_error(
    tmp_path: Path, text: str | None, said: str
) -> None:
    root = tmp_path / "empty" if text is None else _broken(tmp_path, text)
    if text is None:
        shutil.copytree(CLEMBENCH / "referencegame" / "resources", root / "resources")
    with pytest.raises(ConfigError) as caught:
        asyncio.run(run_experiment(load_config(config(root, 1)), tmp_path / "run"))
    assert said in str(caught.value)
    assert "games.0.settings" in str(caught.value)
