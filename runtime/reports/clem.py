"""clem's tables (seed 000): the paper's Table 1 (clemscore, % played, quality, per game), the
per-experiment breakdown (Table 4 style), the MapWorld details (efficiency, exploration, graph
similarity, steps; G2X by distance), and an HTML transcript per episode in ``run_dir/html/``
(MapWorld pages show the walked path on the map, as in the paper's fig. 7).

A row is a model or pairing in one variant (image or text): the clemscore of each variant is
computed over the games played in it, as the paper does for its text-only comparison.
"""

from __future__ import annotations

import html
import math
from collections import defaultdict
from pathlib import Path
from typing import Any

from parley.environments.clem.scoring import (
    GameStats,
    clemscore,
    game_stats,
    is_played,
)
from parley.observability.transcript_html import write_html
from parley.records import EpisodeRecord
from parley.runtime.report import fmt, markdown_table, mean
from parley.runtime.reports.escape import md
from parley.runtime.reports.intervals import (
    INTERVALS_NOTE,
    Interval,
    cell,
    grouped_intervals,
    mean_cell,
    mean_of_shares_interval,
    wilson,
)

GAMES = (
    "clem.matchit",
    "clem.reference",
    "clem.mapworld_ee",
    "clem.mapworld_g2x",
    "clem.mapworld_eegr",
)
MAP_GAMES = GAMES[2:]
TITLES = {
    "clem.matchit": "MatchIt",
    "clem.reference": "Reference",
    "clem.mapworld_ee": "EE",
    "clem.mapworld_g2x": "G2X",
    "clem.mapworld_eegr": "EE-gr",
}


def player_label(record: EpisodeRecord) -> str:
    """The model (or built-in player) of a row: one name when every role has the same player."""
    labels = list(record.pairing.values())
    if len(set(labels)) == 1:
        return labels[0]
    return ", ".join(f"{role}={who}" for role, who in record.pairing.items())


def settings_of(record: EpisodeRecord) -> dict[str, Any]:
    return dict(record.spec.get("settings", {}))


def variant_of(record: EpisodeRecord) -> str:
    return str(settings_of(record).get("variant", "image"))


def experiment_of(record: EpisodeRecord) -> str:
    """The paper's experiment name of an episode, from its settings."""
    s = settings_of(record)
    game = record.game
    if game == "clem.reference":
        return str(s.get("set", ""))
    if game == "clem.matchit":
        return f"{s.get('set', '')}/{s.get('pair', '')}"
    if game == "clem.mapworld_g2x":
        return f"distance {s.get('distance', '')}"
    size = {4: "small", 6: "medium", 8: "large"}.get(
        int(s.get("rooms", 6)), f"{s.get('rooms')} rooms"
    )
    cycle = s.get("cycle")
    return size + ("_cycle" if cycle else "" if cycle is False else "_any")


def _pct(value: float | None) -> str:
    return fmt(value, 2)


# An episode as the scores see it: (played, main score or None); runtime errors left out.
Item = tuple[bool, float | None]


def _items(records: list[EpisodeRecord]) -> list[Item]:
    out: list[Item] = []
    for r in records:
        if r.outcome in ("success", "lost", "aborted"):
            main = r.main_score
            out.append((is_played(r), None if main is None else float(main)))
    return out


def _stats(items: list[Item]) -> GameStats:
    """``game_stats`` over items (the bootstrap resamples items, not records)."""
    played = [m for p, m in items if p]
    mains = [m for m in played if m is not None and not math.isnan(m)]
    return GameStats(
        episodes=len(items),
        played=100.0 * len(played) / len(items) if items else 0.0,
        quality=sum(mains) / len(mains) if mains else None,
    )


def _played_cell(records: list[EpisodeRecord]) -> str:
    """% played with its Wilson interval."""
    items = _items(records)
    return cell(wilson(sum(p for p, _ in items), len(items)), 2, 100.0)


def _quality_cell(records: list[EpisodeRecord]) -> str:
    """Quality (mean main score of the played episodes) with its bootstrap interval."""
    return mean_cell([m for p, m in _items(records) if p], 2)


def _macro_cells(by_game: dict[str, list[EpisodeRecord]]) -> list[str]:
    """clemscore, avg %p and avg ql of a row, each with a bootstrap interval that resamples
    the episodes within each game (the games themselves are fixed)."""
    groups = [_items(rs) for _, rs in sorted(by_game.items())]

    def scores(gs: list[list[Item]]) -> list[float | None]:
        score = clemscore({str(i): _stats(g) for i, g in enumerate(gs)})
        return [score.clemscore, score.played, score.quality]

    value, played, quality = grouped_intervals(groups, scores)
    return [cell(value, 2), _played_over_games(groups, played), cell(quality, 2)]


