"""``transport: direct`` to an OpenAI-compatible server: the request made by parley alone. The
run never imports the SDKs (about 0.3 s of CPU in each of its processes), its workers do not
preload them, the key still reaches the server (which refuses requests without it), and the
entry's headers go with it, never in its place."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from parley.agents.backends.simserver import SimServerProcess
from parley.agents.backends.spec import ModelSpec
from parley.agents.backends.transport import BACKENDS, transport_for, uses_sdk
from tests.backends.conftest import base_sim

ROOT = Path(__file__).resolve().parents[2]


def _env() -> dict[str, str]:
    """This environment without parley's own variables (the run sets what it needs)."""
    return {k: v for k, v in os.environ.items() if not k.startswith("PARLEY_")}


# Run in a fresh interpreter: this one has imported the SDKs for other tests.
_SCRIPT = textwrap.dedent(
    """
    import json, sys
    from pathlib import Path
    from parley import event_loop
    from parley.runtime.preflight import check_config
    from parley.runtime.scheduler import run_experiment
    from parley.runtime.workers import preload_args
    from parley.runtime.experiment import expand
    from tests.backends.conftest import model, wire_config

    url, out = sys.argv[1], Path(sys.argv[2])

    class Sim:
        openai_url = url

    async def main():
        extra = {"transport": "direct", "api_key_env": "PARLEY_DIRECT_KEY",
                 "headers": {"X-Parley-Test": "1"}}
        models = {
            "solver": model(Sim, "solver-m", images=False, **extra),
            "expert": model(Sim, "expert-m", **extra),
        }
        config = wire_config(models, [{"solver": "solver", "expert": "expert"}], seeds=[0, 1])
        checked = await check_config(config)
        outcome = await run_experiment(config, out)
        return {
            "checked": [c.status for c in checked],
            "outcomes": sorted(r["outcome"] for r in outcome.records),
            "preload": preload_args(config, expand(config)),
            "sdks": sorted(m for m in ("openai", "anthropic", "httpx2") if m in sys.modules),
        }

    print(json.dumps(event_loop.run(main())))
    """
)


def test_a_direct_run_to_an_openai_server_never_imports_an_sdk(tmp_path: Path) -> None:
    key = "sk-direct-test-key"
    config = {**base_sim(), "api_key_env": "PARLEY_SIM_REQUIRED_KEY"}
    with SimServerProcess(config, env={"PARLEY_SIM_REQUIRED_KEY": key}) as sim:
        done = subprocess.run(
            [sys.executable, "-c", _SCRIPT, sim.openai_url, str(tmp_path / "run")],
            cwd=ROOT,
            env={**_env(), "PARLEY_DIRECT_KEY": key},
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        got = json.loads(done.stdout.strip().splitlines()[-1])
        stats = sim.stats()
    assert got["checked"] and set(got["checked"]) == {"ok"}, got
    assert got["outcomes"] and set(got["outcomes"]) <= {"success", "lost"}, got
    assert got["sdks"] == [], got
    assert got["preload"][got["preload"].index("--modules") + 1] == ""
    # The server checks the key: a request without it would be refused, and none was.
    assert stats.get("unauthorised", 0) == 0 and stats["completed"] > 0


def test_direct_headers_put_the_key_last_and_the_entrys_headers_over_the_defaults() -> None:
    spec = ModelSpec(
        model="m",
        transport="direct",
        headers={"User-Agent": "lab-proxy/2", "Authorization": "Bearer spoofed", "X-Team": "a"},
    )
    headers = BACKENDS["openai"].direct_headers("sk-k", spec)
    assert headers is not None
    assert headers["Authorization"] == "Bearer sk-k"
    assert headers["User-Agent"] == "lab-proxy/2" and headers["X-Team"] == "a"
    assert headers["Content-Type"] == "application/json"
    unkeyed = BACKENDS["openai"].direct_headers(None, ModelSpec(model="m", transport="direct"))
    assert unkeyed is not None and unkeyed["Authorization"] == "Bearer EMPTY"
    # An entry's own Authorization goes only where it names no key, never beside the key.
    own = ModelSpec(model="m", headers={"authorization": "Bearer lab-token"})
    unkeyed = BACKENDS["openai"].direct_headers(None, own)
    assert unkeyed is not None and unkeyed["authorization"] == "Bearer lab-token"
    assert "Authorization" not in unkeyed
    keyed = BACKENDS["openai"].direct_headers("sk-k", own)
    assert keyed is not None and keyed["Authorization"] == "Bearer sk-k"
    assert "authorization" not in keyed


def test_only_direct_calls_to_openai_compatible_servers_go_without_the_sdk() -> None:
    assert not uses_sdk(ModelSpec(model="m", transport="direct"))
    assert uses_sdk(ModelSpec(model="m", transport="sdk", base_url="http://127.0.0.1:8000/v1"))
    assert uses_sdk(ModelSpec(model="m", backend="anthropic", transport="direct"))


def test_auto_sends_through_the_sdk_only_to_a_vendors_own_api() -> None:
    local = "http://127.0.0.1:8000/v1"
    assert transport_for(ModelSpec(model="m"), local) == "direct"
    assert transport_for(ModelSpec(model="m"), "https://gateway.lab.example/v1") == "direct"
    assert transport_for(ModelSpec(model="m"), "https://api.openai.com/v1") == "sdk"
    assert transport_for(ModelSpec(model="m"), "") == "sdk"  # the SDK's own default host
    assert transport_for(ModelSpec(model="m", backend="anthropic"), local) == "sdk"
    assert transport_for(ModelSpec(model="m", transport="sdk"), local) == "sdk"
    # Basic authentication in the URL is the SDK's HTTP client's to send.
    assert transport_for(ModelSpec(model="m"), "http://u:pw@127.0.0.1:8000/v1") == "sdk"
    assert transport_for(ModelSpec(model="m", transport="direct"), "https://api.openai.com") == (
        "direct"
    )
    # A model served both ways needs the SDK for its hosted URL only.
    both = ModelSpec(model="m", base_urls=[local, "https://api.openai.com/v1"])
    assert uses_sdk(both) and not uses_sdk(ModelSpec(model="m", base_url=local))
    assert uses_sdk(ModelSpec(model="m"))  # no URL: the vendor's API
