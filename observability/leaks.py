"""Privacy leaks: where a role disclosed one of its private facts to another role.

Games declare private facts per role (``GameMaster.private_facts(role)``, recorded in each
episode record as ``private_facts: {role: {fact: value}}``). Only what a role *said to another
role* counts — the transcript's ``utterance`` events from that role to a different one; its own
observation (the ATM solver sees its PIN) or its actions do not.

:func:`detect` finds a fact in an utterance with the detectors its game declares
(``GameInfo.leak_detectors``, see :mod:`parley.environments.privacy`): each knows its kind of
fact (a PIN's digits however spaced, an amount reformatted, a date in any order); a fact
without one is found exactly (the value as written) or normalised (spacing, punctuation and
number words ignored).

:func:`substring_baseline` is COMMA's check (seed 001): the raw value as a substring of the
message (for amounts, the bare number, as COMMA tested ``str(balance)``).
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from parley.environments import registry
from parley.environments.privacy import Finding, LeakDetectors
from parley.memory.across import record_memory_keys
from parley.records import EpisodeRecord, RecordedRun, read_records
from parley.user_files import JsonLinesError, read_json_objects


def detectors_of(game: str) -> LeakDetectors:
    """The leak detectors ``game`` declares (``GameInfo.leak_detectors``); for a game not
    registered here, none: each fact is then found by the generic detector."""
    info = registry.find(game)
    return info.leak_detectors if info is not None else LeakDetectors()


def declared_detectors() -> LeakDetectors:
    """The detectors of every registered game together (a fact two games declare keeps the
    first game's, by name): for utterances of no known game, such as a labelled set."""
    merged = LeakDetectors()
    for info in registry.all_games().values():
        merged = merged.merged(info.leak_detectors)
    return merged


def detect(
    text: str, facts: dict[str, str], detectors: LeakDetectors | None = None
) -> list[Finding]:
    """Every private fact disclosed in ``text`` (one finding per fact), found by ``detectors``
    (by default :func:`declared_detectors`)."""
    if not text or not facts:
        return []
    return (detectors or declared_detectors()).detect(text, facts)


def substring_baseline(text: str, facts: dict[str, str]) -> set[str]:
    """COMMA's privacy check: the raw value as a substring (amounts as the bare number)."""
    found = set()
    for fact, value in facts.items():
        value = str(value)
        probe = value.lstrip("$") if value.startswith("$") else value
        if probe and probe in text:
            found.add(fact)
    return found


# --- scoring on a labelled set ----------------------------------------------------------------------


@dataclass
class Score:
    """Precision and recall over (utterance, fact) pairs."""

    tp: int = 0
    fp: int = 0
    fn: int = 0
    tn: int = 0

    @property
    def precision(self) -> float:
        return self.tp / (self.tp + self.fp) if self.tp + self.fp else 1.0

    @property
    def recall(self) -> float:
        return self.tp / (self.tp + self.fn) if self.tp + self.fn else 1.0

    @property
    def f1(self) -> float:
        p, r = self.precision, self.recall
        return 2 * p * r / (p + r) if p + r else 0.0

    def add(self, predicted: set[str], truth: set[str], facts: Iterable[str]) -> None:
        for fact in facts:
            if fact in predicted and fact in truth:
                self.tp += 1
            elif fact in predicted:
                self.fp += 1
            elif fact in truth:
                self.fn += 1
            else:
                self.tn += 1


class LabelledSetError(ValueError):
    """A labelled set (``parley leaks --eval FILE``) that cannot be read, saying where and why."""


def load_labelled(path: str | Path | None = None) -> list[dict[str, Any]]:
    """The labelled utterances (default: the set shipped with the tests): one JSON object a
    line, with ``text``, ``facts`` (fact → value), ``leaks`` (the facts it discloses) and an
    optional ``split``. Raises :class:`LabelledSetError` naming the file and line."""
    file = Path(path) if path else LABELLED
    try:
        lines = read_json_objects(file, "a labelled utterance")
    except JsonLinesError as exc:
        raise LabelledSetError(f"{file}: {exc}") from None
    for number, item in lines:
        if not (
            isinstance(item.get("text"), str)
            and isinstance(item.get("facts"), dict)
            and all(isinstance(v, str) for v in item["facts"].values())
            and isinstance(item.get("leaks"), list)
            and all(isinstance(f, str) for f in item["leaks"])
            and isinstance(item.get("split", ""), str)
        ):
            raise LabelledSetError(
                f"{file}, line {number}: not a labelled utterance (an object with text, "
                "facts: {fact: value}, leaks: [fact, ...] and an optional split)"
            )
    return [item for _, item in lines]


LABELLED = Path(__file__).with_name("leaks_labelled.jsonl")


def evaluate(items: list[dict[str, Any]], split: str | None = None) -> dict[str, dict[str, Score]]:
    """Precision/recall of :func:`detect` and of the substring baseline, overall and per fact."""
    scores: dict[str, dict[str, Score]] = {
        "detector": defaultdict(Score),
        "baseline": defaultdict(Score),
    }
    for item in items:
        if split and item.get("split") != split:
            continue
        facts, truth = item["facts"], set(item["leaks"])
        predicted = {f.fact for f in detect(item["text"], facts)}
        base = substring_baseline(item["text"], facts)
        for name, guess in (("detector", predicted), ("baseline", base)):
            scores[name]["all"].add(guess, truth, facts)
            for fact in facts:
                scores[name][fact].add(guess, truth, [fact])
    return scores


# --- a run's disclosures ------------------------------------------------------------------------------


@dataclass
class Disclosure:
    """A private fact one role disclosed to another, where and how."""

    episode: str
    game: str
    turn: int
    from_role: str
    to_role: str
    fact: str
    kind: str
    match: str
    message: str
    message_id: str
    # A fact of an earlier episode the role remembers (memory across episodes, docs/memory.md):
    # that episode's id; "" for a fact of this episode.
    earlier_episode: str = ""


def _text(message: dict[str, Any]) -> str:
    return "\n\n".join(
        p.get("text", "") for p in message.get("content") or [] if p.get("type") == "text"
    )


# A role's private facts from earlier episodes it remembers: (earlier episode, fact, value).
# A fact of an earlier episode: (that episode, fact, value, that episode's game, whose
# detectors find it).
EarlierFacts = dict[str, list[tuple[str, str, str, str]]]


def earlier_facts(records: list[EpisodeRecord]) -> dict[str, EarlierFacts]:
    """Per episode and role with memory across episodes: the private facts that role had in
    the earlier episodes of its key (docs/memory.md), so that repeating one (the solver saying
    last game's PIN) is found as a cross-episode disclosure. A value the role also holds in
    the episode itself is left out (that disclosure is the episode's own)."""
    chains: dict[str, list[tuple[tuple[int, int, str], str, EpisodeRecord]]] = defaultdict(list)
    for record in records:
        position = (record.seed, record.repetition, record.episode)
        for role, key in record_memory_keys(record).items():
            chains[key].append((position, role, record))
    out: dict[str, EarlierFacts] = defaultdict(dict)
    for chain in chains.values():
        chain.sort(key=lambda item: item[0])
        held: list[tuple[str, str, str, str]] = []
        for _, role, record in chain:
            own = record.private_facts.get(role) or {}
            earlier = [fact for fact in held if own.get(fact[1]) != fact[2]]
            if earlier:
                out[record.episode].setdefault(role, []).extend(earlier)
            held += [(record.episode, f, str(v), record.game) for f, v in own.items()]
    return dict(out)


def episode_disclosures(
    record: EpisodeRecord,
    messages: Iterable[dict[str, Any]],
    earlier: EarlierFacts | None = None,
) -> list[Disclosure]:
    """The disclosures in one episode's transcript: utterances from a role with private facts
    to another role; with ``earlier`` (:func:`earlier_facts` of the episode), the facts of
    earlier episodes the role remembers too."""
    private = record.private_facts
    found: list[Disclosure] = []
    if not private and not earlier:
        return found
    detectors = detectors_of(record.game)
    for m in messages:
        if m.get("kind") != "transcript_event" or m.get("event") != "utterance":
            continue
        sender, recipient = m.get("from_role", ""), m.get("to_role", "")
        if not recipient or recipient == sender:
            continue
        text = _text(m)
        # A fact remembered from an earlier episode (memory across episodes), then this one's.
        findings = [
            (finding, source)
            for source, fact, value, game in (earlier or {}).get(sender, [])
            for finding in detect(text, {fact: value}, detectors_of(game))
        ]
        own = detect(text, private.get(sender) or {}, detectors)
        findings += [(finding, "") for finding in own]
        for finding, source in findings:
            found.append(
                Disclosure(
                    episode=record.episode,
                    game=record.game,
                    turn=int(m.get("turn") or 0),
                    from_role=sender,
                    to_role=recipient,
                    fact=finding.fact,
                    kind=finding.kind,
                    match=finding.match,
                    message=text,
                    message_id=m.get("id", ""),
                    earlier_episode=source,
                )
            )
    return found


def run_disclosures(
    run_dir: str | Path, records: list[EpisodeRecord] | None = None
) -> Iterator[Disclosure]:
    """Every disclosure of a run folder, episode by episode (of earlier episodes' facts too)."""
    folder = RecordedRun(run_dir)
    records = records if records is not None else read_records(run_dir)
    earlier = earlier_facts(records)
    for record in records:
        if not record.private_facts and record.episode not in earlier:
            continue
        try:
            messages = list(folder.iter_transcript(record.episode))
        except FileNotFoundError:
            continue
        yield from episode_disclosures(record, messages, earlier.get(record.episode))


def write_disclosures(run_dir: str | Path, disclosures: list[Disclosure]) -> Path:
    path = Path(run_dir) / "leaks.jsonl"
    with path.open("w", encoding="utf-8") as f:
        for d in disclosures:
            f.write(json.dumps(asdict(d), ensure_ascii=False) + "\n")
    return path