def _played_over_games(groups: list[list[Item]], bootstrap: Interval | None) -> str:
    """The mean % played over games: over games of one size (none empty) it is the share of
    all their episodes, with Wilson's interval (a bootstrap collapses at 100 %)."""
    if bootstrap is None or not all(groups):
        return cell(bootstrap, 2, 1.0)
    shares = mean_of_shares_interval([[float(p) for p, _ in g] for g in groups])
    if shares is None or not math.isclose(100.0 * shares.estimate, bootstrap.estimate):
        return cell(bootstrap, 2)  # games of different sizes: the stratified bootstrap
    return cell(shares, 2, 100.0)


def _map_cells(by_game: dict[str, list[EpisodeRecord]]) -> list[str]:
    """Map Game: the mean %p and quality of EE, G2X and EE-gr (as the paper's column)."""
    groups = [_items(by_game[g]) for g in MAP_GAMES if g in by_game]
    if not groups:
        return ["–", "–"]

    def scores(gs: list[list[Item]]) -> list[float | None]:
        stats = [_stats(g) for g in gs]
        return [mean([s.played for s in stats]), mean([s.quality for s in stats])]

    played, quality = grouped_intervals(groups, scores)
    return [_played_over_games(groups, played), cell(quality, 2)]


def table1(records: list[EpisodeRecord]) -> str:
    rows: dict[tuple[str, str], dict[str, list[EpisodeRecord]]] = defaultdict(
        lambda: defaultdict(list)
    )
    for r in records:
        rows[(player_label(r), variant_of(r))][r.game].append(r)
    header = ["model / pairing", "variant", "clemscore", "avg %p", "avg ql"]
    for title in ("MatchIt", "Reference", "Map Game", "EE", "G2X", "EE-gr"):
        header += [f"{title} %p", f"{title} ql"]
    out = []
    ranked = []
    for (label, variant), by_game in rows.items():
        stats = {g: game_stats(rs) for g, rs in by_game.items()}
        score = clemscore(stats)
        ranked.append((score.clemscore, label, variant, stats, score))
    for _, label, variant, _, _ in sorted(ranked, key=lambda x: (-x[0], x[1], x[2])):
        by_game = rows[(label, variant)]
        row = [md(label), md(variant), *_macro_cells(by_game)]

        def game_cells(game: str, by_game: dict[str, list[EpisodeRecord]] = by_game) -> list[str]:
            rs = by_game.get(game)
            return ["–", "–"] if rs is None else [_played_cell(rs), _quality_cell(rs)]

        row += game_cells("clem.matchit") + game_cells("clem.reference") + _map_cells(by_game)
        for g in MAP_GAMES:
            row += game_cells(g)
        out.append(row)
    return markdown_table(header, out)


def experiments_table(records: list[EpisodeRecord]) -> str:
    groups: dict[tuple[str, str, str, str], list[EpisodeRecord]] = defaultdict(list)
    for r in records:
        groups[(r.game, experiment_of(r), variant_of(r), player_label(r))].append(r)
    header = [
        "game",
        "experiment",
        "variant",
        "model / pairing",
        "episodes",
        "% played",
        "quality",
        "success %",
        "errors",
        "source",
    ]
    rows = []
    order = {g: i for i, g in enumerate(GAMES)}
    for (game, exp, variant, label), rs in sorted(
        groups.items(), key=lambda kv: (order.get(kv[0][0], 9), *kv[0][1:])
    ):
        s = game_stats(rs)
        success = wilson(sum(r.outcome == "success" for r in rs), s.episodes)
        errors = len(rs) - s.episodes
        sources = sorted({str(settings_source(r)) for r in rs})
        rows.append(
            [
                md(TITLES.get(game, game)),
                md(exp),
                md(variant),
                md(label),
                str(s.episodes),
                _played_cell(rs),
                _quality_cell(rs),
                cell(success, 2, 100.0),
                str(errors),
                md(", ".join(sources)),
            ]
        )
    return markdown_table(header, rows)


def settings_source(record: EpisodeRecord) -> str:
    """Where an episode's pictures came from (photo sets: the user's dataset or the stand-ins)."""
    s = settings_of(record)
    if record.game == "clem.reference" and s.get("set") in (
        "ade",
        "docci",
        "clevr",
        "ade_static",
        "docci_static",
        "clevr_static",
    ):
        return "disk" if s.get("dataset_dir") else "synthetic"
    if record.game == "clem.matchit" and s.get("set") == "photos":
        return "disk" if s.get("pairs_file") else "synthetic"
    return "generated"


