"""A newcomer's papercuts (issue 18), each through the ``parley`` command in a fresh process:
bad numbers are refused by the parser, bad paths and overrides get one clear message and no
traceback, ``parley games`` never cuts a name, a bad config is refused before the model SDKs
are imported, and Ctrl-C at a terminal human's prompt ends the run with the episode recorded
as cancelled."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import re
import select
import shutil
import signal
import struct
import subprocess
import sys
import termios
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml

from parley.runtime.config import ConfigError, apply_overrides

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = ROOT / "configs" / "quickstart.yaml"


def installed_games() -> list[str]:
    """The games a fresh process sees (this one may hold games other tests registered)."""
    code = "from parley.environments import registry; print(*registry.all_games(), sep=chr(10))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return out.stdout.split()


def parley(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """``parley ARGS`` in a fresh process, its output captured (not a terminal)."""
    return subprocess.run(
        [sys.executable, "-m", "parley.runtime.cli", *args],
        cwd=ROOT,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=300,
    )


def _refused(done: subprocess.CompletedProcess[str], code: int, *words: str) -> None:
    assert done.returncode == code, done.stderr
    assert "Traceback" not in done.stderr + done.stdout
    for word in words:
        assert word in done.stderr, done.stderr


@pytest.mark.parametrize(
    "command",
    [
        ["plan", str(QUICKSTART), "--set", "name=@exp"],
        ["run", str(QUICKSTART), "--set", "name=`x`", "--out", "{out}"],
        ["instances", "comma.wire", "--out", "{out}", "--set", "variant=[x"],
        ["check-game", "comma.wire", "--set", "variant=[x"],
    ],
)
def test_an_override_that_is_not_yaml_is_one_message(command: list[str], tmp_path: Path) -> None:
    out = tmp_path / "out"
    done = parley(*(word.format(out=out) for word in command))
    given = next(word for word in command if "=" in word and not word.startswith("-"))
    key, _, value = given.partition("=")
    said = " ".join(done.stderr.split())  # wrapped to the terminal's width
    _refused(done, 2, "invalid config --set")
    assert f"{given}: a YAML value" in said and f"quote it: {key}='\"{value}\"'" in said, said
    assert not out.exists()


@pytest.mark.parametrize(("option", "value"), [("--id", "a/b"), ("--group", "g+")])
def test_a_worker_name_that_cannot_be_a_topic_level_is_refused_first(
    option: str, value: str
) -> None:
    # Port 1: nothing listens there; the name is refused before any connection is tried.
    done = parley("worker", "--bus", "mqtt://127.0.0.1:1", option, value)
    _refused(done, 2, f"parley worker: {option} {value!r}: ")
    assert "broker" not in done.stderr


def test_a_folder_where_the_records_file_goes_is_no_run_folder(
    run_folder: Path, tmp_path: Path
) -> None:
    folder = tmp_path / "odd"
    shutil.copytree(run_folder, folder)
    (folder / "episodes.jsonl").unlink()
    (folder / "episodes.jsonl").mkdir()
    for command in readers_of(folder, tmp_path):
        done = parley(*command)
        _refused(done, 2, "is not a run folder (no episodes.jsonl file)")
    _refused(parley("leaks"), 2, "name a run folder")


def test_a_path_with_brackets_is_said_as_it_is(tmp_path: Path) -> None:
    folder = tmp_path / "[bold]run"
    folder.mkdir()
    done = parley("report", str(folder))
    _refused(done, 2, f"{folder} is not a run folder")


@pytest.mark.parametrize("value", ["-1", "0", "99999", "x"])
def test_a_broker_port_out_of_range_is_refused_by_the_parser(value: str) -> None:
    done = parley("broker", f"--port={value}")
    _refused(done, 2, "--port", "expected a port number")


@pytest.mark.parametrize("command", ["leaks", "errors"])
def test_a_limit_below_one_is_refused_by_the_parser(command: str, run_folder: Path) -> None:
    done = parley(command, str(run_folder), "--limit", "-1")
    _refused(done, 2, "--limit", "at least 1")


@pytest.mark.parametrize("value", ["-1", "0"])
def test_concurrency_below_one_is_refused_by_the_parser(value: str, tmp_path: Path) -> None:
    done = parley("run", str(QUICKSTART), "--concurrency", value, "--out", str(tmp_path / "r"))
    _refused(done, 2, "--concurrency", "at least 1")
    assert not (tmp_path / "r").exists()  # nothing started


def test_instances_count_below_one_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "i.jsonl"
    done = parley("instances", "comma.wire", "--count", "-3", "--out", str(out))
    _refused(done, 2, "--count", "at least 1")
    assert not out.exists() and "wrote" not in done.stderr


def test_an_out_folder_that_cannot_be_made_is_one_message(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    out = blocker / "run"
    done = parley("run", str(QUICKSTART), "--no-check", "--quiet", "--out", str(out))
    assert done.returncode in (1, 2), done.stderr
    assert "Traceback" not in done.stderr and "--out" in done.stderr
    assert str(out) in done.stderr.replace("\n", "")
    target = blocker / "wire.jsonl"
    written = parley("instances", "comma.wire", "--count", "2", "--out", str(target))
    _refused(written, 1, "--out", "cannot write it")
    assert len(written.stderr.strip().splitlines()) == 1
    assert blocker.read_text() == "not a folder"  # nothing lost


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda path: path.mkdir(), "a folder: name the file in it"),
        (lambda path: path.write_bytes(b"name: \xff\xfe\n"), "cannot be read: not UTF-8 text"),
        (lambda path: path.write_text("name: [x"), "not valid YAML"),
    ],
)
def test_a_config_that_is_no_readable_file_is_one_message(
    make: Any, message: str, tmp_path: Path
) -> None:
    config = tmp_path / "config.yaml"
    make(config)
    commands = {"run": [str(config), "--out", str(tmp_path / "r")], "plan": [str(config)]}
    for command, args in commands.items():
        done = parley(command, *args)
        _refused(done, 2, "invalid config")
        said = "".join(done.stderr.split())  # the message wraps to the terminal's width
        assert "".join(str(config).split()) in said and "".join(message.split()) in said, said
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("games.9.seeds.count=2", "games.9: no such list item: the list has 1 item (index 0)"),
        ("name.first=x", "name.first: name is 'quickstart', which has no fields"),
    ],
)
def test_a_bad_set_path_names_the_path(override: str, message: str, tmp_path: Path) -> None:
    done = parley("run", str(QUICKSTART), "--set", override, "--out", str(tmp_path / "r"))
    _refused(done, 2, message)
    assert not (tmp_path / "r").exists()


def test_set_indexes_lists_in_process() -> None:
    data = {"games": [{"seeds": [1, 2]}]}
    assert apply_overrides(data, ["games.0.seeds.1=5"]) == {"games": [{"seeds": [1, 5]}]}
    with pytest.raises(ConfigError) as raised:
        apply_overrides(data, ["games.0.seeds.2=5"])
    assert raised.value.problems[0][0] == "games.0.seeds.2"
    assert "the list has 2 items (indexes 0–1)" in str(raised.value)
    with pytest.raises(ConfigError, match="the list is empty"):
        apply_overrides({"games": []}, ["games.0.game=x"])
    for bad in ("games.x.seeds=2", "games.-1.seeds=2"):
        with pytest.raises(ConfigError) as raised:
            apply_overrides(data, [bad])
        assert raised.value.problems[0][0] == bad.split(".seeds")[0]


@pytest.fixture(scope="module")
def run_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run folder of one scripted episode (played here: the judge is the subject)."""
    from parley import event_loop
    from parley.runtime.config import load_config
    from parley.runtime.scheduler import run_experiment

    out = tmp_path_factory.mktemp("papercuts") / "run"
    config = load_config(QUICKSTART, ["games.0.seeds.count=1", "tracing.enabled=false"])
    event_loop.run(run_experiment(config, out))
    return out


