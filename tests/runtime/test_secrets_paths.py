"""Secrets and paths at the edges of a run: header values and URL passwords are masked in the
run folder's config.yaml and in call records; run names cannot lead out of runs/; a broker
that cannot be reached is one line naming the URL and the cause, and leaves no folder."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
import yaml

from parley.agents.backends.simserver import SimServerProcess
from parley.runtime.cli import main
from parley.runtime.config import ConfigError, load_config, masked_url
from parley.runtime.launch import free_port
from parley.runtime.scheduler import run_experiment

HEADER_SECRET = "hdr-5ecret-that-must-not-leak-81"
BUS_PASSWORD = "bus-pa55word-9q"
GAME = {
    "game": "comma.wire",
    "seeds": [0],
    "pairings": [{"solver": "scripted", "expert": "scripted"}],
}


@pytest.mark.parametrize("name", ["..", ".", "/abs", "a/../../b", "runs/x", ""])
def test_run_names_cannot_leave_runs(name: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_config({"name": name, "games": [GAME]})
    (problem,) = err.value.problems
    assert problem[0] == "name" and problem[1] == name
    assert "one folder name under runs/" in problem[2]


def test_masked_url() -> None:
    assert masked_url("mqtt://bob:pw@h:1883/x?y=1") == "mqtt://bob:***@h:1883/x?y=1"
    assert masked_url("mqtts://h:8883") == "mqtts://h:8883"
    assert masked_url("local") == "local"


@pytest.mark.anyio
async def test_headers_and_passwords_are_masked_in_config_and_records(tmp_path: Path) -> None:
    """A model's Authorization header, refused and echoed back by the server, and a bus URL
    with a password: the run uses them, and no file of the run folder holds them."""
    with SimServerProcess(
        {"api_key_env": "PARLEY_SIM_KEY"}, env={"PARLEY_SIM_KEY": "the-right-one"}
    ) as sim:
        config = load_config(
            {
                "name": "masked",
                "bus": f"mqtt://bob:{BUS_PASSWORD}@127.0.0.1:1883",
                "games": [
                    {
                        **GAME,
                        "pairings": [
                            {"solver": "m", "expert": "scripted"},
                            {"solver": "pw", "expert": "scripted"},
                        ],
                    }
                ],
                "models": {
                    "m": {
                        "model": "solver-m",
                        "base_url": sim.openai_url,
                        "headers": {"Authorization": f"Bearer {HEADER_SECRET}"},
                        "images": False,
                    },
                    # A password in a base URL: masked in config.yaml and call records.
                    "pw": {
                        "model": "solver-m",
                        "base_url": sim.openai_url.replace("//", f"//user:{BUS_PASSWORD}@"),
                        "http": "httpx",
                        "images": False,
                    },
                },
            }
        )
        # The local bus for the run itself; the config's bus URL is still written.
        outcome = await run_experiment(config, tmp_path, bus_url="local")
        assert sim.stats()["unauthorised"] == 2  # the header was sent, and the URL's password
    by_solver = {r["pairing"]["solver"]: r for r in outcome.records}
    assert "auth 401" in by_solver["m"]["reason"] and "***" in by_solver["m"]["reason"]
    assert "auth 401" in by_solver["pw"]["reason"]
    written = yaml.safe_load((tmp_path / "config.yaml").read_text())
    assert written["bus"] == "mqtt://bob:***@127.0.0.1:1883"
    assert written["models"]["m"]["headers"] == {"Authorization": "***"}
    assert written["models"]["pw"]["base_urls"][0].startswith("http://user:***@127.0.0.1:")
    for path in tmp_path.rglob("*"):
        if path.is_file():
            text = path.read_text(encoding="utf-8", errors="replace")
            assert HEADER_SECRET not in text and BUS_PASSWORD not in text, path
            assert base64.b64encode(f"user:{BUS_PASSWORD}".encode()).decode() not in text


def test_an_unreachable_broker_is_one_line_and_leaves_no_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump({"name": "nobroker", "games": [GAME]}))
    out = tmp_path / "out"
    url = f"mqtt://bob:{BUS_PASSWORD}@127.0.0.1:{free_port()}"
    code = main(["run", str(config), "--bus", url, "--out", str(out), "--quiet"])
    err = capsys.readouterr().err.strip()
    assert code == 1
    assert len(err.splitlines()) == 1, err
    assert masked_url(url) in err and "connection refused" in err
    assert BUS_PASSWORD not in err and "Traceback" not in err
    assert not out.exists()
