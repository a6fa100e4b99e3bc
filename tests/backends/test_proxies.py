"""One HTTP path per model call: both transports (the SDK's client over aiohttp or httpx, and
``transport: direct``) reach the stand-in server through the proxy ``HTTP_PROXY`` names, with its
credentials, and straight where ``NO_PROXY`` covers the host; a real forward proxy runs as its
own process and counts what it forwards. And the two transports record the same episodes."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from parley.agents.backends.simserver import SimServerProcess
from tests.backends.conftest import model, play, transcript, wire_config
from tests.backends.forward_proxy import ForwardProxyProcess

pytestmark = pytest.mark.anyio

# (transport, http) of a model entry: every way a request leaves parley.
PATHS = [("sdk", "aiohttp"), ("sdk", "httpx"), ("direct", "aiohttp")]
PROXY_VARIABLES = ("http_proxy", "https_proxy", "all_proxy", "no_proxy")


@pytest.fixture(scope="module")
def proxy() -> Iterator[ForwardProxyProcess]:
    with ForwardProxyProcess() as process:
        yield process


def _clean(monkeypatch: pytest.MonkeyPatch) -> None:
    """No proxy variable of this machine's environment, in either case."""
    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.upper(), raising=False)


async def _play(
    sim: SimServerProcess,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    environ: dict[str, str],
    transport: str,
    http: str,
    *,
    url: str | None = None,
) -> list[dict[str, Any]]:
    """One wire episode played with ``environ`` set while the run lasts (its clients read the
    environment when they are made); the stand-in server is asked for counts after."""
    extra: dict[str, Any] = {"transport": transport, "http": http}
    if url is not None:
        extra["base_url"] = url
    models = {
        "solver": model(sim, "solver-m", images=False, **extra),
        "expert": model(sim, "expert-m", **extra),
    }
    config = wire_config(models, [{"solver": "solver", "expert": "expert"}], seeds=[0])
    with monkeypatch.context() as m:
        _clean(m)
        for name, value in environ.items():
            m.setenv(name, value)
        records = await play(config, tmp_path)
    assert [r["outcome"] for r in records] == ["success"], [
        (r["reason"], r["error"]) for r in records
    ]
    return records


@pytest.mark.parametrize(("transport", "http"), PATHS)
async def test_requests_go_through_the_proxy_with_its_credentials(
    sim: SimServerProcess,
    proxy: ForwardProxyProcess,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    transport: str,
    http: str,
) -> None:
    """With ``HTTP_PROXY`` set, every chat request goes through the proxy, loopback server or
    not, and carries the credentials of the proxy's URL to the proxy (not to the server)."""
    before = proxy.count()["forwarded"]
    with_user = proxy.url.replace("http://", "http://tester:s3cret@")
    await _play(sim, tmp_path, monkeypatch, {"HTTP_PROXY": with_user}, transport, http)
    seen = proxy.count()
    requests = sim.stats()["requests"]
    assert requests > 0
    # The run's probes of the server (what it is, its models) go there too.
    targets = seen["targets"][before:]
    assert {t.split("/", 3)[2] for t in targets} == {sim.url.split("/", 3)[2]}
    assert _chats(targets) == requests
    basic = "Basic " + base64.b64encode(b"tester:s3cret").decode()
    chats = [a for t, a in zip(targets, seen["proxy_auth"][before:], strict=True) if _chat(t)]
    # The proxy's credentials, and never the API key in their place.
    assert set(chats) == {basic}


@pytest.mark.parametrize(("transport", "http"), PATHS)
@pytest.mark.parametrize(
    ("no_proxy", "host", "proxied"),
    [
        ("127.0.0.1", "127.0.0.1", False),
        ("example.org, 127.0.0.0/8", "127.0.0.1", False),
        ("*", "127.0.0.1", False),
        ("localhost", "localhost", False),
        (".localhost", "localhost", True),  # a leading dot: subdomains only
        ("127.0.0.1:1", "127.0.0.1", True),  # another port
    ],
)
async def test_no_proxy_decides_alike_on_every_path(
    sim: SimServerProcess,
    proxy: ForwardProxyProcess,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    transport: str,
    http: str,
    no_proxy: str,
    host: str,
    proxied: bool,
) -> None:
    """A host ``NO_PROXY`` covers is reached straight; one it does not, through the proxy. The
    lower-case names are read as the upper-case ones. The run's other requests to the server
    (the dialect probe, its provenance) go the same way as its model calls."""
    before = proxy.count()["forwarded"]
    url = sim.openai_url.replace("127.0.0.1", host)
    environ = {"http_proxy": proxy.url, "no_proxy": no_proxy}
    await _play(sim, tmp_path, monkeypatch, environ, transport, http, url=url)
    requests = sim.stats()["requests"]
    assert requests > 0
    targets = proxy.count()["targets"][before:]
    assert _chats(targets) == (requests if proxied else 0)
    probes = [t for t in targets if t.endswith(("/version", "/props", "/v1/models"))]
    assert bool(probes) == proxied
    if not proxied:
        assert targets == []


def _chat(target: str) -> bool:
    return target.endswith("/chat/completions")


def _chats(targets: list[str]) -> int:
    return sum(map(_chat, targets))


def _episode(run: Path, record: dict[str, Any]) -> dict[str, Any]:
    """What an episode's record and transcript say of its model calls: outcome, tokens, and
    each reply's text and usage."""
    replies = [
        (m["role"], m["text"], m["usage"])
        for m in transcript(run, record["episode"])
        if m["kind"] == "turn_response"
    ]
    kept = ("seed", "outcome", "reason", "turns", "tokens", "token_source")
    return {"record": {k: record[k] for k in kept}, "replies": replies}


@pytest.mark.parametrize(
    ("backend", "stream"), [("openai", False), ("openai", True), ("anthropic", True)]
)
async def test_direct_and_sdk_record_the_same_episodes(
    sim: SimServerProcess, tmp_path: Path, backend: str, stream: bool
) -> None:
    """The same requests through the SDK and through direct transport: the same replies, the
    same usage call by call, the same records."""
    played = {}
    for transport in ("sdk", "direct"):
        models = {
            "solver": model(
                sim, "solver-m", backend, images=False, stream=stream, transport=transport
            ),
            "expert": model(sim, "expert-m", backend, stream=stream, transport=transport),
        }
        config = wire_config(models, [{"solver": "solver", "expert": "expert"}], seeds=[0, 1, 2])
        run = tmp_path / transport
        records = sorted(await play(config, run), key=lambda r: r["seed"])
        played[transport] = [_episode(run, r) for r in records]
    assert [e["record"]["outcome"] for e in played["sdk"]] == ["success"] * 3
    assert all(e["replies"] for e in played["sdk"])
    assert played["direct"] == played["sdk"]