def readers_of(folder: Path, tmp_path: Path) -> list[list[str]]:
    """Every command that reads a run folder whole, on ``folder``."""
    return [
        ["report", str(folder)],
        ["leaks", str(folder)],
        ["errors", str(folder)],
        ["export", str(folder), "--out", str(tmp_path / "tables")],
        ["dashboard", "--export", str(folder)],
    ]


def test_readers_of_a_run_folder_read_past_damaged_lines(run_folder: Path, tmp_path: Path) -> None:
    folder = tmp_path / "damaged"
    shutil.copytree(run_folder, folder)
    transcripts = folder / "transcripts.jsonl"
    lines = transcripts.read_bytes().split(b"\n")
    # Two messages overwritten in place (the records' byte ranges still hold): JSON that is
    # no message, and bytes that are not UTF-8; a line that is no record among the records.
    lines[1] = b"[" + b" " * (len(lines[1]) - 2) + b"]"
    lines[2] = b"\xff" * len(lines[2])
    # and a message whose content is not a list of parts (every reader iterates it).
    episode = json.loads(lines[3])["episode"]
    wrong = json.dumps(
        {"kind": "transcript_event", "event": "utterance", "episode": episode, "turn": 1}
        | {"from_role": "solver", "to_role": "expert", "content": 5}
    ).encode()
    lines[3] = wrong[:-1] + b" " * (len(lines[3]) - len(wrong)) + b"}"
    transcripts.write_bytes(b"\n".join(lines))
    with (folder / "episodes.jsonl").open("ab") as f:
        f.write(b"\xfe\xff not a record\n")
    for command in readers_of(folder, tmp_path):
        done = parley(*command)
        assert done.returncode == 0, done.stderr
        assert "Traceback" not in done.stderr + done.stdout
        assert "skipped 1 damaged lines" in " ".join(done.stderr.split())
    assert (folder / "report.md").stat().st_size > 0
    assert sorted(path.name for path in (tmp_path / "tables").iterdir())


