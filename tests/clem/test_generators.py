"""Instance generators: deterministic, and they meet their definitions."""

from __future__ import annotations

import json
import random
from pathlib import Path

import networkx as nx
import pytest
from PIL import Image

from parley.environments.clem import (
    grids,
    images,
    mapworld,
    matchit,
    pentomino,
    photos,
    reference,
    rooms,
)


def test_reference_instances_are_deterministic_and_well_formed() -> None:
    for name in reference.SETS:
        a = reference.generate(7, {"set": name})
        assert a == reference.generate(7, {"set": name}), name
        assert a != reference.generate(8, {"set": name}), name
        assert sorted(a["guesser_order"]) == [0, 1, 2]
        units = [tuple(images.units(s)) for s in a["images"]]
        assert len(set(units)) == 3, f"{name}: the three pictures must differ"
        for stim in a["images"]:
            assert images.render(stim).startswith(b"\x89PNG")


def test_same_stimulus_same_png() -> None:
    stim = reference.generate(3, {"set": "pentomino"})["images"][0]
    assert images.render(stim) == images.render(json.loads(json.dumps(stim)))


@pytest.mark.parametrize("name", ["rows", "columns", "diagonals", "letters", "shapes"])
def test_grid_sets(name: str) -> None:
    grid_set = grids.SETS[name]
    assert len(set(grid_set)) == len(grid_set) >= 3
    for g in grid_set:
        assert grids.parse_text(grids.as_text(g)) == g
        assert set("".join(g)) <= {"X", "▢"}
        if name == "rows":
            full = [r for r in g if r == "XXXXX"]
            assert len(full) in (1, 4) and all(r in ("XXXXX", "▢▢▢▢▢") for r in g)
        if name == "columns":
            cols = ["".join(r[c] for r in g) for c in range(5)]
            assert sum(c == "XXXXX" for c in cols) in (1, 4)


def test_random_grids_and_text_rendering() -> None:
    rng = random.Random(1)
    for _ in range(20):
        g = grids.random_grid(rng)
        assert 8 <= "".join(g).count("X") <= 14
    text = grids.as_text(grids.LETTERS[0])
    assert text.splitlines()[0] == "X X X X X" and "▢" in text


def test_matchit_pairs_meet_their_definitions() -> None:
    for seed in range(15):
        same = matchit.generate(seed, {"set": "grids", "pair": "same"})
        assert same["image_a"] == same["image_b"] and same["same"]
        tr = matchit.generate(seed, {"set": "grids", "pair": "similar_transform"})
        a, b = tuple(tr["image_a"]["rows"]), tuple(tr["image_b"]["rows"])
        assert a != b and b in {t(a) for t in grids.TRANSFORMS.values()}
        edit = matchit.generate(seed, {"set": "grids", "pair": "similar_edit"})
        assert grids.difference(tuple(edit["image_a"]["rows"]), tuple(edit["image_b"]["rows"])) == 2
        diff = matchit.generate(seed, {"set": "grids", "pair": "different"})
        assert diff["image_a"] != diff["image_b"] and not diff["same"]
        for name in ("pentomino", "photos"):
            sim = matchit.generate(seed, {"set": name, "pair": "similar"})
            assert images.units(sim["image_a"]) != images.units(sim["image_b"])
            assert not sim["same"]
        assert matchit.generate(seed, {"set": "photos", "pair": "similar"}) == matchit.generate(
            seed, {"set": "photos", "pair": "similar"}
        )
    with pytest.raises(ValueError):
        matchit.generate(0, {"set": "pentomino", "pair": "same", "variant": "text"})


def test_pentomino_changes_are_small_and_real() -> None:
    rng = random.Random(3)
    for _ in range(40):
        board = pentomino.random_board(rng)
        cells = [c for p in board["pieces"] for c in pentomino.cells(p)]
        assert len(cells) == len(set(cells)) == 5 * len(board["pieces"])  # no overlap
        for change in ("recolour", "reshape", "move", "remove", "add"):
            new, kind = pentomino.vary(board, rng, change)
            assert kind == change
            old_units, new_units = set(pentomino.units(board)), set(pentomino.units(new))
            assert old_units != new_units
            # exactly one piece differs: one unit lost and/or one gained
            assert len(old_units - new_units) <= 1 and len(new_units - old_units) <= 1
            if change != "add":  # the original keeps a detail the variant lacks
                assert set(pentomino.features(board)) - set(pentomino.features(new))


