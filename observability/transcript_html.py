"""Readable HTML transcripts of a run's episodes, for any game: the dashboard's episode page
as static files (``parley dashboard --export RUN``; clem's report writes them too).

``write_html(run_dir)`` writes ``run_dir/html/index.html`` (every episode with its outcome and
main score) and one page per episode: who said what to whom, in order, with the images each
player was shown (from ``run_dir/images/<sha256>.png``), system prompts folded away, feedback,
violations and game-master notes, visibility marks, disclosures of private facts highlighted,
and the states the game went through. One column per participant, the game master first, as in
clembench's transcripts.

A game adds its own material through ``extras``: a function ``(record, messages, html_dir) ->
HTML`` (e.g. MapWorld draws the walked path on the map and returns an ``<img>``), given per game
name or as one function deciding by the record.
"""

from __future__ import annotations

import html
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from parley.observability.dashboard import episode as shown
from parley.records import EpisodeRecord, parse_message, read_records

ExtraFn = Callable[[EpisodeRecord, list[dict[str, Any]], Path], str]
Extras = Mapping[str, ExtraFn] | Callable[[EpisodeRecord], ExtraFn | None] | None

GM = shown.GM
PALETTE = ("#e8f0fe", "#fdf0e3", "#e9f7ec", "#f6e8fb", "#fff8d6", "#e6f6f8")

CSS = """
body { font-family: system-ui, sans-serif; margin: 1.5em; color: #222; }
h1 { font-size: 1.3em; } h2 { font-size: 1.1em; margin-top: 1.5em; }
table { border-collapse: collapse; }
table.meta td, table.meta th, table.index td, table.index th { border: 1px solid #ccc; padding: 3px 8px; text-align: left; }
table.transcript { width: 100%; table-layout: fixed; }
table.transcript th { background: #f3f3f3; padding: 4px; border-bottom: 2px solid #bbb; }
table.transcript td { vertical-align: top; padding: 4px; border-bottom: 1px solid #eee; }
td.n, th.n { width: 2.5em; color: #888; font-size: 0.85em; }
.msg { border-radius: 6px; padding: 6px 8px; white-space: pre-wrap; word-wrap: break-word; font-size: 0.92em; }
.who { font-size: 0.78em; color: #555; margin-bottom: 2px; font-weight: 600; }
.violation { background: #fde2e2; border: 1px solid #e99; }
.note { background: #f4f4f4; color: #555; font-size: 0.85em; }
.private { border-left: 4px solid #c77; }
img.stim { max-width: 260px; max-height: 220px; border: 1px solid #bbb; margin: 3px 3px 0 0; vertical-align: top; }
details { margin: 2px 0; } summary { cursor: pointer; color: #446; font-size: 0.85em; }
.outcome-success { color: #1a7f37; font-weight: 600; } .outcome-lost { color: #9a6700; font-weight: 600; }
.outcome-aborted, .outcome-error { color: #cf222e; font-weight: 600; }
figure { display: inline-block; margin: 0 1em 1em 0; vertical-align: top; } figcaption { font-size: 0.85em; color: #444; }
.vis { font-size: 0.8em; border-radius: 6px; padding: 0 5px; font-weight: normal; background: #e2ecfd; }
.vis-private { background: #fde2e2; } .vis-public { background: #e3f6e5; }
.disclosed { outline: 2px solid #d11; } .leak { color: #a40e26; font-weight: 600; }
"""


def load_messages(run_dir: Path, record: EpisodeRecord) -> list[dict[str, Any]]:
    """An episode's messages, in order: from ``transcripts.jsonl`` at the record's byte range,
    or from ``transcripts/<episode>.jsonl`` (one file per episode, older runs)."""
    where = record.transcript
    single = run_dir / "transcripts.jsonl"
    if where and single.exists():
        with single.open("rb") as handle:
            handle.seek(where.offset)
            lines = handle.read(where.length).splitlines()
    else:
        per_episode = run_dir / "transcripts" / f"{record.episode}.jsonl"
        if not per_episode.exists():
            return []
        lines = per_episode.read_bytes().splitlines()
    messages = [m for m in map(parse_message, lines) if m is not None]  # past damaged lines
    return [m for m in messages if m.get("episode", record.episode) == record.episode]


def _e(text: Any) -> str:
    return html.escape(str(text))


def _parts(parts: Iterable[dict[str, Any]], image_src: Callable[[str], str]) -> str:
    """Displayed parts (``{"text": …}`` or ``{"image": sha}``) as HTML, text escaped."""
    out = []
    for part in parts:
        if "image" in part:
            # The image's name comes from the transcript: escaped, it cannot close the attribute.
            src = _e(image_src(part["image"]))
            out.append(
                f'<a href="{src}"><img class="stim" src="{src}" alt="image {_e(part["image"][:12])}"></a>'
            )
        elif part.get("text"):
            out.append(_e(part["text"]))
    return "\n".join(out)


def _cell(who: str, body: str, css: str = "", color: str = "", badge: str = "") -> str:
    style = f' style="background:{color}"' if color else ""
    mark = f' <span class="vis vis-{_e(badge)}">{_e(badge)}</span>' if badge else ""
    return f'<div class="msg {css}"{style}><div class="who">{_e(who)}{mark}</div>{body}</div>'


