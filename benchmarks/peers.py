"""parley beside the frameworks a researcher would use instead, on one machine, in one window.

Three workloads, each side in turn per repeat (``--repeats``), every side run as its users run
it (``SIDES`` below says how):

* **Single-turn, model-played**: N one-request episodes against ONE stand-in model server
  (``parley sim-server``, every reply after ``--latency`` seconds, no batch limit), at
  N = 200, 1,000, 2,000 and 5,000. parley plays N ``clem.reference`` episodes (the guesser a
  model on the sim server, the describer scripted); Inspect AI N single-turn samples through
  its OpenAI-compatible provider (``openai-api/sim/sim``).
* **Multi-turn, model-played**: 500 episodes of 5 model turns each (``--multi-episodes``,
  ``--multi-turns``): parley's ``bench.turns`` (a plugin written here: one model role asked 5
  times), Inspect AI's samples with a solver that generates 5 times.

  Both model-played workloads are measured by the same counters, the sim server's
  ``/sim/stats``: requests/s over the active window (from the arrival of the request that
  makes 1 % of N to the last reply, timed by the server), peak requests in flight, seconds
  until 99 % of N were in flight, the wall time of the whole command, and its CPU per request
  (the command's processes, the sim server excluded).
* **Scripted long game, no model**: the runtime's own cost per turn. clembench's games are not
  on PyPI, so clemcore plays a counting game written here on its ``DialogueGameMaster`` with
  its programmatic (``mock``) players, played by ``clemcore.cli.run`` (what ``clem run``
  calls: its runner, its records on disk) and stepped by hand (its game loop alone); parley
  plays the same counting game on its ``GameMaster`` (``bench.count``) with scripted players,
  at each episode length of ``--long-turns`` (19 and 100), and ``comma.memory`` (a real
  game's logic on top). Reported: µs and CPU µs per turn, and per episode.

The peers are not parley dependencies: the benchmark makes a virtual environment for each under
a cache folder (``$PARLEY_BENCH_CACHE`` or ``~/.cache/parley-bench/peers``) and pip-installs the
pinned versions there on first use. Everything stays on loopback. Prints a table with ratios and
the targets, and writes benchmarks/results/peers.json (or ``--json PATH``).

    python benchmarks/peers.py                   # everything, 2 repeats
    python benchmarks/peers.py --quick           # N = 200, 100 × 5 turns, 1 repeat
    python benchmarks/peers.py --only model --sizes 2000 --repeats 3 --sides parley,inspect
    python benchmarks/peers.py --only long --long-turns 100
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


# --- model-played: the sides ----------------------------------------------------------------

# Each model-played workload is run by four sides, as their users would run them:
# * ``parley``: a config that says what to play and where the model is, and ``concurrency: N``
#   (episodes at once, the one knob a user sets to run N at once); everything else at its
#   default: tracing on, state published, ``transport: auto`` (direct to a self-hosted server
#   such as the stand-in), one process, the report written;
# * ``parley-tuned``: the same with tracing and state publishing off, ``transport: direct``,
#   ``workers: auto``, no report;
# * ``inspect``: Inspect AI with ``max_connections=N`` and its OpenAI client's HTTP pool raised
#   to N (the provider takes an ``http_client``): what its docs say to do for N at once;
# * ``inspect-defaults``: Inspect AI as it comes (adaptive connections, its default pool).
SIDES = ("parley", "parley-tuned", "inspect", "inspect-defaults")

# The game of the multi-turn workload, a plugin module (PARLEY_PLUGINS) written here: one model
# role asked ``turns`` times, each reply taken, the episode a success after the last.
TURNS_GAME = """
from parley.environments.base import GameMaster, Observation
from parley.environments.registry import GameInfo, register


class TurnsMaster(GameMaster):
    roles = ("player",)

    def __init__(self, instance, settings=None):
        super().__init__(instance, settings)
        self.asked, self.limit = 0, int(self.settings["turns"])

    def system_prompt(self, role):
        return "Answer each question with one word."

    def whose_turn(self):
        return "player"

    def observe(self, role):
        return Observation(text=f"Which is the target, first, second or third? ({self.asked})")

    def handle_reply(self, role, text):
        self.asked += 1
        if self.asked >= self.limit:
            self.end("success", "asked every turn")

    def scores(self):
        return {"main": 100.0 if self.outcome == "success" else 0.0}


register(GameInfo(name="bench.turns", family="bench", roles=("player",),
                  game_master=TurnsMaster, instance=lambda seed, settings: {"seed": seed},
                  players={"player": {"scripted": lambda view, rng: "first"}},
                  text_only=True, default_settings={"turns": 5, "variant": "text"}))
