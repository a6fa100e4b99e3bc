"""The dashboard's web server: pages, a JSON API, images, and one WebSocket per browser tab.

The browser says which view it shows (``{"view": "run", "run": …}``) and the server sends that
view again whenever it changed, at most :data:`UPDATES_PER_S` times a second, whatever the
number of episodes behind it. Bound to 127.0.0.1 by default. Any web page the user visits can
reach loopback too, so on every address (see :meth:`Dashboard._guard`): every request needs the
token printed in the URL (``?token=``, the ``X-Parley-Token`` header, or the cookie the first
page sets), a ``Host`` of the dashboard itself, and no other site's ``Origin``; a POST takes
``application/json`` only. A human player's seat checks its own seat token instead.

Example::

    dashboard = Dashboard(Hub())
    await dashboard.watch(bus)          # every run on this bus
    url = await dashboard.start()       # http://127.0.0.1:8765/
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
import secrets
import time
from collections.abc import Awaitable, Callable
from importlib.resources import files
from pathlib import Path
from typing import Any, Literal

from aiohttp import WSMsgType, web
from aiohttp.http import HttpProcessingError

from parley.bus import topics
from parley.bus.base import Bus, BusClosed
from parley.observability.dashboard.hub import Hub
from parley.observability.dashboard.index import RUNNING, QueryError
from parley.observability.dashboard.seats import SeatRegistry

log = logging.getLogger("parley.dashboard")

UPDATES_PER_S = 4
_SEAT_KINDS = ("episode_started", "episode_finished")
INGEST_EVERY_S = 0.05
LOOPBACK = ("127.0.0.1", "localhost", "::1")
WILDCARD = ("0.0.0.0", "::", "")
SEAT_FILES = ("seat.js", "seat.css", "dom.js")  # what a seat's page loads
TOKEN_COOKIE = "parley_token"
_SHA = re.compile(r"^[0-9a-f]{64}$")
STATIC = files("parley.observability.dashboard") / "static"
# Scripts only from this server, no inline script at all: a second wall behind escaping.
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'"
)

# (run, command, episode, reason) -> how it was done, e.g. "scheduler" or "bus".
Controller = Callable[[str, str, str, str], Awaitable[str]]


class DashboardError(ValueError):
    """A dashboard that cannot start as asked (the message says why)."""


class _MalformedRequests(logging.Filter):
    """A request aiohttp cannot parse (no ``Host``, a broken header) has its 400 with the
    reason already: logged as one line, not a traceback that any client could repeat."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, HttpProcessingError):
            record.msg = f"{record.getMessage()}: {exc.code} {exc.message}".replace("\n", " ")
            record.args = ()
            record.exc_info = record.exc_text = None
            record.levelno, record.levelname = logging.INFO, "INFO"
        return True


# The HTTP server's own log (aiohttp's, for requests that never reach a handler).
http_log = logging.getLogger("parley.dashboard.http")
http_log.addFilter(_MalformedRequests())


def _int(request: web.Request, name: str, default: int) -> int:
    value = request.query.get(name, "")
    if not value:
        return default
    try:
        return int(value)
    except ValueError:
        raise web.HTTPBadRequest(text=f"{name} must be a whole number, got {value!r}") from None


def episodes_query(params: Any) -> dict[str, Any]:
    """The index query of a request's parameters (strings, as a URL or a WebSocket gives them)."""
    if not isinstance(params, dict):
        raise QueryError(f"a query is an object of filters, got {type(params).__name__}")
    try:
        return {
            "game": str(params.get("game") or ""),
            "pairing": str(params.get("pairing") or ""),
            "outcome": str(params.get("outcome") or ""),
            "sort": str(params.get("sort") or "started_at"),
            "desc": str(params.get("desc") or "").lower() in ("1", "true", "yes"),
            "offset": int(params.get("offset") or 0),
            "limit": int(params.get("limit") or 50),
        }
    except (TypeError, ValueError, OverflowError) as exc:  # OverflowError: an infinite float
        raise QueryError(f"offset and limit must be whole numbers ({exc})") from None


