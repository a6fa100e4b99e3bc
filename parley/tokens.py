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


def count_tokens(text: str) -> int:
    total = 0
    for piece in _PIECES.findall(text):
        n = len(piece)
        total += 1 if n <= 6 or not piece[0].isalpha() else -(-n // 5)
    return total