def _rows(
    messages: list[dict[str, Any]],
    roles: list[str],
    image_src: Callable[[str], str],
    disclosed: dict[str, list[str]] | None = None,
) -> list[tuple[str, str]]:
    """(column, cell HTML) per displayed message: the dashboard's episode items
    (:func:`parley.observability.dashboard.episode.items`), drawn as static HTML."""
    colors = {role: PALETTE[i % len(PALETTE)] for i, role in enumerate(roles)}
    rows: list[tuple[str, str]] = []
    for item in shown.mark(shown.items(messages), disclosed or {}):
        kind = item["kind"]
        if kind == "started":
            continue
        body = []
        if item.get("system"):
            body.append(f"<details><summary>system prompt</summary>{_e(item['system'])}</details>")
        body.append(_parts(item["parts"], image_src))
        if item.get("data"):
            if kind == "note":
                body.append(f"<details><summary>data</summary>{_e(item['data'])}</details>")
            else:
                body.append(f"<small>{_e(item['data'])}</small>")
        css = {"violation": "violation", "note": "note", "finished": "note"}.get(kind, "")
        if item["visibility"] == "private" and kind not in ("request", "reply"):
            css += " private"
        if item.get("disclosed"):
            css += " disclosed"
            body.append(f"<div class='leak'>discloses {_e('; '.join(item['disclosed']))}</div>")
        column = item["column"] if item["column"] in roles else GM
        color = colors.get(column, "") if kind == "reply" else ""
        badge = "" if kind in ("request", "reply", "finished") else item["visibility"]
        rows.append((column, _cell(item["who"], "\n".join(body), css.strip(), color, badge)))
    return rows


def _states(states: list[dict[str, Any]], image_src: Callable[[str], str]) -> str:
    """The states an episode went through, as a strip of figures (the dashboard's timeline)."""
    figures = []
    for state in states:
        images = "".join(
            f'<a href="{image_src(sha)}"><img class="stim" src="{image_src(sha)}" alt="state {state["step"]}"></a>'
            for sha in state["images"]
        )
        caption = f"state {state['step'] + 1} · turn {state['turn']}" + (
            " · final" if state["final"] else ""
        )
        text = f"<pre>{_e(state['text'])}</pre>" if state["text"] and not images else ""
        figures.append(f"<figure>{images}{text}<figcaption>{_e(caption)}</figcaption></figure>")
    return "".join(figures)


def episode_html(
    record: EpisodeRecord,
    messages: list[dict[str, Any]],
    *,
    image_src: Callable[[str], str],
    extra: str = "",
) -> str:
    """One episode's page."""
    roles = list(record.pairing)
    columns = [GM, *roles]
    rows = _rows(messages, roles, image_src, shown.disclosures(record, messages))
    states = _states(shown.states(messages), image_src)
    outcome = record.outcome
    settings = record.spec.get("settings") or {}
    meta = [
        ("episode", record.episode),
        ("game", record.game),
        ("seed", record.seed),
        ("pairing", ", ".join(f"{r}={p}" for r, p in record.pairing.items())),
        ("settings", ", ".join(f"{k}={v}" for k, v in settings.items())),
        (
            "outcome",
            f'<span class="outcome-{_e(outcome)}">{_e(outcome)}</span> {_e(record.reason)}',
        ),
        ("turns", record.turns),
    ]
    meta_html = "".join(
        f"<tr><th>{_e(k)}</th><td>{v if k == 'outcome' else _e(v)}</td></tr>" for k, v in meta
    )
    scores = {"main": record.main_score, **record.scores}
    score_html = "".join(
        f"<tr><th>{_e(k)}</th><td>{'–' if v is None else _e(round(v, 3) if isinstance(v, float) else v)}</td></tr>"
        for k, v in scores.items()
    )
    head = "".join(f"<th>{_e('game master' if c == GM else c)}</th>" for c in columns)
    body = []
    for i, (column, cell) in enumerate(rows, 1):
        tds = "".join(f"<td>{cell if c == column else ''}</td>" for c in columns)
        body.append(f'<tr><td class="n">{i}</td>{tds}</tr>')
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{_e(record.episode)}</title>"
        f"<style>{CSS}</style></head><body>"
        f"<p><a href='index.html'>← all episodes</a></p><h1>{_e(record.episode)}</h1>"
        f"<table class='meta'>{meta_html}</table>"
        f"<h2>Scores</h2><table class='meta'>{score_html}</table>"
        + (f"<h2>Game view</h2>{extra}" if extra else "")
        + (f"<h2>States</h2><div class='states'>{states}</div>" if states else "")
        + f"<h2>Transcript</h2><table class='transcript'><tr><th class='n'>#</th>{head}</tr>{''.join(body)}</table>"
        "</body></html>"
    )


def _extra_for(extras: Extras, record: EpisodeRecord) -> ExtraFn | None:
    if extras is None:
        return None
    if isinstance(extras, Mapping):
        return extras.get(record.game)
    return extras(record)


def page_name(episode: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in episode) + ".html"


def write_html(
    run_dir: str | Path,
    records: list[EpisodeRecord] | None = None,
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
    for record in sorted(records, key=lambda r: (r.game, r.episode)):
        messages = load_messages(run, record)
        extra = ""
        fn = _extra_for(extras, record)
        if fn is not None:
            try:
                extra = fn(record, messages, html_dir)
            except Exception as exc:  # an extra is decoration; the transcript matters more
                extra = f"<p class='violation'>could not draw the game view: {_e(type(exc).__name__)}: {_e(exc)}</p>"
        name = page_name(record.episode)
        (html_dir / name).write_text(
            episode_html(record, messages, image_src=image_src, extra=extra), encoding="utf-8"
        )
        settings = record.spec.get("settings") or {}
        main = record.main_score
        index_rows.append(
            f"<tr><td><a href='{name}'>{_e(record.episode)}</a></td><td>{_e(record.game)}</td>"
            f"<td>{_e(', '.join(f'{k}={v}' for k, v in settings.items()))}</td>"
            f"<td>{_e(', '.join(f'{r}={p}' for r, p in record.pairing.items()))}</td>"
            f"<td class='outcome-{_e(record.outcome)}'>{_e(record.outcome)}</td>"
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
