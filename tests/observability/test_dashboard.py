"""The dashboard in a real browser (Playwright driving Debian's chromium) on real runs.

A run of ``test.paint`` (tests/observability/dashboard_game.py: a picture a turn, slow enough to
watch) is started as a process: with ``--dashboard`` (embedded, local bus), and over Mosquitto
with ``parley dashboard --bus`` in a process of its own. On each, the same checks: the episode
count rises while the page is open; a running episode's transcript line and state image appear;
pausing stops new episodes (and resuming starts them again); aborting ends one episode as
``aborted`` in ``episodes.jsonl``; a reply full of markup stays text and runs no script; the
filters narrow the list. Every step leaves a screenshot in the test's folder.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from parley.bus.broker import free_port
from tests.observability.dashboard_game import XSS

ROOT = Path(__file__).resolve().parents[2]
WAIT_MS = 60_000  # the longest any one thing may take to show on a loaded 2-core machine

pytestmark = pytest.mark.timeout(240)


def new_page(browser: Any) -> Any:
    """A tab that ignores the page's Content-Security-Policy: Playwright's waits evaluate
    script the policy forbids, and without that second wall the markup test checks the
    escaping alone."""
    return browser.new_page(viewport={"width": 1280, "height": 900}, bypass_csp=True)


def paint_config(path: Path) -> Path:
    """Two markup-replying episodes first, then sixteen slow ones, two at a time."""
    config = {
        "name": "paint",
        "concurrency": 2,
        "games": [
            {
                "game": "test.paint",
                "seeds": {"start": 0, "count": 2},
                "pairings": [{"painter": {"kind": "scripted", "name": "xss"}}],
                "settings": {"turns": 3, "delay_s": 0.2},
            },
            {
                "game": "test.paint",
                "seeds": {"start": 10, "count": 16},
                "pairings": [{"painter": {"kind": "scripted", "name": "slow"}}],
                "settings": {"turns": 8, "delay_s": 0.3},
            },
        ],
    }
    path.write_text(yaml.safe_dump(config))
    return path


class Process:
    """A ``parley`` command as a process, its output collected; ``url`` waits for the
    ``dashboard: URL`` line it prints."""

    def __init__(self, args: list[str], log: Path) -> None:
        env = {
            **os.environ,
            "PARLEY_PLUGINS": "tests.observability.dashboard_game",
            "PYTHONPATH": str(ROOT),
        }
        self.log = log
        self.lines: list[str] = []
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "parley.runtime.cli", *args],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        with self.log.open("w") as out:
            for line in self.proc.stdout:
                self.lines.append(line)
                out.write(line)
                out.flush()

    def url(self, timeout_s: float = 60.0) -> str:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for line in self.lines:
                if line.startswith("dashboard: http"):
                    return line.split(" ", 1)[1].strip()
            if self.proc.poll() is not None:
                break
            time.sleep(0.1)
        raise AssertionError(f"no dashboard URL printed; output:\n{''.join(self.lines)}")

    def wait(self, timeout_s: float = 120.0) -> int:
        return self.proc.wait(timeout_s)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def records(run_dir: Path) -> dict[str, dict[str, Any]]:
    path = run_dir / "episodes.jsonl"
    if not path.exists():
        return {}
    found = {}
    for line in path.read_text().splitlines():
        if line.strip():
            record = json.loads(line)
            found[record["episode"]] = record
    return found


def number(page: Any, selector: str) -> int:
    return int(page.locator(selector).inner_text())


def check_dashboard(page: Any, url: str, run_dir: Path, shots: Path) -> None:
    """The issue's checks, in an order that keeps episodes still to start for the pause and a
    running one at hand for the abort."""
    page.set_default_timeout(WAIT_MS)
    page.goto(url)
    page.locator("#runs a").first.click()
    run_url = page.url

    # The episode count rises while we watch.
    page.wait_for_selector("#run-finished")
    page.wait_for_function("Number(document.querySelector('#run-finished').textContent) >= 1")
    first = number(page, "#run-finished")
    page.wait_for_function(f"Number(document.querySelector('#run-finished').textContent) > {first}")
    assert number(page, "#run-finished") > first
    page.screenshot(path=shots / "run.png", full_page=True)

    # Pausing stops new episodes; resuming starts them again.
    page.goto(run_url)
    page.wait_for_selector("#run-finished")
    page.click("#pause")
    page.wait_for_selector("#control-result >> text=pause: done")
    page.goto(run_url + "/episodes")
    page.wait_for_selector("#episodes tr.episode-row")
    # Once the running episodes have ended, no episode starts while paused.
    page.wait_for_function(
        "!document.querySelector('#filter-outcome').textContent.includes('running')"
    )
    started = number(page, "#episodes-total")
    time.sleep(2.0)  # several episodes' worth of time: two would have started unpaused
    assert number(page, "#episodes-total") == started
    planned = 18
    assert started < planned
    page.screenshot(path=shots / "paused.png", full_page=True)
    page.goto(run_url)
    page.wait_for_selector("#resume")
    page.click("#resume")
    page.wait_for_selector("#control-result >> text=resume: done")
    page.goto(run_url + "/episodes")
    page.wait_for_function(
        f"Number(document.querySelector('#episodes-total').textContent) > {started}"
    )

    # A running episode: a transcript line and a state image appear.
    page.goto(run_url + "/episodes?outcome=running&pairing=painter%3Dslow")
    page.wait_for_selector("#episodes tr.episode-row a")
    page.locator("#episodes tr.episode-row a").first.click()
    episode = page.url.rsplit("/", 1)[1]
    page.wait_for_selector("#transcript tr.item >> text=painter said: a square numbered")
    page.wait_for_function(
        "(() => { const i = document.querySelector('img.state-image');"
        " return i && i.complete && i.naturalWidth === 64; })()"
    )
    page.screenshot(path=shots / "episode.png", full_page=True)

    # Aborting it ends it as aborted, on the page and in episodes.jsonl.
    if page.locator("#abort").is_disabled():  # it ended meanwhile: take another
        page.goto(run_url + "/episodes?outcome=running")
        page.wait_for_selector("#episodes tr.episode-row a")
        page.locator("#episodes tr.episode-row a").first.click()
        episode = page.url.rsplit("/", 1)[1]
        page.wait_for_selector("#abort:not([disabled])")
    page.click("#abort")
    page.wait_for_selector("h1 .outcome-aborted")
    deadline = time.monotonic() + WAIT_MS / 1000
    while episode not in records(run_dir) and time.monotonic() < deadline:
        time.sleep(0.2)
    record = records(run_dir)[episode]
    assert record["outcome"] == "aborted"
    assert record["reason_code"] == "operator_abort"
    page.screenshot(path=shots / "aborted.png", full_page=True)

    # A reply full of markup stays text: no script runs, no element is made of it.
    page.goto(run_url + "/episodes?pairing=painter%3Dxss")
    page.wait_for_selector("#episodes tr.episode-row a")
    page.locator("#episodes tr.episode-row a").first.click()
    page.wait_for_selector("#transcript tr.item >> text=window.__parley_xss")
    shown = page.locator("#transcript tr.item", has_text="painter said").first.inner_text()
    assert XSS in shown
    assert page.evaluate("window.__parley_xss") is None
    assert page.locator("#transcript script").count() == 0
    assert page.locator("#transcript img[src='x']").count() == 0
    page.screenshot(path=shots / "xss.png", full_page=True)

    # The filters narrow the list.
    page.goto(run_url + "/episodes")
    page.wait_for_selector("#episodes tr.episode-row")
    everything = number(page, "#episodes-total")
    page.select_option("#filter-pairing", "painter=xss")
    page.wait_for_function(
        f"Number(document.querySelector('#episodes-total').textContent) < {everything}"
    )
    # The run interleaves its blocks, so the second xss episode may start later: the filtered
    # count reaches the block's two episodes.
    page.wait_for_function("Number(document.querySelector('#episodes-total').textContent) === 2")
    pairings = page.locator("#episodes tr.episode-row td:nth-child(3)").all_inner_texts()
    assert pairings and set(pairings) == {"painter=xss"}
    page.select_option("#filter-pairing", "")
    page.select_option("#filter-outcome", "aborted")
    page.wait_for_function("Number(document.querySelector('#episodes-total').textContent) === 1")
    assert page.locator("#episodes tr.episode-row a").first.inner_text() == episode
    page.screenshot(path=shots / "filtered.png", full_page=True)


def test_embedded_dashboard(browser: Any, tmp_path: Path) -> None:
    """``parley run --dashboard``: served from the run's own process, on its local bus."""
    run_dir = tmp_path / "run"
    port = free_port()
    run = Process(
        [
            "run",
            str(paint_config(tmp_path / "paint.yaml")),
            "--out",
            str(run_dir),
            "--quiet",
            "--dashboard",
            str(port),
        ],
        tmp_path / "run.log",
    )
    page = new_page(browser)
    try:
        url = run.url()
        assert url.startswith(f"http://127.0.0.1:{port}/?token=")  # loopback too
        check_dashboard(page, url, run_dir, tmp_path)
        assert run.wait() == 0, "".join(run.lines)
    finally:
        if not list(tmp_path.glob("*.png")):
            page.screenshot(path=tmp_path / "failed.png", full_page=True)
        page.close()
        run.stop()
    outcomes = [r["outcome"] for r in records(run_dir).values()]
    assert len(outcomes) == 18 and outcomes.count("aborted") == 1


