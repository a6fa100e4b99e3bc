"""The offline token counter: its fast way for ASCII text counts as its definition does."""

from __future__ import annotations

import random

import pytest

from parley.tokens import count_by_pattern, count_tokens


@pytest.mark.parametrize(
    "text",
    [
        "",
        "   \n",
        "Serial number: A7_x9\n4 wires, top to bottom:\n  wire 1: red (cut)",
        "extraordinarily\tlong\x0bwords\x1cand\x1f punctuation!? 1234 __init__ a_b",
        "abcdef abcdefg abcdefghijk abcdefghijklmnopqrstuvwxyz",
        "\x00\x07 control characters \x7f",
    ],
)
def test_ascii_text_counts_as_the_pattern_does(text: str) -> None:
    assert count_tokens(text) == count_by_pattern(text)


def test_random_text_counts_as_the_pattern_does() -> None:
    rng = random.Random(0)
    alphabet = "".join(map(chr, range(128))) + "éß²½٣東"
    for _ in range(5000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40)))
        words = " ".join("x" * rng.randint(1, 17) for _ in range(3))
        assert count_tokens(text) == count_by_pattern(text)
        assert count_tokens(words) == count_by_pattern(words)


def test_the_definition() -> None:
    # Words of up to six letters one token, longer ones one per five letters (rounded up),
    # every digit and every other character that is not a space one.
    assert count_tokens("cut the wire") == 3
    assert count_tokens("abcdefg") == 2 and count_tokens("abcdefghijk") == 3
    assert count_tokens("wire 12!") == 4
    assert count_tokens("naïve café") == 2