"""


def parley_config(url: str, n: int, turns: int, tuned: bool) -> dict[str, Any]:
    """The config of a model-played run: ``clem.reference`` (one request an episode) when
    ``turns`` is 1, else ``bench.turns`` of ``turns`` requests."""
    if turns == 1:
        game = {
            "game": "clem.reference",
            "seeds": {"count": n},
            "settings": {"variant": "text", "set": "grids_letters"},
            "pairings": [{"describer": "scripted", "guesser": "sim"}],
        }
    else:
        game = {
            "game": "bench.turns",
            "seeds": {"count": n},
            "settings": {"turns": turns},
            "pairings": [{"player": "sim"}],
        }
    config: dict[str, Any] = {
        "name": "peers",
        "concurrency": n,
        "models": {"sim": {"model": "sim", "base_url": url, "images": False}},
        "games": [game],
    }
    if tuned:
        config |= {"workers": "auto", "tracing": {"enabled": False}, "state": {"publish": "off"}}
        config["models"]["sim"] |= {"transport": "direct", "timeout_s": 120}
    return config


def parley_side(
    folder: Path, url: str, n: int, turns: int, tuned: bool
) -> tuple[list[str], dict[str, str]]:
    path = folder / "parley.yaml"
    path.write_text(yaml.safe_dump(parley_config(url, n, turns, tuned)))
    (folder / "peer_turns.py").write_text(textwrap.dedent(TURNS_GAME))
    env = {
        "PARLEY_PLUGINS": "peer_turns",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(folder), os.environ.get("PYTHONPATH")])),
    }
    parley = shutil.which("parley", path=str(Path(sys.executable).parent)) or "parley"
    command = [parley, "run", str(path), "--out", str(folder / "run")]
    return command + (["--quiet", "--no-report"] if tuned else []), env


INSPECT_DRIVER = """
import sys
from inspect_ai import Task, eval
from inspect_ai.dataset import Sample
from inspect_ai.model import ChatMessageUser, get_model
from inspect_ai.scorer import includes
from inspect_ai.solver import solver

n, turns, logs, raised = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4] == "raised"


@solver
def ask(turns):
    async def solve(state, generate):
        for turn in range(turns):
            if turn:
                state.messages.append(ChatMessageUser(
                    content=f"Which is the target, first, second or third? ({turn})"))
            state = await generate(state)
        return state
    return solve


task = Task(
    dataset=[Sample(input=f"Which is the target, first, second or third? ({i})", target="first")
             for i in range(n)],
    solver=ask(turns),
    scorer=includes(),
)
options = {}
if raised:
    import httpx2
    from openai import DefaultAsyncHttpxClient

    pool = httpx2.Limits(max_connections=n + 16, max_keepalive_connections=n + 16)
    client = DefaultAsyncHttpxClient(limits=pool, timeout=httpx2.Timeout(120.0, connect=10.0))
    options = {"max_connections": n}
    model = get_model("openai-api/sim/sim", http_client=client)
else:
    model = get_model("openai-api/sim/sim")
log = eval(task, model=model, log_dir=logs, display="none", max_retries=0, timeout=120,
           **options)[0]
