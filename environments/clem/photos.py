"""Photo sets: loaders for datasets a user has on disk, and the paper's target/distractor choice.

Layouts read (only what the selection needs; everything else in the folders is ignored):

- **ADE20K**: images under any sub-folders; an image's scene category is the name of its folder
  (``…/bedroom/ADE_train_00000001.jpg``). An optional ``<stem>_atr.txt`` beside an image (ADE's
  per-image annotation, ``#``-separated, class name in the fourth field) adds its objects.
  Segmentation masks (``*_seg.png``, ``*_parts_*.png``) are skipped.
- **DOCCI**: ``docci_metadata.jsonlines`` (per line ``example_id`` and
  ``cloud_vision_api_responses.labelAnnotations`` with ``description`` and ``score``; concepts are
  the labels scored ≥ 0.8, as in clembench) with images in ``images/<example_id>.jpg``.
- **CLEVR**: ``scenes/CLEVR_<split>_scenes.json`` with images in ``images/<split>/<image_filename>``;
  each object's category is "size colour shape material".
- **Visual Genome pairs** (MatchIt): a CSV file with columns ``image_a,image_b`` (or clembench's
  ``url1,url2``), optional ``kind`` (same/similar/different) and optional ``objects_a``,
  ``objects_b`` (``;``-separated object annotations); image paths relative to the file.

Selection follows seed 000: ADE20K distractors share the target's scene category, DOCCI
distractors share one of its concepts, CLEVR distractors have the most object categories in
common with it. The "static target" sets keep one target and vary the distractors.
"""

from __future__ import annotations

import csv
import json
import random
from functools import lru_cache
from pathlib import Path
from typing import Any

from parley.environments.clem import images, rooms, scenes
from parley.environments.clem.common import an
from parley.environments.data_files import reading

IMAGE_SUFFIXES = {".jpg", ".jpeg", ".png"}

Item = dict[str, Any]
"""A selectable picture: ``id``, ``labels`` (what the selection compares: category, concepts or
object categories), ``stimulus`` (what is shown; a ``photo`` or a synthetic ``scene``)."""


class PhotoDataError(ValueError):
    """A dataset file that is not in its dataset's format (one line for the user)."""


def _photo(path: Path, facts: list[str]) -> dict[str, Any]:
    return {"kind": "photo", "path": str(path.resolve()), "features": facts}


@lru_cache(maxsize=8)
def load_ade(root: str) -> tuple[Item, ...]:
    """ADE20K-style folders: category = the image's folder name."""
    items = []
    for path in sorted(Path(root).rglob("*")):
        if (
            path.suffix.lower() not in IMAGE_SUFFIXES
            or "_seg" in path.stem
            or "_parts_" in path.stem
        ):
            continue
        category = path.parent.name.replace("_", " ")
        objects: list[str] = []
        atr = path.with_name(f"{path.stem}_atr.txt")
        if atr.exists():
            for line in atr.read_text(encoding="utf-8", errors="replace").splitlines():
                fields = [f.strip() for f in line.split("#")]
                if len(fields) > 3 and fields[3] and an(fields[3]) not in objects:
                    objects.append(an(fields[3]))
        items.append(
            {
                "id": str(path.relative_to(root)),
                "labels": [category],
                "stimulus": _photo(path, [an(category), *objects]),
            }
        )
    return tuple(items)


@lru_cache(maxsize=8)
def load_docci(root: str) -> tuple[Item, ...]:
    """DOCCI: concepts are Cloud Vision labels scored at least 0.8."""
    base = Path(root)
    meta = base / "docci_metadata.jsonlines"
    items = []
    with reading(meta, "DOCCI metadata", PhotoDataError) as where:
        for where.line, line in enumerate(meta.read_text(encoding="utf-8").splitlines(), 1):
            if not line.strip():
                continue
            record = json.loads(line)
            image = base / "images" / f"{record['example_id']}.jpg"
            if not image.exists():
                continue
            labels = record.get("cloud_vision_api_responses", {}).get("labelAnnotations", [])
            concepts = []
            for label in labels:
                name = str(label.get("description", "")).lower()
                if label.get("score", 0) >= 0.8 and name and name not in concepts:
                    concepts.append(name)
            items.append(
                {
                    "id": record["example_id"],
                    "labels": concepts,
                    "stimulus": _photo(image, [an(c) for c in concepts]),
                }
            )
    return tuple(items)


@lru_cache(maxsize=8)
def load_clevr(root: str) -> tuple[Item, ...]:
    """CLEVR: per-image object categories from the scene files."""
    base = Path(root)
    items = []
    for scene_file in sorted((base / "scenes").glob("CLEVR_*_scenes.json")):
        split = scene_file.stem.split("_")[1]
        with reading(scene_file, "CLEVR scenes", PhotoDataError):
            for scene in json.loads(scene_file.read_text(encoding="utf-8"))["scenes"]:
                image = base / "images" / split / scene["image_filename"]
                if not image.exists():
                    continue
                objects = scene["objects"]
                cats = [f"{o['size']} {o['color']} {o['shape']} {o['material']}" for o in objects]
                facts = []
                for o in objects:
                    fact = an(f"{o['size']} {o['color']} {o['material']} {o['shape']}")
                    if fact not in facts:
                        facts.append(fact)
                items.append(
                    {
                        "id": scene["image_filename"],
                        "labels": cats,
                        "stimulus": _photo(image, facts),
                    }
                )
    return tuple(items)


