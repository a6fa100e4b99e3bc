"""parley against the papers: every model-free number the four seed papers publish.

    python benchmarks/fidelity.py [--samples 2000] [--mango DATA_DIR]

Prints one table, parley vs paper, with n, SE and z for each number, and writes
benchmarks/results/fidelity.json. The rows:

- **clembench** (seed 000): the Reference game's random level (Table 4: 33.3, three pictures),
  played by parley's scripted describer and random guesser; EE-gr's graph similarity of a
  perfect reported map (100 by the formula) on the paper's map sizes, and the worst search
  the graph edit distance needed over reported graphs of the kinds models write.
- **COMMA** (seed 001): Table 1's random row, from ``comma_rows()`` in
  benchmarks/fidelity_comma.py when it is there.
- **MANGO** (seed 002): Table 6's statistics of the 70-step data (locations, edges, DF and RF
  easy/hard questions, summed over the 53 mazes, with how many mazes agree exactly), from the
  data folder (``--mango``, default ../shared/data/mango; skipped when absent).
- **LVLM-Playground** (seed 003): the Random rows of Tables 2-4 (perceiving, QA, rule
  following), ``--samples`` episodes per cell (the paper's 2,000), on parley's game masters.

z is (parley − target) / SE, where the target is the paper's number, or, for a difference that
docs/fidelity.md documents, the value parley expects (marked ``doc``). SE combines parley's
sampling error with the paper's where the paper's number is itself a sample mean.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import re
import statistics
import sys
import time
from itertools import pairwise
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import networkx as nx

from parley.environments import registry
from parley.environments.base import View
from parley.environments.clem import mapworld
from parley.environments.playground import fidelity as lvlm

ROOT = Path(__file__).resolve().parents[1]
SEEDS = ROOT.parent / "shared" / "seeds"


def row(
    family: str,
    number: str,
    paper: float,
    parley: float,
    n: int | None = None,
    se: float | None = None,
    target: float | None = None,
    note: str = "",
) -> dict[str, Any]:
    """One line of the table; z against ``target`` (default: the paper's number)."""
    goal = paper if target is None else target
    z = (parley - goal) / se if se else None
    return {
        "family": family,
        "number": number,
        "paper": paper,
        "parley": parley,
        "n": n,
        "se": se,
        "target": goal,
        "z": z,
        "note": note,
    }


# --- clembench ------------------------------------------------------------------------------


def _play(game: str, seed: int, kinds: dict[str, str], settings: dict[str, Any]) -> Any:
    """One episode offline, each role played by the built-in ``kinds[role]``, each role's
    history kept as the runtime would (what it was told and what it said)."""
    info = registry.get(game)
    merged = {**info.default_settings, **settings}
    gm = info.game_master(info.instance(seed, merged), merged)
    rng = random.Random(f"fidelity:{game}:{seed}")
    history: dict[str, list[tuple[str, str]]] = {}
    while (turn := gm.next_turn()) is not None:
        seen = history.setdefault(turn.role, [])
        seen += [(m.sender, m.text) for m in turn.incoming]
        view = View(
            role=turn.role,
            system=gm.system_prompt(turn.role),
            text=turn.observation.text,
            data=turn.observation.data,
            feedback=turn.feedback,
            legal_actions=turn.legal_actions,
            history=list(seen),
            turn=len(seen),
        )
        reply = info.players[turn.role][kinds[turn.role]](view, rng)
        seen.append((turn.role, reply))
        gm.on_reply(turn.role, reply)
    return gm


def clembench_rows(samples: int) -> list[dict[str, Any]]:
    rows = []
    wins = []
    for seed in range(samples):
        gm = _play(
            "clem.reference",
            seed,
            {"describer": "scripted", "guesser": "random"},
            {"variant": "text", "set": "grids_random"},
        )
        wins.append(100.0 * (gm.outcome == "success"))
    mean = statistics.fmean(wins)
    se = statistics.stdev(wins) / math.sqrt(len(wins))
    rows.append(row("clembench", "Reference random level (Table 4)", 100 / 3, mean, len(wins), se))

    # EE-gr: a perfect reported map scores 100; and how hard the graph edit distance gets on
    # the paper's map sizes (steps, a count independent of the machine).
    rng = random.Random(17)
    perfect, worst, cut = [], 0, 0
    for _ in range(200):
        rooms = rng.choice((4, 6, 8))
        truth = mapworld.make_map(rng, rooms, None if rooms > 4 else False)
        names = {node: f"room {i}" for i, node in enumerate(truth)}
        perfect.append(mapworld.graph_similarity(nx.relabel_nodes(truth, names), truth)[0])
        for other in (
            mapworld.make_map(rng, rooms, None if rooms > 4 else False),
            nx.gnm_random_graph(
                m := rng.randint(2, 12),
                rng.randint(0, min(20, m * (m - 1) // 2)),
                seed=rng.randrange(1 << 30),
            ),
        ):
            found = mapworld.graph_edit_distance(other, truth)
            worst = max(worst, found.steps)
            cut += not found.exact
    rows.append(
        row(
            "clembench",
            "EE-gr similarity of a perfect map",
            100.0,
            statistics.fmean(perfect),
            len(perfect),
            note=f"GED search: worst {worst:,} steps of {mapworld.GED_MAX_STEPS:,}, {cut} cut",
        )
    )
    return rows


# --- MANGO ----------------------------------------------------------------------------------

TABLE6 = (
    "locations",
    "edges",
    "avg path length",
    "steps",
    "DF easy",
    "DF hard",
    "RF easy",
    "RF hard",
)


def paper_table6() -> dict[str, list[float]]:
    """Table 6 of the MANGO paper (the 70-step data), per maze, read from the seed's text."""
    lines = next(SEEDS.glob("002_*.txt")).read_text().splitlines()
    end = next(i for i, line in enumerate(lines) if line.startswith("Table 6:"))
    start = max(i for i in range(end) if lines[i].startswith("MAPS\t# Locs"))
    table: dict[str, list[float]] = {}
    for line in lines[start + 1 : end]:
        # The text extraction split one number ("5 <i>7</i>" is 57).
        parts = re.sub(r"(\d) <i>(\d)</i>", r"\1\2", line).split("\t")
        if len(parts) >= 9:
            table[parts[0].lower()] = [float(p) for p in parts[1:9]]
    return table


def mango_rows(data_dir: Path) -> list[dict[str, Any]]:
    from parley.environments.mango.data import game_names, load_game

    paper = paper_table6()
    ours: dict[str, list[float]] = {}
    for name in game_names(data_dir):
        game = load_game(data_dir / name)
        df = [q.label(70) for q in game.questions("df")]
        rf = [q.label(70) for q in game.questions("rf")]
        lengths = [len(q.path) for q in game.questions("df") if q.label(70)]
        ours[name] = [
            game.graph.number_of_nodes(),
            game.graph.number_of_edges(),
            statistics.fmean(lengths) if lengths else 0.0,
            max(s.num for s in game.steps_upto(70)),
            df.count("easy"),
            df.count("hard"),
            rf.count("easy"),
            rf.count("hard"),
        ]
    common = sorted(set(paper) & set(ours))
    rows = []
    shortest = {name: _rf_by_shortest_route(load_game(data_dir / name)) for name in common}
    for i, label in enumerate(TABLE6):
        if label == "avg path length":
            p = statistics.fmean(paper[g][i] for g in common)
            q = statistics.fmean(ours[g][i] for g in common)
            same = sum(abs(paper[g][i] - ours[g][i]) < 0.005 for g in common)
        else:
            p = sum(paper[g][i] for g in common)
            q = sum(ours[g][i] for g in common)
            same = sum(paper[g][i] == ours[g][i] for g in common)
        rows.append(
            row(
                "MANGO",
                f"Table 6 {label} ({'mean' if label == 'avg path length' else 'sum'})",
                p,
                q,
                len(common),
                note=f"{same}/{len(common)} mazes equal",
            )
        )
    for i, label in ((6, "RF easy"), (7, "RF hard")):
        p = sum(paper[g][i] for g in common)
        q = sum(shortest[g][i - 6] for g in common)
        same = sum(paper[g][i] == shortest[g][i - 6] for g in common)
        rows.append(
            row(
                "MANGO",
                f"Table 6 {label} by the paper's shortest-route rule (sum)",
                p,
                q,
                len(common),
                note=f"{same}/{len(common)} mazes equal",
            )
        )
    return rows


def _rf_by_shortest_route(game: Any) -> tuple[int, int]:
    """RF easy/hard at step 70 by the paper's text: easy when a shortest route (over the moves
    known by then) uses only moves walked forward; parley's labels (the data's own fields) call
    a question easy when any route does."""
    known, forward = nx.DiGraph(), set()
    for u, v, d in game.graph.edges(data=True):
        if d["edge_min_step_answerable"] <= 70:
            known.add_edge(u, v)
            if d["seen_in_forward_answerable"] <= 70:
                forward.add((u, v))
    easy = hard = 0
    for q in game.questions("rf"):
        if q.label(70) is None:
            continue
        try:
            paths = list(nx.all_shortest_paths(known, q.src, q.dst))
        except (nx.NetworkXNoPath, nx.NodeNotFound):
            continue
        if any(all(step in forward for step in pairwise(p)) for p in paths):
            easy += 1
        else:
            hard += 1
    return easy, hard


# --- LVLM-Playground ------------------------------------------------------------------------


def lvlm_rows(samples: int) -> list[dict[str, Any]]:
    names = {"perceiving": "Table 2", "qa": "Table 3", "rule": "Table 4"}
    rows = []
    for task in lvlm.OFFLINE_TASKS:
        for game in lvlm.GAMES:
            cmp = lvlm.compare(task, game, lvlm.baseline_scores(game, task, range(samples)))
            rows.append(
                row(
                    "LVLM-Playground",
                    f"{names[task]} random, {task} {game}",
                    cmp.paper,
                    cmp.mean,
                    cmp.n,
                    cmp.se,
                    cmp.target,
                    "doc" if cmp.deviation else "",
                )
            )
    return rows


# --- COMMA ----------------------------------------------------------------------------------


def comma_rows_if_any() -> list[dict[str, Any]]:
    """COMMA's rows from helper F's benchmarks/fidelity_comma.py, when it is there."""
    try:
        from benchmarks.fidelity_comma import comma_rows  # type: ignore[import-not-found]
    except ImportError:
        try:
            sys.path.insert(0, str(Path(__file__).resolve().parent))
            from fidelity_comma import comma_rows  # type: ignore[import-not-found,no-redef]
        except ImportError:
            return [row("COMMA", "Table 1 random (benchmarks/fidelity_comma.py absent)", 0, 0)]
    out = []
    for r in comma_rows():
        r = dict(r)
        out.append(
            row(
                "COMMA",
                str(r.get("number") or r.get("name") or r.get("puzzle")),
                float(r["paper"]),
                float(r["parley"]),
                r.get("n"),
                r.get("se"),
                r.get("target"),
                str(r.get("note", "")),
            )
        )
    return out


# --- the reference's own code, headless --------------------------------------------------

COMMA_REF = ROOT.parent / "shared" / "data" / "reference" / "comma"
COMMA_TURNS, COMMA_MISTAKES = 10, 3  # COMMA's random_config.json hyperparameters


class _Widget:
    """A headless stand-in for a Tk widget: it keeps its text and ignores layout."""

    def __init__(self, *args: Any, text: str = "", **kwargs: Any) -> None:
        self.text = text

    def config(self, **kwargs: Any) -> None:
        self.text = kwargs.get("text", self.text)

    configure = config

    def cget(self, key: str) -> Any:
        return self.text if key == "text" else None

    def place(self, *args: Any, **kwargs: Any) -> None: ...

    def destroy(self) -> None: ...


class _Module:
    """The reference modules' GUI base class, headless: counts mistakes, notes the finish."""

    def __init__(self, game_manager: Any) -> None:
        self.game_manager = game_manager
        self.canvas = None
        self.mistakes = 0
        self.finished = False

    def log_mistake(self) -> None:
        self.mistakes += 1

    def finish_check(self) -> str:
        self.finished = True
        return "The puzzle is solved"


def reference_class(module: str, name: str) -> Any:
    """Class ``name`` of COMMA's ``modules/<module>.py``, its own code run as it is, with
    headless stand-ins for Tk, its button and its GUI base class (nothing else replaced)."""
    import types

    fakes = {
        "tkinter": types.SimpleNamespace(Label=_Widget, Button=_Widget, Frame=_Widget),
        "multimodal_comms.apps.comma.modules.module": types.SimpleNamespace(Module=_Module),
        "multimodal_comms.apps.comma.modules.util": types.SimpleNamespace(HighlightButton=_Widget),
    }
    for pkg in ("multimodal_comms", "multimodal_comms.apps", "multimodal_comms.apps.comma",
                "multimodal_comms.apps.comma.modules"):  # fmt: skip
        fakes[pkg] = types.SimpleNamespace()
    saved = {k: sys.modules.get(k) for k in fakes}
    sys.modules.update(fakes)  # type: ignore[arg-type]
    try:
        source = (COMMA_REF / "modules" / f"{module}.py").read_text(encoding="utf-8")
        namespace: dict[str, Any] = {"__name__": f"comma_reference_{module}"}
        exec(compile(source, str(COMMA_REF / "modules" / f"{module}.py"), "exec"), namespace)
    finally:
        for k, v in saved.items():
            if v is None:
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = v
    return namespace[name]


def reference_random(
    module: str, name: str, repeats: int, seed: int = 0
) -> tuple[float, float, int]:
    """COMMA's random solver on COMMA's own puzzle code and its 100 instances of ``name`` in
    config/puzzles_final.json, ``repeats`` plays each: PSR % mean, SE and n. One action a turn,
    uniform over the puzzle's whole action list; three mistakes end the episode with its
    partial score, a solved puzzle scores 100 and the turn limit scores 0 (COMMA's summariser)."""
    import types

    cls = reference_class(module, name)
    instances = [
        c for c in json.loads((COMMA_REF / "config" / "puzzles_final.json").read_text())
        if name in c
    ]  # fmt: skip
    psr: list[float] = []
    rng = random.Random(f"reference:{name}:{seed}")
    for rep in range(repeats):
        for i, config in enumerate(instances):
            random.seed(f"reference:{name}:{seed}:{rep}:{i}")  # the module draws from `random`
            manager = types.SimpleNamespace(
                config=[config], cur_puzzle=0, solver=types.SimpleNamespace(step=print)
            )
            puzzle = cls(manager)
            actions = list(puzzle.actions)
            score = 0.0
            for _ in range(COMMA_TURNS):
                puzzle.actions[rng.choice(actions)]()
                if puzzle.finished:
                    score = 1.0
                    break
                if puzzle.mistakes >= COMMA_MISTAKES:
                    score = float(puzzle.get_score())
                    break
            psr.append(100.0 * score)
    mean = statistics.fmean(psr)
    return mean, statistics.stdev(psr) / math.sqrt(len(psr)), len(psr)


def reference_rows(samples: int) -> list[dict[str, Any]]:
    """The random rows that COMMA's own code gives here (LED), beside parley's under
    ``rules: comma``, and z of parley's against it; LED from the paper as well."""
    from parley.environments.comma import PUZZLES
    from parley.environments.comma.baseline import PAPER_RANDOM, random_row

    if not (COMMA_REF / "modules" / "led.py").is_file():
        return []
    out = []
    for module, name, puzzle in (("led", "LedPuzzle", "led"),):
        ref_mean, ref_se, ref_n = reference_random(module, name, max(1, samples // 100))
        ours = random_row({puzzle: PUZZLES[puzzle][1]}, samples, "comma")[puzzle]
        paper, paper_se = PAPER_RANDOM[puzzle]
        se = math.sqrt(ours.se**2 + ref_se**2)
        out.append(
            row("COMMA", f"{puzzle} random, rules: comma, vs COMMA's code", ref_mean, ours.mean,
                ours.n, se, note=f"COMMA's code {ref_mean:.2f} ± {ref_se:.2f} (n = {ref_n})")
        )  # fmt: skip
        out.append(
            row("COMMA", f"{puzzle} random, rules: comma, vs the paper", paper, ours.mean, ours.n,
                math.sqrt(ours.se**2 + paper_se**2))
        )  # fmt: skip
    return out


def mango_unparsable_rows(data_dir: Path, sample: int) -> list[dict[str, Any]]:
    """RF success of the scripted and random navigators (``sample`` questions a maze) under
    ``unparsable: exclude`` beside MANGO's aggregate computed from the replies' text (an answer
    counts when it is a list with at least one step; MANGO's code is not in ../shared), and
    under ``zero``. The paper has no model-free MANGO score, so the target is MANGO's rule."""
    from parley.environments.mango.game import make_instance, plan
    from parley.environments.mango.offline import play_episode
    from parley.environments.mango.players import random_navigator, scripted_navigator
    from parley.environments.mango.scoring import average

    out = []
    settings = {"data_dir": str(data_dir), "questions_per_episode": 0, "sample": sample}
    for who, player in (("scripted", scripted_navigator), ("random", random_navigator)):
        replies: list[str] = []

        def recording(
            view: View, rng: random.Random, play: Any = player, seen: list[str] = replies
        ) -> str:
            reply = str(play(view, rng))
            seen.append(reply)
            return reply

        rows: list[dict[str, Any]] = []
        for seed in range(len(plan("rf", settings))):
            gm = play_episode(make_instance("rf", seed, settings), settings, recording)
            rows.extend(gm.results)
        for label in ("easy", "hard"):
            picked = [i for i, r in enumerate(rows) if r["label"] == label]
            kept = []
            for i in picked:
                try:
                    value = json.loads(replies[i])
                except json.JSONDecodeError:
                    continue
                if isinstance(value, list) and value:
                    kept.append(float(rows[i]["success_strict"]))
            rule = statistics.fmean(kept)
            sel = [rows[i] for i in picked]
            ours = average(sel, "success_strict", "exclude") or 0.0
            se = statistics.stdev(kept) / math.sqrt(len(kept)) if len(kept) > 1 else None
            zero = average(sel, "success_strict", "zero") or 0.0
            out.append(
                row("MANGO", f"RF {label} success, {who}, unparsable: exclude vs MANGO's rule",
                    rule, ours, len(kept), se,
                    note=f"zero: {zero:.3f} over {len(sel)}; {len(sel) - len(kept)} left out")
            )  # fmt: skip
    return out


# --- output ---------------------------------------------------------------------------------


def _fmt(value: float | None, digits: int = 3) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| family | number | paper | parley | n | SE | z | note |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        big = max(abs(r["paper"]), abs(r["parley"])) >= 10
        digits = 1 if big else 3
        target = "" if r["target"] == r["paper"] else f" (doc {_fmt(r['target'], 4)})"
        lines.append(
            f"| {r['family']} | {r['number']} | {_fmt(r['paper'], digits)}{target} | "
            f"{_fmt(r['parley'], digits)} | {r['n'] if r['n'] is not None else '–'} | "
            f"{_fmt(r['se'], 4 if not big else 2)} | {_fmt(r['z'], 2)} | {r['note']} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=lvlm.PAPER_SAMPLES)
    parser.add_argument("--mango", type=Path, default=ROOT.parent / "shared" / "data" / "mango")
    parser.add_argument("--mango-sample", type=int, default=40, help="RF questions a maze")
    args = parser.parse_args()
    started = time.perf_counter()
    rows = clembench_rows(args.samples)
    rows += comma_rows_if_any()
    rows += reference_rows(args.samples)
    if args.mango.is_dir():
        rows += mango_rows(args.mango)
        rows += mango_unparsable_rows(args.mango, args.mango_sample)
    else:
        print(f"(MANGO data not found at {args.mango}: its rows are left out)")
    rows += lvlm_rows(args.samples)
    print(table(rows))
    took = time.perf_counter() - started
    print(f"\n{len(rows)} numbers in {took:.0f} s")
    out = ROOT / "benchmarks" / "results" / "fidelity.json"
    out.parent.mkdir(exist_ok=True)
    meta = {"samples": args.samples, "seconds": round(took, 1)}
    out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=2))
    print(f"written {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
