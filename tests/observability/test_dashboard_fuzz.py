"""The dashboard's HTTP and WebSocket API, fuzzed: whatever a client sends, it gets a 2xx or a
4xx with a message, never a 500 or a traceback, and the server goes on serving.

Two real dashboards, started the way users start them: ``parley dashboard --runs`` on a
finished run folder, and the one ``parley run --dashboard`` serves from a live run (with a
human seat that waits for its person). Hypothesis picks a route from the app's own router (a
new route is fuzzed without a change here), fills its path parameters (real ids, ``..``,
``%00``, bad UTF-8, unicode, very long), the query, the method, the headers (``Host``,
``Origin``, ``Content-Type``, the token) and the body (random bytes, broken JSON, JSON of the
wrong shape, huge numbers, deep nesting); and WebSocket frames for ``/ws`` and the seat's
socket. Garbage with a valid token changes nothing: the run is not paused, no episode is
aborted, the seat's turn is not answered. Neither process logs a traceback.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import re
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

import aiohttp
import pytest
import yaml
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from parley.bus.broker import free_port
from parley.observability.dashboard.hub import Hub
from parley.observability.dashboard.server import Dashboard
from tests.observability.test_dashboard import Process, records

pytestmark = pytest.mark.timeout(240)

# Every route of the app, read off its router: (method, path pattern such as /api/runs/{run}).
ROUTES = sorted(
    {
        (route.method, route.resource.canonical)
        for route in Dashboard(Hub()).app().router.routes()
        if route.resource is not None
    }
)
FUZZ = settings(
    max_examples=200,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
BODY_LIMIT = 1024**2  # aiohttp's client_max_size, which the dashboard keeps
SEAT_LINE = re.compile(r"^seat: (\S+) of (\S+): (http\S+)$")
TRACEBACK = re.compile(r"Traceback \(most recent call last\)|File \"[^\"]+\", line \d+")


@dataclass
class Served:
    """A dashboard process and what the fuzzing needs to know about it."""

    process: Process
    base: str  # http://127.0.0.1:PORT/
    token: str
    run: str
    episodes: list[str]
    shas: list[str]
    seat: dict[str, str] = field(default_factory=dict)  # run, episode, role, token

    @property
    def host(self) -> str:
        return urlsplit(self.base).netloc

    def get(self, path: str) -> Any:
        request = urllib.request.Request(self.base + path, headers={"X-Parley-Token": self.token})
        with urllib.request.urlopen(request, timeout=30) as answer:
            return json.load(answer)

    def still_serves(self) -> None:
        assert self.process.proc.poll() is None, "".join(self.process.lines)
        assert isinstance(self.get("api/runs")["runs"], list)

    def no_traceback(self) -> None:
        logged = "".join(self.process.lines)
        assert not TRACEBACK.search(logged), logged


def quick_config(path: Path, human: bool) -> Path:
    """Two quick recorded episodes; with ``human``, one more whose painter is a person at a
    browser seat, who never comes: it plays until the test ends."""
    games: list[dict[str, Any]] = [
        {
            "game": "test.paint",
            "seeds": [0, 1],
            "pairings": [{"painter": "scripted"}],
            "settings": {"turns": 2, "delay_s": 0.0},
        }
    ]
    if human:
        games.append(
            {
                "game": "test.paint",
                "seeds": [7],
                "pairings": [{"painter": "human-browser"}],
                "settings": {"turns": 2},
            }
        )
    path.write_text(yaml.safe_dump({"name": "fuzz", "concurrency": 3, "games": games}))
    return path


def wait_for(what: str, check: Any, process: Process, timeout_s: float = 90.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        if process.proc.poll() is not None:
            break
        time.sleep(0.2)
    raise AssertionError(f"{what}; output:\n{''.join(process.lines)}")


def served(process: Process) -> Served:
    url = process.url()
    base, token = url.split("?token=", 1)
    shown = Served(process, base, token, "", [], [])
    shown.run = wait_for("no run shown", lambda: shown.get("api/runs")["runs"], process)[0]["run"]
    page = wait_for(
        "no recorded episodes shown",
        lambda: (
            (p := shown.get(f"api/runs/{shown.run}/episodes?outcome=success"))["total"] >= 2 and p
        ),
        process,
    )
    shown.episodes = [row["episode"] for row in page["rows"]]
    text = json.dumps(shown.get(f"api/runs/{shown.run}/episodes/{shown.episodes[0]}"))
    shown.shas = sorted(set(re.findall(r"[0-9a-f]{64}", text)))
    return shown


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """``parley dashboard --runs`` on a finished run folder."""
    folder = tmp_path_factory.mktemp("finished")
    run_dir = folder / "run"
    config = quick_config(folder / "c.yaml", human=False)
    run = Process(["run", str(config), "--out", str(run_dir), "--quiet"], folder / "run.log")
    assert run.wait(120) == 0, "".join(run.lines)
    assert len(records(run_dir)) == 2
    dashboard = Process(
        ["dashboard", "--runs", str(run_dir), "--port", str(free_port())], folder / "dash.log"
    )
    try:
        yield served(dashboard)
    finally:
        dashboard.stop()


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """The dashboard of a live run (``parley run --dashboard``), its seat's link included."""
    folder = tmp_path_factory.mktemp("live")
    run_dir = folder / "run"
    config = quick_config(folder / "c.yaml", human=True)
    args = ["--out", str(run_dir), "--quiet", "--dashboard", str(free_port())]
    process = Process(["run", str(config), *args], folder / "run.log")
    try:
        shown = served(process)

        def link() -> Any:
            lines = [SEAT_LINE.match(line.strip()) for line in list(process.lines)]
            return next((m for m in lines if m), None)

        match = wait_for("no seat link printed", link, process)
        seat_path, seat_token = urlsplit(match.group(3)).path, match.group(3).split("token=")[1]
        _, _, run, episode, role = seat_path.split("/")
        shown.seat = {"run": run, "episode": episode, "role": role, "token": seat_token}
        wait_for(
            "the seat's episode never ran",
            lambda: shown.get(f"api/runs/{shown.run}/episodes/{episode}")["outcome"] == "running",
            process,
        )
        yield shown
    finally:
        process.stop()


