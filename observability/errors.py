"""Error analysis over transcripts: rule-based detectors for the four failure kinds of seed 001
(fig. 2 and 3), and category shares per model.

The detectors read what the runtime recorded — turn requests (with ``view``, the machine-readable
state the acting role saw, and its legal actions), replies, and the game master's transcript
events (utterances, actions with their outcome) — and need no model:

- **repetition**: the acting role (COMMA's solver) repeats an action that already failed in the
  same state (same ``view`` at the start of the turn, same actions before it in the turn);
- **roleplay**: the instructing role (the expert) writes as if it saw the puzzle ("I can see
  a…", "the image shows…", or a line speaking as the other role: "SOLVER: …"), or the acting
  role recites rules from the instructor's manual (a run of 6 words found in the manual but not
  in anything the actor was shown or told), or claims not to see the puzzle;
- **miscommunication**: the actor starts with an action the instructor's latest message did not
  name and leaves out one it named (actions the instructor hears hidden — the ATM's PIN keys —
  are skipped);
- **misinterpretation**: the actor's description contradicts the state where the environment
  can check it (``STATE_CHECKS``: wire colours and counts, serial numbers, the memory display
  and button labels, the ATM balance).

Which role acts and which instructs is read from the transcript: the actor is the role whose
turn requests list legal actions; every other role that talks to it instructs.
"""

from __future__ import annotations

import json
import re
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from parley.records import EpisodeRecord, RecordedRun, read_records

CATEGORIES = ("roleplay", "misinterpretation", "repetition", "miscommunication")
SHARE_CATEGORIES = (*CATEGORIES, "other")
# Which finding names a failed conversation when it has several: the first in time; on the
# same turn, the more fundamental (a confused role explains the rest).
PRIORITY = {c: i for i, c in enumerate(CATEGORIES)}
FAILED = ("lost", "aborted")


@dataclass
class ErrorFinding:
    """One detected error: category, where, who, and the words or state that show it."""

    episode: str
    game: str
    category: str
    turn: int
    role: str
    evidence: str
    source: str = "rules"


@dataclass
class Step:
    """One answered turn: the request, the reply and the events the game master emitted."""

    turn: int
    role: str
    request: dict[str, Any]
    response: dict[str, Any] | None = None
    events: list[dict[str, Any]] = field(default_factory=list)

    @property
    def reply(self) -> str:
        return str((self.response or {}).get("text") or "")

    def actions(self) -> list[dict[str, Any]]:
        """The actions carried out this turn (``data``: action, mistake, feedback…)."""
        return [e for e in self.events if e.get("event") == "action"]

    def said(self, to_role: str | None = None) -> list[str]:
        return [
            text_of(e)
            for e in self.events
            if e.get("event") == "utterance"
            and e.get("from_role") == self.role
            and (to_role is None or e.get("to_role") == to_role)
        ]


def text_of(message: dict[str, Any]) -> str:
    parts = message.get("content") or []
    return "\n\n".join(p.get("text", "") for p in parts if p.get("type") == "text")


def steps_of(messages: Iterable[dict[str, Any]]) -> list[Step]:
    """An episode's transcript as turns (messages in the order they were recorded)."""
    steps: list[Step] = []
    current: Step | None = None
    for m in messages:
        kind = m.get("kind")
        if kind == "turn_request":
            current = Step(int(m.get("turn") or 0), str(m.get("role") or ""), m)
            steps.append(current)
        elif kind == "turn_response" and current is not None:
            current.response = m
        elif kind == "transcript_event" and current is not None:
            current.events.append(m)
    return steps


def roles_of(steps: list[Step]) -> tuple[set[str], set[str]]:
    """(actors, instructors): who acts on the environment, who talks to the actors."""
    actors = {s.role for s in steps if s.request.get("legal_actions")}
    instructors = set()
    for s in steps:
        if s.role in actors:
            continue
        for e in s.events:
            if (
                e.get("event") == "utterance"
                and e.get("from_role") == s.role
                and e.get("to_role") in actors
            ):
                instructors.add(s.role)
    return actors, instructors


def state_key(request: dict[str, Any]) -> str:
    view = request.get("view")
    if view is not None:
        return json.dumps(view, sort_keys=True, default=str)
    return "\n".join(
        p.get("text", "") for p in request.get("observation") or [] if p.get("type") == "text"
    )


# --- repetition ------------------------------------------------------------------------------------