class Dashboard:
    """The web app over a :class:`Hub`; ``watch`` feeds the hub from a bus."""

    def __init__(
        self,
        hub: Hub | None = None,
        *,
        host: str = "127.0.0.1",
        port: int = 8765,
        token: str | None = None,
        controller: Controller | None = None,
    ) -> None:
        self.hub = hub or Hub()
        self.host = host
        self.port = port
        # Always one, loopback too: any page in the user's browser can reach loopback.
        self.token: str = token or secrets.token_urlsafe(18)
        self.controller = controller
        self.bus: Bus | None = None
        # Human players' seats (docs/humans.md): pages of their own, opened by a seat token.
        self.seats = SeatRegistry(lambda: self.url)
        self._tasks: list[asyncio.Task[None]] = []
        self._runner: web.AppRunner | None = None
        self._sockets: set[web.WebSocketResponse] = set()
        # Seconds spent taking messages in, ticking and building views (none of it waits, so
        # it is CPU time): what watching costs the process it shares
        # (benchmarks/concurrency.py --dashboard reports it).
        self.cpu_s = 0.0

    # --- feeding the hub ----------------------------------------------------------------------

    async def watch(self, bus: Bus, run: str = "+") -> None:
        """Subscribe to the runs on ``bus`` (``run``: one run id, or ``+`` for every run)."""
        self.bus = bus
        self.seats.bus = bus
        if run == "+":
            filters = [
                f"{topics.ROOT}/+/status/+",
                f"{topics.ROOT}/+/results",
                f"{topics.ROOT}/+/+/events",
                f"{topics.ROOT}/+/+/state",
                # What only a role and the run's own processes may read: an operator's dashboard
                # sees it, a spectator's credential is refused it (docs/security.md).
                f"{topics.ROOT}/+/+/private/+",
                f"{topics.ROOT}/+/+/state/private",
            ]
        else:
            # One run, in its own process: every publish of the run is matched against each
            # wildcard filter here, so one (events, state, status, and the replies on the game
            # master's inbox) and an exact one (results) cost the run less than four.
            filters = [
                f"{topics.ROOT}/{run}/+/+",
                topics.results(run),
                topics.all_private(run),
                topics.all_private_states(run),
            ]
        for topic_filter in filters:
            # A dashboard never holds a run back: a mailbox this size does not fill.
            sub = bus.subscribe(topic_filter, maxsize=1_000_000)
            self._tasks.append(asyncio.create_task(self._consume(sub)))

    async def _consume(self, sub: Any) -> None:
        # Woken a few times a second to take in whatever has arrived, not once per message:
        # a task switch per message would cost the run more than the ingesting does.
        with contextlib.suppress(BusClosed):
            try:
                await sub.ready()
            except ConnectionError as exc:
                # A spectator's credential may not read private topics (a broker that checks
                # subscriptions refuses them): the dashboard shows what it may read.
                log.warning("dashboard: not watching %s: %s", sub.filter, exc)
                return
            ingest = self.hub.ingest
            seats = self.seats
            mailbox = sub.mailbox
            while not mailbox.closed or len(mailbox):
                await asyncio.sleep(INGEST_EVERY_S)
                began = time.perf_counter()
                while len(mailbox):
                    delivery = await mailbox.get()  # does not wait: an item is there
                    try:
                        ingest(delivery.message)
                        if delivery.message.kind in _SEAT_KINDS:
                            seats.see(delivery.message)  # an episode with seats starts or ends
                    except Exception:  # one odd message must not stop the watching
                        log.exception("dashboard could not take a message on %s", delivery.topic)
                self.cpu_s += time.perf_counter() - began

    async def _tick(self) -> None:
        while True:
            await asyncio.sleep(1.0)
            began = time.perf_counter()
            try:
                self.hub.tick()
            except Exception:
                log.exception("dashboard tick failed")
            self.cpu_s += time.perf_counter() - began

    # --- serving ------------------------------------------------------------------------------

    def app(self) -> web.Application:
        app = web.Application(middlewares=[self._guard])
        app.router.add_get("/", self._index)
        app.router.add_get("/static/{name}", self._static)
        app.router.add_get("/images/{sha}", self._image)
        app.router.add_get("/api/runs", self._api_runs)
        app.router.add_get("/api/runs/{run}", self._api_run)
        app.router.add_get("/api/runs/{run}/episodes", self._api_episodes)
        app.router.add_get("/api/runs/{run}/episodes/{episode}", self._api_episode)
        app.router.add_post("/api/runs/{run}/control", self._api_control)
        app.router.add_get("/ws", self._ws)
        # A human player's seat: its own token, not the dashboard's (docs/humans.md).
        app.router.add_get("/seat-static/{name}", self._seat_static)
        app.router.add_get("/seat/{run}/{episode}/{role}", self._seat_page)
        app.router.add_get("/seat/{run}/{episode}/{role}/ws", self._seat_ws)
        app.router.add_get("/seat/{run}/{episode}/{role}/images/{sha}", self._seat_image)
        return app

    @property
    def base(self) -> str:
        """The dashboard's address without its token, e.g. ``http://127.0.0.1:8765/``."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/"

    @property
    def url(self) -> str:
        """The URL to open: the address with the token (its page then sets the cookie)."""
        return f"{self.base}?token={self.token}"

    def hosts(self) -> set[str] | None:
        """The ``Host`` values this dashboard answers (None: any, when bound to every address,
        where the token still guards every request)."""
        if self.host in WILDCARD:
            return None
        names = {self.host, *LOOPBACK} if self.host in LOOPBACK else {self.host}
        named = {f"[{n}]" if ":" in n else n for n in names}
        # A browser leaves the port out where it is the scheme's own.
        return {f"{n}:{self.port}" for n in named} | (named if self.port == 80 else set())

    async def start(self) -> str:
        """Serve (and start the once-a-second tick); returns the URL to open."""
        self._runner = web.AppRunner(
            self.app(), access_log=None, handle_signals=False, logger=http_log
        )
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        try:
            await site.start()
        except OSError as exc:
            await self._runner.cleanup()
            raise DashboardError(
                f"cannot serve the dashboard on {self.host}:{self.port}: {exc.strerror or exc}"
            ) from None
        if self.port == 0:
            server = getattr(site, "_server", None)
            sockets = getattr(server, "sockets", None) or []
            if sockets:
                self.port = sockets[0].getsockname()[1]
        self._tasks.append(asyncio.create_task(self._tick()))
        self.seats.start()
        return self.url

    async def stop(self) -> None:
        await self.seats.stop()
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._tasks = []
        for ws in list(self._sockets):
            with contextlib.suppress(Exception):
                await ws.close()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    @web.middleware
    async def _guard(self, request: web.Request, handler: Any) -> web.StreamResponse:
        """Refuse what another site's page (or a DNS-rebound name) could send, then the token."""
        host = request.headers.get("Host", "").lower()
        allowed = self.hosts()
        if allowed is not None and host not in allowed:
            # A name that resolves to this address but is not ours: DNS rebinding, or a typo.
            raise web.HTTPMisdirectedRequest(
                text=f"this dashboard does not answer for Host {host!r}: open the URL it printed"
            )
        origin = request.headers.get("Origin")
        if origin is not None and origin.lower() != f"http://{host}":
            raise web.HTTPForbidden(text="requests from another site's page are refused")
        # Browsers say where a request comes from; a page on another port of 127.0.0.1 is
        # "same-site" and would carry the cookie. Following a link (a GET) is let through.
        fetched_from = request.headers.get("Sec-Fetch-Site", "")
        navigation = request.method == "GET" and request.headers.get("Sec-Fetch-Mode") in (
            "navigate",
            None,
        )
        if fetched_from in ("cross-site", "same-site") and not navigation:
            raise web.HTTPForbidden(text="requests from another site's page are refused")
        if request.method not in ("GET", "HEAD") and request.content_type != "application/json":
            # A form or a no-cors fetch cannot send JSON: it needs a preflight, which fails.
            raise web.HTTPUnsupportedMediaType(
                text=f"this takes application/json only, not {request.content_type!r}"
            )
        # A seat's pages check the seat's own token (a person gets that, not the dashboard's).
        seat = request.path.startswith(("/seat/", "/seat-static/"))
        if not seat:
            given = (
                request.query.get("token")
                or request.headers.get("X-Parley-Token")
                or request.cookies.get(TOKEN_COOKIE)
                or ""
            )
            if not secrets.compare_digest(given.encode(), self.token.encode()):
                raise web.HTTPForbidden(
                    text="this dashboard needs its token: open the URL it printed"
                )
        response = await handler(request)
        if request.query.get("token") and not seat:
            response.set_cookie(TOKEN_COOKIE, self.token, httponly=True, samesite="Strict")
        if not isinstance(response, web.WebSocketResponse):
            response.headers.setdefault("Content-Security-Policy", CSP)
            response.headers.setdefault("X-Content-Type-Options", "nosniff")
        return response

    async def _index(self, request: web.Request) -> web.StreamResponse:
        return web.Response(
            text=(STATIC / "index.html").read_text(encoding="utf-8"), content_type="text/html"
        )

    async def _static(self, request: web.Request) -> web.StreamResponse:
        name = request.match_info["name"]
        kinds = {".js": "text/javascript", ".css": "text/css"}
        suffix = Path(name).suffix
        resource = STATIC / name
        if "/" in name or suffix not in kinds or not resource.is_file():
            raise web.HTTPNotFound()
        return web.Response(
            text=resource.read_text(encoding="utf-8"),
            content_type=kinds[suffix],
            headers={"Cache-Control": "no-cache"},
        )

    async def _image(self, request: web.Request) -> web.StreamResponse:
        sha = request.match_info["sha"]
        if not _SHA.match(sha):
            raise web.HTTPNotFound()
        data = self.hub.image(sha)
        if data is None:
            raise web.HTTPNotFound(text="no such image (yet)")
        return _png(data, "max-age=31536000, immutable")

    async def _api_runs(self, request: web.Request) -> web.StreamResponse:
        return web.json_response({"runs": self.hub.runs_view()})

    async def _api_run(self, request: web.Request) -> web.StreamResponse:
        view = self.hub.run_view(request.match_info["run"])
        if view is None:
            raise web.HTTPNotFound(text=f"no run {request.match_info['run']!r}")
        return web.json_response(view)

    async def _api_episodes(self, request: web.Request) -> web.StreamResponse:
        try:
            view = self.hub.episodes_view(
                request.match_info["run"], **episodes_query(dict(request.query))
            )
        except QueryError as exc:
            raise web.HTTPBadRequest(text=str(exc)) from None
        if view is None:
            raise web.HTTPNotFound(text=f"no run {request.match_info['run']!r}")
        return web.json_response(view)

    async def _api_episode(self, request: web.Request) -> web.StreamResponse:
        run, episode = request.match_info["run"], request.match_info["episode"]
        view = self.hub.episode_view(run, episode)
        if view is None:
            raise web.HTTPNotFound(text=f"no episode {episode!r} in run {run!r}")
        return web.json_response(view)

    async def _api_control(self, request: web.Request) -> web.StreamResponse:
        run = request.match_info["run"]
        try:
            body = await request.json()
        except (ValueError, RecursionError):  # RecursionError: nested deeper than json reads
            raise web.HTTPBadRequest(text="expected a JSON body") from None
        command = body.get("command") if isinstance(body, dict) else None
        episode = str(body.get("episode") or "") if isinstance(body, dict) else ""
        reason = str(body.get("reason") or "") if isinstance(body, dict) else ""
        if command not in ("pause", "resume", "abort"):
            raise web.HTTPBadRequest(
                text=f"command must be pause, resume or abort, got {command!r}"
            )
        if command == "abort" and not episode:
            raise web.HTTPBadRequest(text="abort needs the episode to abort")
        try:
            via = await self.control(run, command, episode, reason)
        except Exception as exc:
            raise web.HTTPBadRequest(text=f"{command} failed: {exc}") from None
        return web.json_response({"ok": True, "command": command, "episode": episode, "via": via})

    async def control(
        self,
        run: str,
        command: Literal["pause", "resume", "abort"],
        episode: str = "",
        reason: str = "",
    ) -> str:
        """Pause or resume ``run``, or abort ``episode``: through the controller (the embedded
        run's scheduler) where there is one, else as a ``Control`` message on the bus."""
        if self.controller is not None:
            return await self.controller(run, command, episode, reason)
        if self.bus is None:
            raise DashboardError("this dashboard watches no bus, so it cannot control a run")
        topics.check_id(run, "run")
        # Only what is playing: a message to a finished or silent run (or an episode it does
        # not play) would be published and answered "done" with nobody to act on it.
        state = self.hub.runs.get(run)
        if state is None:
            raise DashboardError(f"no run {run!r} on this dashboard")
        if not state.live:
            since = state.silent_since
            when = "finished" if since is None else f"no status since {time.ctime(since)}"
            raise DashboardError(f"run {run} is not playing ({when})")
        row = state.index.get(episode) if episode else None
        if episode and (row is None or row.outcome != RUNNING):
            raise DashboardError(f"episode {episode!r} is not playing in run {run}")
        topic = topics.episode_control(run, episode) if episode else topics.control(run)
        # Signed with the run's key (its folder's): the run's processes obey nothing else.
        message = self.hub.control_message(run, command, episode, reason)
        await self.bus.publish(topic, message)
        return "bus"

    # --- the WebSocket --------------------------------------------------------------------------

    async def _ws(self, request: web.Request) -> web.StreamResponse:
        ws = web.WebSocketResponse(heartbeat=30)
        await ws.prepare(request)
        self._sockets.add(ws)
        view: dict[str, Any] = {"view": "runs"}
        changed = asyncio.Event()
        changed.set()
        sender = asyncio.create_task(self._send_views(ws, lambda: view, changed))
        try:
            async for msg in ws:
                if msg.type != WSMsgType.TEXT:
                    continue
                try:
                    wanted = json.loads(msg.data)
                except (ValueError, RecursionError):  # not JSON, or nested too deep to read
                    continue
                if isinstance(wanted, dict) and wanted.get("view"):
                    view = wanted
                    changed.set()
        finally:
            sender.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await sender
            self._sockets.discard(ws)
        return ws

    async def _send_views(
        self,
        ws: web.WebSocketResponse,
        current: Callable[[], dict[str, Any]],
        changed: asyncio.Event,
    ) -> None:
        """Send the tab's view whenever it changed, at most UPDATES_PER_S times a second."""
        last_key: Any = None
        sent_items = sent_states = 0
        shown: dict[str, Any] = {}
        while not ws.closed:
            if changed.is_set():
                changed.clear()
                last_key = None
                shown = current()
                sent_items = sent_states = 0
            began = time.perf_counter()
            payload, key = self._view(shown, last_key, sent_items, sent_states)
            text = None
            if payload is not None:
                if payload.get("type") == "episode":
                    sent_items = payload.pop("_items_total")
                    sent_states = payload.pop("_states_total")
                text = json.dumps(payload, default=str)
            self.cpu_s += time.perf_counter() - began
            if text is not None:
                await ws.send_str(text)
                last_key = key
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(changed.wait(), 1.0 / UPDATES_PER_S)

    def _view(
        self, wanted: dict[str, Any], last_key: Any, sent_items: int, sent_states: int
    ) -> tuple[dict[str, Any] | None, Any]:
        """The payload for ``wanted`` if it changed since ``last_key`` (else None)."""
        hub = self.hub
        kind = wanted.get("view")
        run = str(wanted.get("run") or "")
        state = hub.runs.get(run)
        key: tuple[Any, ...]  # each view's own: what, when unchanged, means nothing to send
        if kind == "runs":
            key = ("runs", hub.version)
            if key == last_key:
                return None, key
            return {"type": "runs", "runs": hub.runs_view()}, key
        if state is None:
            key = ("missing", run, len(hub.runs))
            if key == last_key:
                return None, key
            return {"type": "missing", "run": run}, key
        if kind == "run":
            key = ("run", run, state.version)
            if key == last_key:
                return None, key
            return {"type": "run", **(hub.run_view(run) or {})}, key
        if kind == "episodes":
            try:
                query = episodes_query(wanted.get("query") or {})
                key = (
                    "episodes",
                    run,
                    state.index.version,
                    json.dumps(query, sort_keys=True),
                    self.seats.version,
                )
                if key == last_key:
                    return None, key
                page = state.index.query(**query)
                # Episodes with human seats: whom the game waits for, and the join links.
                seats = self.seats.rows(run, (r["episode"] for r in page["rows"]))
                return {"type": "episodes", "run": run, **page, "seats": seats}, key
            except QueryError as exc:
                key = ("error", str(exc))
                return ({"type": "error", "error": str(exc)} if key != last_key else None), key
        if kind == "episode":
            episode = str(wanted.get("episode") or "")
            live = state.live_episodes.get(episode)
            row = state.index.get(episode)
            key = (
                "episode",
                run,
                episode,
                live.version if live else -1,
                row.offset if row else None,
                row.outcome if row else None,
            )
            if key == last_key:
                return None, key
            view = hub.episode_view(run, episode)
            if view is None:
                return {"type": "missing", "run": run, "episode": episode}, key
            items, states = view["items"], view["states"]
            # The last key sent may be another view's ("missing" until the run was known).
            reset = (
                last_key is None
                or last_key[0] != "episode"
                or last_key[4] != key[4]
                or len(items) < sent_items
            )
            start_items = 0 if reset else sent_items
            start_states = 0 if reset or len(states) < sent_states else sent_states
            payload = {
                "type": "episode",
                "reset": reset or (start_states == 0 and sent_states > 0),
                **{k: v for k, v in view.items() if k not in ("items", "states")},
                "items": items[start_items:],
                "items_from": start_items,
                "states": states[start_states:],
                "states_from": start_states,
                "_items_total": len(items),
                "_states_total": len(states),
            }
            return payload, key
        return None, last_key

    # --- human players' seats (docs/humans.md) ------------------------------------------------

    def _seat_of(self, request: web.Request) -> Any:
        """The seat the request's token opens, or 403: a token opens its own seat only."""
        info = request.match_info
        seat = self.seats.get(
            info["run"], info["episode"], info["role"], request.query.get("token", "")
        )
        if seat is None:
            raise web.HTTPForbidden(text="this seat needs its own link (the token is for another)")
        return seat

    async def _seat_page(self, request: web.Request) -> web.StreamResponse:
        self._seat_of(request)
        return web.Response(
            text=(STATIC / "seat.html").read_text(encoding="utf-8"),
            content_type="text/html",
            headers={"Cache-Control": "no-store", "Referrer-Policy": "no-referrer"},
        )

    async def _seat_static(self, request: web.Request) -> web.StreamResponse:
        name = request.match_info["name"]
        if name not in SEAT_FILES:
            raise web.HTTPNotFound()
        return await self._static(request)

    async def _seat_image(self, request: web.Request) -> web.StreamResponse:
        seat = self._seat_of(request)
        data = seat.images.get(request.match_info["sha"])  # only what this role was shown
        if data is None:
            raise web.HTTPNotFound(text="no such image for this seat")
        return _png(data, "private, max-age=31536000, immutable")

    async def _seat_ws(self, request: web.Request) -> web.StreamResponse:
        """The seat's WebSocket: its role's turns and the episode's end out, replies in."""
        seat = self._seat_of(request)
        ws = web.WebSocketResponse(heartbeat=30)
        await ws.prepare(request)
        self._sockets.add(ws)
        self.seats.joined(seat, ws)
        try:
            for frame in self.seats.hello(seat):
                await ws.send_str(json.dumps(frame))
            async for msg in ws:
                if msg.type != WSMsgType.TEXT:
                    continue
                try:
                    data = json.loads(msg.data)
                except (ValueError, RecursionError):  # not JSON, or nested too deep to read
                    data = None
                if not isinstance(data, dict) or data.get("type") != "reply":
                    await ws.send_str(json.dumps({"type": "error", "error": "expected a reply"}))
                    continue
                problem = self.seats.reply(seat, data.get("turn"), data.get("text"))
                if problem is not None:
                    await ws.send_str(json.dumps({"type": "error", "error": problem}))
        finally:
            self.seats.left(seat, ws)
            self._sockets.discard(ws)
        return ws


def _png(data: bytes, cache: str) -> web.Response:
    """An image by its sha256: the bytes never change, so browsers keep them."""
    return web.Response(body=data, content_type="image/png", headers={"Cache-Control": cache})
