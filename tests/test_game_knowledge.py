"""Game knowledge stays with the game: nothing in ``runtime/`` or ``observability/`` names a
built-in game, and what a game declares about itself (check-game exemptions, data shown
otherwise, leak detectors) is read from its ``GameInfo``, for a plugin's game as for ours.

The scan reads every string literal of the two layers with ``ast`` (f-string parts included,
docstrings left out: they document, they decide nothing) and flags a built-in game's name or a
pattern over one (``comma.atm``, ``playground.``, ``'mango.*'``) and a literal that is exactly a
built-in family (``"clem"``). A family's name alone inside prose is not flagged: "comma" is
also a word.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import replace
from importlib.metadata import entry_points
from pathlib import Path

import tests.runtime.faulty_game  # noqa: F401  (registers the test.* games)
from parley.environments import registry
from parley.environments.privacy import Finding, LeakDetectors
from parley.observability.leaks import detectors_of, episode_disclosures
from parley.runtime.checkgame import check_game
from tests.records import record as episode_record

ROOT = Path(__file__).resolve().parents[1]
LAYERS = ("runtime", "observability")

# What the scan may find, with why it is not game knowledge held in the wrong place:
# (file, what was found) -> why; "*" as what: anything in that file.
ALLOWED: dict[tuple[str, str], str] = {
    ("runtime/quick_config.py", "comma.wire"): "an example command in `parley run --help`",
    ("runtime/quick_config.py", "clem.*"): "an example command in `parley run --help`",
    ("runtime/cli.py", "comma.wire"): "an example pattern in `parley check-game --help`",
    ("runtime/cli.py", "comma.*"): "an example pattern in `parley check-game --help`",
    # A family's report section: reached only through its `parley.reports` entry point, as a
    # plugin's is, and it cannot live in environments/ (it builds on the runtime's report
    # helpers, which environments may not import).
    ("runtime/reports/clem.py", "*"): "clem's report section (entry point parley.reports)",
    ("runtime/reports/comma.py", "*"): "COMMA's report section (entry point parley.reports)",
    ("runtime/reports/mango.py", "*"): "MANGO's report section (entry point parley.reports)",
    ("runtime/reports/playground.py", "*"): "the playground's report section (entry point)",
}


def builtin_games() -> dict[str, registry.GameInfo]:
    """The games of parley's own families: its own ``parley.games`` entry points (those whose
    module is one of parley's), not plugins' or tests'."""
    own = {
        ep.name for ep in entry_points(group=registry.GAMES_GROUP) if ep.value.startswith("parley.")
    }
    return {name: info for name, info in registry.all_games().items() if info.family in own}


def name_pattern(games: dict[str, registry.GameInfo]) -> re.Pattern[str]:
    """A game's name, or a family prefix with a dot (``playground.``, ``clem.mapworld``)."""
    families = sorted({info.family for info in games.values()})
    prefix = "|".join(re.escape(f) for f in families)
    part = r"[\w*?\[\]]+"
    return re.compile(rf"(?<![\w.-])(?:{prefix})\.(?:{part}(?:\.{part})*)?")


def _docstrings(tree: ast.AST) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                found.add(id(body[0].value))
    return found


