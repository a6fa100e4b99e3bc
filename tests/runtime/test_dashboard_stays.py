"""``parley run --dashboard`` with someone at the terminal: once the run is over, the dashboard
stays, serving the finished episodes, until Ctrl-C; then the run ends as a finished one does
(its summary, exit 0), not as an interrupted one."""

from __future__ import annotations

import os
import pty
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import yaml

from parley.agents.backends.processes import free_port

ROOT = Path(__file__).resolve().parents[2]


def _config(path: Path) -> Path:
    config = {
        "name": "stays",
        "games": [
            {
                "game": "comma.wire",
                "seeds": [0, 1],
                "pairings": [{"solver": "random", "expert": "scripted"}],
            }
        ],
    }
    path.write_text(yaml.safe_dump(config))
    return path


def _wait_for(lines: list[str], text: str, proc: subprocess.Popen[str], timeout_s: float) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = next((line for line in lines if text in line), None)
        if found is not None:
            return found
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    raise AssertionError(f"no line with {text!r}; output:\n{''.join(lines)}")


def test_the_dashboard_stays_after_the_run_until_ctrl_c(tmp_path: Path) -> None:
    out = tmp_path / "run"
    leader, follower = pty.openpty()  # stdin a terminal, as a person's is
    command = ["run", str(_config(tmp_path / "stays.yaml")), "--out", str(out)]
    port = str(free_port())
    proc = subprocess.Popen(
        [sys.executable, "-m", "parley.runtime.cli", *command, "--quiet", "--dashboard", port],
        cwd=ROOT,
        stdin=follower,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    os.close(follower)
    lines: list[str] = []

    def read() -> None:
        assert proc.stdout is not None
        lines.extend(proc.stdout)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        stays = _wait_for(lines, "the dashboard stays at", proc, timeout_s=120)
        url = stays.split(" stays at ", 1)[1].split()[0]
        assert url.startswith(f"http://127.0.0.1:{port}/?token=")
        with urllib.request.urlopen(url, timeout=10) as page:  # still served
            assert page.status == 200
        assert proc.poll() is None
        proc.send_signal(signal.SIGINT)
        assert proc.wait(30) == 0, "".join(lines)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(leader)
    reader.join(10)
    text = "".join(lines)
    assert "2 played now, 0 already done" in text
    assert "interrupted" not in text
