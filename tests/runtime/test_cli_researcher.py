"""The command line a researcher expects: ``--version``, ``--limit``, and the same command
run twice saying what the folder holds and what to type."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import parley
from parley.runtime.cli import main

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = ROOT / "configs" / "quickstart.yaml"


def test_version_is_the_installed_one(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out.strip() == f"parley {parley.__version__}"


def test_limit_then_the_same_command_then_resume(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    base = ["run", str(QUICKSTART), "--out", str(out), "--quiet", "--no-report"]
    assert main([*base, "--limit", "3"]) == 0
    assert json.loads((out / "run.json").read_text())["planned"] == 3
    capsys.readouterr()
    assert main(base) == 1  # the same folder again, without --resume
    said = capsys.readouterr().err
    assert "invalid config" not in said
    assert "limited to 3 episodes" in said and "--resume" in said
    assert main([*base, "--resume"]) == 0
    assert json.loads((out / "run.json").read_text())["planned"] == 40
    capsys.readouterr()
    assert main(base) == 1
    said = capsys.readouterr().err
    assert "finished run" in said and "parley report" in said and "--out NEW" in said