def test_reference_pentomino_target_is_distinguishable() -> None:
    for seed in range(20):
        inst = reference.generate(seed, {"set": "pentomino"})
        target, *distractors = [set(images.features(s)) for s in inst["images"]]
        assert all(target - d for d in distractors)


def test_maps_meet_their_definitions() -> None:
    for seed in range(10):
        for rooms_n, cycle in ((4, False), (6, False), (8, False), (6, True), (8, True)):
            inst = mapworld.explore_instance(seed, {"rooms": rooms_n, "cycle": cycle}, "t")
            assert inst == mapworld.explore_instance(seed, {"rooms": rooms_n, "cycle": cycle}, "t")
            g = mapworld.graph_of(inst)
            assert g.number_of_nodes() == rooms_n and nx.is_connected(g)
            assert bool(nx.cycle_basis(g)) == cycle == inst["cycle"]
            assert all(0 <= x < 4 and 0 <= y < 4 for x, y in g.nodes)
            assert all(abs(a[0] - b[0]) + abs(a[1] - b[1]) == 1 for a, b in g.edges)  # grid doors
            assert tuple(inst["start"]) in g
        for distance, allowed in (("zero", {0}), ("close", {1, 2}), ("far", {3, 4})):
            inst = mapworld.g2x_instance(seed, {"distance": distance})
            g = mapworld.graph_of(inst)
            d = nx.shortest_path_length(g, tuple(inst["start"]), tuple(inst["target"]))
            assert d == inst["distance"] and d in allowed
            cats = [r["category"] for r in inst["rooms"]]
            assert cats.count(inst["target_category"]) == 1


def test_room_pictures_are_distinct_per_category() -> None:
    cores = {c: set(spec["core"]) for c, spec in rooms.CATEGORIES.items()}
    for c, core in cores.items():
        for other, other_core in cores.items():
            if c != other:
                assert not core <= other_core, f"{c}'s furniture also makes a {other}"
    rng = random.Random(0)
    pictures = {c: rooms.render_room(rooms.random_room(rng, c)) for c in rooms.CATEGORIES}
    assert len(set(pictures.values())) == len(pictures)


# --- loaders on tiny folders ------------------------------------------------------------------


def _jpg(path: Path, color: tuple[int, int, int]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (32, 24), color).save(path)


def test_ade_loader_picks_distractors_of_the_target_category(tmp_path: Path) -> None:
    for i in range(3):
        _jpg(tmp_path / "b" / "bedroom" / f"ADE_train_{i}.jpg", (10 * i, 0, 0))
    for i in range(2):
        _jpg(tmp_path / "k" / "kitchen" / f"ADE_train_{10 + i}.jpg", (0, 10 * i, 0))
    _jpg(tmp_path / "b" / "bedroom" / "ADE_train_0_seg.png", (1, 1, 1))  # a mask: skipped
    (tmp_path / "b" / "bedroom" / "ADE_train_0_atr.txt").write_text(
        '001 # 0 # 0 # bed # bed # ""\n002 # 0 # 0 # lamp # lamp # ""\n'
    )
    items = photos.load_ade(str(tmp_path))
    assert len(items) == 5
    for seed in range(5):
        inst = reference.generate(seed, {"set": "ade", "dataset_dir": str(tmp_path)})
        assert inst["source"] == "disk"
        paths = [s["path"] for s in inst["images"]]
        assert all("bedroom" in p for p in paths)  # only bedrooms have two other images
        assert images.render(inst["images"][0]).startswith(b"\x89PNG")
    bed = next(i for i in items if i["id"].endswith("ADE_train_0.jpg"))
    assert bed["stimulus"]["features"] == ["a bedroom", "a bed", "a lamp"]


