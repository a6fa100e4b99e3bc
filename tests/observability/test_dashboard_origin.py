"""Another site's page can neither drive nor read the loopback dashboard.

A real run (``parley run --dashboard``, the slow ``test.paint`` game of
tests/observability/dashboard_game.py) and a real chromium. A page served from another port of
127.0.0.1 (the same site, so the dashboard's cookie travels with its requests) tries a form
POST and a ``no-cors`` fetch to the control endpoint, a CORS read of an episode, and a
WebSocket to ``/ws``: it reads no transcript and the run is neither paused nor any episode
aborted. The dashboard's own page, opened from the printed link, still reads and controls.
Plain HTTP checks cover the refusals one by one: an unknown ``Host``, a non-JSON POST, no
token, a foreign ``Origin`` on the WebSocket.
"""

from __future__ import annotations

import asyncio
import http.server
import json
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml

from parley.bus.broker import free_port
from parley.observability.dashboard.hub import Hub
from parley.observability.dashboard.server import Dashboard
from tests.observability.test_dashboard import Process, records

pytestmark = pytest.mark.timeout(240)

SECRET = "a square numbered"  # what the painter says: the transcript the other page wants

EVIL = """<!doctype html><html><body>
<iframe name="sink"></iframe>
<form id="f" method="POST" enctype="text/plain" target="sink" action="%(control)s">
<input name='{"command":"pause","x":"' value='"}'></form>
<script>
window.seen = [];
window.done = (async () => {
  document.getElementById("f").submit();
  const abort = JSON.stringify({command: "abort", episode: "%(episode)s", reason: "forged"});
  try {
    await fetch("%(control)s", {method: "POST", mode: "no-cors", body: abort,
                                headers: {"Content-Type": "text/plain"}});
    await fetch("%(control)s", {method: "POST", mode: "no-cors",
                                body: JSON.stringify({command: "pause"})});
  } catch (e) { window.seen.push("fetch failed: " + e); }
  try {
    const r = await fetch("%(episode_url)s", {credentials: "include"});
    window.seen.push("read: " + await r.text());
  } catch (e) { window.seen.push("read failed: " + e); }
  await new Promise((resolve) => {
    const ws = new WebSocket("%(ws)s");
    ws.onopen = () => ws.send(JSON.stringify(
      {view: "episode", run: "%(run)s", episode: "%(episode)s"}));
    ws.onmessage = (m) => window.seen.push("ws: " + m.data);
    ws.onclose = () => resolve();
    ws.onerror = () => window.seen.push("ws refused");
    setTimeout(resolve, 3000);
  });
  return window.seen;
})();
</script></body></html>"""


def slow_config(path: Path) -> Path:
    """Six slow episodes, two at a time: some are still to start, and some running, while
    the other page tries."""
    config = {
        "name": "origin",
        "concurrency": 2,
        "games": [
            {
                "game": "test.paint",
                "seeds": {"start": 0, "count": 6},
                "pairings": [{"painter": {"kind": "scripted", "name": "slow"}}],
                "settings": {"turns": 20, "delay_s": 0.3},
            }
        ],
    }
    path.write_text(yaml.safe_dump(config))
    return path


def get_json(url: str, token: str) -> Any:
    request = urllib.request.Request(url, headers={"X-Parley-Token": token})
    with urllib.request.urlopen(request, timeout=10) as answer:
        return json.load(answer)


def a_running_episode(base: str, token: str) -> tuple[str, str]:
    """The run's id and an episode it plays now."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        runs = get_json(base + "api/runs", token)["runs"]
        if runs:
            run_id = runs[0]["run"]
            page = get_json(f"{base}api/runs/{run_id}/episodes?outcome=running", token)
            if page["rows"]:
                return run_id, page["rows"][0]["episode"]
        time.sleep(0.2)
    raise AssertionError("no episode ran")


def serve_page(html: str) -> tuple[http.server.HTTPServer, int]:
    """A second web server on another port of 127.0.0.1 serving one page: another site's."""
    body = html.encode()

    class Page(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Page)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, server.server_address[1]


