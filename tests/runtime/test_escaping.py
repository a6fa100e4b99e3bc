"""Names and text from configs and model servers are escaped in report.md, CSV and HTML."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from parley.agents.backends.simserver import SimServerProcess
from parley.runtime.config import load_config
from parley.runtime.report import build_report
from parley.runtime.reports.escape import csv_cell, md, plot_label
from parley.runtime.scheduler import run_experiment
from tests.records import record

EVIL = "evil|<script>alert(1)</script>*x*"


def write_run(run_dir: Path, model: str) -> None:
    """A run folder of two episodes played by ``model``, one of them ending in ``error``."""
    spec = {"players": {"solver": {"kind": "llm", "model": model}}}
    lines = [
        record(episode="e-0", pairing={"solver": model}, spec=spec),
        record(
            episode="e-1",
            pairing={"solver": model},
            spec=spec,
            outcome="error",
            reason=f"solver failed: {model} said [click](javascript:alert(1))",
        ),
    ]
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "episodes.jsonl").write_text(
        "".join(json.dumps(r.model_dump(mode="json")) + "\n" for r in lines), encoding="utf-8"
    )


def test_md_escapes_markup() -> None:
    assert md("a|b") == r"a\|b"
    assert md("<b>") == r"\<b\>"
    assert md("# head") == r"\# head"
    assert md("one\ntwo") == "one two"
    assert md("[x](javascript:y)") == r"\[x\](javascript:y)"
    assert md("a\\b") == "a\\\\b"


def assert_tables_hold(report: str) -> int:
    """Every Markdown table of ``report`` keeps its columns in every row, and the report holds
    no tag and no link built from a name: the number of tables."""
    assert "<script>" not in report
    assert not re.search(r"(?<!\\)\]\(javascript:", report)  # no link, only its text
    lines = report.splitlines()
    tables = 0
    for i, line in enumerate(lines):
        if line.startswith("|---"):
            tables += 1
            columns = lines[i - 1].count("|") - lines[i - 1].count("\\|")
            j = i + 1
            while j < len(lines) and lines[j].startswith("|"):
                row = lines[j]
                assert row.count("|") - row.count("\\|") == columns, row
                j += 1
    return tables


def test_report_tables_keep_columns_and_hold_no_script(tmp_path: Path) -> None:
    write_run(tmp_path, EVIL)
    report = build_report(tmp_path)
    assert assert_tables_hold(report) > 0
    assert "evil\\|" in report


def test_csv_cell_guards_formulas() -> None:
    assert csv_cell("=cmd|' /C calc'!A0") == "'=cmd|' /C calc'!A0"
    assert csv_cell("@SUM(1)") == "'@SUM(1)"
    assert csv_cell("\tx") == "'\tx"
    assert csv_cell("plain") == "plain"
    assert csv_cell(-1) == -1


def test_plot_label_escapes_mathtext() -> None:
    assert plot_label("$x^2$") == r"\$x^2\$"


def test_transcript_html_escapes_replies_and_model_names() -> None:
    from parley.observability.transcript_html import episode_html

    rec = record(episode="e-0", pairing={"solver": EVIL}, reason="<img src=x onerror=alert(1)>")
    messages = [
        {"kind": "episode_started", "game": "<b>game</b>"},
        {"kind": "turn_response", "role": "solver", "model": EVIL, "text": "<script>x()</script>"},
        {
            "kind": "transcript_event",
            "event": "message",
            "from_role": "solver",
            "to_role": "gm",
            "content": [{"type": "text", "text": "<script>y()</script>"}],
        },
    ]
    page = episode_html(rec, messages, image_src=lambda sha: f"../images/{sha}.png")
    assert "<script>" not in page
    assert "<img src=x" not in page
    assert "&lt;script&gt;x()&lt;/script&gt;" in page


def test_comma_csv_guards_formulas(tmp_path: Path) -> None:
    import csv

    from parley.runtime.reports.comma import write_episode_csv

    path = tmp_path / "comma_episodes.csv"
    write_episode_csv([{"pairing": '=HYPERLINK("http://x")', "psr": -1.5}], path)
    with path.open(encoding="utf-8") as f:
        row = next(csv.DictReader(f))
    assert row["pairing"] == '\'=HYPERLINK("http://x")'
    assert row["psr"] == "-1.5"  # a number, not text: no prefix


def test_plot_draws_a_mathtext_model_name_as_text(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from parley.runtime.reports.learning import _plot

    # Unescaped, "$\nosuchcommand$" is mathtext that matplotlib cannot parse: savefig raises.
    path = tmp_path / "learning_curve.png"
    _plot({r"$\nosuchcommand$": [[0.5, 0.7], [0.6]]}, path)
    assert path.stat().st_size > 0


# A model's registry name as hostile as a config can make it: columns, tags, code spans,
# emphasis, a link, a line break and a spreadsheet formula.
HOSTILE = "a|b<script>x()</script>`tick` *em* [l](javascript:alert(1))\n=cmd"


@pytest.fixture(scope="module")
def replies() -> Iterator[SimServerProcess]:
    """A model server that answers every request with a reply no game accepts, a tag in it."""
    with SimServerProcess({"replies": {"text": "OK <script>y()</script>"}}) as server:
        yield server


def test_a_hostile_model_name_through_a_real_clem_and_mango_run(
    replies: SimServerProcess, tmp_path: Path
) -> None:
    entry = {"backend": "openai", "model": "m", "base_url": replies.openai_url}
    mango = {"synthetic_games": 1, "questions_per_episode": 2}
    config = load_config(
        {
            "name": "hostile",
            "tracing": {"enabled": False},
            "models": {HOSTILE: entry},
            "games": [
                {"game": "mango.df", "seeds": [0], "settings": mango,
                 "pairings": [{"navigator": HOSTILE}]},
                {"game": "clem.reference", "seeds": [0],
                 "pairings": [{"describer": HOSTILE, "guesser": HOSTILE}]},
            ],
        }
    )  # fmt: skip
    run = tmp_path / "run"
    asyncio.run(run_experiment(config, run))
    report = build_report(run)
    escaped = md(HOSTILE)
    assert "\n" not in escaped and "\\`tick\\`" in escaped
    # The clem tables (table 1, experiments) and MANGO's (overall, per game, pairwise).
    clem = report.split("## clem")[1].split("\n## ")[0]
    assert clem.count(f"| {escaped} |") == 2
    section = report.split("## MANGO")[1].split("\n## ")[0]
    assert section.count(f"| {escaped} |") >= 4
    assert assert_tables_hold(report) >= 7
    assert not re.search(r"(?<!\\)`", report.replace("`html/index.html`", ""))
    # clem's HTML transcripts: the name and the replies are text, on the index and the page.
    pages = {page.name: page.read_text(encoding="utf-8") for page in (run / "html").glob("*")}
    assert len(pages) == 2 and "index.html" in pages
    for text in pages.values():
        assert "<script>" not in text and "&lt;script&gt;x()&lt;/script&gt;" in text
    (episode,) = (text for name, text in pages.items() if name != "index.html")
    assert "OK &lt;script&gt;y()&lt;/script&gt;" in episode
