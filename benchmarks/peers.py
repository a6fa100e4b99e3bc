"""parley beside the frameworks a researcher would use instead, on one machine, in one window.

Two workloads, each played by parley and by a peer, interleaved A, B, A, B (``--repeats``):

* **Single-turn, model-played** — N one-request episodes against ONE stand-in model server
  (``parley sim-server``, every reply after ``--latency`` seconds, no batch limit), at
  N = 200, 1,000 and 2,000. parley: ``parley run`` of N ``clem.reference`` episodes, the
  guesser a model on the sim server, the describer scripted (one request per episode), auto
  workers, ``--no-report``. Inspect AI: N single-turn samples through its OpenAI-compatible
  provider (``openai-api/sim/sim``) with ``max_connections=N``. Both are measured by the
  same counters, the sim server's ``/sim/stats``: requests/s over the active window (from the
  arrival of the request that makes 1 % of N to the last reply, timed by the server; the JSON
  also has the figure from 50 ms samples), peak requests in flight, seconds from the command's
  start until 99 % of N were in flight, and the wall time of the whole command (interpreter,
  imports, results on disk; parley's report is left to ``parley report``).
* **Scripted long game, no model** — the runtime's own cost per turn. clembench's games are
  not on PyPI, so clemcore plays a counting game written here on its ``DialogueGameMaster``
  with its programmatic (``mock``) players, twice: laid out as a clemgame and played by
  ``clemcore.cli.run`` (what ``clem run`` calls: its runner, its records on disk), and stepped
  by hand with its interactions recorder (its game loop alone); parley plays the
  same counting game written on its ``GameMaster`` (``bench.count``, registered here: like for
  like, the runtime's own cost) and ``comma.memory`` (``--long-game``, a real game's logic on
  top) with scripted players, one episode at a time, in one process, the counting episodes as
  long as ``comma.memory``'s. Reported: µs per turn (parley) against µs per player response
  (clemcore), wall and CPU, and per episode.

The peers are not parley dependencies: the benchmark makes a virtual environment for each under
a cache folder (``$PARLEY_BENCH_CACHE`` or ``~/.cache/parley-bench/peers``) and pip-installs the
pinned versions there on first use. Everything stays on loopback. Prints a table with ratios and
writes benchmarks/results/peers.json (or ``--json PATH``).

    python benchmarks/peers.py                   # sizes 200,1000,2000, 2 repeats each
    python benchmarks/peers.py --quick           # 200 only, 1 repeat, shorter long game
    python benchmarks/peers.py --only single --sizes 1000 --repeats 3
    # The long game by instructions and first-level cache misses, steady on a busy machine
    # (after a plain run installed the peers): each driver's timed part is dump 2 of its
    # process, cg.<pid>.2 (each row prints its pid); the summary line has the totals
    valgrind --tool=callgrind --trace-children=yes --cache-sim=yes --dump-before=os_getppid \
        --callgrind-out-file=cg.%p python benchmarks/peers.py --only long --repeats 1 \
        --long-episodes 150 --marks
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import psutil
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from precompile import compile_parley  # noqa: E402

from parley.agents.backends.simserver import SimServerProcess  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
CACHE = Path(
    os.environ.get("PARLEY_BENCH_CACHE", Path.home() / ".cache" / "parley-bench" / "peers")
)
# The versions measured; change them here to measure others (the venv is rebuilt).
PINS: dict[str, list[str]] = {
    "inspect": ["inspect-ai==0.3.285", "openai==3.54.0"],
    "clemcore": ["clemcore==3.7.2"],
}
REPLY = "Answer: first"


# --- the peers' virtual environments ---------------------------------------------------------


def peer_python(name: str) -> Path:
    """The interpreter of peer ``name``'s venv, created and installed on first use."""
    venv = CACHE / name
    python = venv / "bin" / "python"
    marker = venv / ".parley-pins"
    wanted = "\n".join(PINS[name])
    if python.exists() and marker.exists() and marker.read_text() == wanted:
        return python
    print(f"installing {', '.join(PINS[name])} into {venv} (once) …", file=sys.stderr)
    venv.parent.mkdir(parents=True, exist_ok=True)
    try:
        if not python.exists():
            subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run(
            [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", *PINS[name]],
            check=True,
        )
    except (OSError, subprocess.CalledProcessError) as exc:
        raise SystemExit(
            f"peers.py: could not install {', '.join(PINS[name])} into {venv} ({exc}); "
            "install them there by hand, or run with --only to skip this peer's workload"
        ) from None
    marker.write_text(wanted)
    return python


# --- watching the sim server -----------------------------------------------------------------


class Watch:
    """Samples the sim server's counters every 50 ms while one command runs."""

    def __init__(self, sim: SimServerProcess, target: int) -> None:
        self.sim = sim
        self.target = target
        self.samples: list[tuple[float, int, int]] = []  # (time, requests, in flight)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(Exception):
                stats = self.sim.stats()
                self.samples.append(
                    (time.monotonic(), int(stats.get("requests", 0)), int(stats["in_flight"]))
                )
            self._stop.wait(0.05)

    def __enter__(self) -> Watch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def run_watched(
    command: list[str], sim: SimServerProcess, n: int, env: dict[str, str] | None = None
) -> dict[str, Any]:
    """Run ``command`` against a freshly reset sim server; the server's figures for it."""
    sim.reset()
    cpu0 = _children_cpu()
    start = time.monotonic()
    with Watch(sim, n) as watch:
        done = subprocess.run(
            command, env={**os.environ, **(env or {})}, capture_output=True, text=True, check=False
        )
    wall = time.monotonic() - start
    # The active window: from the arrival of the request that makes 1 % of N (parley's pre-run
    # check of the model sends one request first) to the last reply, timed by the server.
    floor = max(2, n // 100)
    stats = sim.stats(window_from=floor)
    samples = watch.samples or [(start, 0, 0)]
    requests = int(stats.get("requests", 0))
    timed = stats.get("window") or {}
    # The same window from the 50 ms samples (the figure before the server timed it).
    opened = next((s for s in samples if s[1] >= floor), samples[0])
    last = next((s[0] for s in samples if s[1] >= requests and s[2] == 0), samples[-1][0])
    sampled = max(1e-3, last - opened[0])
    served = requests - (opened[1] - opened[2])  # those not answered when the window opened
    window = max(1e-3, float(timed.get("seconds") or sampled))
    full = next((s[0] for s in samples if s[2] >= 0.99 * n), None)
    first = opened[0]
    return {
        "ok": done.returncode == 0,
        "returncode": done.returncode,
        "error": "" if done.returncode == 0 else (done.stderr or done.stdout)[-800:],
        "requests": requests,
        "wall_s": round(wall, 2),
        "active_s": round(window, 3),
        "requests_per_s": round(int(timed.get("requests") or served) / window, 1),
        "requests_per_s_sampled": round(served / sampled, 1),
        "peak_in_flight": int(stats.get("peak_in_flight", 0)),
        "all_in_flight_after_s": round(full - start, 2) if full is not None else None,
        "first_request_after_s": round(first - start, 2),
        "cpu_s": round(_children_cpu() - cpu0, 2),
    }


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


# --- single-turn: parley ---------------------------------------------------------------------


def parley_single(folder: Path, url: str, n: int) -> list[str]:
    config = {
        "name": "peers-single",
        "concurrency": n,
        "workers": "auto",
        "tracing": {"enabled": False},
        "state": {"publish": "off"},
        "models": {
            "sim": {
                "model": "sim",
                "base_url": url,
                "images": False,
                "transport": "direct",
                "timeout_s": 120,
                "concurrency": {"start": 4096, "min": 64, "max": 4096},
            }
        },
        "games": [
            {
                "game": "clem.reference",
                "seeds": {"count": n},
                "settings": {"variant": "text", "set": "grids_letters"},
                "pairings": [{"describer": "scripted", "guesser": "sim"}],
            }
        ],
    }
    path = folder / "parley.yaml"
    path.write_text(yaml.safe_dump(config))
    parley = shutil.which("parley", path=str(Path(sys.executable).parent)) or "parley"
    return [parley, "run", str(path), "--out", str(folder / "run"), "--quiet", "--no-report"]


# --- single-turn: Inspect AI -----------------------------------------------------------------

INSPECT_DRIVER = """
import sys
from inspect_ai import Task, eval
from inspect_ai.dataset import Sample
from inspect_ai.scorer import includes
from inspect_ai.solver import generate

n, logs = int(sys.argv[1]), sys.argv[2]
task = Task(
    dataset=[Sample(input=f"Which is the target, first, second or third? ({i})", target="first")
             for i in range(n)],
    solver=generate(),
    scorer=includes(),
)
log = eval(task, model="openai-api/sim/sim", max_connections=n, log_dir=logs,
           display="none", max_retries=0, timeout=120)[0]
print(log.status, len(log.samples or []))
sys.exit(0 if log.status == "success" else 1)
"""


def inspect_single(folder: Path, url: str, n: int) -> tuple[list[str], dict[str, str]]:
    driver = folder / "inspect_driver.py"
    driver.write_text(textwrap.dedent(INSPECT_DRIVER))
    env = {"SIM_API_KEY": "unused", "SIM_BASE_URL": url, "INSPECT_LOG_LEVEL": "warning"}
    return [str(peer_python("inspect")), str(driver), str(n), str(folder / "logs")], env


def single_turn(args: argparse.Namespace) -> list[dict[str, Any]]:
    sim_config = {
        "latency": {"ttft_s": args.latency, "tokens_per_s": 0, "max_seqs": 100_000},
        "replies": {"text": REPLY},
    }
    rows: list[dict[str, Any]] = []
    with SimServerProcess(sim_config) as sim:
        for n in args.sizes:
            for repeat in range(args.repeats):
                for who in ("parley", "inspect"):
                    folder = Path(tempfile.mkdtemp(prefix=f"parley-peers-{who}-"))
                    try:
                        if who == "parley":
                            command, env = parley_single(folder, sim.openai_url, n), {}
                        else:
                            command, env = inspect_single(folder, sim.openai_url, n)
                        figures = run_watched(command, sim, n, env)
                    finally:
                        shutil.rmtree(folder, ignore_errors=True)
                    row = {"workload": "single", "who": who, "n": n, "repeat": repeat, **figures}
                    rows.append(row)
                    print(
                        f"  single N={n} #{repeat} {who:8} {figures['requests_per_s']:>8} req/s "
                        f"(sampled {figures['requests_per_s_sampled']}, window "
                        f"{figures['active_s']} s) wall {figures['wall_s']} s "
                        f"peak {figures['peak_in_flight']}"
                        + ("" if figures["ok"] else f"  FAILED: {figures['error'][-200:]}"),
                        file=sys.stderr,
                    )
    return rows


# --- scripted long game ----------------------------------------------------------------------

# clembench's games are not on PyPI (pip gives clemcore, the framework, only; the games live in
# the clembench repository), so the clemcore side is a game written here on clemcore's own
# DialogueGameMaster: two programmatic players (clemcore's CustomResponseModel, what ``-m mock``
# resolves to) count in turns until the episode's turn limit. Its episode is as long as
# parley's (the same number of responses). It is measured twice:
# * ``clem run``: the game laid out as a clemgame (clemgame.json, master.py with its
#   GameBenchmark, in/instances.json) and played by ``clemcore.cli.run``, what ``clem run -g
#   count -m mock mock`` calls: clemcore's runner and its per-episode records on disk
#   (instance.json, interactions.json, the players' requests), as a researcher runs it;
# * ``loop only``: the same game master stepped by hand with clemcore's interactions recorder
#   and its record serialised but not written: clemcore's game loop without its runner.
CLEM_GAME = """
from clemcore.clemgame.benchmark import GameBenchmark
from clemcore.clemgame.errors import ParseError
from clemcore.clemgame.master import DialogueGameMaster
from clemcore.clemgame.player import Player


class Counter(Player):
    def _custom_response(self, context):
        return f"NUMBER: {int(context['content'].rsplit(' ', 1)[-1]) + 1}"


class CountGame(DialogueGameMaster):
    def _on_setup(self, **instance):
        self.limit = instance["turns"]
        self.a = Counter(self.player_models[0])
        self.b = Counter(self.player_models[1])
        self.add_player(self.a, initial_context="Count on from the number I give you. Start: 0")
        self.add_player(self.b)

    def _parse_response(self, player, response):
        if not response.startswith("NUMBER: "):
            raise ParseError(reason="no NUMBER:", response=response)
        return response[len("NUMBER: "):]

    def _advance_game(self, player, parsed):
        other = self.b if player is self.a else self.a
        self.set_context_for(other, f"Your partner said {parsed}. Next after {parsed}")
        if int(parsed) >= self.limit:
            self.state.succeed()

    def compute_turn_score(self):
        return 1

    def compute_episode_score(self):
        return 1


class CountBenchmark(GameBenchmark):
    def create_game_master(self, experiment, player_models):
        return CountGame(self.game_spec, experiment, player_models)
"""

CLEM_DRIVER = """
import json, os, sys, tempfile, time
from pathlib import Path

mode, episodes, turns = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
root = Path(tempfile.mkdtemp(prefix="parley-peers-clem-"))
game = root / "count"
(game / "in").mkdir(parents=True)
(game / "master.py").write_text(GAME)
meta = {"game_name": "count", "game_path": str(game), "description": "count in turns",
        "main_game": "count", "players": 2, "image": "none", "languages": ["en"]}
(game / "clemgame.json").write_text(json.dumps(meta))
instances = [{"game_id": i, "turns": turns} for i in range(episodes)]
(game / "in" / "instances.json").write_text(
    json.dumps({"experiments": [{"name": "count", "game_instances": instances}]}))
os.chdir(root)
from clemcore import backends, cli
from clemcore.clemgame.benchmark import GameBenchmark
from clemcore.clemgame.recorder import GameInteractionsRecorder
from clemcore.clemgame.registry import GameSpec

spec = GameSpec.from_dict(meta)
mock = [backends.ModelSpec(model_name="mock"), backends.ModelSpec(model_name="mock")]
# --marks: os.getppid() around each timed part, which callgrind dumps before (a dump each)
mark = os.getppid if os.environ.get("PARLEY_BENCH_MARKS") == "1" else (lambda: 0)
if mode == "clem-run":
    mark()
    start, cpu = time.perf_counter(), time.process_time()
    cli.run(spec, mock, gen_args={"temperature": 0.0, "max_tokens": 100},
            results_dir_path=root / "results")
    seconds, cpu_s = time.perf_counter() - start, time.process_time() - cpu
    mark()
    records = [json.loads(p.read_text()) for p in (root / "results").rglob("interactions.json")]
    responses = sum(e["action"]["type"] == "get message" for r in records
                    for turn in r["turns"] for e in turn)
    done = len(records)
else:
    benchmark = GameBenchmark.load_from_spec(spec)
    models = backends.load_models(mock, {"temperature": 0.0, "max_tokens": 100})
    responses = done = 0
    mark()
    start, cpu = time.perf_counter(), time.process_time()
    for game_id in range(episodes):
        gm = benchmark.create_game_master({"name": "count"}, models)
        gm.setup(turns=turns, game_id=game_id)
        recorder = GameInteractionsRecorder("count", "count", game_id, ".", {})
        for p in gm.get_players():
            recorder.log_player(p.name, p.game_role, p.model.name)
        gm.register(recorder)
        gm.before_game()
        over = False
        while not over:
            player = gm.current_player
            over, _ = gm.step(player(gm.get_context_for(player)))
            responses += 1
        json.dumps(recorder.interactions)
        done += 1
    seconds, cpu_s = time.perf_counter() - start, time.process_time() - cpu
    mark()
print(json.dumps({"episodes": done, "turns": responses, "seconds": seconds, "cpu_s": cpu_s,
                  "pid": os.getpid()}))
"""

# parley's side, in one process on the local bus, tracing and state publishing off, one episode
# at a time as clemcore plays them (``--long-concurrency`` for more at once), scripted players,
# timed from the run's start to its end, imports excluded as on clemcore's side. Two games:
# ``bench.count``, the counting game above written on parley's GameMaster and registered here as
# a plugin would (a game as trivial as clemcore's: what is left is the runtime's per-turn cost),
# and ``comma.memory`` (``--long-game``; five stages, 19 turns an episode, the longest scripted
# COMMA episode: a real game's logic on top).
PARLEY_LONG = """
import json, os, sys, tempfile, time
from pathlib import Path
from parley import event_loop
from parley.environments.base import GameMaster, Observation
from parley.environments.registry import GameInfo, all_games, get, register
from parley.runtime.config import load_config
from parley.runtime.scheduler import run_experiment


class CountMaster(GameMaster):
    # Two roles count in turns, each told the number its partner said, until the turn limit;
    # one utterance per turn goes into the transcript (clemcore's recorder logs as much).
    roles = ("a", "b")

    def __init__(self, instance, settings=None):
        super().__init__(instance, settings)
        self.last, self.limit, self.who = 0, int(self.settings["turns"]), "a"

    def system_prompt(self, role):
        return "Count on from the number I give you."

    def whose_turn(self):
        return self.who

    def observe(self, role):
        return Observation(text=f"Next after {self.last}", data={"last": self.last})

    def handle_reply(self, role, text):
        if not text.startswith("NUMBER: "):
            self.violation(role, "no NUMBER:")
            return
        self.last = int(text[len("NUMBER: "):])
        self.who = "b" if role == "a" else "a"
        self.say(role, self.who, str(self.last))
        if self.last >= self.limit:
            self.end("success", "counted to the limit")

    def scores(self):
        return {"main": 100.0 if self.outcome == "success" else 0.0}


def count(view, rng):
    return f"NUMBER: {view.data['last'] + 1}"


episodes, concurrency, game, turns = map(str, sys.argv[1:5])
register(GameInfo(name="bench.count", family="bench", roles=("a", "b"), game_master=CountMaster,
                  instance=lambda seed, settings: {"seed": seed},
                  players={"a": {"scripted": count}, "b": {"scripted": count}},
                  text_only=True, default_settings={"turns": 19, "variant": "text"}))
settings = {"variant": "text", **({"turns": int(turns)} if game == "bench.count" else {})}
config = load_config({
    "name": "peers-long", "concurrency": int(concurrency), "workers": 1,
    "tracing": {"enabled": False}, "state": {"publish": "off"},
    "games": [{"game": game, "seeds": {"count": int(episodes)}, "settings": settings,
               "pairings": [{role: "scripted" for role in get(game).roles}]}],
})
out = Path(tempfile.mkdtemp(prefix="parley-peers-long-"))
all_games()  # the games imported before the clock starts, as clemcore's game is
# --marks: os.getppid() around the timed part, which callgrind dumps before (a dump each)
mark = os.getppid if os.environ.get("PARLEY_BENCH_MARKS") == "1" else (lambda: 0)
mark()
start, cpu = time.perf_counter(), time.process_time()
outcome = event_loop.run(run_experiment(config, out / "run"))
seconds, cpu_s = time.perf_counter() - start, time.process_time() - cpu
mark()
print(json.dumps({"episodes": len(outcome.records), "turns": sum(r["turns"] for r in outcome.records),
                  "seconds": seconds, "cpu_s": cpu_s, "pid": os.getpid(),
                  "won": sum(r["outcome"] == "success" for r in outcome.records)}))
"""


def _driver(python: Path | str, source: str, *argv: object) -> dict[str, Any]:
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(textwrap.dedent(source))
    try:
        done = subprocess.run(
            [str(python), f.name, *map(str, argv)],
            capture_output=True,
            text=True,
            check=False,
            cwd=tempfile.gettempdir(),
        )
    finally:
        os.unlink(f.name)
    if done.returncode != 0:
        raise RuntimeError(f"{python} {source.split(chr(10))[1]}…: {done.stderr[-1500:]}")
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def long_game(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Per repeat: parley on ``--long-game`` (which sets the episode length), parley on the
    counting game and clemcore on its counting game, both as long."""
    clem = peer_python("clemcore")
    rows: list[dict[str, Any]] = []
    turns_per_episode = 0
    for repeat in range(args.repeats):
        for who, game in (
            ("parley", args.long_game),
            ("parley", "bench.count"),
            ("clemcore", "clem-run"),
            ("clemcore", "loop-only"),
        ):
            if who == "parley":
                figures = _driver(
                    sys.executable,
                    PARLEY_LONG,
                    args.long_episodes,
                    args.long_concurrency,
                    game,
                    turns_per_episode or 19,
                )
                if game == args.long_game:
                    turns_per_episode = round(figures["turns"] / max(1, figures["episodes"]))
            else:
                source = f"GAME = {CLEM_GAME!r}\n" + textwrap.dedent(CLEM_DRIVER)
                figures = _driver(clem, source, game, args.long_episodes, turns_per_episode)
            row = {
                "workload": "long",
                "who": who,
                "repeat": repeat,
                "game": game,
                **figures,
                "us_per_turn": round(1e6 * figures["seconds"] / max(1, figures["turns"]), 1),
                "cpu_us_per_turn": round(1e6 * figures["cpu_s"] / max(1, figures["turns"]), 1),
                "us_per_episode": round(1e6 * figures["seconds"] / max(1, figures["episodes"]), 1),
            }
            rows.append(row)
            print(
                f"  long #{repeat} {who:8} {game[:14]:14} {row['us_per_turn']} µs/turn, "
                f"{row['cpu_us_per_turn']} CPU µs/turn, {row['us_per_episode']} µs/episode "
                f"({figures['turns']} turns, pid {figures['pid']})",
                file=sys.stderr,
            )
    return rows


# --- the table -------------------------------------------------------------------------------


def summarise(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One line per workload and size: parley's and the peer's medians and their ratio."""
    out: list[dict[str, Any]] = []
    groups: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault((row["workload"], row.get("n", 0)), []).append(row)
    for (workload, n), group in groups.items():
        if workload == "single":
            for key, better in (
                ("requests_per_s", "higher"),
                ("wall_s", "lower"),
                ("peak_in_flight", "higher"),
                ("all_in_flight_after_s", "lower"),
            ):
                mine = [r[key] for r in group if r["who"] == "parley" and r[key] is not None]
                theirs = [r[key] for r in group if r["who"] != "parley" and r[key] is not None]
                out.append(_line(f"N={n:,} {key}", mine, theirs, "Inspect AI", better))
        else:
            # One block per parley game (the counting game first: like for like), each against
            # clemcore's counting game as ``clem run`` plays it and as its bare loop.
            games = sorted({r["game"] for r in group if r["who"] == "parley"}, key=_count_first)
            for game in games:
                for key in ("us_per_turn", "cpu_us_per_turn", "us_per_episode"):
                    mine = [r[key] for r in group if r["who"] == "parley" and r["game"] == game]
                    for variant, peer in CLEM_VARIANTS.items():
                        theirs = [r[key] for r in group if r["game"] == variant]
                        out.append(_line(f"long {game} {key}", mine, theirs, peer, "lower"))
    return out


CLEM_VARIANTS = {"clem-run": "clem run, count", "loop-only": "clemcore loop only"}

# Issue 20's targets among this benchmark's lines: measure -> (its peer, the advantage needed).
# The per-turn target compares like for like: the counting game against ``clem run``'s.
TARGETS = {
    "N=200 requests_per_s": ("Inspect AI", 1.0),
    "N=1,000 requests_per_s": ("Inspect AI", 1.5),
    "N=2,000 requests_per_s": ("Inspect AI", 1.5),
    "long bench.count us_per_turn": (CLEM_VARIANTS["clem-run"], 1.0),
}


def against_targets(summary: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each of issue 20's targets this run measured: the advantage it needs, the one measured,
    and whether it is met (a line without a figure is not)."""
    out = []
    for line in summary:
        peer, needs = TARGETS.get(line["measure"], (None, 0.0))
        if peer is None or line["peer"] != peer:
            continue
        got = line["advantage"]
        out.append(
            {
                "measure": line["measure"],
                "peer": peer,
                "needs": needs,
                "advantage": got,
                "met": got is not None and got >= needs,
            }
        )
    return out


def _count_first(game: str) -> tuple[bool, str]:
    return (game != "bench.count", game)


def _line(name: str, mine: list[float], theirs: list[float], peer: str, better: str) -> dict:
    a = statistics.median(mine) if mine else None
    b = statistics.median(theirs) if theirs else None
    ratio = None
    if a and b:
        ratio = round(a / b if better == "higher" else b / a, 2)
    return {
        "measure": name,
        "parley": a,
        "parley_range": [min(mine), max(mine)] if mine else None,
        "peer": peer,
        "peer_value": b,
        "peer_range": [min(theirs), max(theirs)] if theirs else None,
        "advantage": ratio,  # > 1: parley ahead
        "better": better,
    }


def print_table(summary: list[dict[str, Any]]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="parley beside its peers (median of repeats; advantage > 1: parley ahead)")
    for column in ("measure", "parley", "peer", "peer value", "advantage"):
        table.add_column(column, justify="left" if column in ("measure", "peer") else "right")
    for line in summary:
        table.add_row(
            line["measure"],
            _fmt(line["parley"], line["parley_range"]),
            line["peer"],
            _fmt(line["peer_value"], line["peer_range"]),
            "—" if line["advantage"] is None else f"{line['advantage']:.2f}×",
        )
    Console().print(table)
    targets = Table(title="issue 20's targets (advantage needed against the peer)")
    for column in ("measure", "peer", "needs", "advantage", "met"):
        targets.add_column(column, justify="left" if column in ("measure", "peer") else "right")
    for target in against_targets(summary):
        got = target["advantage"]
        targets.add_row(
            target["measure"],
            target["peer"],
            f"{target['needs']:.1f}×",
            "—" if got is None else f"{got:.2f}×",
            "yes" if target["met"] else "no",
        )
    Console().print(targets)


def _fmt(value: float | None, span: list[float] | None) -> str:
    if value is None:
        return "—"
    text = f"{value:,.1f}" if isinstance(value, float) else f"{value:,}"
    if span and span[0] != span[1]:
        text += f" ({span[0]:,.4g}–{span[1]:,.4g})"
    return text


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="200,1000,2000", help="single-turn sizes N")
    parser.add_argument("--repeats", type=int, default=2, help="A,B pairs per size")
    parser.add_argument("--latency", type=float, default=1.0, help="seconds per sim reply")
    parser.add_argument("--only", choices=["single", "long"], help="one workload only")
    parser.add_argument("--long-episodes", type=int, default=1000, help="long game: episodes")
    parser.add_argument(
        "--long-concurrency", type=int, default=1, help="long game: parley episodes at once"
    )
    parser.add_argument("--long-game", default="comma.memory", help="long game: parley's game")
    parser.add_argument("--quick", action="store_true", help="N=200, 1 repeat, short long game")
    parser.add_argument("--json", type=Path, default=RESULTS / "peers.json", help="output JSON")
    parser.add_argument(
        "--marks",
        action="store_true",
        help="long game: each driver calls os.getppid() around its timed part (callgrind)",
    )
    args = parser.parse_args()
    compiled = compile_parley()  # the peers' modules were compiled by pip (precompile.py)
    if args.marks:
        os.environ["PARLEY_BENCH_MARKS"] = "1"  # the drivers' processes inherit it
    if args.quick:
        args.sizes, args.repeats, args.long_episodes = "200", 1, 200
    args.sizes = [int(x) for x in str(args.sizes).split(",") if x]
    rows: list[dict[str, Any]] = []
    if args.only in (None, "single"):
        rows += single_turn(args)
    if args.only in (None, "long"):
        rows += long_game(args)
    summary = summarise(rows)
    print_table(summary)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    payload = {
        "finished_at": time.strftime("%Y-%m-%d %H:%M:%S"),
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "load_average_1m_after": round(os.getloadavg()[0], 2),
            "memory_gb": round(psutil.virtual_memory().total / 2**30, 1),
        },
        "parley_modules_compiled_first": compiled,
        "pins": PINS,
        "latency_s": args.latency,
        "summary": summary,
        "targets": against_targets(summary),
        "runs": rows,
    }
    args.json.write_text(json.dumps(payload, indent=2) + "\n")
    print(f"wrote {args.json}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
