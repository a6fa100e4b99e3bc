"""Pairing tables (each metric by who played which role) and the model usage and cost table.

Generic over games: the first role of a game gives the rows, the second the columns (solver ×
expert for COMMA); a game with more roles gets one set of tables per combination of the
others. Shown for games played by more than one pairing.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import yaml

from parley.records import main_score
from parley.runtime.report import fmt, markdown_table, mean
from parley.runtime.reports.intervals import INTERVALS_NOTE, mean_cell, rate_cell


def _metrics(records: list[dict[str, Any]]) -> list[str]:
    keys: set[str] = set()
    has_main = False
    for r in records:
        keys.update(k for k, v in (r.get("scores") or {}).items() if isinstance(v, int | float))
        has_main = has_main or isinstance(main_score(r), int | float)
    keys.discard("main")  # a schema-1 record's main score, read through main_score
    return (["main"] if has_main else []) + sorted(keys)


def _cell(group: list[dict[str, Any]], metric: str) -> str:
    if not group:
        return ""
    if metric == "episodes":
        return str(len(group))
    # Shares of episodes: Wilson intervals; mean scores: bootstrap (runtime/reports/intervals.py).
    if metric == "success %":
        return rate_cell(sum(r["outcome"] == "success" for r in group), len(group))
    if metric == "error %":
        return rate_cell(sum(r["outcome"] == "error" for r in group), len(group))
    if metric == "replies":
        return fmt(mean([r["turns"] for r in group]))
    if metric == "main":
        return mean_cell([main_score(r) for r in group])
    return mean_cell([(r.get("scores") or {}).get(metric) for r in group])


def pairing_tables(records: list[dict[str, Any]]) -> str:
    """Per game, one table per metric: rows = first role's player, columns = second role's."""
    by_game: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in records:
        by_game[r["game"]].append(r)
    parts: list[str] = []
    for game, group in sorted(by_game.items()):
        roles = list(group[0]["pairing"])
        if len(roles) < 2 or len({tuple(r["pairing"].values()) for r in group}) < 2:
            continue
        row_role, col_role, rest = roles[0], roles[1], roles[2:]
        by_rest: dict[tuple[str, ...], list[dict[str, Any]]] = defaultdict(list)
        for r in group:
            by_rest[tuple(r["pairing"].get(x, "") for x in rest)].append(r)
        metrics = ["episodes", "success %", *_metrics(group), "replies", "error %"]
        for fixed, subset in sorted(by_rest.items()):
            rows = sorted({r["pairing"][row_role] for r in subset})
            cols = sorted({r["pairing"][col_role] for r in subset})
            cells: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
            for r in subset:
                cells[(r["pairing"][row_role], r["pairing"][col_role])].append(r)
            title = f"### {game}: {row_role} (rows) × {col_role} (columns)"
            if rest:
                title += " with " + ", ".join(f"{k}={v}" for k, v in zip(rest, fixed, strict=True))
            parts += [title, ""]
            for metric in metrics:
                header = [f"{metric}: {row_role} \\ {col_role}", *cols]
                body = [
                    [row] + [_cell(cells.get((row, col), []), metric) for col in cols]
                    for row in rows
                ]
                parts += [markdown_table(header, body), ""]
    if not parts:
        return ""
    return "\n".join(["## Pairings", "", INTERVALS_NOTE, "", *parts])


def _prices(run_dir: Path) -> dict[str, dict[str, Any]]:
    """Model name → price entry, from the run's resolved config."""
    try:
        config = yaml.safe_load((run_dir / "config.yaml").read_text()) or {}
    except (OSError, yaml.YAMLError):
        return {}
    models = config.get("models") or {}
    return {
        name: m["price"] for name, m in models.items() if isinstance(m, dict) and m.get("price")
    }


def usage_table(records: list[dict[str, Any]], run_dir: Path) -> str:
    """Per model: episodes, requests, retries, tokens, time in calls, and cost when priced."""
    stats: dict[str, dict[str, Any]] = {}
    for r in records:
        spec_players = (r.get("spec") or {}).get("players") or {}
        for role, label in r["pairing"].items():
            if (spec_players.get(role) or {}).get("kind") != "llm":
                continue
            s = stats.setdefault(
                label,
                {
                    "episodes": set(),
                    "requests": 0,
                    "attempts": 0,
                    "retries": defaultdict(int),
                    "input": 0,
                    "output": 0,
                    "call_s": 0.0,
                    "sources": set(),
                    "errors": 0,
                },
            )
            s["episodes"].add(r["episode"])
            tokens = (r.get("tokens") or {}).get(role) or {}
            s["input"] += int(tokens.get("input", 0))
            s["output"] += int(tokens.get("output", 0))
            if role in (r.get("token_source") or {}):
                s["sources"].add(r["token_source"][role])
            calls = (r.get("model_calls") or {}).get(role) or {}
            s["requests"] += int(calls.get("requests", 0))
            s["attempts"] += int(calls.get("attempts", 0))
            s["call_s"] += float(calls.get("call_s", 0.0))
            for kind, n in (calls.get("retries") or {}).items():
                s["retries"][kind] += n
            if r["outcome"] == "error" and r.get("reason", "").startswith(f"{role} failed"):
                s["errors"] += 1
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
    if prices:
        header.append("cost")
    rows = []
    total_cost: dict[str, float] = defaultdict(float)
    for label, s in sorted(stats.items()):
        retries = sum(s["retries"].values())
        detail = ", ".join(f"{k} {n}" for k, n in sorted(s["retries"].items()))
        sources = ", ".join(sorted(s["sources"]))
        row = [
            label,
            str(len(s["episodes"])),
            str(s["requests"]),
            f"{retries} ({detail})" if retries else "0",
            f"{s['input']:,}" + (f" ({sources})" if sources and sources != "backend" else ""),
            f"{s['output']:,}",
            fmt(s["call_s"] / s["attempts"], 3) if s["attempts"] else "–",
            str(s["errors"]),
        ]
        if prices:
            price = prices.get(label)
            if price:
                cost = (
                    s["input"] * float(price["input_per_mtok"])
                    + s["output"] * float(price["output_per_mtok"])
                ) / 1e6
                currency = price.get("currency", "USD")
                total_cost[currency] += cost
                row.append(f"{cost:,.4f} {currency}")
            else:
                row.append("–")
        rows.append(row)
    parts = ["## Models: usage and cost", "", markdown_table(header, rows), ""]
    if total_cost:
        parts.append(
            "Total cost: " + "; ".join(f"{v:,.4f} {c}" for c, v in sorted(total_cost.items()))
        )
        parts.append("")
    return "\n".join(parts)


def report(records: list[dict[str, Any]], run_dir: Path) -> str:
    """The pairing tables and the model usage table (empty when there is nothing to show)."""
    parts = [p for p in (pairing_tables(records), usage_table(records, run_dir)) if p]
    return "\n".join(parts)
