"""Names and text from configs and model servers are escaped in report.md, CSV and HTML."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from parley.runtime.report import build_report
from parley.runtime.reports.escape import csv_cell, md, plot_label
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


def test_report_tables_keep_columns_and_hold_no_script(tmp_path: Path) -> None:
    write_run(tmp_path, EVIL)
    report = build_report(tmp_path)
    assert "<script>" not in report
    assert not re.search(r"(?<!\\)\]\(javascript:", report)  # no link, only its text
    lines = report.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("|---"):
            columns = lines[i - 1].count("|") - lines[i - 1].count("\\|")
            j = i + 1
            while j < len(lines) and lines[j].startswith("|"):
                row = lines[j]
                assert row.count("|") - row.count("\\|") == columns, row
                j += 1
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