def load_vg_pairs(file: str) -> list[dict[str, Any]]:
    """Visual Genome image pairs for MatchIt (see the module docstring for the columns)."""
    path = Path(file)
    pairs = []
    with (
        reading(path, "Visual Genome pairs", PhotoDataError),
        path.open(newline="", encoding="utf-8") as handle,
    ):
        for row in csv.DictReader(handle):
            a = row.get("image_a") or row.get("url1")
            b = row.get("image_b") or row.get("url2")
            if not a or not b:
                raise PhotoDataError(f"{file}: each row needs image_a,image_b (or url1,url2)")
            objects_a = [o.strip() for o in (row.get("objects_a") or "").split(";") if o.strip()]
            objects_b = [o.strip() for o in (row.get("objects_b") or "").split(";") if o.strip()]
            kind = (row.get("kind") or ("same" if a == b else "different")).strip()
            pairs.append(
                {
                    "kind": kind,
                    "image_a": _photo(path.parent / a, [an(o) for o in objects_a]),
                    "image_b": _photo(path.parent / b, [an(o) for o in objects_b]),
                }
            )
    return pairs


# --- synthetic stand-ins ----------------------------------------------------------------------

POOL_SIZE = 64


@lru_cache(maxsize=8)
def synthetic(dataset: str) -> tuple[Item, ...]:
    """A fixed pool of synthetic pictures with the dataset's kind of metadata."""
    rng = random.Random(f"clem.synthetic:{dataset}")
    items: list[Item] = []
    seen: set[tuple[str, ...]] = set()
    categories = sorted(rooms.CATEGORIES)
    while len(items) < POOL_SIZE:
        i = len(items)
        if dataset == "ade":
            category = categories[i % len(categories)]
            spec = rooms.random_room(rng, category)
            labels = [category]
        elif dataset == "docci":
            spec = scenes.random_outdoor(rng)
            labels = scenes.outdoor_concepts(spec)
        elif dataset == "clevr":
            spec = scenes.random_objects(rng)
            labels = scenes.object_categories(spec)
        else:
            raise ValueError(f"no synthetic stand-in for {dataset!r}")
        facts = tuple(sorted(images.units(spec)))
        if facts in seen:  # two pictures alike in every detail would make an unsolvable set
            continue
        seen.add(facts)
        items.append({"id": f"synthetic-{dataset}-{i}", "labels": labels, "stimulus": spec})
    return tuple(items)


def pool(dataset: str, root: str = "") -> tuple[tuple[Item, ...], str]:
    """The items of ``dataset`` (ade, docci, clevr) from ``root``, or the synthetic stand-in when
    ``root`` is empty; returns the items and their source (``disk`` or ``synthetic``)."""
    if not root:
        return synthetic(dataset), "synthetic"
    if not Path(root).is_dir():
        raise FileNotFoundError(f"{dataset} dataset folder {root!r} does not exist")
    loader = {"ade": load_ade, "docci": load_docci, "clevr": load_clevr}[dataset]
    items = loader(str(Path(root).resolve()))
    if len(items) < 3:
        raise ValueError(f"{dataset} dataset {root!r}: found {len(items)} images, need at least 3")
    return items, "disk"


# --- target and distractors -------------------------------------------------------------------


def _shared(a: Item, b: Item) -> int:
    return len(set(a["labels"]) & set(b["labels"]))


def _distractors(
    dataset: str, target: Item, items: tuple[Item, ...], rng: random.Random
) -> list[Item] | None:
    others = [i for i in items if i["id"] != target["id"]]
    if dataset == "ade":
        same = [i for i in others if i["labels"][:1] == target["labels"][:1]]
        return rng.sample(same, 2) if len(same) >= 2 else None
    if dataset == "docci":
        concepts = [c for c in target["labels"] if sum(c in i["labels"] for i in others) >= 2]
        if not concepts:
            return None
        concept = rng.choice(concepts)
        return rng.sample([i for i in others if concept in i["labels"]], 2)
    # CLEVR: the images with most object categories in common; ties broken at random.
    ranked = sorted(others, key=lambda i: (-_shared(target, i), rng.random()))
    return ranked[:2]


def choose(
    dataset: str, items: tuple[Item, ...], rng: random.Random, *, static_target: bool = False
) -> list[Item]:
    """Target and two distractors, chosen as the paper describes (target first)."""
    if static_target:
        # One target for the whole experiment (fixed by the dataset, not the episode seed).
        fixed = random.Random(f"clem.static:{dataset}")
        candidates = list(items)
        fixed.shuffle(candidates)
        for target in candidates:
            if dataset == "clevr":
                top = sorted(
                    (i for i in items if i["id"] != target["id"]),
                    key=lambda i: (-_shared(target, i), i["id"]),
                )[:6]
                return [target, *rng.sample(top, 2)]
            found = _distractors(dataset, target, items, rng)
            if found:
                return [target, *found]
        raise ValueError(f"{dataset}: no image has two similar distractors")
    order = list(items)
    rng.shuffle(order)
    for target in order:
        found = _distractors(dataset, target, items, rng)
        if found:
            return [target, *found]
    raise ValueError(f"{dataset}: no image has two similar distractors")