# --- what a client may send ---------------------------------------------------------------

# Path segments that have broken servers elsewhere, already percent-encoded as a URL holds them.
HOSTILE_SEGMENTS = [
    "..",
    ".",
    "%2e%2e",
    "..%2F..%2Fetc%2Fpasswd",
    "%2F",
    "%00",
    "a%00.js",
    "%ff%fe",
    "%ED%A0%80",  # a lone surrogate, in UTF-8's form
    "%C0%AE%C0%AE",
    "%25",
    "%",
    "app.js%00.css",
    "app.js",
    "index.html",
    "x" * 3000,
    "0" * 64 + "%0A",
    "%E2%80%AE",
    quote("épisode-名前", safe=""),
]
safe_text = st.text(st.characters(blacklist_categories=["Cs"]), max_size=24)
header_text = st.text(st.characters(min_codepoint=0x20, max_codepoint=0xFF), max_size=40).filter(
    lambda s: "\x7f" not in s
)
NUMBERS = ["-1", "0", "1", "1e999", "nan", "9" * 5000, "-9" * 30, "0x10", "１２"]
QUERY_KEYS = ["offset", "limit", "sort", "desc", "game", "pairing", "outcome", "token", "view"]
huge_numbers = st.sampled_from([10**400, -(10**400), 1e308, float("inf"), float("-inf")])
wild_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | huge_numbers | safe_text,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(safe_text, inner, max_size=4),
    max_leaves=12,
)
BROKEN_JSON = [
    "",
    "{",
    '{"command": "pause"',
    "[" * 5000 + "]" * 5000,
    '{"command": ' * 3000 + "1" + "}" * 3000,
    "9" * 6000,
    "1e999999",
    "NaN",
    '"\\ud800"',
    '{"command": "pause", "episode": "\\u0000"}',
    "\ufeff{}",
]


def segments(known: list[str]) -> st.SearchStrategy[str]:
    return (
        st.sampled_from(known or ["r"])
        | st.sampled_from(HOSTILE_SEGMENTS)
        | safe_text.map(lambda s: quote(s, safe=""))
    )


def queries(known: list[str]) -> st.SearchStrategy[list[tuple[str, str]]]:
    keys = st.sampled_from(QUERY_KEYS) | safe_text
    values = (
        st.sampled_from(NUMBERS + known + ["started_at", "main_score", "true", "%00", "%ff"])
        | safe_text
    )
    return st.lists(st.tuples(keys, values), max_size=4)


