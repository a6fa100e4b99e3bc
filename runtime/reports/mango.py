"""MANGO's tables (seed 002): success and reasoning accuracy on DF/RF × easy/hard per player,
per game, the pairwise comparison of the paper's Table 1, and a per-game scatter plot.

Every answered question leaves a transcript note with its scores (``data.mango``); the tables
are built from those notes, one row per (player, game, question). "Success" in the pairwise
table is the paper's: DF = the edit-similarity score (loose), RF = reaching the destination
(strict). A player's label carries the settings that differ between the run's episodes
(cutoff, token budget, walkthrough placement, memory policy), so ablations get their own rows.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from parley.environments.mango.scoring import answered
from parley.records import EpisodeRecord, parse_message
from parley.runtime.report import markdown_table
from parley.runtime.reports.escape import md, plot_label
from parley.runtime.reports.intervals import INTERVALS_NOTE, mean_cell, rate_cell

TYPES = ("df", "rf")
LABELS = ("easy", "hard")
VARIANT_KEYS = ("cutoff", "token_budget", "walkthrough", "data_dir")
PLOT = "mango_per_game.png"


def _messages(run_dir: Path) -> Iterator[bytes]:
    """Transcript lines that may hold a MANGO note (one file per run, or one per episode)."""
    files = [run_dir / "transcripts.jsonl"]
    folder = run_dir / "transcripts"
    if folder.is_dir():
        files += sorted(folder.glob("*.jsonl"))
    for path in files:
        if not path.is_file():
            continue
        with path.open("rb") as f:
            for line in f:
                if b'"mango"' in line and b'"note"' in line:
                    yield line


def player_labels(records: list[EpisodeRecord]) -> dict[str, str]:
    """Episode → label: the navigator, plus the settings that vary across these records."""

    def variant(r: EpisodeRecord) -> dict[str, Any]:
        spec = r.spec
        settings = spec.get("settings") or {}
        out = {k: settings.get(k) for k in VARIANT_KEYS}
        out["memory"] = ((spec.get("memory") or {}).get("navigator") or {}).get("policy", "full")
        return out

    variants = {r.episode: variant(r) for r in records}
    varying = [
        k for k in [*VARIANT_KEYS, "memory"] if len({str(v[k]) for v in variants.values()}) > 1
    ]
    labels = {}
    for r in records:
        who = r.pairing.get("navigator", "?")
        extra = ", ".join(f"{k}={variants[r.episode][k]}" for k in varying)
        labels[r.episode] = f"{who} [{extra}]" if extra else who
    return labels


def question_rows(records: list[EpisodeRecord], run_dir: Path) -> list[dict[str, Any]]:
    """One row per scored question: player, type, game, question id, label and scores."""
    mango = {r.episode: r for r in records if r.game.startswith("mango.")}
    labels = player_labels(list(mango.values()))
    rows = []
    for line in _messages(run_dir):
        message = parse_message(line)
        if message is None:  # a torn or damaged line
            continue
        episode, data = message.get("episode"), message.get("data")
        note = data.get("mango") if isinstance(data, dict) else None
        if message.get("event") != "note" or not isinstance(note, dict):
            continue
        if not isinstance(episode, str) or episode not in mango:
            continue
        rows.append({**note, "player": labels[episode], "episode": episode})
    return rows


def paper_success(row: dict[str, Any]) -> float:
    """DF: the edit-similarity score; RF: reached or not (the paper's success rates)."""
    return float(row["success_loose"] if row["kind"] == "df" else row["success_strict"])


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _by_question(rows: list[dict[str, Any]]) -> dict[str, dict[tuple[str, str], dict[str, Any]]]:
    """player → (game, question id) → the row (repeats averaged)."""
    grouped: dict[str, dict[tuple[str, str], list[dict[str, Any]]]] = defaultdict(
        lambda: defaultdict(list)
    )
    for r in rows:
        grouped[r["player"]][(r["game"], r["question"])].append(r)
    out: dict[str, dict[tuple[str, str], dict[str, Any]]] = {}
    for player, questions in grouped.items():
        out[player] = {}
        for key, reps in questions.items():
            row = dict(reps[0])
            for field in ("success_loose", "success_strict", "reasoning", "weighted"):
                row[field] = sum(float(r[field]) for r in reps) / len(reps)
            row["parsed"] = any(r["parsed"] for r in reps)
            # MANGO's rule (unparsable: exclude): the repeats that gave a route, if any did.
            kept = [r for r in reps if answered(r)]
            row["answered"] = bool(kept)
            for field in ("success_loose", "success_strict"):
                row[f"{field}_answered"] = _mean([float(r[field]) for r in kept])
            out[player][key] = row
    return out


def overall_table(per_player: dict[str, dict[tuple[str, str], dict[str, Any]]]) -> str:
    """Every question counted (unparsable: zero); where some answer gave no route, MANGO's
    averages over the answers that did (unparsable: exclude) stand beside them."""
    header = [
        "player", "type", "difficulty", "questions", "answered %", "success (loose)",
        "success (strict)", "reasoning", "weighted success",
    ]  # fmt: skip
    both = any(not r["answered"] for q in per_player.values() for r in q.values())
    if both:
        header += ["success (loose), unparsable left out", "success (strict), unparsable left out"]
    body = []
    for player in sorted(per_player):
        rows = list(per_player[player].values())
        for kind in TYPES:
            for label in (*LABELS, "all"):
                sel = [r for r in rows if r["kind"] == kind and label in ("all", r["label"])]
                if not sel:
                    continue
                cells = [
                    md(player),
                    kind.upper(),
                    label,
                    str(len(sel)),
                    rate_cell(sum(bool(r["parsed"]) for r in sel), len(sel)),
                    mean_cell([r["success_loose"] for r in sel]),
                    mean_cell([r["success_strict"] for r in sel]),
                    mean_cell([r["reasoning"] for r in sel]),
                    mean_cell([r["weighted"] for r in sel]),
                ]
                if both:
                    kept = [r for r in sel if r["answered"]]
                    cells += [
                        mean_cell([r["success_loose_answered"] for r in kept]),
                        mean_cell([r["success_strict_answered"] for r in kept]),
                    ]
                body.append(cells)
    return markdown_table(header, body)


def per_game(
    per_player: dict[str, dict[tuple[str, str], dict[str, Any]]], metric: str
) -> dict[str, dict[str, dict[str, list[float]]]]:
    """player → game → "df-easy"… → the per-question values of ``metric`` (``paper`` for the
    paper's success)."""
    out: dict[str, dict[str, dict[str, list[float]]]] = {}
    for player, questions in per_player.items():
        cells: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
        for (game, _), r in questions.items():
            value = paper_success(r) if metric == "paper" else float(r[metric])
            cells[game][f"{r['kind']}-{r['label']}"].append(value)
        out[player] = {g: dict(c) for g, c in cells.items()}
    return out


def game_table(per_player: dict[str, dict[tuple[str, str], dict[str, Any]]]) -> str:
    """One row per game and player: success and reasoning accuracy per type and difficulty,
    each a mean over the questions with its bootstrap interval."""
    success = per_game(per_player, "paper")
    reasoning = per_game(per_player, "reasoning")
    games = sorted({g for p in success.values() for g in p})
    keys = [(k, d) for k in TYPES for d in LABELS]
    header = ["game", "player"]
    for kind, label in keys:
        header += [f"{kind.upper()} {label} success", f"{kind.upper()} {label} reasoning"]
    body = []
    for game in games:
        for p in sorted(per_player):
            if game not in success[p]:
                continue
            row = [md(game), md(p)]
            for kind, label in keys:
                key = f"{kind}-{label}"
                row += [
                    mean_cell(success[p][game].get(key, [])),
                    mean_cell(reasoning[p][game].get(key, [])),
                ]
            body.append(row)
    return markdown_table(header, body)


def pairwise_table(per_player: dict[str, dict[tuple[str, str], dict[str, Any]]], kind: str) -> str:
    """The paper's Table 1: row A, column B holds "A | B" on the questions both answered;
    easy below the diagonal, hard above."""
    players = sorted(per_player)
    header = ["", *(md(p) for p in players), "HARD"]
    body = []
    for i, a in enumerate(players):
        row = [md(a)]
        for j, b in enumerate(players):
            if i == j:
                row.append("*")
                continue
            label = "easy" if i > j else "hard"
            both = [
                key
                for key, r in per_player[a].items()
                if r["kind"] == kind and r["label"] == label and r["parsed"]
                and key in per_player[b] and per_player[b][key]["parsed"]
            ]  # fmt: skip
            if not both:
                row.append("–")
                continue
            sa = mean_cell([paper_success(per_player[a][k]) for k in both])
            sb = mean_cell([paper_success(per_player[b][k]) for k in both])
            row.append(f"{sa} \\| {sb} (n={len(both)})")
        row.append("*")
        body.append(row)
    body.append(["EASY", *("*" for _ in players), "*"])
    return markdown_table(header, body)


def plot_per_game(
    per_player: dict[str, dict[tuple[str, str], dict[str, Any]]], path: Path
) -> Path | None:
    """Per game (x) the paper's success (y) of each player, one panel per type × difficulty."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    success = {
        player: {g: {k: _mean(v) for k, v in cells.items()} for g, cells in by_game.items()}
        for player, by_game in per_game(per_player, "paper").items()
    }
    games = sorted({g for p in success.values() for g in p})
    if not games:
        return None
    fig, axes = plt.subplots(2, 2, figsize=(max(8.0, 0.28 * len(games) + 3), 8), sharey=True)
    markers = "os^Dv<>ph*"
    for ax, (kind, label) in zip(axes.flat, [(k, d) for k in TYPES for d in LABELS], strict=True):
        key = f"{kind}-{label}"
        for n, player in enumerate(sorted(success)):
            xs = [i for i, g in enumerate(games) if success[player].get(g, {}).get(key) is not None]
            ys = [success[player][games[i]][key] for i in xs]
            shift = 0.18 * (n - (len(success) - 1) / 2)  # side by side, so equal scores show
            ax.scatter(
                [x + shift for x in xs],
                ys,
                s=22,
                marker=markers[n % len(markers)],
                label=plot_label(player),
                alpha=0.8,
            )
        ax.set_title(f"{kind.upper()} {label}")
        ax.set_xticks(range(len(games)))
        ax.set_xticklabels([plot_label(g) for g in games], rotation=90, fontsize=6)
        ax.set_ylim(-0.05, 1.05)
        ax.grid(alpha=0.3)
    axes.flat[0].set_ylabel("success")
    axes.flat[2].set_ylabel("success")
    axes.flat[0].legend(fontsize=7, loc="lower left")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def report(records: list[EpisodeRecord], run_dir: Path) -> str:
    mango = [r for r in records if r.game.startswith("mango.")]
    parts = ["## MANGO (seed 002)", ""]
    failed = [r for r in mango if r.outcome == "error"]
    if failed:
        reasons: dict[str, int] = defaultdict(int)
        for r in failed:
            reasons[r.reason or "?"] += 1
        parts += [f"**{len(failed)} episode(s) failed:**", ""]
        parts += [f"- {n}× {md(reason)}" for reason, n in sorted(reasons.items())] + [""]
    rows = question_rows(mango, Path(run_dir))
    if not rows:
        parts.append("No scored questions.")
        return "\n".join(parts)
    per_player = _by_question(rows)
    parts += [
        "Success and reasoning accuracy per player, type and difficulty (answered % = replies "
        "that parsed; unparsed answers score 0; where some answer did not parse or was empty, "
        "the last two columns average over the others only, as MANGO's evaluator does). "
        + INTERVALS_NOTE,
        "",
        overall_table(per_player),
        "",
        "### Per game",
        "",
        "Success (paper's: DF loose, RF strict) and reasoning accuracy, mean over the game's "
        "questions with its 95 % interval.",
        "",
        game_table(per_player),
        "",
    ]
    for kind in TYPES:
        parts += [
            f"### Pairwise comparison, {kind.upper()} (seed 002, Table 1)",
            "",
            "Cell (row A, column B): success of A \\| B on the questions both answered; easy "
            "below the diagonal, hard above.",
            "",
            pairwise_table(per_player, kind),
            "",
        ]
    plot = plot_per_game(per_player, Path(run_dir) / PLOT)
    if plot is not None:
        parts += [f"Per-game success: ![per game]({plot.name})", ""]
    return "\n".join(parts)
