"""Reading a user's copy of PAD-UFES-20 (skin-lesion photos with clinical metadata, CC BY 4.0 per
its authors) for the telehealth puzzle. Nothing is downloaded: point the puzzle's
``pad_ufes_dir`` setting at the folder that holds ``metadata.csv`` and the images (in any
sub-folders, e.g. ``images/imgs_part_1``)."""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

DIAGNOSES = ("BCC", "SCC", "MEL", "ACK", "NEV", "SEK")
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg")


@dataclass(frozen=True)
class PadRecord:
    """One lesion of the dataset: its photo and the metadata the puzzle uses (None: unknown)."""

    img_id: str
    image: Path
    diagnosis: str
    age: int | None
    sex: str | None
    region: str | None
    diameter_mm: float | None
    itch: bool | None
    bleed: bool | None
    hurt: bool | None
    grew: bool | None
    changed: bool | None
    smoke: bool | None
    drink: bool | None
    skin_cancer_history: bool | None
    cancer_history: bool | None
    fitzpatrick: int | None


def _flag(value: str | None) -> bool | None:
    text = (value or "").strip().lower()
    if text in ("true", "1", "yes"):
        return True
    if text in ("false", "0", "no"):
        return False
    return None  # "UNK", empty and anything else: unknown


def _number(value: str | None) -> float | None:
    try:
        return float((value or "").strip())
    except ValueError:
        return None


def _text(value: str | None) -> str | None:
    text = (value or "").strip()
    return None if not text or text.upper() == "UNK" else text


def find_metadata(folder: Path) -> Path:
    direct = folder / "metadata.csv"
    if direct.exists():
        return direct
    found = sorted(folder.rglob("metadata.csv"))
    if not found:
        raise FileNotFoundError(f"no metadata.csv under {folder}")
    return found[0]


def load_pad_ufes(folder: str | Path) -> list[PadRecord]:
    """The records of ``folder`` whose image exists and whose diagnosis is one of the six,
    sorted by image id (so a seed picks the same lesion on every machine)."""
    root = Path(folder)
    images = {
        p.name: p for p in root.rglob("*") if p.suffix.lower() in IMAGE_SUFFIXES and p.is_file()
    }
    records = []
    with find_metadata(root).open(newline="", encoding="utf-8") as f:
        for row in csv.DictReader(f):
            img_id = (row.get("img_id") or "").strip()
            diagnosis = (row.get("diagnostic") or "").strip().upper()
            if img_id not in images or diagnosis not in DIAGNOSES:
                continue
            d1, d2 = _number(row.get("diameter_1")), _number(row.get("diameter_2"))
            sizes = [d for d in (d1, d2) if d is not None]
            age = _number(row.get("age"))
            fitz = _number(row.get("fitspatrick"))
            gender = _text(row.get("gender"))
            records.append(
                PadRecord(
                    img_id=img_id,
                    image=images[img_id],
                    diagnosis=diagnosis,
                    age=int(age) if age is not None else None,
                    sex=gender.lower() if gender else None,
                    region=(_text(row.get("region")) or "").lower() or None,
                    diameter_mm=max(sizes) if sizes else None,
                    itch=_flag(row.get("itch")),
                    bleed=_flag(row.get("bleed")),
                    hurt=_flag(row.get("hurt")),
                    grew=_flag(row.get("grew")),
                    changed=_flag(row.get("changed")),
                    smoke=_flag(row.get("smoke")),
                    drink=_flag(row.get("drink")),
                    skin_cancer_history=_flag(row.get("skin_cancer_history")),
                    cancer_history=_flag(row.get("cancer_history")),
                    fitzpatrick=int(fitz) if fitz is not None else None,
                )
            )
    return sorted(records, key=lambda r: r.img_id)
