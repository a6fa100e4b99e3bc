"""Game plugins by entry points: the example plugin installed for real, a broken plugin named
in one line, and docs/games.md quoting the example exactly."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import require

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "parley-guess"


def parley(*args: str, path: Path | None = None, **env: str) -> subprocess.CompletedProcess[str]:
    """``parley ARGS`` in a fresh process, with ``path`` on PYTHONPATH (where plugins lie)."""
    environ = {**os.environ, **env}
    if path is not None:
        environ["PYTHONPATH"] = os.pathsep.join([str(path), environ.get("PYTHONPATH", "")])
    return subprocess.run(
        [sys.executable, "-m", "parley.runtime.cli", *args],
        cwd=ROOT,
        env=environ,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The example plugin, built and installed into a folder of its own: its entry points are
    found through the dist-info there, as for any installed package."""
    try:
        import setuptools  # noqa: F401  (the example builds with the setuptools already here)
    except ImportError:
        require(False, "setuptools is not installed (pip install setuptools)")
    base = tmp_path_factory.mktemp("plugin")
    source = base / "src"
    shutil.copytree(EXAMPLE, source, ignore=shutil.ignore_patterns("build", "*.egg-info"))
    site = base / "site"
    pip = [sys.executable, "-m", "pip", "install", "--no-deps", "--no-build-isolation"]
    done = subprocess.run(
        [*pip, "-q", "--no-index", "--target", str(site), str(source)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert list(site.glob("parley_guess-*.dist-info"))
    return site


def test_the_example_plugin_is_listed_checked_played_and_reported(
    installed: Path, tmp_path: Path
) -> None:
    games = parley("games", path=installed)
    assert games.returncode == 0, games.stderr
    assert "guess.number" in games.stdout and "warning" not in games.stderr

    check = parley("check-game", "guess.number", "--seeds", "2", path=installed)
    assert check.returncode == 0, check.stdout + check.stderr
    assert "FAIL" not in check.stdout and "oracle wins" in check.stdout

    out = tmp_path / "run"
    run = parley(
        "run",
        str(EXAMPLE / "guess.yaml"),
        "--out",
        str(out),
        "--quiet",
        "--set",
        "games.0.seeds.count=6",
        path=installed,
    )
    assert run.returncode == 0, run.stderr
    records = [json.loads(line) for line in (out / "episodes.jsonl").read_text().splitlines()]
    scripted = [r for r in records if r["pairing"]["guesser"] == "scripted"]
    assert len(scripted) == 6 and {r["outcome"] for r in scripted} == {"success"}
    assert all(r["private_facts"]["keeper"]["secret"] for r in scripted)
    # The plugin's own report section, from its parley.reports entry point.
    report = (out / "report.md").read_text()
    assert "## Guess the number" in report
    assert re.search(r"\| guesser=scripted, keeper=scripted \| 6 \| 100\.0 \| \d\.\d \|", report)

    # The plugin's settings model validates a config before anything runs.
    bad = ("--set", "games.0.settings.max_guesses=abc")
    typo = parley(
        "run",
        str(EXAMPLE / "guess.yaml"),
        "--out",
        str(tmp_path / "no"),
        *bad,
        path=installed,
        COLUMNS="400",
    )
    assert typo.returncode == 2 and not (tmp_path / "no").exists()
    assert "games.0.settings.max_guesses: got 'abc'" in typo.stderr
    assert "guess.number takes max_guesses: int" in typo.stderr


def _broken_plugin(site: Path) -> None:
    """A package installed by hand (its dist-info written out) whose module fails to import."""
    site.mkdir()
    (site / "broken_games.py").write_text("import not_a_module_of_anyone  # noqa\n")
    info = site / "broken_games-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: broken-games\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[parley.games]\nbroken = broken_games\n")


def test_a_plugin_that_fails_to_import_is_named_in_one_line(tmp_path: Path) -> None:
    site = tmp_path / "site"
    _broken_plugin(site)
    expected = (
        "warning: game plugin 'broken' (entry point parley.games: broken_games) failed to "
        "load: ModuleNotFoundError: No module named 'not_a_module_of_anyone'"
    )
    games = parley("games", path=site, COLUMNS="400")
    assert games.returncode == 0, games.stderr
    assert games.stderr.strip() == expected
    assert "comma.wire" in games.stdout  # the other games are there

    config = tmp_path / "broken.yaml"
    config.write_text(
        "name: broken\ngames:\n  - game: broken.game\n    pairings: [{player: scripted}]\n"
    )
    run = parley("run", str(config), "--out", str(tmp_path / "out"), path=site, COLUMNS="400")
    assert run.returncode == 2
    assert expected in run.stderr and "games.0.game" in run.stderr
    assert "Traceback" not in run.stderr

    hack = parley("games", PARLEY_PLUGINS="also_not_a_module", COLUMNS="400")
    assert hack.returncode == 0
    assert "game plugin 'also_not_a_module' (PARLEY_PLUGINS: also_not_a_module) failed to" in (
        hack.stderr
    )


def test_docs_games_quotes_the_example_exactly() -> None:
    doc = (ROOT / "docs" / "games.md").read_text()
    quoted = re.findall(r"<!-- file: (\S+) -->\n```\w*\n(.*?)\n```\n", doc, re.DOTALL)
    paths = {path for path, _ in quoted}
    assert {
        "examples/parley-guess/parley_guess/__init__.py",
        "examples/parley-guess/parley_guess/report.py",
        "examples/parley-guess/pyproject.toml",
    } <= paths
    for path, code in quoted:
        assert code == (ROOT / path).read_text().rstrip("\n"), (
            f"docs/games.md quotes {path} differently: copy the file into the doc"
        )


def test_a_report_section_that_fails_to_load_leaves_a_note(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import tests.runtime.faulty_game  # noqa: F401  (registers test.counter, family "test")
    from parley.runtime.cli import main
    from parley.runtime.report import ReportSectionError, family_report

    site = tmp_path / "site"
    info = site / "broken_report-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: broken-report\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[parley.reports]\ntest = not_a_report_module:report\n")
    monkeypatch.syspath_prepend(str(site))
    with pytest.raises(ReportSectionError, match="not_a_report_module:report"):
        family_report("test")

    config = tmp_path / "counter.yaml"
    config.write_text(
        "name: counter\ngames:\n  - game: test.counter\n    seeds: [0, 1]\n"
        "    pairings: [{counter: scripted}]\n"
    )
    assert main(["run", str(config), "--out", str(tmp_path / "run"), "--quiet"]) == 0
    report = (tmp_path / "run" / "report.md").read_text()
    assert "## Outcomes by game and pairing" in report
    assert (
        "> the report section of 'test' (parley.reports: not_a_report_module:report) failed "
        "to load: ModuleNotFoundError: No module named 'not_a_report_module'" in report
    )
