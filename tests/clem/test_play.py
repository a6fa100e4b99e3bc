"""Playing through the bus: scripted players win where the game is solvable from what they see,
random players finish, every role sees only its own share, runs are deterministic, the report
prints Table 1 and writes readable HTML transcripts."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest

from parley.environments.clem import reference
from parley.runtime.config import load_config
from parley.runtime.reports.clem import report
from parley.runtime.results import RunFolder
from parley.runtime.scheduler import run_experiment

pytestmark = pytest.mark.anyio

PAIRS = {
    "clem.reference": {"describer": "scripted", "guesser": "scripted"},
    "clem.matchit": {"player_a": "scripted", "player_b": "scripted"},
    "clem.mapworld_ee": {"navigator": "scripted"},
    "clem.mapworld_g2x": {"navigator": "scripted"},
    "clem.mapworld_eegr": {"navigator": "scripted"},
}


def _block(game: str, count: int, kind: str = "scripted", **settings: Any) -> dict[str, Any]:
    return {
        "game": game,
        "seeds": {"count": count},
        "pairings": [{role: kind for role in PAIRS[game]}],
        "settings": settings,
    }


async def _run(
    tmp_path: Path, games: list[dict[str, Any]], name: str = "run"
) -> list[dict[str, Any]]:
    config = load_config({"name": "t", "games": games, "tracing": {"enabled": False}})
    outcome = await run_experiment(config, tmp_path / name)
    return outcome.records


async def test_scripted_players_win_every_experiment(tmp_path: Path) -> None:
    games = [_block("clem.reference", 3, set=s) for s in reference.SETS]
    games += [_block("clem.reference", 3, set=s, variant="text") for s in reference.TEXT_SETS]
    for name, pairs in (
        ("grids", ("same", "similar_transform", "similar_edit", "different")),
        ("pentomino", ("same", "similar", "different")),
        ("photos", ("same", "similar", "different")),
    ):
        for pair in pairs:
            games.append(
                _block(
                    "clem.matchit",
                    3,
                    set=name,
                    pair=pair,
                    variant="text" if name == "grids" else "image",
                )
            )
    for variant in ("text", "image"):
        count = 10 if variant == "text" else 3
        for rooms, cycle in ((4, False), (6, False), (8, False), (6, True), (8, True)):
            games.append(
                _block("clem.mapworld_ee", count, rooms=rooms, cycle=cycle, variant=variant)
            )
        for distance in ("zero", "close", "far"):
            games.append(_block("clem.mapworld_g2x", count, distance=distance, variant=variant))
    games += [_block("clem.mapworld_eegr", 3, rooms=r, variant="text") for r in (4, 6, 8)]
    records = await _run(tmp_path, games)
    # reference 13 image + 6 text sets and 10 MatchIt experiments, 3 seeds each; MapWorld EE and
    # G2X (8 experiments) with 10 text + 3 image seeds; EE-gr 3 × 3.
    assert len(records) == 3 * (13 + 6 + 10) + 8 * (10 + 3) + 3 * 3
    failed = [
        (r["episode"], r["outcome"], r["reason"]) for r in records if r["outcome"] != "success"
    ]
    assert not failed
    for r in records:
        assert r["main_score"] == 100.0, r["episode"]
        if r["game"] == "clem.mapworld_ee" or r["game"] == "clem.mapworld_eegr":
            assert r["scores"]["efficiency"] == 100.0 and r["scores"]["exploration"] == 100.0
        if r["game"] == "clem.mapworld_eegr":
            assert r["scores"]["graph_similarity"] == 100.0 and r["scores"]["ged_bounded"] == 0.0
        assert r["turns"] <= 20


async def test_random_players_finish_and_are_scored(tmp_path: Path) -> None:
    games = [
        _block("clem.reference", 12, "random", set="grids_rows"),
        _block("clem.matchit", 6, "random", set="pentomino", pair="similar"),
        _block("clem.mapworld_ee", 6, "random", rooms=6),
        _block("clem.mapworld_g2x", 6, "random", distance="close", variant="text"),
        _block("clem.mapworld_eegr", 4, "random", rooms=4, variant="text"),
    ]
    records = await _run(tmp_path, games)
    assert {r["outcome"] for r in records} <= {"success", "lost"}
    assert all(r["main_score"] is not None for r in records)
    ref = [r for r in records if r["game"] == "clem.reference"]
    assert 0 < sum(r["outcome"] == "success" for r in ref) < len(ref)


def _messages(run: Path, episode: str) -> list[dict[str, Any]]:
    return list(RunFolder(run).iter_transcript(episode))


def _prompt_of(messages: list[dict[str, Any]], role: str) -> list[list[dict[str, Any]]]:
    return [m["prompt"] for m in messages if m["kind"] == "turn_response" and m["role"] == role]


async def test_guesser_prompt_never_shows_the_target_position(tmp_path: Path) -> None:
    # The same three grids, the target at each of the three positions for the guesser.
    base = reference.generate(0, {"set": "grids_letters"})
    instances = []
    for position in range(3):
        order = [1, 2]
        order.insert(position, 0)
        instances.append({**base, "seed": position, "guesser_order": order})
    file = tmp_path / "instances.jsonl"
    file.write_text("".join(json.dumps(i) + "\n" for i in instances))
    config = load_config(
        {
            "name": "flow",
            "tracing": {"enabled": False},
            "games": [
                {
                    "game": "clem.reference",
                    "instances_file": str(file),
                    "pairings": [{"describer": "scripted", "guesser": "scripted"}],
                    "settings": {"set": "grids_letters", "variant": "text"},
                }
            ],
        }
    )
    outcome = await run_experiment(config, tmp_path / "run")
    assert [r["outcome"] for r in outcome.records] == ["success"] * 3
    texts = []
    for record in sorted(outcome.records, key=lambda r: r["seed"]):
        (prompt,) = _prompt_of(_messages(outcome.folder.path, record["episode"]), "guesser")
        text = "\n".join(p.get("text", "") for m in prompt for p in m["content"])
        assert "target" not in text.lower() and "distractor" not in text.lower()
        # Only the order of the grids differs between the three prompts: the text without the
        # grid rows is identical, and so is the set of grids.
        lines = text.splitlines()
        words = [line for line in lines if set(line) - set("X▢ ")]
        rows = sorted(line for line in lines if line and not set(line) - set("X▢ "))
        texts.append((words, rows))
    assert texts[0] == texts[1] == texts[2]
    assert len(texts[0][1]) == 15


async def test_matchit_players_never_see_the_other_picture(tmp_path: Path) -> None:
    records = await _run(tmp_path, [_block("clem.matchit", 2, set="pentomino", pair="similar")])
    for record in records:
        messages = _messages(tmp_path / "run", record["episode"])
        shown: dict[str, set[str]] = {"player_a": set(), "player_b": set()}
        for m in messages:
            if m["kind"] == "turn_response":
                for msg in m["prompt"]:
                    for part in msg["content"]:
                        if part["type"] == "image":
                            shown[m["role"]].add(part["sha256"])
        assert len(shown["player_a"]) == len(shown["player_b"]) == 1
        assert shown["player_a"] != shown["player_b"]
        # B describes its picture before it hears A's description, and hears it right after.
        a_description = next(
            m["text"] for m in messages if m["kind"] == "turn_response" and m["role"] == "player_a"
        )
        prompts_b = [
            "\n".join(p.get("text", "") for m in prompt for p in m["content"])
            for prompt in _prompt_of(messages, "player_b")
        ]
        assert a_description not in prompts_b[0]
        assert a_description in prompts_b[1]


async def test_runs_are_deterministic(tmp_path: Path) -> None:
    games = [
        _block("clem.reference", 3, "random", set="pentomino"),
        _block("clem.mapworld_eegr", 2, rooms=6),
    ]
    first = await _run(tmp_path, games, "a")
    second = await _run(tmp_path, games, "b")

    def key(records: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
        return sorted(
            (r["episode"], r["outcome"], json.dumps(r["scores"], sort_keys=True)) for r in records
        )

    assert key(first) == key(second)
    images_a = sorted(p.name for p in (tmp_path / "a" / "images").iterdir())
    images_b = sorted(p.name for p in (tmp_path / "b" / "images").iterdir())
    assert images_a == images_b


async def test_report_prints_table1_and_writes_html(tmp_path: Path) -> None:
    games = [
        _block("clem.reference", 2, set="grids_rows"),
        _block("clem.reference", 2, "random", set="grids_rows"),
        _block("clem.matchit", 2, set="grids", pair="different", variant="text"),
        _block("clem.mapworld_g2x", 2, distance="far"),
        _block("clem.mapworld_ee", 2, rooms=4, variant="text"),
    ]
    records = await _run(tmp_path, games)
    run = tmp_path / "run"
    text = report(records, run)
    assert "| model / pairing | variant | clemscore | avg %p | avg ql | MatchIt %p |" in text
    assert "| scripted | image | 100.00 [" in text
    assert "| random | image |" in text
    index = run / "html" / "index.html"
    assert index.exists()
    pages = {p.name: p.read_text() for p in (run / "html").glob("*.html") if p.name != "index.html"}
    assert len(pages) == len(records)
    g2x = next(v for k, v in pages.items() if "g2x" in k)
    assert ".path.png" in g2x and "orange ring" in g2x
    for path_png in (run / "html").glob("*.path.png"):
        assert path_png.read_bytes().startswith(b"\x89PNG")
    ref = next(v for k, v in pages.items() if "reference" in k)
    for sha in set(__import__("re").findall(r"\.\./images/([0-9a-f]{64})\.png", ref)):
        assert (run / "images" / f"{sha}.png").exists()
    assert "Expression:" in ref and "GM → guesser" in ref


async def test_matchit_draws_its_final_state(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """After the decisions nothing is asked, and the observers' last view still draws."""
    with caplog.at_level(logging.WARNING):
        records = await _run(
            tmp_path,
            [_block("clem.matchit", 2, variant="text"), _block("clem.matchit", 1, set="photos")],
        )
    assert [r["outcome"] for r in records] == ["success"] * 3
    assert "no observer view" not in caplog.text
