"""The PAD-UFES-20 loader and the telehealth puzzle on a user's copy of the dataset, tried on a
tiny folder in the dataset's layout that the test writes."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
from PIL import Image

from parley.environments import registry
from parley.environments.comma.pad_ufes import load_pad_ufes
from parley.environments.comma.telehealth import TelehealthPuzzle
from parley.runtime.config import ConfigError, load_config
from parley.runtime.experiment import expand
from parley.runtime.scheduler import run_experiment

COLUMNS = [
    "patient_id",
    "lesion_id",
    "smoke",
    "drink",
    "background_father",
    "background_mother",
    "age",
    "pesticide",
    "gender",
    "skin_cancer_history",
    "cancer_history",
    "has_piped_water",
    "has_sewage_system",
    "fitspatrick",
    "region",
    "diameter_1",
    "diameter_2",
    "diagnostic",
    "itch",
    "grew",
    "hurt",
    "changed",
    "bleed",
    "elevation",
    "img_id",
    "biopsed",
]


def _row(img_id: str, diagnostic: str, **values: str) -> dict[str, str]:
    row = dict.fromkeys(COLUMNS, "")
    row.update(img_id=img_id, diagnostic=diagnostic, patient_id=img_id[:6], lesion_id="1")
    row.update(values)
    return row


@pytest.fixture
def pad_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "pad"
    images = folder / "images" / "imgs_part_1"
    images.mkdir(parents=True)
    rows = [
        _row(
            "PAT_1_1_1.png",
            "BCC",
            age="71",
            gender="FEMALE",
            diameter_1="4.0",
            diameter_2="6.0",
            itch="True",
            bleed="False",
            hurt="UNK",
            region="FACE",
            fitspatrick="2",
            smoke="False",
        ),
        _row(
            "PAT_2_2_2.png",
            "SEK",
            age="55",
            gender="MALE",
            diameter_1="8",
            diameter_2="7",
            itch="False",
            bleed="False",
            hurt="False",
            region="BACK",
        ),
        _row(
            "PAT_3_3_3.png",
            "NEV",
            age="",
            gender="",
            diameter_1="",
            diameter_2="",
            itch="UNK",
            bleed="",
            region="",
        ),
        _row("PAT_4_4_4.png", "XYZ"),  # unknown diagnosis: left out
        _row("PAT_5_5_5.png", "MEL"),  # no image on disk: left out
    ]
    with (folder / "metadata.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    for i, row in enumerate(rows[:4]):
        Image.new("RGB", (64 + 8 * i, 48), (150 + 20 * i, 90, 80)).save(images / row["img_id"])
    return folder


def test_loader_reads_the_metadata_and_finds_the_images(pad_folder: Path) -> None:
    records = load_pad_ufes(pad_folder)
    assert [r.img_id for r in records] == ["PAT_1_1_1.png", "PAT_2_2_2.png", "PAT_3_3_3.png"]
    bcc, sek, nev = records
    assert (bcc.diagnosis, bcc.age, bcc.sex, bcc.region, bcc.fitzpatrick) == (
        "BCC",
        71,
        "female",
        "face",
        2,
    )
    assert bcc.diameter_mm == 6.0 and bcc.itch is True and bcc.bleed is False and bcc.hurt is None
    assert bcc.image.exists() and bcc.smoke is False
    assert sek.diameter_mm == 8.0 and sek.sex == "male"
    assert nev.age is None and nev.diameter_mm is None and nev.itch is None and nev.region is None


def test_telehealth_on_the_dataset(pad_folder: Path) -> None:
    settings = {"pad_ufes_dir": str(pad_folder)}
    seen = set()
    for seed in range(12):
        instance = TelehealthPuzzle.generate(seed, settings)
        assert instance == TelehealthPuzzle.generate(seed, settings)
        assert instance["source"] == "pad-ufes-20" and instance["lesion"] is None
        seen.add(instance["img_id"])
        puzzle = TelehealthPuzzle()
        puzzle.reset(instance)
        assert puzzle.render()[:8] == b"\x89PNG\r\n\x1a\n"
        profile = instance["profile"]
        if instance["img_id"] == "PAT_1_1_1.png":
            assert profile["age"] == 71 and profile["diameter_mm"] == 6.0
            assert puzzle.treatment == "surgery"  # BCC of 6 mm
        if instance["img_id"] == "PAT_2_2_2.png":
            assert puzzle.treatment == "no_treatment"  # SEK, not irritated
        facts = puzzle.private_facts()
        assert {"name", "ssn", "address"} <= set(facts)
        puzzle.step("solver", f"diagnose_{puzzle.diagnosis}")
        assert puzzle.step("solver", f"treat_{puzzle.treatment}").progress == 1.0
    assert seen == {"PAT_1_1_1.png", "PAT_2_2_2.png", "PAT_3_3_3.png"}
    with pytest.raises(FileNotFoundError):
        TelehealthPuzzle.generate(0, {"pad_ufes_dir": str(pad_folder / "nothing")})


@pytest.mark.anyio
async def test_a_run_on_the_dataset_through_the_bus(pad_folder: Path, tmp_path: Path) -> None:
    assert "pad_ufes_dir" in registry.get("comma.telehealth").default_settings
    config = load_config(
        {
            "name": "pad",
            "tracing": {"enabled": False},
            "games": [
                {
                    "game": "comma.telehealth",
                    "seeds": {"count": 4},
                    "pairings": [{"solver": "random", "expert": "scripted"}],
                    "settings": {"pad_ufes_dir": str(pad_folder)},
                }
            ],
        }
    )
    outcome = await run_experiment(config, tmp_path / "run")
    assert {r["outcome"] for r in outcome.records} <= {"success", "lost"}
    assert all("ssn" in r["private_facts"]["solver"] for r in outcome.records)


def test_a_missing_dataset_folder_is_a_config_error(tmp_path: Path) -> None:
    config = load_config(
        {
            "name": "pad",
            "games": [
                {
                    "game": "comma.telehealth",
                    "seeds": {"count": 1},
                    "pairings": [{"solver": "random", "expert": "scripted"}],
                    "settings": {"pad_ufes_dir": str(tmp_path / "nowhere")},
                }
            ],
        }
    )
    with pytest.raises(ConfigError) as caught:
        expand(config)
    assert "games.0.settings" in str(caught.value) and "metadata.csv" in str(caught.value)