def test_docci_loader_uses_confident_concepts(tmp_path: Path) -> None:
    lines = []
    for i, labels in enumerate([["dog", "grass"], ["dog"], ["dog", "ball"], ["car"]]):
        _jpg(tmp_path / "images" / f"ex{i}.jpg", (0, 0, 20 * i))
        ann = [{"description": name.title(), "score": 0.9} for name in labels] + [
            {"description": "Blur", "score": 0.3}
        ]
        lines.append(
            json.dumps(
                {"example_id": f"ex{i}", "cloud_vision_api_responses": {"labelAnnotations": ann}}
            )
        )
    (tmp_path / "docci_metadata.jsonlines").write_text("\n".join(lines) + "\n")
    items = photos.load_docci(str(tmp_path))
    assert [i["labels"] for i in items] == [["dog", "grass"], ["dog"], ["dog", "ball"], ["car"]]
    for seed in range(5):
        inst = reference.generate(seed, {"set": "docci", "dataset_dir": str(tmp_path)})
        ids = {Path(s["path"]).stem for s in inst["images"]}
        assert ids == {"ex0", "ex1", "ex2"}  # the three sharing "dog"


def test_clevr_loader_ranks_by_shared_objects(tmp_path: Path) -> None:
    def obj(size: str, color: str, shape: str) -> dict[str, str]:
        return {"size": size, "color": color, "shape": shape, "material": "rubber"}

    scenes = [
        [obj("large", "red", "cube"), obj("small", "blue", "sphere")],
        [
            obj("large", "red", "cube"),
            obj("small", "blue", "sphere"),
            obj("large", "gray", "cylinder"),
        ],
        [obj("large", "red", "cube")],
        [obj("small", "yellow", "cylinder")],
    ]
    doc = {
        "scenes": [
            {"image_filename": f"CLEVR_val_{i}.png", "objects": objs}
            for i, objs in enumerate(scenes)
        ]
    }
    (tmp_path / "scenes").mkdir()
    (tmp_path / "scenes" / "CLEVR_val_scenes.json").write_text(json.dumps(doc))
    for i in range(4):
        _jpg(tmp_path / "images" / "val" / f"CLEVR_val_{i}.png", (0, 20 * i, 0))
    items = photos.load_clevr(str(tmp_path))
    assert items[0]["labels"] == ["large red cube rubber", "small blue sphere rubber"]
    target = items[0]
    chosen = photos._distractors("clevr", target, items, random.Random(0))
    assert {c["id"] for c in chosen} == {"CLEVR_val_1.png", "CLEVR_val_2.png"}


@pytest.mark.parametrize(
    ("where", "content", "says"),
    [
        ("docci_metadata.jsonlines", b"\xff\xfe", "not UTF-8 text, so not DOCCI metadata"),
        ("docci_metadata.jsonlines", b'{"example_id": "a"}\n[1]\n', ", line 2: not DOCCI metadata"),
        ("scenes/CLEVR_val_scenes.json", b"{broken", "not CLEVR scenes (Expecting"),
        ("scenes/CLEVR_val_scenes.json", b'{"scenes": [{}]}', "not CLEVR scenes (no field"),
        ("pairs.csv", b"image_a,image_b\n\xff,b.jpg\n", "not UTF-8 text, so not Visual Genome"),
    ],
)
def test_a_damaged_dataset_file_is_named(
    where: str, content: bytes, says: str, tmp_path: Path
) -> None:
    target = tmp_path / where
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(content)
    with pytest.raises(photos.PhotoDataError) as caught:
        if where == "pairs.csv":
            photos.load_vg_pairs(str(target))
        else:
            photos.pool("docci" if "docci" in where else "clevr", str(tmp_path))
    assert str(caught.value).startswith(str(target)) and says in str(caught.value)


def test_visual_genome_pairs_file(tmp_path: Path) -> None:
    for name in ("a.jpg", "b.jpg", "c.jpg"):
        _jpg(tmp_path / name, (len(name), 0, 0))
    (tmp_path / "pairs.csv").write_text(
        "image_a,image_b,kind,objects_a,objects_b\n"
        "a.jpg,a.jpg,same,horse;hill,horse;hill\n"
        "a.jpg,b.jpg,similar,horse;hill,horse;fence\n"
        "a.jpg,c.jpg,different,horse,car\n"
    )
    inst = matchit.generate(
        0, {"set": "photos", "pair": "similar", "pairs_file": str(tmp_path / "pairs.csv")}
    )
    assert inst["source"] == "disk" and not inst["same"]
    assert images.units(inst["image_b"]) == ["a horse", "a fence"]
    assert images.render(inst["image_a"]).startswith(b"\x89PNG")
    with pytest.raises(FileNotFoundError):
        photos.pool("ade", str(tmp_path / "missing"))
