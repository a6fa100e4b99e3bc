"""The order a run plays its episodes in (runtime/experiment.py play_order): games, pairings
and seeds interleaved, so that any prefix of a run is a fair sample of its plan; the same
order for the same config; and a run cut at 30 % holds each pairing in its planned share."""

from __future__ import annotations

import math
import random
from collections import Counter
from pathlib import Path

import pytest

import tests.runtime.faulty_game  # noqa: F401  (registers test.counter)
from parley.records import FINISHED, read_records
from parley.runtime.config import ExperimentConfig, load_config
from parley.runtime.experiment import EpisodeSpec, expand, play_order
from parley.runtime.report import summary_rows
from parley.runtime.scheduler import Scheduler, run_experiment

pytestmark = pytest.mark.anyio


def _config(**top: object) -> ExperimentConfig:
    """Three strata of unequal size: 80 + 80 + 40 episodes (shares 0.4, 0.4, 0.2)."""
    return load_config(
        {
            "name": "order",
            "tracing": {"enabled": False},
            "record_prompts": False,
            "games": [
                {
                    "game": "test.counter",
                    "seeds": {"count": 80},
                    "pairings": [{"counter": "scripted"}, {"counter": "random"}],
                },
                {
                    "game": "test.counter",
                    "seeds": {"start": 100, "count": 20},
                    "repetitions": 2,
                    "settings": {"target": 2},
                    "pairings": [{"counter": "scripted"}],
                },
            ],
            **top,
        }
    )


def _stratum(spec: EpisodeSpec) -> str:
    return f"{spec.pairing_label} target={spec.settings['target']}"


def test_every_prefix_holds_each_stratum_in_its_planned_share() -> None:
    specs = expand(_config())
    planned = Counter(_stratum(s) for s in specs)
    order = play_order(specs)
    assert sorted(s.id for s in order) == sorted(s.id for s in specs)
    seen: Counter[str] = Counter()
    for m, spec in enumerate(order, start=1):
        seen[_stratum(spec)] += 1
        for stratum, n in planned.items():
            # The construction bounds the gap by 1 + (strata) · share; 2 for these shares.
            assert abs(seen[stratum] - m * n / len(specs)) <= 2, (m, stratum)


def test_the_order_is_fixed_by_the_config_alone() -> None:
    specs = expand(_config())
    shuffled = list(specs)
    random.Random(7).shuffle(shuffled)
    assert [s.id for s in play_order(shuffled)] == [s.id for s in play_order(specs)]
    assert [s.id for s in play_order(expand(_config()))] == [s.id for s in play_order(specs)]
    # Not the config's own order (block by block, pairing by pairing, seed by seed).
    assert [s.id for s in play_order(specs)] != [s.id for s in specs]


def test_the_pairings_of_a_game_meet_the_same_seeds_and_seeds_before_repeats() -> None:
    order = play_order(expand(_config()))
    first = order[:60]
    by_pairing: dict[str, list[int]] = {}
    for spec in first:
        if spec.settings["target"] == 3:
            by_pairing.setdefault(spec.pairing_label, []).append(spec.seed)
    scripted, rand = by_pairing["counter=scripted"], by_pairing["counter=random"]
    # Both pairings of the first block have played the same seeds, give or take the latest.
    assert len(set(scripted) ^ set(rand)) <= 2
    # Seeds are spread, not 0, 1, 2 …: the first 24 of block one's 80 are not all low.
    assert max(scripted) > 40
    # The second block's repetition 1 of any seed starts only after every seed's repetition 0.
    second = [s for s in order if s.settings["target"] == 2]
    assert [s.repetition for s in second] == sorted(s.repetition for s in second)


async def test_a_run_cut_at_30_percent_holds_each_pairing_in_its_planned_share(
    tmp_path: Path,
) -> None:
    """The run stops (as Ctrl-C does) when its episode past 30 % starts; the report of what
    it holds gives every pairing its planned share, within sampling error."""
    config = _config(concurrency=4)
    specs = expand(config)
    cut = int(0.3 * len(specs))
    started: list[str] = []

    def on_start(scheduler: Scheduler) -> None:
        def begin(spec: EpisodeSpec) -> None:
            started.append(spec.id)
            if len(started) == cut + 1:
                scheduler.stop()

        scheduler.on_begin = begin

    outcome = await run_experiment(
        config,
        tmp_path / "run",
        on_start=on_start,  # type: ignore[arg-type]
    )
    assert outcome.interrupted
    played = [r for r in read_records(outcome.folder.path) if r["outcome"] in FINISHED]
    # Those running at the cut are cancelled (and played on --resume).
    assert cut + 1 - config.concurrency <= len(played) <= cut + 1
    header, rows = summary_rows(played)
    got = Counter[str]()
    for row in rows:
        got[row[header.index("pairing")]] += int(row[header.index("episodes")])
    planned = Counter(s.pairing_label.replace(",", ", ") for s in specs)
    n = len(played)
    for pairing, count in planned.items():
        share = count / len(specs)
        # Binomial sampling error (3 sigma), though the order does better than chance.
        assert abs(got[pairing] - n * share) <= 3 * math.sqrt(n * share * (1 - share)) + 1
    # Per setting too: the 40 episodes of the second block are a fifth of the plan.
    second = sum(r["spec"]["settings"]["target"] == 2 for r in played)
    assert abs(second - n * 0.2) <= 3 * math.sqrt(n * 0.2 * 0.8) + 1