def test_dashboard_over_mosquitto(browser: Any, mosquitto_broker: Any, tmp_path: Path) -> None:
    """``parley dashboard --bus``: a process of its own watching a run that publishes to a
    real broker; pause, resume and abort travel as Control messages."""
    run_dir = tmp_path / "run"
    port = free_port()
    dashboard = Process(
        ["dashboard", "--bus", mosquitto_broker.url, "--port", str(port)], tmp_path / "dash.log"
    )
    run: Process | None = None
    page = new_page(browser)
    try:
        url = dashboard.url()
        run = Process(
            [
                "run",
                str(paint_config(tmp_path / "paint.yaml")),
                "--out",
                str(run_dir),
                "--quiet",
                "--bus",
                mosquitto_broker.url,
            ],
            tmp_path / "run.log",
        )
        check_dashboard(page, url, run_dir, tmp_path)
        assert run.wait() == 0, "".join(run.lines)
    finally:
        if not list(tmp_path.glob("*.png")):
            page.screenshot(path=tmp_path / "failed.png", full_page=True)
        page.close()
        if run is not None:
            run.stop()
        dashboard.stop()
    outcomes = [r["outcome"] for r in records(run_dir).values()]
    assert len(outcomes) == 18 and outcomes.count("aborted") == 1


def test_token_off_loopback(browser: Any, tmp_path: Path) -> None:
    """On any address but loopback, a request without the printed token is refused, and the
    printed URL (with it) opens the dashboard."""
    port = free_port()
    runs = tmp_path / "runs"
    runs.mkdir()
    dashboard = Process(
        ["dashboard", "--runs", str(runs), "--host", "0.0.0.0", "--port", str(port)],
        tmp_path / "dash.log",
    )
    page = new_page(browser)
    try:
        url = dashboard.url()
        assert "?token=" in url and len(url.split("token=")[1]) >= 20
        base = f"http://127.0.0.1:{port}/"
        assert page.goto(base).status == 403
        assert page.goto(base + "api/runs").status == 403
        assert page.goto(url.replace("0.0.0.0", "127.0.0.1")).status == 200
        page.wait_for_selector("#connection.ok")  # the WebSocket got in with the token
        page.screenshot(path=tmp_path / "token.png")
    finally:
        page.close()
        dashboard.stop()
