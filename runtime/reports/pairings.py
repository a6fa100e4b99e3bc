"""Pairing tables (each metric by who played which role) and the model usage and cost table.

Generic over games: the first role of a game gives the rows, the second the columns (solver ×
expert for COMMA); a game with more roles gets one set of tables per combination of the
others. Shown for games played by more than one pairing.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

from parley.agents.backends.batch import PRICE_FACTOR as BATCH_PRICE_FACTOR
from parley.agents.backends.spec import PriceSpec
from parley.records import EpisodeRecord, ModelCalls, TokenCounts
from parley.runtime.report import fmt, markdown_table, mean, over_context
from parley.runtime.reports.escape import md
from parley.runtime.reports.intervals import INTERVALS_NOTE, mean_cell, rate_cell
from parley.user_files import YamlFileError, read_mapping


def _metrics(records: list[EpisodeRecord]) -> list[str]:
    keys: set[str] = set()
    has_main = False
    for r in records:
        keys.update(k for k, v in r.scores.items() if isinstance(v, int | float))
        has_main = has_main or isinstance(r.main_score, int | float)
    keys.discard("main")  # a schema-1 record's main score, read through main_score
    return (["main"] if has_main else []) + sorted(keys)


def _cell(group: list[EpisodeRecord], metric: str) -> str:
    if not group:
        return ""
    if metric == "episodes":
        return str(len(group))
    # Shares of episodes: Wilson intervals; mean scores: bootstrap (runtime/reports/intervals.py).
    if metric == "success %":
        return rate_cell(sum(r.outcome == "success" for r in group), len(group))
    if metric == "error %":
        return rate_cell(sum(r.outcome == "error" for r in group), len(group))
    if metric == "replies":
        return fmt(mean([r.turns for r in group]))
    if metric == "main":
        return mean_cell([r.main_score for r in group])
    return mean_cell([r.scores.get(metric) for r in group])


def pairing_tables(records: list[EpisodeRecord]) -> str:
    """Per game, one table per metric: rows = first role's player, columns = second role's."""
    by_game: dict[str, list[EpisodeRecord]] = defaultdict(list)
    for r in records:
        by_game[r.game].append(r)
    parts: list[str] = []
    for game, group in sorted(by_game.items()):
        roles = list(group[0]["pairing"])
        if len(roles) < 2 or len({tuple(r.pairing.values()) for r in group}) < 2:
            continue
        row_role, col_role, rest = roles[0], roles[1], roles[2:]
        by_rest: dict[tuple[str, ...], list[EpisodeRecord]] = defaultdict(list)
        for r in group:
            by_rest[tuple(r.pairing.get(x, "") for x in rest)].append(r)
        metrics = ["episodes", "success %", *_metrics(group), "replies", "error %"]
        for fixed, subset in sorted(by_rest.items()):
            rows = sorted({r.pairing[row_role] for r in subset})
            cols = sorted({r.pairing[col_role] for r in subset})
            cells: dict[tuple[str, str], list[EpisodeRecord]] = defaultdict(list)
            for r in subset:
                cells[(r.pairing[row_role], r.pairing[col_role])].append(r)
            title = f"### {md(game)}: {md(row_role)} (rows) × {md(col_role)} (columns)"
            if rest:
                title += " with " + md(
                    ", ".join(f"{k}={v}" for k, v in zip(rest, fixed, strict=True))
                )
            parts += [title, ""]
            for metric in metrics:
                header = [f"{metric}: {md(row_role)} \\ {md(col_role)}", *map(md, cols)]
                body = [
                    [md(row)] + [_cell(cells.get((row, col), []), metric) for col in cols]
                    for row in rows
                ]
                parts += [markdown_table(header, body), ""]
    if not parts:
        return ""
    return "\n".join(["## Pairings", "", INTERVALS_NOTE, "", *parts])


def _prices(run_dir: Path) -> dict[str, dict[str, Any]]:
    """Model name → price entry, from the run's resolved config."""
    try:
        models = read_mapping(run_dir / "config.yaml").get("models")
    except YamlFileError:  # the folder's config is not needed for the rest of the report
        return {}
    if not isinstance(models, dict):
        return {}
    return {
        name: m["price"] for name, m in models.items() if isinstance(m, dict) and m.get("price")
    }