# Records of the wrong shape: each one a field of another type, or one a reader needs missing.
WRONG_SHAPES: list[tuple[str, Any]] = [
    ("pairing", "solver=x"),
    ("turns", "three"),
    ("scores", [1, 2]),
    ("game", 7),
    ("seed", "six"),
    ("tokens", "lots"),
    ("transcript", "x"),
    ("transcript", {"offset": -5, "length": 10}),
    ("spec", "x"),
    ("started_at", "x"),
    ("main_score", "abc"),
    ("private_facts", "x"),
    ("seed", None),  # None here: the field left out
    ("pairing", None),
    ("turns", None),
]


def test_records_of_the_wrong_shape_are_damaged_lines_to_every_reader(
    run_folder: Path, tmp_path: Path
) -> None:
    folder = tmp_path / "shapes"
    shutil.copytree(run_folder, folder)
    good = json.loads((folder / "episodes.jsonl").read_bytes().splitlines()[0])
    with (folder / "episodes.jsonl").open("a") as f:
        for i, (field, value) in enumerate(WRONG_SHAPES):
            record = {**good, "episode": f"wrong-{i}"}
            if value is None:
                del record[field]
            else:
                record[field] = value
            f.write(json.dumps(record) + "\n")
    skipped = f"skipped {len(WRONG_SHAPES)} damaged lines"
    for command in readers_of(folder, tmp_path):
        done = parley(*command)
        assert done.returncode == 0, done.stderr
        assert "Traceback" not in done.stderr + done.stdout
        said = " ".join(done.stderr.split())
        assert skipped in said and "pairing of the wrong shape (str)" in said, said
    # A resume keeps them aside and plays nothing again: the good record still counts.
    resumed = parley(
        "run",
        str(QUICKSTART),
        *("--set", "games.0.seeds.count=1", "--set", "tracing.enabled=false"),
        *("--out", str(folder), "--resume", "--quiet"),
    )
    assert resumed.returncode == 0, resumed.stderr
    kept = (folder / "episodes.damaged.jsonl").read_bytes().splitlines()
    assert [json.loads(line)["episode"] for line in kept] == [
        f"wrong-{i}" for i in range(len(WRONG_SHAPES))
    ]


def test_judging_with_a_launch_only_model_is_one_line(run_folder: Path, tmp_path: Path) -> None:
    models = tmp_path / "models.yaml"
    models.write_text(
        yaml.safe_dump({"models": {"local": {"model": "org/vlm", "launch": {"gpus": [0]}}}})
    )
    done = parley("errors", str(run_folder), "--judge", "local", "--models", str(models))
    _refused(done, 2, "model local", "launch:", "base_url")
    assert len(done.stderr.strip().splitlines()) == 1
    # An entry that is not a model: one message.
    models.write_text(yaml.safe_dump({"models": {"bad": {"model": 3, "backend": "other"}}}))
    bad = parley("errors", str(run_folder), "--judge", "bad", "--models", str(models))
    _refused(bad, 2, "model bad", "backend")
    # A models file that is not text: one message too.
    models.write_bytes(b"models: \xff\xfe")
    unreadable = parley("errors", str(run_folder), "--judge", "bad", "--models", str(models))
    _refused(unreadable, 2, "--models", "cannot be read: not UTF-8 text")


