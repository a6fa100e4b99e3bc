"""Progress everywhere: outside a terminal (nohup, Slurm) ``parley run`` logs a status line
from the start and every ``--log-every`` seconds, and on a terminal it shows a live table;
both carry elapsed time, ETA, episodes by outcome, requests/s, 429s and retries, tokens and
cost so far, and success so far by pairing, matching what the run recorded."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import struct
import sys
import termios
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from rich.console import Console

from parley.agents.backends.simserver import SimServerProcess
from parley.records import read_records
from parley.runtime import cli
from parley.runtime.cli import main
from parley.runtime.status import model_tokens
from tests.backends.conftest import FAST_RETRY, base_sim, model, wire_config

PRICE = {"input_per_mtok": 3.0, "output_per_mtok": 15.0}
SEEDS = [0, 1, 2, 3]


def _sim_config() -> dict[str, Any]:
    # Replies after 0.02 s; the first three requests answered 429 (then retried).
    config = base_sim()
    config["latency"] = {"ttft_s": 0.02, "max_seqs": 1024}
    config["faults"] = [{"kind": "rate_limit", "first": 3, "retry_after_s": 0.01}]
    return config


@pytest.fixture(scope="module")
def sim_process() -> Iterator[SimServerProcess]:
    with SimServerProcess(_sim_config()) as server:
        yield server


@pytest.fixture
def sim(sim_process: SimServerProcess) -> SimServerProcess:
    sim_process.configure(**_sim_config())
    sim_process.reset()
    return sim_process


def _config(sim: SimServerProcess, path: Path) -> Path:
    models = {
        "solver-llm": model(sim, "solver-m", images=False, retry=FAST_RETRY, price=PRICE),
        "expert-llm": model(sim, "expert-m", retry=FAST_RETRY, price=PRICE),
    }
    pairings = [
        {"solver": "solver-llm", "expert": "expert-llm"},
        {"solver": "random", "expert": "scripted"},
    ]
    config = wire_config(models, pairings, seeds=SEEDS, concurrency=2, name="progress")
    path.write_text(yaml.safe_dump(config.model_dump(mode="json")))
    return path


def _pairing_counts(records: list[dict]) -> dict[str, tuple[int, int]]:
    """``game role=p,role=p`` → (successes, ended) as the status names them."""
    out: dict[str, tuple[int, int]] = {}
    for r in records:
        key = f"{r['game']} " + ",".join(f"{k}={v}" for k, v in r["pairing"].items())
        won, ended = out.get(key, (0, 0))
        out[key] = (won + (r["outcome"] == "success"), ended + 1)
    return out


def test_outside_a_terminal_a_status_line_comes_at_once_and_at_the_end(
    sim: SimServerProcess, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """With ``--log-every 600`` the run is over long before a second line is due: the lines
    it prints are the one at the start (before any episode ended) and the final one."""
    config = _config(sim, tmp_path / "run.yaml")
    out = tmp_path / "run"
    assert main(["run", str(config), "--out", str(out), "--log-every", "600", "--no-check"]) == 0
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("progress:")]
    assert len(lines) == 2
    planned = 2 * len(SEEDS)
    assert f"done 0/{planned}, running" in lines[0]
    final = lines[-1]
    records = read_records(out)
    assert f"done {planned}/{planned}, running 0" in final
    # Episodes by outcome, as recorded.
    for outcome, n in Counter(r["outcome"] for r in records).items():
        assert f"{outcome} {n}" in final
    assert re.search(r"elapsed \d+:\d\d", final)
    assert "ETA 0:00" in final and " req/s" in final
    # The 429s and retries the endpoints saw, summed (the server counted the 429s too).
    found = re.search(r"429s (\d+), retries (\d+)", final)
    assert found is not None
    limited, retries = int(found[1]), int(found[2])
    assert limited == sim.stats()["fault_rate_limit"] > 0 and retries >= limited
    # Model tokens (built-in players' words are not), summed over the records.
    used = [model_tokens(r["spec"]["players"], r["tokens"]) for r in records]
    tokens_in = sum(t[0] for u in used for t in u.values())
    tokens_out = sum(t[1] for u in used for t in u.values())
    assert tokens_in > 0 and tokens_out > 0
    assert f"tokens {tokens_in:,} in {tokens_out:,} out" in final
    cost = (tokens_in * PRICE["input_per_mtok"] + tokens_out * PRICE["output_per_mtok"]) / 1e6
    assert f"${cost:,.4f}" in final
    # Success so far by pairing, as recorded.
    for key, (won, ended) in _pairing_counts(records).items():
        assert f"{key} {won}/{ended} success" in final


def test_on_a_terminal_the_live_table_shows_the_same_figures(
    sim: SimServerProcess, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``parley run`` with its stderr on a pseudo-terminal (a real one, as a person's has):
    the live table, read from the terminal's other end."""
    config = _config(sim, tmp_path / "run.yaml")
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 240, 0, 0))
    screen = bytearray()

    def drain() -> None:  # the terminal's reader: a full pty would block the run
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:
                return
            if not chunk:
                return
            screen.extend(chunk)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    terminal = open(follower, "w", encoding="utf-8", closefd=True)  # noqa: SIM115
    monkeypatch.setattr(sys, "stderr", terminal)
    monkeypatch.setenv("TERM", "xterm-256color")  # as a person's terminal says
    monkeypatch.setenv("COLUMNS", "200")
    # The CLI's console as it is made when parley starts on a terminal (rich decides then
    # whether it may redraw in place).
    monkeypatch.setattr(cli, "console", Console(stderr=True))
    try:
        assert main(["run", str(config), "--out", str(tmp_path / "run"), "--no-check"]) == 0
    finally:
        monkeypatch.undo()
        terminal.close()
        reader.join(10)
        os.close(leader)
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", screen.decode("utf-8", "replace"))
    for figure in ("running", "failed", "elapsed", "ETA", "req/s", "429s", "retries", "tokens"):
        assert figure in text, figure
    assert "$" in text
    assert "comma.wire solver=solver-llm,expert=expert-llm" in text
    assert re.search(r"comma\.wire solver=random,expert=scripted \d+/\d+ success", text)


@pytest.mark.parametrize("value", ["0", "-5", "soon", "nan"])
def test_a_log_interval_that_is_not_a_positive_number_is_refused_in_one_line(
    value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["run", "any.yaml", "--log-every", value])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert f"expected a number of seconds above 0, got {value!r}" in err
    assert "Traceback" not in err
