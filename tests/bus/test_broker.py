"""Running Mosquitto: the project config, the rendered copies, the process and `run_broker`."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from parley.bus.broker import (
    INSTALL_HINT,
    PROJECT_CONFIG,
    find_mosquitto,
    free_port,
    port_open,
    render_config,
    run_broker,
    start_mosquitto,
)
from parley.bus.mqtt import MqttBus
from tests.conftest import require

HAVE_MOSQUITTO = find_mosquitto() is not None


def directives(text: str) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for line in text.splitlines():
        words = line.split()
        if words and not words[0].startswith("#"):
            found.setdefault(words[0], []).append(" ".join(words[1:]))
    return found


def test_the_project_config_keeps_what_the_bus_relies_on() -> None:
    config = directives(PROJECT_CONFIG.read_text())
    assert config["max_queued_messages"] == ["0"]  # the default 1000 drops messages
    assert config["max_queued_bytes"] == ["0"]
    assert int(config["max_inflight_messages"][0]) >= MqttBus().max_inflight
    assert config["persistence"] == ["true"]
    assert config["listener"] == ["1883 127.0.0.1"]  # loopback only
    assert "persistence_location" not in config  # the tools add their own


def test_every_setting_of_the_project_config_is_explained() -> None:
    comment_seen = False
    for line in PROJECT_CONFIG.read_text().splitlines():
        stripped = line.strip()
        if not stripped:
            comment_seen = False
        elif stripped.startswith("#"):
            comment_seen = True
        else:
            assert comment_seen, f"no comment explains {stripped!r}"


def test_render_config_moves_the_listener_and_the_data_folder() -> None:
    text = "port 1999\nlistener 1883 0.0.0.0\ncertfile /c.pem\npersistence_location /var/x/\n"
    out = directives(render_config(text, port=2345, data_dir="/tmp/d"))
    assert out["listener"] == ["2345 0.0.0.0"]  # the bind address is kept
    assert "port" not in out  # it would open a second listener
    assert out["certfile"] == ["/c.pem"]
    assert out["persistence_location"] == ["/tmp/d/"]


def test_render_config_adds_a_listener_when_there_is_none() -> None:
    out = directives(render_config("persistence true\n", port=2345))
    assert out["listener"] == ["2345 127.0.0.1"]
    assert "persistence_location" not in out
    assert render_config("listener 1883\n") == "listener 1883\n"  # nothing to change


def test_free_ports_avoid_the_ephemeral_range() -> None:
    range_file = Path("/proc/sys/net/ipv4/ip_local_port_range")
    require(range_file.exists(), f"no {range_file} (not Linux?)")
    low = int(range_file.read_text().split()[0])
    ports = {free_port() for _ in range(20)}
    assert all(p < low for p in ports)
    assert len(ports) > 1


def test_run_broker_without_mosquitto_says_how_to_install_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("PARLEY_MOSQUITTO", "/nonexistent/mosquitto")
    assert find_mosquitto() is None
    assert run_broker() == 1
    err = capsys.readouterr().err
    assert "apt-get install mosquitto" in err and "brew install mosquitto" in err
    assert err.strip() == INSTALL_HINT


def test_run_broker_with_an_unreadable_config(capsys: pytest.CaptureFixture[str]) -> None:
    require(HAVE_MOSQUITTO, "Mosquitto is not installed")
    assert run_broker("/nonexistent/broker.conf") == 1
    assert "cannot read the broker config" in capsys.readouterr().err


def test_start_stop_restart_kill() -> None:
    require(HAVE_MOSQUITTO, "Mosquitto is not installed")
    broker = start_mosquitto()
    try:
        assert broker.running and port_open(broker.host, broker.port)
        assert broker.url == f"mqtt://127.0.0.1:{broker.port}"
        broker.restart()
        assert broker.running and port_open(broker.host, broker.port)
        broker.save()
        assert (broker.data_dir / "mosquitto.db").exists()
        broker.kill()
        assert not broker.running and not port_open(broker.host, broker.port)
        broker.start()
        assert port_open(broker.host, broker.port)
        broker.stop()
        assert not broker.running
        assert "New connection" in broker.log_tail()  # its log is kept
    finally:
        broker.close()
    assert not broker.config_path.exists()  # its files are gone


def test_a_broker_that_cannot_start_reports_its_log() -> None:
    require(HAVE_MOSQUITTO, "Mosquitto is not installed")
    folder = Path(tempfile.mkdtemp())
    try:
        bad = folder / "bad.conf"
        bad.write_text("listener 1883 127.0.0.1\nno_such_option 1\n")
        with pytest.raises(RuntimeError, match=r"no_such_option|exited"):
            start_mosquitto(bad)
    finally:
        shutil.rmtree(folder)


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_run_broker_runs_mosquitto_in_the_foreground_until_interrupted(stop: int) -> None:
    """Ctrl-C, a kill or a closed terminal stops Mosquitto with it (none left orphaned)."""
    require(HAVE_MOSQUITTO, "Mosquitto is not installed")
    port = free_port()
    code = f"from parley.bus.broker import run_broker; raise SystemExit(run_broker(port={port}))"
    process = subprocess.Popen([sys.executable, "-c", code], stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 10
        while not port_open("127.0.0.1", port):
            assert process.poll() is None, process.stderr.read() if process.stderr else ""
            assert time.monotonic() < deadline, "mosquitto did not come up"
            time.sleep(0.05)
        process.send_signal(stop)
        assert process.wait(10) == 0
        assert not port_open("127.0.0.1", port)
        assert f"port {port}" in (process.stderr.read() if process.stderr else "")
    finally:
        if process.poll() is None:
            process.kill()
        shutil.rmtree(Path(tempfile.gettempdir()) / f"parley-mosquitto-{port}", ignore_errors=True)
    assert os.path.exists(PROJECT_CONFIG)