def control_bodies(episodes: list[str]) -> st.SearchStrategy[Any]:
    """What a control POST may carry: JSON values, objects nearly commands, broken JSON, bytes."""
    commands = st.sampled_from(["pause", "resume", "abort", "PAUSE", "", "stop"]) | wild_json
    shaped = st.fixed_dictionaries(
        {"command": commands},
        optional={
            "episode": st.sampled_from([*episodes, "", "..", "\x00"]) | wild_json,
            "reason": wild_json | st.just("x" * 100_000),
        },
    )
    return (
        st.builds(json.dumps, shaped | wild_json).map(str.encode)
        | st.sampled_from(BROKEN_JSON).map(lambda s: s.encode("utf-8", "surrogatepass"))
        | st.binary(max_size=200)
        | st.just(b"[" * 200_000)
        | st.just(b" " * (2 * 1024 * 1024))  # past the server's body limit
    )


@st.composite
def requests(draw: st.DrawFn, shown: Served) -> tuple[str, str, dict[str, str], bytes | None]:
    """One HTTP request: method, path with query, headers, body. Half of them pass every
    wall (the route's own method, the dashboard's Host, its token, JSON) so that what is
    fuzzed reaches the handlers; the rest fuzz the walls as well."""
    method, pattern = draw(st.sampled_from(ROUTES))
    walls = draw(st.booleans())
    if not walls:
        method = draw(st.sampled_from([method, "POST", "PUT", "DELETE", "OPTIONS", "GET"]))
    known = {
        "run": [shown.run, *([shown.seat["run"]] if shown.seat else [])],
        "episode": [*shown.episodes, *([shown.seat["episode"]] if shown.seat else [])],
        "role": ["painter", *([shown.seat["role"]] if shown.seat else [])],
        "sha": shown.shas,
        "name": ["app.js", "app.css", "seat.js", "index.html"],
    }
    path = re.sub(r"\{(\w+)\}", lambda m: draw(segments(known.get(m.group(1), []))), pattern)
    query = draw(queries([shown.run, *shown.episodes]))
    token = "header" if walls else draw(st.sampled_from(["query", "cookie", "none", "wrong"]))
    seat_token = shown.seat.get("token", "")
    if token == "query":
        query.append(("token", shown.token))
    elif token == "wrong":
        query.append(("token", draw(st.sampled_from([seat_token, "x", "%ff"]) | safe_text)))
    if draw(st.booleans()) and seat_token:
        query.append(("token", seat_token))  # a seat's token, where a seat's page wants it
    text = "&".join(
        f"{quote(k, safe='%')}={v if v in ('%00', '%ff') else quote(v, safe='')}" for k, v in query
    )
    body = draw(st.none() | control_bodies(shown.episodes)) if method != "GET" else None
    target = path + (f"?{text}" if text else "")
    if walls:
        headers = {"Host": shown.host, "X-Parley-Token": shown.token}
        return method, target, {**headers, "Content-Type": "application/json"}, body
    headers = {}
    host = draw(st.sampled_from(["own", "own", "own", "localhost", "evil", "none"]) | header_text)
    if host != "none":
        headers["Host"] = {
            "own": shown.host,
            "localhost": "localhost:" + shown.host.rsplit(":", 1)[1],
            "evil": "evil.example",
        }.get(host, host)
    origin = draw(st.sampled_from(["none", "none", "own", "evil", "null"]) | header_text)
    if origin != "none":
        headers["Origin"] = {"own": f"http://{shown.host}", "evil": "http://evil.example"}.get(
            origin, origin
        )
    if token == "cookie":
        headers["Cookie"] = f"parley_token={shown.token}"
    elif draw(st.booleans()):
        headers[draw(st.sampled_from(["X-Parley-Token", "Cookie"]))] = draw(header_text)
    content_type = draw(
        st.sampled_from(
            [
                "application/json",
                "application/json",
                "application/json; charset=latin-1",
                "application/json; charset=nonsense",
                "text/plain",
                "multipart/form-data; boundary=x",
                "none",
            ]
        )
        | header_text
    )
    if content_type != "none":
        headers["Content-Type"] = content_type
    for name in draw(st.lists(st.sampled_from(["Sec-Fetch-Site", "Sec-Fetch-Mode", "Accept"]))):
        headers[name] = draw(st.sampled_from(["cross-site", "same-origin", "navigate", "cors"]))
    return method, target, headers, body


def send(
    shown: Served, method: str, target: str, headers: dict[str, str], body: bytes | None
) -> tuple[int, bytes]:
    """One request as sent, byte for byte (no client rewrites its headers or path)."""
    host, port = shown.host.rsplit(":", 1)
    connection = http.client.HTTPConnection(host, int(port), timeout=60)
    try:
        connection.putrequest(method, target, skip_host=True, skip_accept_encoding=True)
        for name, value in headers.items():
            connection.putheader(name, value.encode("latin-1"))
        if body is not None:
            connection.putheader("Content-Length", str(len(body)))
        connection.endheaders(body)
        answer = connection.getresponse()
        return answer.status, answer.read()
    except (ConnectionResetError, BrokenPipeError):
        # A server refuses a body past its limit (or any request it refuses by its headers)
        # and closes while the rest is still being sent: fine for such a body, for no other.
        if body is None or len(body) <= BODY_LIMIT:
            raise
        return 413, b"closed while a body past the limit was sent"
    finally:
        connection.close()


