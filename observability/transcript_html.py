"""Readable HTML transcripts of a run's episodes, for any game.

``write_html(run_dir)`` writes ``run_dir/html/index.html`` (every episode with its outcome and
main score) and one page per episode: who said what to whom, in order, with the images each
player was shown (from ``run_dir/images/<sha256>.png``), system prompts folded away, feedback,
violations and game-master notes. One column per participant, the game master first, as in
clembench's transcripts.

A game adds its own material through ``extras``: a function ``(record, messages, html_dir) ->
HTML`` (e.g. MapWorld draws the walked path on the map and returns an ``<img>``), given per game
name or as one function deciding by the record.
"""

from __future__ import annotations

import html
import json
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from parley.records import read_records

ExtraFn = Callable[[dict[str, Any], list[dict[str, Any]], Path], str]
Extras = Mapping[str, ExtraFn] | Callable[[dict[str, Any]], ExtraFn | None] | None

GM = "game master"
PALETTE = ("#e8f0fe", "#fdf0e3", "#e9f7ec", "#f6e8fb", "#fff8d6", "#e6f6f8")

CSS = """
body { font-family: system-ui, sans-serif; margin: 1.5em; color: #222; }
h1 { font-size: 1.3em; } h2 { font-size: 1.1em; margin-top: 1.5em; }
table { border-collapse: collapse; }
table.meta td, table.meta th, table.index td, table.index th { border: 1px solid #ccc; padding: 3px 8px; text-align: left; }
table.transcript { width: 100%; table-layout: fixed; }
table.transcript th { background: #f3f3f3; padding: 4px; border-bottom: 2px solid #bbb; }
table.transcript td { vertical-align: top; padding: 4px; border-bottom: 1px solid #eee; }
td.n { width: 2.5em; color: #888; font-size: 0.85em; }
.msg { border-radius: 6px; padding: 6px 8px; white-space: pre-wrap; word-wrap: break-word; font-size: 0.92em; }
.who { font-size: 0.78em; color: #555; margin-bottom: 2px; font-weight: 600; }
.violation { background: #fde2e2; border: 1px solid #e99; }
.note { background: #f4f4f4; color: #555; font-size: 0.85em; }
.private { border-left: 4px solid #c77; }
img.stim { max-width: 260px; max-height: 220px; border: 1px solid #bbb; margin: 3px 3px 0 0; vertical-align: top; }
details { margin: 2px 0; } summary { cursor: pointer; color: #446; font-size: 0.85em; }
.outcome-success { color: #1a7f37; font-weight: 600; } .outcome-lost { color: #9a6700; font-weight: 600; }
.outcome-aborted, .outcome-error { color: #cf222e; font-weight: 600; }
figure { display: inline-block; margin: 0 1em 1em 0; } figcaption { font-size: 0.85em; color: #444; }
"""


def load_messages(run_dir: Path, record: dict[str, Any]) -> list[dict[str, Any]]:
    """An episode's messages, in order: from ``transcripts.jsonl`` at the record's byte range,
    or from ``transcripts/<episode>.jsonl`` (one file per episode, older runs)."""
    where = record.get("transcript")
    single = run_dir / "transcripts.jsonl"
    if where and single.exists():
        with single.open("rb") as handle:
            handle.seek(int(where["offset"]))
            lines = handle.read(int(where["length"])).splitlines()
    else:
        per_episode = run_dir / "transcripts" / f"{record['episode']}.jsonl"
        if not per_episode.exists():
            return []
        lines = per_episode.read_bytes().splitlines()
    messages = [json.loads(line) for line in lines if line.strip()]
    return [m for m in messages if m.get("episode", record["episode"]) == record["episode"]]


def _e(text: Any) -> str:
    return html.escape(str(text))


