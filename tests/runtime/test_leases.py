"""The lease book on its own: the rules both worker transports follow, step by step on a clock
the test moves (tests/runtime/test_worker_contract.py runs them with real processes)."""

from __future__ import annotations

from parley.runtime.experiment import EpisodeSpec
from parley.runtime.leases import MAX_DEATHS, LeaseBook


def specs(n: int) -> list[EpisodeSpec]:
    return [EpisodeSpec(id=f"e{i}", game="test.counter", seed=i, players={}) for i in range(n)]


def test_the_first_result_wins_and_later_ones_are_counted_as_duplicates() -> None:
    book = LeaseBook(specs(2), lease_s=2.0, finished=["e1"])
    (spec,) = book.hand_out(10)
    book.issue(spec, 0.0)
    assert book.result("e0") and not book.result("e0")
    assert not book.result("e1")  # recorded by the run this one resumes
    assert not book.result("elsewhere")  # not planned here
    assert book.counts["duplicates"] == 3 and book.done()


def test_a_heartbeat_keeps_a_lease_and_a_silent_worker_is_taken_over() -> None:
    book = LeaseBook(specs(2), lease_s=2.0)
    for spec in book.hand_out(10):
        book.issue(spec, 0.0)
    book.beat("w", ["e0", "e1"], 1.0)
    assert book.due(2.5) == [] and book.silent(2.5) == []
    book.beat("w", ["e0", "e1"], 2.5)
    assert book.silent(4.6) == ["w"]
    again, given_up = book.lost("w")
    assert [s.id for s in again] == ["e0", "e1"] and given_up == []
    assert book.counts["takeovers"] == 1 and book.deaths == {"e0": 1, "e1": 1}


def test_the_lag_a_worker_reports_lengthens_its_lease() -> None:
    book = LeaseBook(specs(1), lease_s=2.0)
    book.issue(book.hand_out(1)[0], 0.0)
    book.beat("w", ["e0"], 0.0, lag_s=3.0)
    assert book.silent(5.0) == [] and book.due(5.0) == []


def test_a_late_loop_stops_the_clocks() -> None:
    book = LeaseBook(specs(1), lease_s=2.0)
    book.issue(book.hand_out(1)[0], 0.0)
    book.beat("w", ["e0"], 0.0)
    book.shift(10.0)  # no heartbeat could have been read meanwhile
    assert book.silent(11.0) == [] and book.due(11.0) == []


def test_a_job_its_worker_stops_naming_is_renewed_no_more() -> None:
    book = LeaseBook(specs(2), lease_s=15.0)
    for spec in book.hand_out(2):
        book.issue(spec, 0.0)
    book.beat("w", ["e0", "e1"], 1.0)
    book.beat("w", ["e1"], 2.0)  # e0's result is on the way (a busy worker's comes late)
    book.beat("w", ["e1"], 14.0)
    assert book.due(15.9) == []
    (lease,) = book.due(16.0)
    assert lease.spec.id == "e0" and book.counts["reissued"] == 1
    book.beat("w", [], 17.0, final=True)  # it left: e1 goes out again at once
    (lease,) = book.due(17.5)
    assert lease.spec.id == "e1"


def test_an_episode_lost_with_its_workers_goes_out_alone_then_is_given_up() -> None:
    book = LeaseBook(specs(3), lease_s=2.0)
    for round_ in range(MAX_DEATHS):
        out = book.hand_out(10)
        if round_ >= 2:  # a suspect: alone, once nothing else is out
            assert [s.id for s in out] == ["e0"]
        for spec in out:
            book.issue(spec, 0.0, holder=f"w{round_}")
        book.beat(f"w{round_}", [s.id for s in out], 0.0)
        again, given_up = book.lost(f"w{round_}", playing=["e0"])
        book.again(again)
    assert [s.id for s in given_up] == ["e0"] and book.counts["given_up"] == 1
    result = book.poison(given_up[0], "exit code 3")
    assert result.outcome == "error" and "lost 3 times" in (result.reason or "")
    assert [s.id for s in book.hand_out(10)] == ["e1", "e2"]  # the others, together again
