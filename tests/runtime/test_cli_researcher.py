"""The command line a researcher expects: ``--version``, ``--limit``, and the same command
run twice saying what the folder holds and what to type."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import parley
from parley.environments import registry
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


def _options_without_help(help_text: str) -> list[str]:
    """The options of an ``--help`` page that carry no text of their own."""
    missing: list[str] = []
    entries: list[list[str]] = []
    listing = False  # inside argparse's list of options or of positional arguments
    for line in help_text.splitlines():
        if line and not line.startswith(" "):
            listing = line in ("options:", "positional arguments:")
            entries.append([])  # a heading ends the entry before it
        elif not listing:
            continue
        elif re.match(r"^  \S", line):
            entries.append([line])
        elif entries and line.startswith("    ") and line.strip():
            entries[-1].append(line)
        elif not line.strip():
            entries.append([])
    for entry in filter(None, entries):
        first = re.split(r"\s{2,}", entry[0].strip(), maxsplit=1)
        if len(first) == 1 and len(entry) == 1:
            missing.append(first[0])
    return missing


def _help(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit):
        main([*argv, "--help"])
    return capsys.readouterr().out


def test_every_option_of_every_command_says_what_it_does(
    capsys: pytest.CaptureFixture[str],
) -> None:
    top = _help([], capsys)
    commands = re.search(r"\{([a-z,-]+)\}", top)
    assert commands is not None
    pages = {name: _help([name], capsys) for name in commands.group(1).split(",")}
    nested = re.search(r"\{([a-z,-]+)\}", pages["traces"])
    assert nested is not None
    for name in nested.group(1).split(","):
        pages[f"traces {name}"] = _help(["traces", name], capsys)
    assert "parquet" in pages["export"] and len(pages) > 10
    missing = {
        name: found for name, page in pages.items() if (found := _options_without_help(page))
    }
    assert missing == {}
    # The check itself finds an option without text.
    assert _options_without_help("options:\n  -h, --help  show this\n  --bare\n") == ["--bare"]


def test_a_mistyped_key_setting_or_game_gets_a_guess(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def problems(block: dict[str, object]) -> str:
        config = tmp_path / "typo.yaml"
        config.write_text(json.dumps({"name": "typo", "games": [block]}))
        assert main(["plan", str(config)]) != 0
        return capsys.readouterr().err

    good = {"game": "comma.wire", "seeds": {"count": 2}}
    good["pairings"] = [{"solver": "scripted", "expert": "scripted"}]
    assert "did you mean" not in problems({**good, "seeds": "many"})
    seedz = {k if k != "seeds" else "seedz": v for k, v in good.items()}
    assert "games.0.seedz" in (text := problems(seedz)) and "did you mean 'seed'" in text
    assert "'seeds'" in text
    assert "did you mean 'variant'?" in problems({**good, "settings": {"variantt": "text"}})
    assert "did you mean 'comma.wire'?" in problems({**good, "game": "comma.wirez"})
    assert "did you mean" not in problems({**good, "game": "zzzz"})
    with pytest.raises(KeyError, match=r"did you mean 'comma\.wire'\?"):
        registry.get("comma.wirez")