def _parts(parts: Iterable[dict[str, Any]], image_src: Callable[[str], str]) -> str:
    out = []
    for part in parts:
        if part.get("type") == "image":
            src = image_src(part["sha256"])
            out.append(
                f'<a href="{src}"><img class="stim" src="{src}" alt="image {part["sha256"][:12]}"></a>'
            )
        elif part.get("text"):
            out.append(_e(part["text"]))
    return "\n".join(out)


def _cell(who: str, body: str, css: str = "", color: str = "") -> str:
    style = f' style="background:{color}"' if color else ""
    return f'<div class="msg {css}"{style}><div class="who">{_e(who)}</div>{body}</div>'


def _rows(
    messages: list[dict[str, Any]], roles: list[str], image_src: Callable[[str], str]
) -> list[tuple[str, str]]:
    """(column, cell HTML) per displayed message."""
    colors = {role: PALETTE[i % len(PALETTE)] for i, role in enumerate(roles)}
    rows: list[tuple[str, str]] = []
    for m in messages:
        kind = m.get("kind")
        if kind == "turn_request":
            role = m.get("role", "")
            body = []
            if m.get("system"):
                body.append(f"<details><summary>system prompt</summary>{_e(m['system'])}</details>")
            for said in m.get("incoming", []):
                body.append(f"<b>{_e(said['sender'])}:</b> {_parts(said['content'], image_src)}")
            if m.get("observation"):
                body.append(_parts(m["observation"], image_src))
            if m.get("feedback"):
                body.append(f"<i>feedback:</i> {_e(m['feedback'])}")
            if m.get("legal_actions"):
                body.append(f"<i>actions:</i> {_e(', '.join(m['legal_actions']))}")
            rows.append((GM, _cell(f"GM → {role} (turn {m.get('turn', '')})", "\n".join(body))))
        elif kind == "turn_response":
            role = m.get("role", "")
            who = f"{role} → GM" + (f" · {m['model']}" if m.get("model") else "")
            rows.append((role, _cell(who, _e(m.get("text", "")), color=colors.get(role, ""))))
        elif kind == "transcript_event" and m.get("event") in ("violation", "note", "action"):
            event = m["event"]
            text = _parts(m.get("content", []), image_src)
            data = m.get("data") or {}
            if data and event != "note":
                text += f"\n<small>{_e(json.dumps(data))}</small>"
            elif data and event == "note":
                text += f"<details><summary>data</summary>{_e(json.dumps(data))}</details>"
            css = {"violation": "violation", "note": "note"}.get(event, "")
            if m.get("visibility") == "private":
                css += " private"
            rows.append((GM, _cell(f"{event} · {m.get('from_role', '')}", text, css)))
        elif kind == "episode_finished":
            body = f"{_e(m.get('outcome'))}: {_e(m.get('reason', ''))}"
            rows.append((GM, _cell("episode finished", body, "note")))
    return rows


def episode_html(
    record: dict[str, Any],
    messages: list[dict[str, Any]],
    *,
    image_src: Callable[[str], str],
    extra: str = "",
) -> str:
    """One episode's page."""
    roles = list(record.get("pairing", {}))
    columns = [GM, *roles]
    rows = _rows(messages, roles, image_src)
    outcome = record.get("outcome", "")
    settings = (record.get("spec") or {}).get("settings", {})
    meta = [
        ("episode", record["episode"]),
        ("game", record.get("game", "")),
        ("seed", record.get("seed", "")),
        ("pairing", ", ".join(f"{r}={p}" for r, p in record.get("pairing", {}).items())),
        ("settings", ", ".join(f"{k}={v}" for k, v in settings.items())),
        (
            "outcome",
            f'<span class="outcome-{_e(outcome)}">{_e(outcome)}</span> {_e(record.get("reason", ""))}',
        ),
        ("turns", record.get("turns", "")),
    ]
    meta_html = "".join(
        f"<tr><th>{_e(k)}</th><td>{v if k == 'outcome' else _e(v)}</td></tr>" for k, v in meta
    )
    scores = record.get("scores") or {}
    score_html = "".join(
        f"<tr><th>{_e(k)}</th><td>{'–' if v is None else _e(round(v, 3) if isinstance(v, float) else v)}</td></tr>"
        for k, v in scores.items()
    )
    head = "".join(f"<th>{_e(c)}</th>" for c in columns)
    body = []
    for i, (column, cell) in enumerate(rows, 1):
        tds = "".join(f"<td>{cell if c == column else ''}</td>" for c in columns)
        body.append(f'<tr><td class="n">{i}</td>{tds}</tr>')
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{_e(record['episode'])}</title>"
        f"<style>{CSS}</style></head><body>"
        f"<p><a href='index.html'>← all episodes</a></p><h1>{_e(record['episode'])}</h1>"
        f"<table class='meta'>{meta_html}</table>"
        f"<h2>Scores</h2><table class='meta'>{score_html}</table>"
        + (f"<h2>Game view</h2>{extra}" if extra else "")
        + f"<h2>Transcript</h2><table class='transcript'><tr><th class='n'>#</th>{head}</tr>{''.join(body)}</table>"
        "</body></html>"
    )


