"""The data layer: the real files' own fields against what the loader computes, and the
synthetic generator (format, determinism, labels)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from parley.environments.mango.data import (
    EDGE_FIELDS,
    LABEL_FIELDS,
    NEVER,
    MangoDataError,
    cached_game,
    df_fields,
    format_walkthrough,
    game_names,
    load_game,
    parse_walkthrough,
    rf_table,
    write_game,
)
from parley.environments.mango.synthetic import synthetic_game


def test_real_graph_and_labels_agree_with_the_files(data_dir: Path) -> None:
    names = game_names(data_dir)
    assert len(names) == 53
    counts: Counter[tuple[str, str | None]] = Counter()
    for name in names:
        game = cached_game(data_dir, name)
        graph = game.graph
        # One graph edge per file row (no (src, action, dst) twice), every location a node.
        assert graph.number_of_edges() == len(game.edges), name
        assert set(graph.nodes) == set(game.locations), name
        rows = {(e["src_node"], e["action"], e["dst_node"]): e for e in game.edges}
        for q in game.df:
            path = [rows[step] for step in q.path]  # every DF step is an edge of the file
            for step, detail in zip(path, q.fields["path_details"], strict=True):
                assert {f: step[f] for f in EDGE_FIELDS} == {f: detail[f] for f in EDGE_FIELDS}
            assert df_fields(path) == {f: q.fields[f] for f in LABEL_FIELDS}, (name, q.id)
            assert q.fields["step_count"] == len(q.path)
            counts[("df", q.label(70))] += 1
        table = rf_table(graph, game.locations)
        for q in game.rf:
            expected = {f: q.fields[f] for f in [*LABEL_FIELDS, "num_paths"]}
            assert table[(q.src, q.dst)] == expected, (name, q.src, q.dst)
            counts[("rf", q.label(70))] += 1
        # The released files cover the first 70 steps: every edge is known by then.
        assert max(e["edge_min_step_answerable"] for e in game.edges) <= 70
        actions, places = game.lists_at(70)
        assert (actions, places) == (game.actions, game.locations)
    # The answerable/easy/hard counts at cutoff 70 (no DF question is unanswerable; the RF
    # ones that are can never be answered: their destination is unreachable).
    assert counts == {
        ("df", "easy"): 14166,
        ("df", "hard"): 6994,
        ("rf", "easy"): 12438,
        ("rf", "hard"): 2344,
        ("rf", None): 3386,
    }
    unreachable = [q for n in names for q in cached_game(data_dir, n).rf if q.label(70) is None]
    assert all(q.answerable == NEVER for q in unreachable)


def test_real_walkthrough_parses_and_labels_move_with_the_cutoff(data_dir: Path) -> None:
    game = cached_game(data_dir, "zork1")
    assert [s.num for s in game.steps] == list(range(len(game.steps)))
    assert game.steps[1].act == "north"
    assert game.steps[1].observation.startswith("North of House")
    assert parse_walkthrough(format_walkthrough(game.steps)) == game.steps
    # A shorter prefix answers fewer questions and makes more of them hard.
    at = {c: Counter(q.label(c) for q in game.df) for c in (10, 40, 70)}
    assert at[10][None] > at[40][None] > at[70][None] == 0
    assert at[10]["easy"] < at[70]["easy"]


def test_missing_data_folder_is_explained(tmp_path: Path) -> None:
    with pytest.raises(MangoDataError, match="not found"):
        game_names(tmp_path / "nowhere")
    with pytest.raises(MangoDataError, match="no MANGO game folders"):
        game_names(tmp_path)
    (tmp_path / "g").mkdir()
    with pytest.raises(MangoDataError, match="missing"):
        load_game(tmp_path / "g")


@pytest.mark.parametrize(
    ("file", "damage", "says"),
    [
        ("locations.json", b"\xff\xfe", "locations.json: not UTF-8 text"),
        ("edges.json", b"{broken", "edges.json: not in the MANGO format"),
        ("all2all.jsonl", b'{"id": 1}\n', "all2all.jsonl, line 2: not a MANGO question (no field"),
        ("all_pairs.jsonl", b"[1, 2]\n", "all_pairs.jsonl, line 2: not a MANGO question"),
    ],
)
def test_a_damaged_game_file_is_named_with_its_line(
    file: str, damage: bytes, says: str, tmp_path: Path
) -> None:
    game = synthetic_game(3, 1)
    folder = write_game(game, tmp_path)
    target = folder / f"{game.name}.{file}"
    if file.endswith(".jsonl"):  # a second line that is no question, after a whole one
        first = target.read_bytes().splitlines(keepends=True)[0]
        target.write_bytes(first + damage)
    else:
        target.write_bytes(damage)
    with pytest.raises(MangoDataError) as caught:
        load_game(folder)
    assert says in str(caught.value) and str(target.parent) in str(caught.value)


def test_synthetic_games_are_deterministic_and_in_the_format(tmp_path: Path) -> None:
    a, b = synthetic_game(3, 1), synthetic_game(3, 1)
    assert (a.steps, a.edges, a.locations, a.actions) == (b.steps, b.edges, b.locations, b.actions)
    assert [q.fields for q in a.df] == [q.fields for q in b.df]
    assert [q.fields for q in a.rf] == [q.fields for q in b.rf]
    assert synthetic_game(3, 2).steps != a.steps and synthetic_game(4, 1).steps != a.steps
    # Written as a MANGO folder and read back by the same loader as the real data.
    folder = write_game(a, tmp_path)
    assert game_names(tmp_path) == [a.name]
    back = load_game(folder)
    assert (back.steps, back.edges, back.locations, back.actions) == (
        a.steps, a.edges, a.locations, a.actions,
    )  # fmt: skip
    assert [q.fields for q in back.df] == [q.fields for q in a.df]
    assert [q.fields for q in back.rf] == [q.fields for q in a.rf]


def test_synthetic_edges_match_their_walkthrough() -> None:
    labels: Counter[tuple[str, str | None]] = Counter()
    dark = 0
    for index in range(6):
        game = synthetic_game(0, index)
        acts = {s.num: s.act for s in game.steps}
        for e in game.edges:
            if e["seen_in_forward"] != NEVER:
                # The first forward walk is the step whose command is the edge's action.
                assert acts[e["seen_in_forward"]] == e["action"]
            assert e["edge_min_step"] == min(e["seen_in_forward"], e["seen_in_reversed"])
            dark += e["seen_in_forward_answerable"] > e["seen_in_forward"]
        graph = game.graph
        table = rf_table(graph, game.locations)
        for q in game.rf:
            assert table[(q.src, q.dst)]["min_step_total_answerable"] == q.answerable
            labels[("rf", q.label(70))] += 1
        rows = {(e["src_node"], e["action"], e["dst_node"]): e for e in game.edges}
        for q in game.df:
            assert df_fields([rows[s] for s in q.path])["min_step_forward_answerable"] == q.easy
            labels[("df", q.label(70))] += 1
    # Both difficulties of both types occur, and a dark room delays an edge's answerable step.
    assert all(labels[(k, d)] > 0 for k in ("df", "rf") for d in ("easy", "hard"))
    assert dark > 0
