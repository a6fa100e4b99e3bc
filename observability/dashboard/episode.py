"""One episode as the pages show it: transcript items in columns, and the states to step through.

Both the live dashboard and the static export (``observability/transcript_html.py``) build on
:func:`items` and :func:`states`, which take an episode's messages as JSON objects (as
``transcripts.jsonl`` holds them, or a bus message dumped with images by reference), so a
finished episode of any family and a running one look the same.

Example::

    from parley.observability.dashboard.episode import items, states

    for item in items(messages):
        print(item["column"], item["who"], [p.get("text") for p in item["parts"]])
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from parley.observability.leaks import episode_disclosures
from parley.records import EpisodeRecord

GM = "gm"
MAX_DATA_CHARS = 2000


def _parts(parts: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Text and image parts, images by sha only (the page fetches ``/images/<sha>``)."""
    out: list[dict[str, Any]] = []
    for part in parts or ():
        if part.get("type") == "image" and part.get("sha256"):
            out.append({"image": part["sha256"]})
        elif part.get("text"):
            out.append({"text": str(part["text"])})
    return out


def _data(data: dict[str, Any] | None) -> str:
    if not data:
        return ""
    text = json.dumps(data, ensure_ascii=False, default=str)
    return text if len(text) <= MAX_DATA_CHARS else text[:MAX_DATA_CHARS] + "…"


def item(message: dict[str, Any]) -> dict[str, Any] | None:
    """The displayed form of one message, or None for messages the transcript does not show.

    ``column`` is ``gm`` or a role; ``visibility`` is ``private``, ``shared`` or ``public``;
    ``parts`` hold ``{"text": …}`` or ``{"image": sha}``; all text is untrusted and is only ever
    inserted as text.
    """
    kind = message.get("kind")
    turn = message.get("turn", 0)
    if kind == "turn_request":
        role = message.get("role", "")
        parts: list[dict[str, Any]] = []
        for said in message.get("incoming") or []:
            parts.append({"text": f"{said.get('sender', '')}: "})
            parts += _parts(said.get("content") or [])
        parts += _parts(message.get("observation") or [])
        if message.get("feedback"):
            parts.append({"text": f"feedback: {message['feedback']}"})
        if message.get("legal_actions"):
            parts.append({"text": f"actions: {', '.join(map(str, message['legal_actions']))}"})
        return {
            "kind": "request",
            "column": GM,
            "who": f"GM → {role} (turn {turn})",
            "visibility": "private",
            "turn": turn,
            "parts": parts,
            "system": message.get("system") or "",
        }
    if kind == "turn_response":
        role = message.get("role", "")
        who = f"{role} → GM" + (f" · {message['model']}" if message.get("model") else "")
        return {
            "kind": "reply",
            "column": role,
            "who": who,
            "visibility": "private",
            "turn": turn,
            "parts": [{"text": str(message.get("text", ""))}],
        }
    if kind == "transcript_event":
        event = message.get("event", "")
        if event == "prompt":
            return None
        sender, recipient = message.get("from_role", ""), message.get("to_role", "")
        column = sender if event == "utterance" and sender not in ("", "gm") else GM
        who = f"{event} · {sender}" + (f" → {recipient}" if recipient else "")
        return {
            "kind": event,
            "column": column,
            "who": who,
            "visibility": message.get("visibility", "shared"),
            "turn": turn,
            "parts": _parts(message.get("content") or []),
            "data": _data(message.get("data")),
            "id": message.get("id", ""),
        }
    if kind == "episode_started":
        return {
            "kind": "started",
            "column": GM,
            "who": "episode started",
            "visibility": "public",
            "turn": 0,
            "parts": [{"text": str(message.get("game", ""))}],
        }
    if kind == "episode_finished":
        text = f"{message.get('outcome', '')}: {message.get('reason', '')}"
        return {
            "kind": "finished",
            "column": GM,
            "who": "episode finished",
            "visibility": "public",
            "turn": turn,
            "parts": [{"text": text}],
        }
    return None


def state(message: dict[str, Any]) -> dict[str, Any]:
    """The displayed form of one ``state_update``."""
    parts = _parts(message.get("content") or [])
    return {
        "step": message.get("step", 0),
        "turn": message.get("turn", 0),
        "final": bool(message.get("final", False)),
        "visibility": message.get("visibility", "public"),
        "progress": message.get("progress"),
        "scores": message.get("scores") or {},
        "text": "\n".join(p["text"] for p in parts if "text" in p),
        "images": [p["image"] for p in parts if "image" in p],
        "data": _data(message.get("data")),
    }


def items(messages: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The transcript items of an episode's messages, in order."""
    return [shown for m in messages if (shown := item(m)) is not None]


def states(messages: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The states to step through: the episode's published states where it has them; else (a
    run recorded without state publishing) each observation that showed an image, so every
    family's finished episode still has a timeline."""
    messages = list(messages)
    published = [state(m) for m in messages if m.get("kind") == "state_update"]
    if published:
        return published
    found: list[dict[str, Any]] = []
    for m in messages:
        if m.get("kind") != "turn_request":
            continue
        images = [p["image"] for p in _parts(m.get("observation") or []) if "image" in p]
        if images:
            found.append(
                {
                    "step": len(found),
                    "turn": m.get("turn", 0),
                    "final": False,
                    "visibility": "private",
                    "progress": None,
                    "scores": {},
                    "text": f"what {m.get('role', '')} was shown",
                    "images": images,
                    "data": "",
                }
            )
    return found


def disclosures(record: EpisodeRecord, messages: Iterable[dict[str, Any]]) -> dict[str, list[str]]:
    """Message id → the private facts it disclosed (for highlighting), from the leak detector."""
    found: dict[str, list[str]] = {}
    for d in episode_disclosures(record, messages):
        found.setdefault(d.message_id, []).append(f"{d.fact} ({d.kind}: {d.match})")
    return found


def mark(shown: list[dict[str, Any]], found: dict[str, list[str]]) -> list[dict[str, Any]]:
    """``shown`` with ``disclosed`` set on the items that disclosed a private fact."""
    for entry in shown:
        facts = found.get(entry.get("id", ""))
        if facts:
            entry["disclosed"] = facts
    return shown