def test_another_sites_page_neither_drives_nor_reads_the_dashboard(
    browser: Any, tmp_path: Path
) -> None:
    run_dir = tmp_path / "run"
    port = free_port()
    args = ["--out", str(run_dir), "--quiet", "--dashboard", str(port)]
    run = Process(
        ["run", str(slow_config(tmp_path / "c.yaml")), *args],
        tmp_path / "run.log",
    )
    context = browser.new_context()
    evil_server = None
    try:
        url = run.url()
        base = f"http://127.0.0.1:{port}/"
        assert url.startswith(base + "?token=")
        token = url.split("token=", 1)[1]

        # The user opened the dashboard: the browser holds its cookie from now on.
        own = context.new_page()
        own.set_default_timeout(60_000)
        assert own.goto(url).status == 200
        own.wait_for_selector("#connection.ok")
        run_id, episode = a_running_episode(base, token)

        evil_server, evil_port = serve_page(
            EVIL
            % {
                "control": f"{base}api/runs/{run_id}/control",
                "episode_url": f"{base}api/runs/{run_id}/episodes/{episode}",
                "ws": f"ws://127.0.0.1:{port}/ws",
                "run": run_id,
                "episode": episode,
            }
        )
        evil = context.new_page()
        evil.goto(f"http://127.0.0.1:{evil_port}/")
        seen = evil.evaluate("window.done")
        evil.screenshot(path=tmp_path / "evil.png")
        assert not any(SECRET in s or s.startswith("ws: ") for s in seen), seen
        assert not any(s.startswith("read: ") for s in seen), seen

        # Nothing changed: not paused, the episode still playing or ended by itself.
        runs = {r["run"]: r for r in get_json(base + "api/runs", token)["runs"]}
        assert not runs[run_id]["paused"]

        # The dashboard's own page still reads the transcript and controls the run, with the
        # cookie alone (its fetch carries no token here).
        run_id, episode = a_running_episode(base, token)
        own.goto(f"{url}#/run/{run_id}/episode/{episode}")
        own.wait_for_selector(f"#transcript tr.item >> text={SECRET}")
        answer = own.evaluate(
            """async ([run, episode]) => {
              const r = await fetch(`/api/runs/${run}/control`, {method: "POST",
                headers: {"Content-Type": "application/json"},
                body: JSON.stringify({command: "abort", episode, reason: "own page"})});
              return [r.status, await r.text()];
            }""",
            [run_id, episode],
        )
        own.screenshot(path=tmp_path / "own.png")
        assert answer[0] == 200, answer
        assert run.wait(120) == 0, "".join(run.lines)
    finally:
        context.close()
        if evil_server is not None:
            evil_server.shutdown()
        run.stop()
    done = records(run_dir)
    assert len(done) == 6  # a pause would have held the rest back: the run ended whole
    aborted = [r for r in done.values() if r["outcome"] == "aborted"]
    assert [r["episode"] for r in aborted] == [episode]
    assert "forged" not in json.dumps(aborted)


def test_refusals_over_plain_http() -> None:
    """Each rule on its own, from a client that sets any header it likes. On the main
    thread's own event loop, right after this module's browser test: the browser fixture
    leaves no loop running behind it."""
    asyncio.run(refusals())


async def refusals() -> None:
    """The plain HTTP checks, against a dashboard of its own."""
    dashboard = Dashboard(Hub(), port=0)
    await dashboard.start()
    base, token = dashboard.base, dashboard.token
    auth = {"X-Parley-Token": token}
    try:
        async with aiohttp.ClientSession() as http:
            async with http.get(base + "api/runs", headers={**auth, "Host": "evil.example"}) as r:
                assert r.status == 421 and "Host" in await r.text()
            async with http.get(
                base + "api/runs", headers={**auth, "Host": f"rebound.example:{dashboard.port}"}
            ) as r:
                assert r.status == 421
            for host in (f"localhost:{dashboard.port}", f"127.0.0.1:{dashboard.port}"):
                async with http.get(base + "api/runs", headers={**auth, "Host": host}) as r:
                    assert r.status == 200
            async with http.get(base + "api/runs") as r:
                assert r.status == 403 and "token" in await r.text()
            async with http.get(base) as r:
                assert r.status == 403
            control = f"{base}api/runs/r1/control"
            async with http.post(
                control,
                data='{"command": "pause"}',
                headers={**auth, "Content-Type": "text/plain"},
            ) as r:
                assert r.status == 415 and "application/json" in await r.text()
            async with http.post(
                control,
                json={"command": "pause"},
                headers={**auth, "Origin": "http://evil.example"},
            ) as r:
                assert r.status == 403
            # Through every wall, the request reaches the handler (which has no bus here).
            async with http.post(control, json={"command": "pause"}, headers=auth) as r:
                assert r.status == 400 and "no bus" in await r.text()
            for headers in (
                {**auth, "Origin": f"http://127.0.0.1:{dashboard.port + 1}"},  # another port
                {"Origin": f"http://127.0.0.1:{dashboard.port}"},  # its own origin, no token
                {},  # no Origin, no token
            ):
                with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
                    await http.ws_connect(base + "ws", headers=headers)
                assert refused.value.status == 403
            async with http.ws_connect(base + "ws", headers=auth) as ws:
                assert json.loads((await ws.receive(timeout=10)).data)["type"] == "runs"
            async with http.ws_connect(
                f"{base}ws?token={token}", headers={"Origin": f"http://127.0.0.1:{dashboard.port}"}
            ) as ws:
                assert json.loads((await ws.receive(timeout=10)).data)["type"] == "runs"
    finally:
        await dashboard.stop()