print(log.status, len(log.samples or []))
sys.exit(0 if log.status == "success" else 1)
"""


def inspect_side(
    folder: Path, url: str, n: int, turns: int, raised: bool
) -> tuple[list[str], dict[str, str]]:
    driver = folder / "inspect_driver.py"
    driver.write_text(textwrap.dedent(INSPECT_DRIVER))
    env = {"SIM_API_KEY": "unused", "SIM_BASE_URL": url, "INSPECT_LOG_LEVEL": "warning"}
    how = "raised" if raised else "defaults"
    command = [str(peer_python("inspect")), str(driver), str(n), str(turns), str(folder / "logs")]
    return [*command, how], env


def side_command(
    who: str, folder: Path, url: str, n: int, turns: int
) -> tuple[list[str], dict[str, str]]:
    if who.startswith("parley"):
        return parley_side(folder, url, n, turns, tuned=who == "parley-tuned")
    return inspect_side(folder, url, n, turns, raised=who == "inspect")


def model_played(args: argparse.Namespace) -> list[dict[str, Any]]:
    """The single-turn sizes, then the multi-turn workload, each side in turn per repeat."""
    sim_config = {
        "latency": {"ttft_s": args.latency, "tokens_per_s": 0, "max_seqs": 100_000},
        "replies": {"text": REPLY},
    }
    plan = [("single", n, 1) for n in args.sizes]
    if args.multi_episodes:
        plan.append(("multi", args.multi_episodes, args.multi_turns))
    sides = [s for s in SIDES if s in args.sides]
    rows: list[dict[str, Any]] = []
    with SimServerProcess(sim_config) as sim:
        for workload, n, turns in plan:
            for repeat in range(args.repeats):
                for who in sides:
                    folder = Path(tempfile.mkdtemp(prefix=f"parley-peers-{who}-"))
                    try:
                        command, env = side_command(who, folder, sim.openai_url, n, turns)
                        figures = run_watched(command, sim, n, env)
                    finally:
                        shutil.rmtree(folder, ignore_errors=True)
                    figures["cpu_ms_per_request"] = round(
                        1e3 * figures["cpu_s"] / max(1, figures["requests"]), 3
                    )
                    row = {"workload": workload, "who": who, "n": n, "turns": turns}
                    rows.append({**row, "repeat": repeat, **figures})
                    print(
                        f"  {workload} N={n}×{turns} #{repeat} {who:16} "
                        f"{figures['requests_per_s']:>8} req/s (window {figures['active_s']} s) "
                        f"wall {figures['wall_s']} s peak {figures['peak_in_flight']} "
                        f"CPU {figures['cpu_ms_per_request']} ms/request"
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
print(json.dumps({"episodes": len(outcome.records), "turns": sum(r.turns for r in outcome.records),
                  "seconds": seconds, "cpu_s": cpu_s, "pid": os.getpid(),
                  "won": sum(r.outcome == "success" for r in outcome.records)}))
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
    """Per repeat: parley on ``--long-game`` (a real game's logic, its own length), then per
    length of ``--long-turns``: parley on the counting game and clemcore on its counting game,
    both that long, with as many episodes as make about as many turns in all."""
    clem = peer_python("clemcore")
    rows: list[dict[str, Any]] = []
    for repeat in range(args.repeats):
        plan: list[tuple[str, str, int]] = [("parley", args.long_game, 0)]
        for length in args.long_turns:
            plan += [(who, game, length) for who, game in LONG_SIDES]
        for who, game, length in plan:
            episodes = max(1, round(args.long_episodes * 19 / length)) if length else 0
            if who == "parley":
                figures = _driver(
                    sys.executable,
                    PARLEY_LONG,
                    episodes or args.long_episodes,
                    args.long_concurrency,
                    game,
                    length or 19,
                )
            else:
                source = f"GAME = {CLEM_GAME!r}\n" + textwrap.dedent(CLEM_DRIVER)
                figures = _driver(clem, source, game, episodes, length)
            per_episode = round(figures["turns"] / max(1, figures["episodes"]))
            row = {
                "workload": "long",
                "who": who,
                "repeat": repeat,
                "game": game,
                "length": length or per_episode,
                **figures,
                "us_per_turn": round(1e6 * figures["seconds"] / max(1, figures["turns"]), 1),
                "cpu_us_per_turn": round(1e6 * figures["cpu_s"] / max(1, figures["turns"]), 1),
                "us_per_episode": round(1e6 * figures["seconds"] / max(1, figures["episodes"]), 1),
            }
            rows.append(row)
            print(
                f"  long #{repeat} {who:8} {game[:14]:14} ×{row['length']} turns: "
                f"{row['us_per_turn']} µs/turn, {row['cpu_us_per_turn']} CPU µs/turn, "
                f"{row['us_per_episode']} µs/episode ({figures['turns']} turns, "
                f"pid {figures['pid']})",
                file=sys.stderr,
            )
    return rows


LONG_SIDES = (("parley", "bench.count"), ("clemcore", "clem-run"), ("clemcore", "loop-only"))
CLEM_VARIANTS = {"clem-run": "clem run, count", "loop-only": "clemcore loop only"}
PEER_NAMES = {
    "parley-tuned": "parley tuned",
    "inspect": "Inspect AI, pool raised",
    "inspect-defaults": "Inspect AI defaults",
}
# The model-played comparisons: (parley side, peer side); the first is the fair one.
PAIRS = (("parley", "inspect"), ("parley-tuned", "inspect"), ("parley", "inspect-defaults"))
MODEL_PLAYED = (
    ("requests_per_s", "higher"),
    ("cpu_ms_per_request", "lower"),
    ("wall_s", "lower"),
    ("peak_in_flight", "higher"),
    ("all_in_flight_after_s", "lower"),
)


# --- the table -------------------------------------------------------------------------------


def summarise(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One line per workload, size and measure: parley's and the peer's medians and their
    ratio."""
    out: list[dict[str, Any]] = []
    groups: dict[tuple[str, int, int], list[dict[str, Any]]] = {}
    for row in rows:
        size = row.get("length", 0) if row["workload"] == "long" else row["n"]
        groups.setdefault((row["workload"], size, row.get("turns", 0)), []).append(row)
    for (workload, size, turns), group in groups.items():
        if workload != "long":
            label = f"N={size:,}" if workload == "single" else f"{size:,}×{turns} turns"
            for key, better in MODEL_PLAYED:
                for mine_side, peer_side in PAIRS:
                    mine = _values(group, key, who=mine_side)
                    theirs = _values(group, key, who=peer_side)
                    if not mine and not theirs:
                        continue
                    name = f"{label} {key}" + ("" if mine_side == "parley" else " (tuned)")
                    out.append(_line(name, mine, theirs, PEER_NAMES[peer_side], better))
            continue
        for game in sorted({r["game"] for r in group if r["who"] == "parley"}, key=_count_first):
            for key in ("us_per_turn", "cpu_us_per_turn", "us_per_episode"):
                mine = _values(group, key, game=game)
                for variant, peer in CLEM_VARIANTS.items():
                    theirs = _values(group, key, game=variant)
                    if theirs:
                        out.append(_line(f"long ×{size} {game} {key}", mine, theirs, peer, "lower"))
    return out


def _values(group: list[dict[str, Any]], key: str, **match: str) -> list[float]:
    return [
        r[key]
        for r in group
        if all(r.get(k) == v for k, v in match.items()) and r.get(key) is not None
    ]


# The targets among this benchmark's lines: measure -> (its peer, the advantage needed). Each
# holds parley at its defaults to the peer as its docs say to run it; the per-turn one compares
# like for like, the counting game on 100-turn episodes against ``clem run``'s.
TARGETS = {
    "N=2,000 requests_per_s": (PEER_NAMES["inspect"], 1.2),
    "500×5 turns requests_per_s": (PEER_NAMES["inspect"], 3.0),
    "N=2,000 cpu_ms_per_request": (PEER_NAMES["inspect"], 1 / 0.3),
    "long ×100 bench.count cpu_us_per_turn": (CLEM_VARIANTS["clem-run"], 1.0),
}


def against_targets(summary: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each target this run measured: the advantage it needs, the one measured, and whether it
    is met (a line without a figure is not)."""
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
                "needs": round(needs, 2),
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
    targets = Table(title="targets: parley at its defaults (advantage needed against the peer)")
    for column in ("measure", "peer", "needs", "advantage", "met"):
        targets.add_column(column, justify="left" if column in ("measure", "peer") else "right")
    for target in against_targets(summary):
        got = target["advantage"]
        targets.add_row(
            target["measure"],
            target["peer"],
            f"{target['needs']:.2f}×",
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
    parser.add_argument("--sizes", default="200,1000,2000,5000", help="single-turn sizes N")
    parser.add_argument("--repeats", type=int, default=2, help="rounds of every side per size")
    parser.add_argument("--latency", type=float, default=1.0, help="seconds per sim reply")
    parser.add_argument("--only", choices=["model", "long"], help="one kind of workload only")
    parser.add_argument(
        "--sides", default=",".join(SIDES), help=f"model-played sides, of {', '.join(SIDES)}"
    )
    parser.add_argument(
        "--multi-episodes", type=int, default=500, help="multi-turn: episodes (0: none)"
    )
    parser.add_argument("--multi-turns", type=int, default=5, help="multi-turn: model turns")
    parser.add_argument(
        "--long-episodes", type=int, default=1000, help="long game: episodes of 19 turns"
    )
    parser.add_argument(
        "--long-turns", default="19,100", help="long game: episode lengths of the counting game"
    )
    parser.add_argument(
        "--long-concurrency", type=int, default=1, help="long game: parley episodes at once"
    )
    parser.add_argument("--long-game", default="comma.memory", help="long game: parley's game")
    parser.add_argument("--quick", action="store_true", help="N=200, 1 repeat, short workloads")
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
        args.sizes, args.repeats, args.long_episodes, args.multi_episodes = "200", 1, 200, 100
    args.sizes = [int(x) for x in str(args.sizes).split(",") if x]
    args.long_turns = [int(x) for x in str(args.long_turns).split(",") if x]
    args.sides = [s.strip() for s in str(args.sides).split(",") if s.strip()]
    unknown = sorted(set(args.sides) - set(SIDES))
    if unknown:
        parser.error(f"unknown sides {', '.join(unknown)}; the sides are {', '.join(SIDES)}")
    rows: list[dict[str, Any]] = []
    if args.only in (None, "model"):
        rows += model_played(args)
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
        "sides": args.sides,
        "summary": summary,
        "targets": against_targets(summary),
        "runs": rows,
    }
    args.json.write_text(json.dumps(payload, indent=2) + "\n")
    print(f"wrote {args.json}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