def repetition(
    steps: list[Step], actors: set[str], instructors: set[str]
) -> list[tuple[int, str, str, str]]:
    """(turn, role, category, evidence) for each repeated failed (state, action)."""
    found = []
    failed: dict[tuple[str, str, tuple[str, ...]], int] = {}
    for step in steps:
        if step.role not in actors:
            continue
        key = state_key(step.request)
        done: list[str] = []
        for event in step.actions():
            data = event.get("data") or {}
            action = str(data.get("action") or text_of(event))
            done.append(action)
            if not data.get("mistake"):
                continue
            ident = (step.role, key, tuple(done))
            if ident in failed:
                found.append(
                    (
                        step.turn,
                        step.role,
                        "repetition",
                        f"{action} failed again in the same state (first at turn {failed[ident]})",
                    )
                )
            else:
                failed[ident] = step.turn
            break  # after a mistake the rest of the turn was not carried out
    return found


# --- roleplay --------------------------------------------------------------------------------------

_SEES = re.compile(
    r"\b(?:i (?:can )?see (?:a|an|the|two|three|four|five|six|\d)\b|i'm looking at\b|i am looking at\b|"
    r"the (?:image|picture|screenshot) (?:shows|has|contains)\b|in (?:the|this) (?:image|picture)\b|"
    r"on my screen\b|i(?:'ll| will) (?:press|cut|click|push|type) )",
    re.IGNORECASE,
)
_CANT_SEE = re.compile(
    r"\bi (?:can't|cannot|can not|don't|do not) (?:see|view) (?:the|your|any) "
    r"(?:puzzle|module|image|picture|screen|device)\b",
    re.IGNORECASE,
)
_MANUAL_CITED = re.compile(
    r"\b(?:according to (?:the|my) manual|the manual (?:says|states|tells)|per the manual|"
    r"my manual)\b",
    re.IGNORECASE,
)
NGRAM = 6


def _words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9]+", text.lower())


def _ngrams(text: str, n: int = NGRAM) -> set[tuple[str, ...]]:
    words = _words(text)
    return {tuple(words[i : i + n]) for i in range(len(words) - n + 1)}


def roleplay(
    steps: list[Step], actors: set[str], instructors: set[str]
) -> list[tuple[int, str, str, str]]:
    found = []
    manual = ""
    for step in steps:
        if step.role in instructors and step.request.get("system"):
            manual = str(step.request["system"])
    manual_grams = _ngrams(manual)
    known: dict[str, set[tuple[str, ...]]] = defaultdict(set)  # what each actor was shown/told
    others = {s.role for s in steps}
    for step in steps:
        reply = step.reply
        if step.role in instructors:
            for role in others - {step.role}:
                if re.search(
                    rf"^\s*\**{re.escape(role)}\**\s*:", reply, re.IGNORECASE | re.MULTILINE
                ):
                    found.append(
                        (step.turn, step.role, "roleplay", f"writes as the {role}: {_clip(reply)}")
                    )
                    break
            else:
                m = _SEES.search(reply)
                if m:
                    found.append(
                        (
                            step.turn,
                            step.role,
                            "roleplay",
                            f"claims to see the puzzle: {_clip(reply, m)}",
                        )
                    )
        elif step.role in actors:
            request = step.request
            seen = [request.get("system") or ""]
            seen += [
                p.get("text", "")
                for p in request.get("observation") or []
                if p.get("type") == "text"
            ]
            for said in request.get("incoming") or []:
                seen += [
                    p.get("text", "") for p in said.get("content") or [] if p.get("type") == "text"
                ]
            for text in seen:
                known[step.role] |= _ngrams(text)
            for utterance in step.said():
                recited = (_ngrams(utterance) & manual_grams) - known[step.role]
                if recited:
                    gram = " ".join(sorted(recited)[0])
                    found.append(
                        (
                            step.turn,
                            step.role,
                            "roleplay",
                            f"recites the manual ('{gram}…'): {_clip(utterance)}",
                        )
                    )
                    break
                m = _MANUAL_CITED.search(utterance) or _CANT_SEE.search(utterance)
                if m:
                    found.append(
                        (
                            step.turn,
                            step.role,
                            "roleplay",
                            f"speaks as the instructor: {_clip(utterance, m)}",
                        )
                    )
                    break
    return found


# --- miscommunication ------------------------------------------------------------------------------

_FILLER = {
    "the", "a", "an", "button", "buttons", "key", "keys", "arrow", "labeled", "labelled", "marked",
    "with", "number", "on", "your", "of", "that", "says", "it", "one", "to", "and", "then",
}  # fmt: skip
_ORDINAL_WORDS = {
    "first": "1", "second": "2", "third": "3", "fourth": "4", "fifth": "5", "sixth": "6",
    "1st": "1", "2nd": "2", "3rd": "3", "4th": "4", "5th": "5", "6th": "6",
}  # fmt: skip
_NUMBER_WORDS = {
    w: str(i)
    for i, w in enumerate(
        ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]
    )
}