def _new_usage() -> dict[str, Any]:
    return {
        "episodes": set(),
        "requests": 0,
        "attempts": 0,
        "retries": defaultdict(int),
        "input": 0,
        "output": 0,
        "reasoning": 0,
        "cache_read": 0,
        "cache_write": 0,
        "call_s": 0.0,
        "cached": 0,
        "batch_input": 0,
        "batch_output": 0,
        "sources": set(),
        "errors": 0,
        "over_context": 0,
    }


def usage_stats(records: list[EpisodeRecord]) -> dict[str, dict[str, Any]]:
    """Per model (its label in the pairings): episodes, requests, attempts, retries by cause,
    tokens of each kind, time in calls, replies from the cache or a batch, failed episodes."""
    stats: dict[str, dict[str, Any]] = {}
    for r in records:
        spec_players = r.spec.get("players") or {}
        for role, label in r.pairing.items():
            if (spec_players.get(role) or {}).get("kind") != "llm":
                continue
            s = stats.setdefault(label, _new_usage())
            s["episodes"].add(r.episode)
            tokens = r.tokens.get(role) or TokenCounts()
            s["input"] += tokens.input
            s["output"] += tokens.output
            # Reasoning (part of the output) and prompt-cache tokens (apart from the input).
            s["reasoning"] += tokens.reasoning
            s["cache_read"] += tokens.cache_read
            s["cache_write"] += tokens.cache_write
            if role in r.token_source:
                s["sources"].add(r.token_source[role])
            calls = r.model_calls.get(role) or ModelCalls()
            s["requests"] += calls.requests
            s["attempts"] += calls.attempts
            s["call_s"] += calls.call_s
            s["cached"] += calls.cached
            for kind, n in calls.retries.items():
                s["retries"][kind] += n
            # Tokens of replies served from a batch (agents/backends/batch.py): half price.
            if calls.batch is not None:
                s["batch_input"] += calls.batch.input
                s["batch_output"] += calls.batch.output
            if r.outcome == "error" and r.reason.startswith(f"{role} failed"):
                # A prompt too long for the model's context is the config's to fix, not the
                # server's: counted apart.
                s["over_context" if over_context(r) else "errors"] += 1
    return stats


def _usage_row(label: str, s: dict[str, Any]) -> list[str]:
    retries = sum(s["retries"].values())
    detail = ", ".join(f"{k} {n}" for k, n in sorted(s["retries"].items()))
    sources = ", ".join(sorted(s["sources"]))
    return [
        md(label),
        str(len(s["episodes"])),
        str(s["requests"]),
        f"{retries} ({detail})" if retries else "0",
        f"{s['input']:,}"
        + (f" ({sources})" if sources and sources != "backend" else "")
        + (f" (+{s['cache_read']:,} cache read)" if s["cache_read"] else "")
        + (f" (+{s['cache_write']:,} cache write)" if s["cache_write"] else ""),
        f"{s['output']:,}" + (f" ({s['reasoning']:,} reasoning)" if s["reasoning"] else ""),
        fmt(s["call_s"] / s["attempts"], 3) if s["attempts"] else "–",
        str(s["errors"]),
    ]


def _cost(s: dict[str, Any], price: dict[str, Any]) -> tuple[float, str]:
    """What a model's calls cost, and in which currency: input, output and prompt-cache
    reads/writes each at its price; tokens served from a batch at BATCH_PRICE_FACTOR of it."""
    priced = PriceSpec.model_validate(price)
    cost = priced.cost(s)
    batched = {"input": s["batch_input"], "output": s["batch_output"]}
    cost -= (1.0 - BATCH_PRICE_FACTOR) * priced.cost(batched)
    return cost, str(price.get("currency", "USD"))