def test_games_piped_are_whole_tab_separated_lines() -> None:
    done = parley("games")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].split("\t") == ["game", "roles", "built-in players", "description"]
    names = [line.split("\t")[0] for line in lines[1:]]
    assert names == installed_games()
    assert all(len(line.split("\t")) == 4 for line in lines)


def _in_terminal(args: list[str], columns: int = 80, until: str | None = None) -> tuple[int, str]:
    """Run ``args`` on a pseudo-terminal of ``columns`` columns; with ``until``, press Ctrl-C
    (the terminal's interrupt character) once that text has been printed. Returns the exit
    status and everything printed."""
    pid, fd = pty.fork()
    if pid == 0:  # the child: its stdin, stdout and stderr are the terminal
        os.chdir(ROOT)
        os.execve(sys.executable, [sys.executable, "-m", "parley.runtime.cli", *args], {
            **os.environ, "COLUMNS": str(columns), "TERM": "xterm",
        })  # fmt: skip
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 50, columns, 0, 0))
    out = b""
    pressed = False
    while True:
        ready, _, _ = select.select([fd], [], [], 120)
        if not ready:  # a hang: stop it, and fail below
            os.kill(pid, signal.SIGKILL)
            break
        try:
            data = os.read(fd, 65536)
        except OSError:  # the child closed the terminal
            break
        if not data:
            break
        out += data
        if until is not None and not pressed and until.encode() in out:
            os.write(fd, b"\x03")  # Ctrl-C: the terminal sends SIGINT to the process
            pressed = True
    _, status = os.waitpid(pid, 0)
    os.close(fd)
    return os.waitstatus_to_exitcode(status), out.decode(errors="replace")


def test_games_at_a_terminal_of_80_columns_cuts_no_name() -> None:
    code, text = _in_terminal(["games"], columns=80)
    assert code == 0, text
    flat = re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", text).replace("\r", "")  # no colours
    assert all(len(line) <= 80 for line in flat.splitlines())
    cells = {cell.strip() for line in flat.splitlines() for cell in line.split("│")}
    assert set(installed_games()) <= cells  # every name whole, in a cell of its own
    assert "…" not in flat


def test_ctrl_c_at_a_terminal_humans_prompt_ends_the_run(tmp_path: Path) -> None:
    config = tmp_path / "human.yaml"
    config.write_text(
        textwrap.dedent(
            """\
            name: human
            concurrency: 1
            tracing: {enabled: false}
            games:
              - game: comma.wire
                seeds: [0]
                pairings: [{solver: human, expert: scripted}]
            """
        )
    )
    out = tmp_path / "run"
    args = ["run", str(config), "--out", str(out), "--no-check", "--quiet"]
    code, text = _in_terminal(args, until="Your reply (end with an empty line):")
    assert "Your reply" in text and "Traceback" not in text
    assert code == 130, text  # interrupted, not killed by the test
    records = [json.loads(line) for line in (out / "episodes.jsonl").read_text().splitlines()]
    assert [r["outcome"] for r in records] == ["cancelled"]
    assert "--resume" in text  # and it says how to go on


LAZY = """
import json, sys
from parley.runtime import cli
{body}
heavy = ("openai", "anthropic", "pandas", "opentelemetry.exporter")
print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] in heavy
                        or m.startswith("opentelemetry.exporter"))))
"""


def _imported(body: str) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-c", LAZY.format(body=textwrap.dedent(body))],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_loading_and_validating_a_config_imports_no_model_sdk(tmp_path: Path) -> None:
    models = ROOT / "configs" / "models-example.yaml"
    imported = _imported(
        f"""
        from parley.runtime.config import load_config
        from parley.runtime.experiment import expand
        config = load_config({str(models)!r}, [])
        assert config.models and expand(config)
        """
    )
    assert imported == []


def test_a_bad_config_is_refused_before_the_runtime_is_imported(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\ngames: 7\n")
    imported = _imported(
        f"""
        assert cli.main(["run", {str(bad)!r}]) == 2
        for name in ("parley.runtime.scheduler", "parley.agents.backends.client"):
            assert name not in sys.modules, name
        """
    )
    assert imported == []
