"""``reference:``: COMMA's own prompts, instances and limits, read from a COMMA checkout (here
the copy of COMMA's config in ../shared/data/reference/comma), played through the runtime.

One run plays all 1,000 of COMMA's instances (100 a puzzle, text variant) with the scripted
pair; the tests read its transcripts and run folder. What each test expects is computed from
the reference's own files, never written down here.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from parley.environments.comma import PUZZLES, reference
from parley.environments.comma import colour as colour_mod
from parley.environments.comma.base import EXPERT_LIMIT, CommaGameMaster
from parley.environments.registry import get
from parley.runtime.config import ConfigError, load_config
from parley.runtime.scheduler import run_experiment
from tests.comma.conftest import SCRIPTED, Run, comma_config, play

COMMA = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "reference" / "comma"
CONFIG = COMMA / "config"
PER_PUZZLE = 100


def reference_json(name: str) -> Any:
    return json.loads((CONFIG / name).read_text(encoding="utf-8"))


def comma_instances(class_name: str) -> list[dict[str, Any]]:
    return [e[class_name] for e in reference_json("puzzles_final.json") if class_name in e]


def settings(path: Path | str = COMMA) -> dict[str, Any]:
    return {"variant": "text", "reference": str(path)}


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    config = comma_config(PER_PUZZLE, [SCRIPTED], settings=settings())
    return play(config, tmp_path_factory.mktemp("reference") / "run")


def requests(run: Run, role: str) -> dict[str, dict[str, Any]]:
    """Each episode's first turn request to ``role`` (the one carrying its system prompt)."""
    first: dict[str, dict[str, Any]] = {}
    with (run.path / "transcripts.jsonl").open(encoding="utf-8") as f:
        for line in f:
            event = json.loads(line)
            if event.get("kind") == "turn_request" and event.get("role") == role:
                first.setdefault(event["episode"], event)
    return first


def test_recorded_prompts_are_the_references_templates_filled(run: Run) -> None:
    prompts = reference_json("prompts.json")
    experts, solvers = requests(run, "expert"), requests(run, "solver")
    games = {r["episode"]: r["game"].removeprefix("comma.") for r in run.records}
    assert len(experts) == len(solvers) == len(games) == PER_PUZZLE * len(PUZZLES)
    for episode, puzzle in games.items():
        manual = prompts[reference.CLASS_NAMES[puzzle]]
        assert experts[episode]["system"] == f"{prompts['EXPERT']}\n\n{manual}"
        solver = solvers[episode]["system"]
        if puzzle in ("atm", "telehealth"):
            # COMMA adds the private profile; parley says it in its own words after the prompt.
            assert solver.startswith(prompts["SOLVER"] + "\n\n")
        else:
            assert solver == prompts["SOLVER"]


def test_the_instances_are_commas(run: Run) -> None:
    wires = comma_instances("SimpleWirePuzzle")
    pins = comma_instances("AtmPuzzle")
    solvers = requests(run, "solver")
    checked = 0
    for record in run.records:
        index = record.seed % PER_PUZZLE
        if record.game == "comma.wire":
            seen = solvers[record.episode]["observation"][0]["text"]
            order = [c for c in seen.replace(",", " ").split() if c in wires[index]["colors"]]
            assert order[: wires[index]["n_wires"]] == wires[index]["colors"]
            checked += 1
        if record.game == "comma.atm":
            assert record.private_facts["solver"]["pin"] == pins[index]["PIN"]
            assert record.private_facts["solver"]["balance"] == f"${pins[index]['Balance']}"
            checked += 1
    assert checked == 2 * PER_PUZZLE


def _ambiguous_passwords() -> set[int]:
    """COMMA's password instances whose wheels (each the letter before the answer's, the
    answer's and the one after) spell more than one listed word."""
    found = set()
    for i, p in enumerate(comma_instances("PasswordPuzzle")):
        wheels = [
            {chr((ord(c) - 98) % 26 + 97), c, chr((ord(c) - 96) % 26 + 97)}
            for c in p["answer_word"]
        ]
        words = [
            w
            for w in p["possible_words"]
            if all(ch in wh for ch, wh in zip(w, wheels, strict=True))
        ]
        if len(words) > 1:
            found.add(i)
    return found


def _long_colour_grids(turns: int) -> set[int]:
    """COMMA's colour grids that take more groups than the scripted pair has turns for (one
    turn to describe, then one group a turn) under the seed's recolouring."""
    found = set()
    for i, p in enumerate(comma_instances("ColourPuzzle")):
        grid = [[c.lower() for c in p["colors"][r * 4 : r * 4 + 4]] for r in range(4)]
        if 1 + len(colour_mod.solution(grid, i)) > turns:
            found.add(i)
    return found