def named_games(
    folder: str, games: dict[str, registry.GameInfo], root: Path = ROOT
) -> Iterator[tuple[str, int, str]]:
    """(file, line, what) for each string literal under ``folder`` naming a built-in game."""
    pattern = name_pattern(games)
    families = {info.family for info in games.values()}
    for path in sorted((root / folder).rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        docs = _docstrings(tree)
        file = path.relative_to(root).as_posix()
        for node in ast.walk(tree):
            if not isinstance(node, ast.Constant) or not isinstance(node.value, str):
                continue
            if id(node) in docs:
                continue
            if node.value in families:
                yield file, node.lineno, node.value
            for match in pattern.finditer(node.value):
                yield file, node.lineno, match.group(0)


def unexplained(folder: str, games: dict[str, registry.GameInfo], root: Path = ROOT) -> list[str]:
    """``file:line: what`` for each name the scan finds that :data:`ALLOWED` does not explain."""
    return [
        f"{file}:{line}: {what}"
        for file, line, what in named_games(folder, games, root)
        if (file, what) not in ALLOWED and (file, "*") not in ALLOWED
    ]


def test_runtime_and_observability_name_no_builtin_game() -> None:
    games = builtin_games()
    assert {info.family for info in games.values()} >= {"clem", "comma", "mango", "playground"}
    found = [line for folder in LAYERS for line in unexplained(folder, games)]
    assert not found, (
        "game knowledge belongs to the game (GameInfo or its module; docs/games.md):\n"
        + "\n".join(found)
    )


def test_every_allowance_is_still_needed() -> None:
    """An allowance nothing uses any more is taken out, so the list stays honest."""
    games = builtin_games()
    met = {(file, what) for folder in LAYERS for file, _, what in named_games(folder, games)}
    stale = [
        key
        for key in ALLOWED
        if key not in met and not (key[1] == "*" and any(file == key[0] for file, _ in met))
    ]
    assert not stale, stale


def test_the_scan_sees_a_game_name(tmp_path: Path) -> None:
    probe = tmp_path / "runtime" / "probe.py"
    probe.parent.mkdir()
    probe.write_text(
        '"""Runs comma.wire, for example."""\n'
        'SKIP = {"playground.chess.e2e": 1}\n'
        "def f(game):\n"
        '    """Like clem.reference."""\n'
        '    return game.startswith("mango.") or game == "comma" or f"clem.{game}"\n'
        'PROSE = "a comma, then words"\n',
        encoding="utf-8",
    )
    assert unexplained("runtime", builtin_games(), tmp_path) == [
        "runtime/probe.py:2: playground.chess.e2e",
        "runtime/probe.py:5: mango.",
        "runtime/probe.py:5: comma",
        "runtime/probe.py:5: clem.",
    ]


# --- a plugin's declarations are read ------------------------------------------------------


def test_declared_exemptions_and_data_shown_otherwise_are_read_by_check_game() -> None:
    """test.counter shows its seed nowhere, so its observation-data check fails; a game that
    declares the seed shown otherwise passes it, and one that declares the check exempt (for
    some settings) reads ``exempt`` there, the check's own result still in the detail."""
    counter = registry.get("test.counter")
    plain = {r.name: r for r in check_game(counter, seeds=1).results}
    assert plain["observation data"].status == "FAIL"
    assert "counter: seed" in plain["observation data"].detail

    shown = replace(counter, shown_otherwise={"seed": "the episode's seed, in no words"})
    report = check_game(shown, seeds=1)
    assert {r.name: r.status for r in report.results}["observation data"] == "pass"
    assert "declared shown otherwise: seed: the episode's seed, in no words" in report.notes

    def short_counts(settings: dict[str, object]) -> str:
        return "the seed is for the players alone" if settings.get("target") == 3 else ""

    exempt = replace(counter, check_exemptions={"observation data": short_counts})
    rows = {r.name: r for r in check_game(exempt, seeds=1).results}
    assert rows["observation data"].status == "exempt"
    assert rows["observation data"].exempt == "the seed is for the players alone"
    assert rows["observation data"].detail == plain["observation data"].detail
    other = {r.name: r for r in check_game(exempt, seeds=1, settings={"target": 2}).results}
    assert other["observation data"].status == "FAIL"


def _tally(text: str, norm: str, value: str) -> Finding | None:
    """A count told as tally marks: ``|||`` for 3."""
    marks = "|" * int(value)
    found = re.search(rf"(?<!\|){re.escape(marks)}(?!\|)", norm)
    return Finding("", "normalised", found.group(0)) if found else None


TALLY = LeakDetectors({"count": _tally}, rewrites=((r"\bthree\b", "|||"),))


def test_a_games_own_leak_detectors_find_its_facts() -> None:
    """A fact is looked for with its game's detector (and the game's rewrites); the same
    words in a game that declares none are read by the generic detector."""
    tally = registry.find("test.tally") or registry.register(
        replace(registry.get("test.counter"), name="test.tally", leak_detectors=TALLY)
    )
    assert detectors_of(tally.name) is TALLY
    data = {"episode": "e1", "game": "test.tally", "private_facts": {"a": {"count": "3"}}}
    record = episode_record(data)
    said = [
        {"kind": "transcript_event", "event": "utterance", "from_role": "a", "to_role": "b",
         "turn": 1, "content": [{"type": "text", "text": text}]}
        for text in ("I have |||.", "I have ||||.", "I have three.", "I have 3.")
    ]  # fmt: skip
    found = episode_disclosures(record, said)
    assert [(d.fact, d.match, d.message) for d in found] == [
        ("count", "|||", "I have |||."),
        ("count", "|||", "I have three."),
    ]
    plain = episode_disclosures(episode_record({**data, "game": "test.counter"}), said)
    assert [d.message for d in plain] == ["I have three.", "I have 3."]