def _tokens(text: str) -> list[str]:
    out = []
    for word in re.findall(r"[a-z0-9]+", text.lower().replace("_", " ")):
        word = _ORDINAL_WORDS.get(word, word)
        if word not in ("one",):
            word = _NUMBER_WORDS.get(word, word)
        if word not in _FILLER:
            out.append(word)
    return out


def mentioned_actions(text: str, actions: list[str]) -> list[str]:
    """The actions ``text`` names, in the order it names them (by name, or in words: "press the
    top left button", "cut the fourth wire")."""
    lowered = text.lower()
    words = _tokens(text)
    hits: list[tuple[int, str]] = []
    for action in actions:
        exact = re.search(rf"(?<![a-z0-9_]){re.escape(action.lower())}(?![a-z0-9_])", lowered)
        if exact:
            hits.append((len(_tokens(lowered[: exact.start()])), action))
            continue
        wanted = _tokens(action)
        if not wanted:
            continue
        window = len(wanted) + 2
        for i in range(len(words)):
            chunk = words[i : i + window]
            if chunk and chunk[0] in wanted and all(w in chunk for w in wanted):
                hits.append((i, action))
                break
    # An action whose words are all inside a longer hit at the same place is that one.
    hits.sort(key=lambda h: (h[0], -len(_tokens(h[1]))))
    ordered: list[str] = []
    for _, action in hits:
        if action not in ordered:
            ordered.append(action)
    return ordered


_NO_INSTRUCTION = re.compile(
    r"\b(?:tell me|describe|what do you see|what does|which|can you|could you|how many)\b.*\?",
    re.IGNORECASE,
)


def miscommunication(
    steps: list[Step], actors: set[str], instructors: set[str]
) -> list[tuple[int, str, str, str]]:
    found = []
    last_instruction: dict[str, tuple[int, str]] = {}
    for step in steps:
        if step.role in instructors:
            for e in step.events:
                if e.get("event") == "utterance" and e.get("from_role") == step.role:
                    last_instruction[str(e.get("to_role"))] = (step.turn, text_of(e))
            continue
        if step.role not in actors:
            continue
        instruction = last_instruction.pop(step.role, None)
        actions = step.actions()
        if instruction is None or not actions:
            continue
        legal = list(step.request.get("legal_actions") or [])
        named = mentioned_actions(instruction[1], legal)
        if not named:
            continue
        heard = "\n".join(step.said())
        visible = [
            str((a.get("data") or {}).get("action") or text_of(a))
            for a in actions
            if "<hidden>" not in heard or str((a.get("data") or {}).get("action") or "") in heard
        ]
        if not visible:
            continue
        first = visible[0]
        # Departed from the instruction: started with something else and left out an action
        # it named (an instruction may name only the last step: "set THINK and press submit").
        skipped = [a for a in named if a not in visible]
        if first not in named and skipped:
            found.append(
                (
                    step.turn,
                    step.role,
                    "miscommunication",
                    f"did {first} after being told {', '.join(named[:3])} (turn {instruction[0]})",
                )
            )
    return found


# --- misinterpretation -----------------------------------------------------------------------------

COLOURS = ("red", "blue", "yellow", "white", "black", "green", "orange", "purple", "pink", "brown")
StateCheck = Callable[[dict[str, Any], str], str | None]


def _check_wires(view: dict[str, Any], text: str) -> str | None:
    colors = [str(c).lower() for c in view.get("colors") or []]
    if not colors:
        return None
    lowered = text.lower()
    m = re.search(r"\b(\d+|three|four|five|six|seven)\s+wires\b", lowered)
    if m:
        n = (
            int(m.group(1))
            if m.group(1).isdigit()
            else (["three", "four", "five", "six", "seven"].index(m.group(1)) + 3)
        )
        if n != len(colors):
            return f"says {n} wires; there are {len(colors)}"
    said = re.findall(rf"\b({'|'.join(COLOURS)})\b", lowered)
    if len(said) >= len(colors) and said[: len(colors)] != colors:
        return (
            f"describes the wires as {', '.join(said[: len(colors)])}; they are {', '.join(colors)}"
        )
    return None


def _check_serial(view: dict[str, Any], text: str) -> str | None:
    serial = str(view.get("serial") or "")
    m = re.search(r"\bserial(?: number)?(?: is|:)?\s+([A-Za-z0-9]{4,})\b", text, re.IGNORECASE)
    if serial and m and m.group(1).upper() != serial.upper():
        return f"reads the serial as {m.group(1)}; it is {serial}"
    return None