def usage_table(records: list[EpisodeRecord], run_dir: Path) -> str:
    """Per model: episodes, requests, retries, tokens, time in calls, and cost when priced."""
    stats = usage_stats(records)
    if not stats:
        return ""
    prices = _prices(run_dir)
    header = [
        "model",
        "episodes",
        "requests",
        "retries",
        "input tokens",
        "output tokens",
        "mean call s",
        "failed episodes",
    ]
    over = any(s["over_context"] for s in stats.values())
    if over:
        header.append("over context")
    if prices:
        header.append("cost")
    rows = []
    total_cost: dict[str, float] = defaultdict(float)
    for label, s in sorted(stats.items()):
        row = _usage_row(label, s)
        if over:
            row.append(str(s["over_context"]))
        if prices:
            price = prices.get(label)
            if price:
                cost, currency = _cost(s, price)
                total_cost[currency] += cost
                row.append(f"{cost:,.4f} {currency}")
            else:
                row.append("–")
        rows.append(row)
    parts = ["## Models: usage and cost", "", markdown_table(header, rows), ""]
    cached = sum(s["cached"] for s in stats.values())
    if cached:
        calls = sum(s["requests"] for s in stats.values())
        parts += [f"{cached} of {calls} model calls from the cache.", ""]
    if total_cost:
        parts.append(
            "Total cost: " + "; ".join(f"{v:,.4f} {c}" for c, v in sorted(total_cost.items()))
        )
        parts.append("")
    return "\n".join(parts)


def _held(calls: ModelCalls) -> str:
    """How a role's replies in one episode were held to the legal actions: a reply whose
    constraint was sent but not applied by the server (``not_honoured``) was not held."""
    ignored = calls.not_honoured
    held = calls.constrained - ignored
    free = calls.unconstrained + ignored
    if held and free:
        return "partly"
    if held:
        return "held"
    if ignored:
        return "not honoured by the server"
    return "not expressible" if free else "free"


def constrained_table(records: list[EpisodeRecord]) -> str:
    """Constrained and free play side by side: per game, model and role, the episodes whose
    replies were held to the legal actions (``constrain: legal_actions``) and those played
    free. Empty when no episode asked for a constraint."""
    groups: dict[tuple[str, str, str, str], list[EpisodeRecord]] = defaultdict(list)
    asked = False
    for r in records:
        spec_players = r.spec.get("players") or {}
        for role, label in r.pairing.items():
            if (spec_players.get(role) or {}).get("kind") != "llm":
                continue
            mode = _held(r.model_calls.get(role) or ModelCalls())
            asked = asked or mode != "free"
            groups[(r.game, label, role, mode)].append(r)
    if not asked:
        return ""
    header = ["game", "model", "role", "replies", "episodes", "success %", "main", "error %"]
    rows = [
        [md(game), md(label), md(role), mode]
        + [_cell(group, m) for m in ("episodes", "success %", "main", "error %")]
        for (game, label, role, mode), group in sorted(groups.items())
    ]
    return "\n".join(
        [
            "## Constrained and free play",
            "",
            markdown_table(header, rows),
            "",
            *_not_honoured(records),
        ]
    )


def _not_honoured(records: list[EpisodeRecord]) -> list[str]:
    """Per model and role: the constrained calls whose reply was outside the legal set, the
    constraint sent but not applied by the server (a field it does not know, ignored)."""
    counts: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0])
    for r in records:
        for role, label in r.pairing.items():
            calls = r.model_calls.get(role)
            if calls is not None and calls.constrained:
                counts[(label, role)][0] += calls.constrained
                counts[(label, role)][1] += calls.not_honoured
    if not any(ignored for _, ignored in counts.values()):
        return []
    header = ["model", "role", "constrained calls", "not honoured by the server"]
    rows = [
        [md(label), md(role), str(sent), str(ignored)]
        for (label, role), (sent, ignored) in sorted(counts.items())
    ]
    return [
        "Constraint not honoured by the server: the constraint was sent, and the reply was "
        "outside the legal set (a server that ignores a field it does not know answers as if "
        "unconstrained; `constrain_via` chooses the form, docs/models.md).",
        "",
        markdown_table(header, rows),
        "",
    ]


def report(records: list[EpisodeRecord], run_dir: Path) -> str:
    """The pairing tables and the model usage table (empty when there is nothing to show)."""
    tables = (pairing_tables(records), constrained_table(records), usage_table(records, run_dir))
    parts = [p for p in tables if p]
    return "\n".join(parts)