def answered_well(status: int, body: bytes, what: Any, head: bool = False) -> None:
    assert 200 <= status < 300 or 400 <= status < 500, (status, body[:500], what)
    text = body.decode("utf-8", "replace")
    assert not TRACEBACK.search(text), (text[:2000], what)
    if status >= 400 and not head:  # a HEAD's answer has no body
        assert text.strip(), ("a refusal says why", status, what)


def effective(body: bytes | None, running: set[str]) -> bool:
    """Whether a control body is a real command that would act: left out of the garbage."""
    try:
        data = json.loads(body or b"")
    except (ValueError, RecursionError):
        return False
    if not isinstance(data, dict):
        return False
    command = data.get("command")
    if command in ("pause", "resume"):
        return True
    return (
        command == "abort" and isinstance(data.get("episode"), str) and (data["episode"] in running)
    )


def fuzz_http(shown: Served, data: st.DataObject) -> None:
    method, target, headers, body = data.draw(requests(shown))
    running = {shown.seat["episode"]} if shown.seat else set()
    assume(not (target.split("?")[0].endswith("/control") and effective(body, running)))
    status, answer = send(shown, method, target, headers, body)
    answered_well(status, answer, (method, target[:300], headers), head=method == "HEAD")


@FUZZ
@given(data=st.data())
def test_every_route_of_a_finished_runs_dashboard_answers_2xx_or_4xx(
    finished: Served, data: st.DataObject
) -> None:
    fuzz_http(finished, data)


@FUZZ
@given(data=st.data())
def test_every_route_of_a_live_runs_dashboard_answers_2xx_or_4xx(
    live: Served, data: st.DataObject
) -> None:
    fuzz_http(live, data)


POSTS = [pattern for method, pattern in ROUTES if method == "POST"]


@settings(FUZZ, max_examples=120)
@given(data=st.data())
def test_what_changes_state_takes_no_garbage_through_every_wall(
    live: Served, data: st.DataObject
) -> None:
    """Every POST route, with the token, the Host and JSON: garbage gets a 4xx and does
    nothing (checked at the end of the module)."""
    pattern = data.draw(st.sampled_from(POSTS))
    path = pattern.replace("{run}", data.draw(st.sampled_from([live.run]) | segments([])))
    body = data.draw(control_bodies([live.seat["episode"], *live.episodes]))
    assume(not effective(body, {live.seat["episode"]}))
    headers = {"Host": live.host, "X-Parley-Token": live.token, "Content-Type": "application/json"}
    status, answer = send(live, "POST", path, headers, body)
    answered_well(status, answer, (path, body[:200]))
    assert 400 <= status < 500, (status, answer)
    nothing_changed(live)


def nothing_changed(live: Served) -> None:
    """The live run is not paused and its seat's episode still plays, nothing aborted."""
    (run,) = live.get("api/runs")["runs"]
    assert not run["paused"]
    episode = live.get(f"api/runs/{live.run}/episodes/{live.seat['episode']}")
    assert episode["outcome"] == "running"
    assert live.get(f"api/runs/{live.run}/episodes?outcome=aborted")["total"] == 0


# --- WebSockets -----------------------------------------------------------------------------

views = st.fixed_dictionaries(
    {"view": st.sampled_from(["runs", "run", "episodes", "episode"]) | wild_json},
    optional={
        "run": st.sampled_from(["fuzz", ""]) | wild_json,
        "episode": wild_json,
        "query": st.dictionaries(
            st.sampled_from(QUERY_KEYS), wild_json | st.sampled_from(NUMBERS), max_size=4
        )
        | wild_json,
    },
)
replies = st.fixed_dictionaries(
    {"type": st.sampled_from(["reply", "Reply", ""]) | wild_json},
    optional={"turn": wild_json, "text": wild_json | st.just("y" * 30_000)},
)
frames = st.lists(
    st.builds(json.dumps, views | replies | wild_json)
    | st.sampled_from(BROKEN_JSON).filter(lambda s: "\\ud800" not in s)
    | safe_text
    | st.binary(max_size=64),
    min_size=1,
    max_size=5,
)