def test_commas_instances_play_to_sr_1(run: Run) -> None:
    """All 1,000 play; every one wins but those no player could win: password wheels that
    spell two listed words (COMMA's manual promises one) and colour grids whose groups outlast
    COMMA's turns. Those are computed from the reference's own files."""
    turns = reference_json("random_config.json")["Hyperparameters"]["MAX_CONVERSATION_TURNS"] + 1
    unwinnable = {"password": _ambiguous_passwords(), "colour": _long_colour_grids(turns)}
    assert all(len(v) < PER_PUZZLE // 5 for v in unwinnable.values())
    by_game: dict[str, dict[int, str]] = {}
    for record in run.records:
        by_game.setdefault(record.game.removeprefix("comma."), {})[record.seed] = record.outcome
    assert set(by_game) == set(PUZZLES)
    for puzzle, outcomes in by_game.items():
        assert sorted(outcomes) == list(range(PER_PUZZLE)), puzzle
        lost = {seed for seed, outcome in outcomes.items() if outcome != "success"}
        assert lost == unwinnable.get(puzzle, set()), puzzle


def test_the_run_folder_names_the_reference_and_hashes_its_files(run: Run) -> None:
    meta = json.loads((run.path / "run.json").read_text(encoding="utf-8"))
    (entry,) = meta["references"]
    assert entry["path"] == str(COMMA.resolve())
    assert entry["commit"] is None  # the shared copy is not a git checkout
    names = {"prompts.json", "puzzles_final.json", "random_config.json"}
    assert entry["files"] == {
        f"config/{n}": hashlib.sha256((CONFIG / n).read_bytes()).hexdigest() for n in names
    }


def test_a_git_checkout_of_multimodal_comms_records_its_commit(tmp_path: Path) -> None:
    git = "git"
    root = tmp_path / "multimodal_comms"
    config = root / "src" / "multimodal_comms" / "apps" / "comma" / "config"
    config.mkdir(parents=True)
    for name in ("prompts.json", "puzzles_final.json", "random_config.json"):
        shutil.copy(CONFIG / name, config / name)
    for args in (
        ["init", "-q"],
        ["add", "."],
        ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "c"],
    ):
        subprocess.run([git, "-C", str(root), *args], check=True, capture_output=True)
    head = subprocess.run(
        [git, "-C", str(root), "rev-parse", "HEAD"], check=True, capture_output=True, text=True
    ).stdout.strip()
    found = reference.load(root).provenance()
    assert found["commit"] == head
    assert set(found["files"]) == {
        f"src/multimodal_comms/apps/comma/config/{n}"
        for n in ("prompts.json", "puzzles_final.json", "random_config.json")
    }


def broken(tmp_path: Path, name: str, text: str) -> Path:
    """A copy of the reference's config with ``name`` replaced by ``text``."""
    config = tmp_path / "comma" / "config"
    config.mkdir(parents=True)
    for file in ("prompts.json", "puzzles_final.json", "random_config.json"):
        shutil.copy(CONFIG / file, config / file)
    (config / name).write_text(text, encoding="utf-8")
    return tmp_path / "comma"


def no_expert(tmp_path: Path) -> Path:
    prompts = reference_json("prompts.json")
    del prompts["EXPERT"]
    return broken(tmp_path, "prompts.json", json.dumps(prompts))


def no_atm(tmp_path: Path) -> Path:
    kept = [e for e in reference_json("puzzles_final.json") if "AtmPuzzle" not in e]
    return broken(tmp_path, "puzzles_final.json", json.dumps(kept))


@pytest.mark.parametrize(
    ("make", "said"),
    [
        (lambda t: t / "nowhere", "not a folder"),
        (lambda t: t, "no COMMA config folder"),
        (lambda t: broken(t, "prompts.json", "{not json"), "prompts.json: not JSON"),
        (no_expert, "prompts.json: no EXPERT text"),
        (no_atm, "puzzles_final.json: no instances of AtmPuzzle"),
        (lambda t: broken(t, "random_config.json", "{}"), "random_config.json: no Hyperparameters"),
    ],
)
def test_a_broken_reference_is_a_config_error(tmp_path: Path, make: Any, said: str) -> None:
    path = make(tmp_path)
    config = load_config(
        {
            "name": "bad",
            "games": [{"game": "comma.wire", "pairings": [SCRIPTED], "settings": settings(path)}],
        }
    )
    with pytest.raises(ConfigError) as caught:
        asyncio.run(run_experiment(config, tmp_path / "run"))
    assert said in str(caught.value)
    assert "games.0.settings" in str(caught.value)
    assert not (tmp_path / "run" / "episodes.jsonl").exists()


def master(puzzle: str, seed: int, **extra: Any) -> CommaGameMaster:
    info = get(f"comma.{puzzle}")
    values = info.resolve_settings({**settings(), **extra})
    game = info.game_master(info.instance(seed, values), values)
    assert isinstance(game, CommaGameMaster)
    return game


def test_commas_parsing_acts_on_action_names_inside_text() -> None:
    game = master("wire", 0)
    answer = f"cut_wire_{game.puzzle.answer}"
    wrong = next(a for a in game.puzzle.legal_actions() if a != answer)
    # A mistake does not stop the reply: COMMA carries on with the next line.
    game.handle_reply("solver", f"I will {wrong.upper()} first\nthen {answer} please")
    assert game.mistakes == 1
    assert game.outcome == "success"


def test_commas_extra_step_acts_on_its_first_line_only() -> None:
    game = master("password", 3)
    limit = reference_json("random_config.json")["Hyperparameters"]["MAX_CONVERSATION_TURNS"]
    assert game.max_turns == limit + 1
    for _ in range(limit):
        game.handle_reply("solver", "what do I do?")
        game.handle_reply("expert", "describe it")
    game.handle_reply("solver", "up_button_1\nup_button_2")
    assert game.puzzle.selected != game.puzzle.instance["selected"]
    assert game.actions_taken == 1
    assert game.outcome == "lost"


@pytest.mark.parametrize("name", list(PUZZLES))
def test_parleys_expert_prompt_holds_the_100_word_limit(name: str) -> None:
    info = get(f"comma.{name}")
    for rules in ("comma", "parley"):
        values = info.resolve_settings({"rules": rules, "variant": "text"})
        game = info.game_master(info.instance(1, values), values)
        assert EXPERT_LIMIT in game.system_prompt("expert")
        assert "100 words" in EXPERT_LIMIT
        assert EXPERT_LIMIT not in game.system_prompt("solver")
