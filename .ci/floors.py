"""Print pip constraints that pin every dependency of parley to the lowest version its
pyproject.toml allows (``name>=X`` becomes ``name==X``), for CI's run at the floors.

Usage: ``python .ci/floors.py [EXTRA ...]``; the extras named have their floors pinned too. A
floor is therefore written as a released version that has a wheel for the Python CI uses
(``scipy>=1.11.1``, not a yanked ``1.11.0``; ``xllamacpp>=2026.10.11549``, not ``2026.10``,
which names no release): CI installs wheels only, and a pin that matches nothing fails there."""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

root = Path(__file__).resolve().parents[1]
project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
extras = sys.argv[1:]  # optional extras whose floors are pinned too, e.g. otlp-grpc
wanted = list(project["dependencies"])
for extra in extras:
    wanted += project["optional-dependencies"][extra]
for spec in wanted:
    requirement, _, marker = spec.partition(";")
    match = re.match(r"\s*([A-Za-z0-9_.\-]+)(\[[^\]]*\])?\s*(.*)", requirement)
    if match is None:
        continue
    name, _, versions = match.groups()
    floor = re.search(r">=\s*([0-9][^,\s]*)", versions)
    if floor is None:
        continue
    line = f"{name}=={floor.group(1)}"
    print(f"{line}; {marker.strip()}" if marker.strip() else line)
