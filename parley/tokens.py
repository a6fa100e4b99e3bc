"""The offline token counter used when a backend reports no usage (scripted, random, human).

It lives in the package root, not in ``parley.agents``: games (MANGO's token budget), model
backends and the runtime all count with it, and ``parley.environments`` may import nothing of
``parley.agents`` (``tests/test_layers.py``).

``parley-approx-v1``: words of up to six letters count one token, longer words one per five
letters (rounded up), every digit and every other non-space character one token. It needs no
download, is the same everywhere, and lands within about 15 % of common BPE tokenizers on
English prose; results say which counts came from it (``source: counted``).
"""

from __future__ import annotations

import re

TOKENIZER = "parley-approx-v1"
_PIECES = re.compile(r"[^\W\d_]+|\d|[^\w\s]|_")
# ASCII letters stay, every other character becomes a space: what is left are the words.
_LETTER_RUNS = str.maketrans({chr(c): "a" if chr(c).isalpha() else " " for c in range(128)})
_ASCII_SPACES = tuple(chr(c) for c in range(128) if chr(c).isspace())


def count_tokens(text: str) -> int:
    """``text``'s tokens by ``parley-approx-v1``.

    >>> count_tokens("Cut wire 3, then 12!")
    8
    """
    if not text.isascii():
        return count_by_pattern(text)
    # ASCII text is counted without the pattern, in a third of the CPU (the stand-in server
    # counts every prompt, the runtime every scripted reply): a word of n letters is one token,
    # ceil(n / 5) = 1 + (n - 1) // 5 when n > 6; every other character but a space is one.
    words = text.translate(_LETTER_RUNS).split()
    lengths = list(map(len, words))
    spaces = sum(map(text.count, _ASCII_SPACES))
    others = len(text) - spaces - sum(lengths)  # digits, punctuation, underscores
    return others + len(words) + sum((n - 1) // 5 for n in lengths if n > 6)


def count_by_pattern(text: str) -> int:
    """:func:`count_tokens` for any text, by its definition's pattern."""
    total = 0
    for piece in _PIECES.findall(text):
        n = len(piece)
        total += 1 if n <= 6 or not piece[0].isalpha() else -(-n // 5)
    return total