def mapworld_table(records: list[EpisodeRecord]) -> str:
    groups: dict[tuple[str, str, str, str], list[EpisodeRecord]] = defaultdict(list)
    for r in records:
        if r.game in MAP_GAMES:
            groups[(r.game, experiment_of(r), variant_of(r), player_label(r))].append(r)
    header = [
        "game",
        "experiment",
        "variant",
        "model / pairing",
        "% played",
        "success %",
        "main",
        "efficiency",
        "exploration",
        "graph similarity",
        "GED bounded",
        "steps",
    ]
    rows = []
    for (game, exp, variant, label), group in sorted(groups.items()):
        rs = [r for r in group if r.outcome in ("success", "lost", "aborted")]
        if not rs:
            continue
        played = [r for r in rs if r.outcome in ("success", "lost")]

        def m(key: str, group: list[EpisodeRecord] = played) -> str:
            if key == "main":
                return mean_cell([r.main_score for r in group], 2)
            return mean_cell([r.scores.get(key) for r in group], 2)

        bounded = sum(1 for r in played if r.scores.get("ged_bounded"))
        rows.append(
            [
                md(TITLES[game]),
                md(exp),
                md(variant),
                md(label),
                cell(wilson(len(played), len(rs)), 2, 100.0),
                cell(wilson(sum(r.outcome == "success" for r in rs), len(rs)), 2, 100.0),
                m("main"),
                m("efficiency"),
                m("exploration") if game != "clem.mapworld_g2x" else "–",
                m("graph_similarity") if game == "clem.mapworld_eegr" else "–",
                str(bounded) if game == "clem.mapworld_eegr" else "–",
                _pct(mean([r.scores.get("moves") for r in played])),
            ]
        )
    return markdown_table(header, rows)


# --- HTML extras ---------------------------------------------------------------------------------


def mapworld_extra(record: EpisodeRecord, messages: list[dict[str, Any]], html_dir: Path) -> str:
    """The map with the walked path (fig. 7 style), drawn from the game master's notes."""
    from parley.environments.clem.mapworld import render_path

    notes = [
        m for m in messages if m.get("kind") == "transcript_event" and m.get("event") == "note"
    ]
    layout = next((n["data"] for n in notes if n.get("data", {}).get("rooms")), None)
    if layout is None:
        return ""
    path = [tuple(layout["start"])]
    for n in notes:
        data = n.get("data", {})
        if "new" in data:
            path.append(tuple(data["new"]))
    image = html_dir / f"{record['episode']}.path.png"
    image.write_bytes(render_path(layout, path))
    moves = len(path) - 1
    visited = len(set(path))
    caption = (
        f"{record['outcome']}: visited {visited} of {len(layout['rooms'])} rooms in {moves} steps. "
        "Cyan: where the navigator ended; olive: visited; grey: not visited"
        + ("; orange ring: the target room." if layout.get("target") else ".")
    )
    rooms = ", ".join(f"({r['pos'][0]},{r['pos'][1]}) {r['category']}" for r in layout["rooms"])
    return (
        f"<figure><img src='{html.escape(image.name)}' width='330'>"
        f"<figcaption>{html.escape(caption)}</figcaption></figure>"
        f"<p><small>Rooms (x, y; north is up): {html.escape(rooms)}</small></p>"
    )


def report(records: list[EpisodeRecord], run_dir: Path) -> str:
    parts = [
        "## clem (seed 000): clemscore, % played, quality",
        "",
        "clemscore = avg %p / 100 × avg ql, macro-averaged over the games of a row; a game with "
        "0 % played drops out of the quality average. Map Game = mean of EE, G2X and EE-gr. "
        + INTERVALS_NOTE
        + " Over several games (clemscore, averages, Map Game) the bootstrap resamples the "
        "episodes within each game.",
        "",
        table1(records),
        "",
        "### Experiments",
        "",
        experiments_table(records),
        "",
    ]
    if any(r.game in MAP_GAMES for r in records):
        parts += ["### MapWorld", "", mapworld_table(records), ""]
    failed = sum(r.outcome not in ("success", "lost", "aborted") for r in records)
    if failed:
        parts += [
            f"{failed} episodes ended in a runtime error or were cancelled; they are left out of "
            "% played and quality (see the `errors` column and the outcomes table).",
            "",
        ]
    if any(settings_source(r) == "synthetic" for r in records):
        parts += [
            "Photo experiments marked `synthetic` used parley's generated stand-in pictures "
            "(no dataset folder was given): they are not the paper's ADE20K/DOCCI/CLEVR/Visual "
            "Genome photos.",
            "",
        ]
    index = write_html(run_dir, records, extras={g: mapworld_extra for g in MAP_GAMES})
    parts += [f"HTML transcripts: `{index.relative_to(run_dir)}` in the run folder.", ""]
    return "\n".join(parts)