async def receive_until(ws: aiohttp.ClientWebSocketResponse, wanted: Any) -> dict[str, Any]:
    """Frames until one ``wanted`` accepts; the socket must stay open all along, and a seat
    never says it sent a reply (garbage answered no turn)."""
    while True:
        message = await ws.receive(timeout=30)
        assert message.type == aiohttp.WSMsgType.TEXT, (message.type, message.data)
        frame = json.loads(message.data)
        assert frame.get("type") != "sent", frame
        if wanted(frame):
            return frame


async def view_socket(shown: Served, sent: list[str | bytes]) -> None:
    async with (
        aiohttp.ClientSession() as client,
        client.ws_connect(f"{shown.base}ws", headers={"X-Parley-Token": shown.token}) as ws,
    ):
        for frame in sent:
            if isinstance(frame, bytes):
                await ws.send_bytes(frame)
            else:
                text = frame.replace('"fuzz"', json.dumps(shown.run))
                await ws.send_str(text)
        # Still there, and still answering: the run's view comes when asked.
        await ws.send_str(json.dumps({"view": "run", "run": shown.run}))
        answer = await receive_until(ws, lambda f: f.get("type") == "run")
        assert answer["run"] == shown.run


@settings(FUZZ, max_examples=80)
@given(sent=frames)
def test_the_view_socket_takes_any_frames_and_still_answers(
    live: Served, sent: list[str | bytes]
) -> None:
    asyncio.run(view_socket(live, sent))


async def seat_socket(shown: Served, sent: list[str | bytes]) -> None:
    seat = shown.seat
    url = f"{shown.base}seat/{seat['run']}/{seat['episode']}/{seat['role']}/ws"
    async with (
        aiohttp.ClientSession() as client,
        client.ws_connect(f"{url}?token={seat['token']}") as ws,
    ):
        hello = await receive_until(ws, lambda f: f.get("type") == "seat")
        assert hello["episode"] == seat["episode"]
        for frame in sent:
            if isinstance(frame, bytes):
                await ws.send_bytes(frame)
                continue
            await ws.send_str(frame)
            error = await receive_until(ws, lambda f: f.get("type") == "error")
            assert error["error"]
        await ws.send_str(json.dumps({"type": "reply", "turn": True, "text": "still here"}))
        error = await receive_until(ws, lambda f: f.get("type") == "error")
        assert "turn" in error["error"]


def a_real_reply(frame: str | bytes) -> bool:
    """A reply the seat would take: left out of the garbage (it would play the turn)."""
    try:
        data = json.loads(frame)
    except (ValueError, RecursionError):
        return False
    # The seat's first turn, as a whole number (true and 1.0 are refused: not turns).
    turn = data.get("turn") if isinstance(data, dict) else None
    return (
        isinstance(data, dict) and data.get("type") == "reply" and type(turn) is int and turn == 1
    )


@settings(FUZZ, max_examples=60)
@given(sent=frames)
def test_the_seat_socket_answers_any_frame_with_an_error_and_plays_no_turn(
    live: Served, sent: list[str | bytes]
) -> None:
    assume(not any(a_real_reply(f) for f in sent))
    asyncio.run(seat_socket(live, sent))


# --- afterwards ---------------------------------------------------------------------------


def test_after_the_fuzzing_both_still_serve_and_nothing_changed(
    finished: Served, live: Served
) -> None:
    """Runs after the fuzz tests above (pytest keeps a module's order; the control fuzzing
    checks the live run after each example as well)."""
    for shown in (finished, live):
        shown.still_serves()
        shown.no_traceback()
    nothing_changed(live)
    # The seat's turn was never answered: its socket still offers turn 1.
    frames_seen = asyncio.run(seat_frames(live))
    assert any(f.get("type") == "turn" and f.get("turn") == 1 for f in frames_seen), frames_seen
    # And the refusals were the server's own answers: one with a valid token still works.
    status, body = send(
        live,
        "POST",
        f"/api/runs/{live.run}/control",
        {"Host": live.host, "X-Parley-Token": live.token, "Content-Type": "application/json"},
        json.dumps({"command": "abort", "episode": "no-such-episode"}).encode(),
    )
    assert status == 400 and b"not running" in body, body


async def seat_frames(shown: Served) -> list[dict[str, Any]]:
    seat = shown.seat
    url = f"{shown.base}seat/{seat['run']}/{seat['episode']}/{seat['role']}/ws"
    async with (
        aiohttp.ClientSession() as client,
        client.ws_connect(f"{url}?token={seat['token']}") as ws,
    ):
        return [json.loads((await ws.receive(timeout=30)).data) for _ in range(2)]