def _check_memory(view: dict[str, Any], text: str) -> str | None:
    if "display" not in view:
        return None
    lowered = text.lower()
    m = re.search(r"\bdisplay\b[^.\n]{0,40}?\b(\d+)\b", lowered)
    if m and str(view["display"]) != m.group(1):
        return f"reads the display as {m.group(1)}; it shows {view['display']}"
    labels = [str(x) for x in view.get("labels") or []]
    m = re.search(r"\blabel(?:l)?ed\b[^.\n]*?((?:\d+\D{1,8}){3}\d+)", lowered)
    if labels and m:
        said = re.findall(r"\d+", m.group(1))
        if said != labels:
            return f"reads the labels as {', '.join(said)}; they are {', '.join(labels)}"
    return None


def _check_balance(view: dict[str, Any], text: str) -> str | None:
    if "balance" not in view:
        return None
    m = re.search(r"\bbalance\b[^.\n]{0,20}?\$?\s*(\d[\d,]*)", text, re.IGNORECASE)
    if m and int(m.group(1).replace(",", "")) != int(view["balance"]):
        return f"reads the balance as {m.group(1)}; it is {view['balance']}"
    return None


STATE_CHECKS: list[StateCheck] = [_check_wires, _check_serial, _check_memory, _check_balance]


def misinterpretation(
    steps: list[Step], actors: set[str], instructors: set[str]
) -> list[tuple[int, str, str, str]]:
    found = []
    for step in steps:
        view = step.request.get("view")
        if step.role not in actors or not isinstance(view, dict):
            continue
        for utterance in step.said():
            if all(
                re.fullmatch(r"[A-Za-z0-9_<>]+", line.strip())
                for line in utterance.splitlines()
                if line.strip()
            ):
                continue  # relayed actions, not a description
            for check in STATE_CHECKS:
                problem = check(view, utterance)
                if problem:
                    found.append(
                        (
                            step.turn,
                            step.role,
                            "misinterpretation",
                            f"{problem}: {_clip(utterance)}",
                        )
                    )
                    break
    return found


DETECTORS = (roleplay, misinterpretation, repetition, miscommunication)


def _clip(text: str, match: re.Match[str] | None = None, width: int = 140) -> str:
    flat = " ".join(text.split())
    if match is not None:
        start = max(0, match.start() - 40)
        flat = " ".join(text[start : start + width].split())
        return ("…" if start else "") + flat + "…"
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def episode_errors(record: EpisodeRecord, messages: Iterable[dict[str, Any]]) -> list[ErrorFinding]:
    """Every rule-based finding in one episode, in turn order."""
    steps = steps_of(messages)
    actors, instructors = roles_of(steps)
    found: list[ErrorFinding] = []
    for detector in DETECTORS:
        for turn, role, category, evidence in detector(steps, actors, instructors):
            found.append(ErrorFinding(record.episode, record.game, category, turn, role, evidence))
    found.sort(key=lambda f: (f.turn, PRIORITY.get(f.category, 99)))
    return found


def primary(findings: list[ErrorFinding]) -> str:
    """The category a failed conversation counts under (``other`` when nothing was found)."""
    if not findings:
        return "other"
    return min(findings, key=lambda f: (f.turn, PRIORITY.get(f.category, 99))).category


def model_label(record: EpisodeRecord) -> str:
    """One model name when every role is played by it, else the pairing."""
    labels = list(record.pairing.values())
    if labels and len(set(labels)) == 1:
        return labels[0]
    return ", ".join(f"{r}={w}" for r, w in record.pairing.items())


def run_errors(
    run_dir: str | Path, records: list[EpisodeRecord] | None = None
) -> dict[str, list[ErrorFinding]]:
    """Episode id → rule-based findings, for every finished episode of a run folder."""
    folder = RecordedRun(run_dir)
    out: dict[str, list[ErrorFinding]] = {}
    for record in records if records is not None else read_records(run_dir):
        if record.outcome in ("error", "cancelled"):
            continue
        out[record.episode] = episode_errors(record, folder.iter_transcript(record.episode))
    return out


def shares(
    records: list[EpisodeRecord], findings: dict[str, list[ErrorFinding]]
) -> dict[str, dict[str, Any]]:
    """Per model: failed conversations, the share of each primary category, all findings."""
    table: dict[str, dict[str, Any]] = {}
    for record in records:
        episode = record.episode
        if episode not in findings:
            continue
        row = table.setdefault(
            model_label(record),
            {"episodes": 0, "failed": 0, "primary": Counter(), "findings": Counter()},
        )
        row["episodes"] += 1
        row["findings"].update(f.category for f in findings[episode])
        if record.outcome in FAILED:
            row["failed"] += 1
            row["primary"][primary(findings[episode])] += 1
    return table


def write_findings(
    run_dir: str | Path, findings: dict[str, list[ErrorFinding]], name: str = "errors.jsonl"
) -> Path:
    path = Path(run_dir) / name
    with path.open("w", encoding="utf-8") as f:
        for items in findings.values():
            for finding in items:
                f.write(json.dumps(asdict(finding), ensure_ascii=False) + "\n")
    return path