def _extra_for(extras: Extras, record: dict[str, Any]) -> ExtraFn | None:
    if extras is None:
        return None
    if isinstance(extras, Mapping):
        return extras.get(record.get("game", ""))
    return extras(record)


def page_name(episode: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in episode) + ".html"


def write_html(
    run_dir: str | Path,
    records: list[dict[str, Any]] | None = None,
    *,
    extras: Extras = None,
    out: str = "html",
) -> Path:
    """Write a page per episode (of ``records``, default: all of the run) and an index into
    ``run_dir/<out>/``; returns the index path. A failing extra is reported on its page, not
    raised: a transcript is still worth having without it."""
    run = Path(run_dir)
    if records is None:
        records = read_records(run)
    html_dir = run / out
    html_dir.mkdir(parents=True, exist_ok=True)

    def image_src(sha: str) -> str:
        return f"../images/{sha}.png"

    index_rows = []
    for record in sorted(records, key=lambda r: (r.get("game", ""), r["episode"])):
        messages = load_messages(run, record)
        extra = ""
        fn = _extra_for(extras, record)
        if fn is not None:
            try:
                extra = fn(record, messages, html_dir)
            except Exception as exc:  # an extra is decoration; the transcript matters more
                extra = f"<p class='violation'>could not draw the game view: {_e(type(exc).__name__)}: {_e(exc)}</p>"
        name = page_name(record["episode"])
        (html_dir / name).write_text(
            episode_html(record, messages, image_src=image_src, extra=extra), encoding="utf-8"
        )
        settings = (record.get("spec") or {}).get("settings", {})
        main = record.get("main_score", (record.get("scores") or {}).get("main"))
        index_rows.append(
            f"<tr><td><a href='{name}'>{_e(record['episode'])}</a></td><td>{_e(record.get('game', ''))}</td>"
            f"<td>{_e(', '.join(f'{k}={v}' for k, v in settings.items()))}</td>"
            f"<td>{_e(', '.join(f'{r}={p}' for r, p in record.get('pairing', {}).items()))}</td>"
            f"<td class='outcome-{_e(record.get('outcome', ''))}'>{_e(record.get('outcome', ''))}</td>"
            f"<td>{'–' if main is None else f'{main:.1f}'}</td></tr>"
        )
    index = html_dir / "index.html"
    index.write_text(
        f"<!doctype html><html><head><meta charset='utf-8'><title>{_e(run.name)}</title><style>{CSS}</style></head><body>"
        f"<h1>Transcripts: {_e(run.name)}</h1><p>{len(index_rows)} episodes.</p>"
        "<table class='index'><tr><th>episode</th><th>game</th><th>settings</th><th>pairing</th><th>outcome</th><th>main</th></tr>"
        + "".join(index_rows)
        + "</table></body></html>",
        encoding="utf-8",
    )
    return index
