"""parley.results (a run's episodes and turns as DataFrames), ``parley export``, the schema
version of run folders, and the notebook API of docs/api.md, on real runs of scripted players."""

from __future__ import annotations

import ast
import asyncio
import json
import re
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

import parley
from parley.records import SCHEMA_VERSION, NewerSchema, RecordedRun
from parley.results import OUTCOMES, episodes, read_jsonl, turns
from parley.runtime.cli import main
from parley.runtime.config import load_config
from parley.runtime.scheduler import run_experiment

ROOT = Path(__file__).resolve().parents[2]
OLD_RUN = Path(__file__).parent / "data" / "schema1_run"
SEEDS = 3
CONFIG: dict[str, Any] = {
    "name": "results-api",
    "concurrency": 8,
    "games": [
        {
            "game": "comma.wire",
            "seeds": {"count": SEEDS},
            "settings": {"variant": "text", "max_turns": 6},
            "pairings": [
                {"solver": "scripted", "expert": "scripted"},
                {"solver": "random", "expert": "scripted"},
            ],
        },
        {
            "game": "playground.tictactoe.e2e",
            "seeds": {"count": 2},
            "settings": {"variant": "text"},
            "pairings": [{"player": "scripted", "opponent": "random"}],
        },
    ],
}


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One real run, shared by the read-only tests (each copies it before changing it)."""
    out = tmp_path_factory.mktemp("results") / "run"
    asyncio.run(run_experiment(load_config(CONFIG), out))
    return out


def raw_records(run: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run / "episodes.jsonl").read_text().splitlines()]


def copy(run: Path, tmp_path: Path) -> Path:
    target = tmp_path / "copy"
    shutil.copytree(run, target)
    return target


def test_one_typed_row_per_episode_with_the_pairing_flattened(run: Path) -> None:
    raw = {r["episode"]: r for r in raw_records(run)}
    df = episodes(run)
    assert len(df) == len(raw) == 2 * SEEDS + 2
    assert df["episode"].is_unique and set(df["episode"]) == set(raw)
    assert isinstance(df["game"].dtype, pd.CategoricalDtype)
    assert list(df["outcome"].cat.categories) == list(OUTCOMES)
    assert df["seed"].dtype == "int64" and df["turns"].dtype == "int64"
    assert df["success"].dtype == bool and df["main_score"].dtype == "float64"
    assert isinstance(df["started_at"].dtype, pd.DatetimeTZDtype)
    for row in df.itertuples():
        record = raw[row.episode]
        assert row.game == record["game"] and row.seed == record["seed"]
        assert row.outcome == record["outcome"] and row.turns == record["turns"]
        assert row.success == (record["outcome"] == "success")
        for role, player in record["pairing"].items():
            assert getattr(row, f"role_{role}") == player
        # A role another game has not: missing, not made up.
        other = {"solver", "expert", "player", "opponent"} - set(record["pairing"])
        assert all(pd.isna(getattr(row, f"role_{role}")) for role in other)
        for name, value in record["scores"].items():
            got = getattr(row, f"score_{name}")
            assert (pd.isna(got) and value is None) or got == pytest.approx(value)
        for role, result in record["role_results"].items():
            assert getattr(row, f"result_{role}") == result
        tokens = record["tokens"].values()
        assert row.output_tokens == sum(t.get("output", 0) for t in tokens)
    wire = df[df["game"] == "comma.wire"]
    assert set(wire["role_solver"]) == {"scripted", "random"}
    assert set(wire["setting_variant"]) == {"text"}
    # The scripted pair is the upper bound: it wins every seed.
    scripted = wire[wire["role_solver"] == "scripted"]
    assert scripted["success"].all() and len(scripted) == SEEDS


def test_turns_one_row_per_reply_in_order(run: Path) -> None:
    replies: Counter[str] = Counter()
    for line in (run / "transcripts.jsonl").read_text().splitlines():
        message = json.loads(line)
        if message["kind"] == "turn_response":
            replies[message["episode"]] += 1
    df = turns(run)
    assert len(df) == sum(replies.values())
    assert Counter(df["episode"]) == replies
    assert df["turn"].dtype == "int64" and df["input_tokens"].dtype == "Int64"
    for _, one in df.groupby("episode", observed=True):
        assert one["turn"].is_monotonic_increasing
        assert set(one["role"]) <= {"solver", "expert", "player", "opponent"}
    wire = df[(df["game"] == "comma.wire") & (df["role"] == "solver")]
    acted = wire[wire["event"] == "action"]
    assert len(acted) and acted["actions"].ge(1).all() and acted["feedback"].notna().all()
    # A random solver makes mistakes at some seed; the scripted one never does.
    assert wire[wire["role_solver"] == "scripted"]["mistakes"].sum() == 0


def test_a_run_object_reads_as_its_folder(run: Path) -> None:
    pd.testing.assert_frame_equal(episodes(RecordedRun(run)), episodes(str(run)))


def test_the_latest_record_of_an_episode_wins(run: Path, tmp_path: Path) -> None:
    folder = copy(run, tmp_path)
    first = raw_records(folder)[0]
    # As --retry-errors leaves it: the episode's first record, then a second one for it.
    retried = {**first, "outcome": "lost", "turns": first["turns"] + 7, "main_score": 0.0}
    with (folder / "episodes.jsonl").open("a") as f:
        f.write(json.dumps(retried) + "\n")
    df = episodes(folder).set_index("episode")
    assert len(df) == len(raw_records(run))
    row = df.loc[first["episode"]]
    assert (row["outcome"], row["turns"], row["main_score"]) == ("lost", first["turns"] + 7, 0.0)


def test_an_old_folder_without_a_schema_version_reads(tmp_path: Path) -> None:
    raw = [json.loads(line) for line in (OLD_RUN / "episodes.jsonl").read_text().splitlines()]
    assert not any("schema_version" in r or "schema" in r for r in raw)
    df = episodes(OLD_RUN)
    assert len(df) == len(raw)
    # Schema 1 kept the main score in scores["main"]: it is read as main_score.
    by_seed = {(r.seed, r.role_solver): r.main_score for r in df.itertuples()}
    old = {(r["seed"], r["pairing"]["solver"]): r["scores"].get("main") for r in raw}
    assert by_seed.keys() == old.keys()
    for key, value in old.items():
        assert (value is None and pd.isna(by_seed[key])) or by_seed[key] == value
    assert "score_main" not in df.columns


def test_records_carry_the_schema_version(run: Path) -> None:
    assert {r["schema_version"] for r in raw_records(run)} == {SCHEMA_VERSION}
    assert json.loads((run / "run.json").read_text())["schema_version"] == SCHEMA_VERSION


def newer(run: Path, tmp_path: Path, where: str) -> Path:
    folder = copy(run, tmp_path)
    if where == "run.json":
        meta = json.loads((folder / "run.json").read_text())
        meta["schema_version"] = SCHEMA_VERSION + 1
        (folder / "run.json").write_text(json.dumps(meta))
    else:  # one record only, appended by a newer parley resuming the folder
        record = {**raw_records(folder)[-1], "schema_version": SCHEMA_VERSION + 1}
        with (folder / "episodes.jsonl").open("a") as f:
            f.write(json.dumps(record) + "\n")
    return folder


@pytest.mark.parametrize("where", ["run.json", "record"])
def test_a_newer_folder_is_refused_plainly_by_every_reader(
    run: Path, tmp_path: Path, where: str, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = newer(run, tmp_path, where)
    before = (folder / "episodes.jsonl").read_bytes()
    expected = (
        f"run folder {folder} was written by schema {SCHEMA_VERSION + 1}; "
        f"this parley reads up to {SCHEMA_VERSION}: upgrade parley"
    )
    with pytest.raises(NewerSchema) as caught:
        episodes(folder)
    assert str(caught.value) == expected
    commands = [
        ["report", str(folder)],
        ["leaks", str(folder)],
        ["errors", str(folder)],
        ["export", str(folder), "--format", "jsonl"],
        ["dashboard", "--export", str(folder)],
    ]
    if where == "run.json":  # the live dashboard checks run.json only (a newer parley stamps it)
        commands.append(["dashboard", "--runs", str(folder.parent), "--port", "0"])
    for argv in commands:
        capsys.readouterr()
        assert main(argv) == 2, argv
        err = " ".join(capsys.readouterr().err.split())  # rich wraps long lines
        assert expected in err and "Traceback" not in err, (argv, err)
    assert not (folder / "export").exists() and not (folder / "html").exists()
    assert (folder / "episodes.jsonl").read_bytes() == before  # nothing rewritten


def test_resuming_a_newer_folder_is_refused_and_changes_nothing(
    run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = newer(run, tmp_path, "run.json")
    config = tmp_path / "config.yaml"
    config.write_text(json.dumps(CONFIG))
    files = {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()}
    assert main(["run", str(config), "--out", str(folder), "--resume", "--quiet"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "this parley reads up to" in err and "Traceback" not in err
    assert {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()} == files


@pytest.mark.parametrize("fmt", ["parquet", "jsonl"])
def test_export_round_trips_to_the_same_frames(run: Path, tmp_path: Path, fmt: str) -> None:
    out = tmp_path / "tables"
    assert main(["export", str(run), "--format", fmt, "--out", str(out)]) == 0
    for name, frame in (("episodes", episodes(run)), ("turns", turns(run))):
        path = out / f"{name}.{fmt}"
        back = pd.read_parquet(path) if fmt == "parquet" else read_jsonl(path, frame)
        pd.testing.assert_frame_equal(back, frame)
    if fmt == "jsonl":  # plain JSON a row a line, readable without parley
        lines = (out / "episodes.jsonl").read_text().splitlines()
        assert len(lines) == len(episodes(run))
        assert json.loads(lines[0])["episode"] in set(episodes(run)["episode"])


def test_export_of_a_folder_that_is_not_a_run_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["export", str(tmp_path / "nothing")]) == 2
    assert "is not a run folder" in " ".join(capsys.readouterr().err.split())


def test_the_example_of_docs_api_md_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The first ``python`` block of docs/api.md, run as written (top-level ``await``, as in a
    notebook) in a folder holding a small scripted config under the name the example uses."""
    text = (ROOT / "docs" / "api.md").read_text(encoding="utf-8")
    block = re.search(r"```python\n(.*?)```", text, re.S)
    assert block is not None
    (tmp_path / "configs").mkdir()
    small = {**CONFIG, "name": "quickstart", "games": CONFIG["games"][:1]}
    (tmp_path / "configs" / "quickstart.yaml").write_text(json.dumps(small))
    monkeypatch.chdir(tmp_path)
    code = compile(block.group(1), "docs/api.md", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    namespace: dict[str, Any] = {}

    async def notebook() -> None:
        pending = eval(code, namespace)  # a coroutine, for code with a top-level await
        if pending is not None:
            await pending

    asyncio.run(notebook())
    result = namespace["result"]
    assert isinstance(result, parley.RunResult)
    df = episodes(result.folder)
    assert result.counts == dict(Counter(df["outcome"].astype(str)))
    assert len(df) == 2 * SEEDS and df["success"].any()
    pd.testing.assert_frame_equal(namespace["df"], df)


def test_parquet_without_pyarrow_says_how_to_get_it(
    run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # as if not installed: import fails
    assert main(["export", str(run), "--out", str(tmp_path / "t")]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "pip install 'parley[parquet]'" in err and "Traceback" not in err
    assert not (tmp_path / "t").exists()


def test_import_parley_stays_light_and_run_loads_on_use() -> None:
    code = (
        "import sys, parley; heavy = [m for m in ('parley.runtime', 'pandas') if m in sys.modules];"
        "run = parley.run; print(heavy, run.__module__)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["[]", "parley.runtime.api"]
