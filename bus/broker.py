"""Run Mosquitto with parley's configuration: for `parley broker`, the tests and the benchmarks."""

from __future__ import annotations

import os
import pwd
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import IO, Any, Self

PROJECT_CONFIG = Path(__file__).resolve().parent.parent / "configs" / "mosquitto.conf"
DEFAULT_HOST = "127.0.0.1"
INSTALL_HINT = (
    "Mosquitto is not installed. Install it with `apt-get install mosquitto` (Debian/Ubuntu), "
    "`brew install mosquitto` (macOS) or from https://mosquitto.org/download/, "
    "or point parley at any MQTT 5 broker with --broker mqtt://host:port."
)


class BrokerError(RuntimeError):
    """Mosquitto could not be started (the message carries the end of its log)."""


def find_mosquitto() -> str | None:
    """The path of the mosquitto executable, or None when it is not installed.

    ``PARLEY_MOSQUITTO`` names the executable to use instead (a build of your own); when it
    names nothing executable, Mosquitto counts as not installed.
    """
    chosen = os.environ.get("PARLEY_MOSQUITTO")
    if chosen:
        return chosen if os.access(chosen, os.X_OK) else None
    found = shutil.which("mosquitto")
    if found:
        return found
    for candidate in (
        "/usr/sbin/mosquitto",
        "/usr/local/sbin/mosquitto",
        "/opt/homebrew/sbin/mosquitto",
    ):
        if os.access(candidate, os.X_OK):
            return candidate
    return None


def free_port(host: str = DEFAULT_HOST) -> int:
    """A TCP port nothing uses right now, below the ephemeral range when possible.

    A port from the ephemeral range can be taken while its broker restarts: by another
    connection's local end, or by a client reconnecting to it, which on Linux may connect to
    itself (its local port chosen equal to the port it dials).
    """
    low = _ephemeral_low()
    for _ in range(50):
        port = random.randrange(10000, low) if low > 10100 else 0
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind((host, port))
            except OSError:
                continue
            return sock.getsockname()[1]
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 49152  # the IANA dynamic range (macOS, Windows)


def port_open(host: str, port: int, timeout: float = 0.2) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def render_config(
    text: str, *, port: int | None = None, host: str = DEFAULT_HOST, data_dir: str | None = None
) -> str:
    """``text`` with the first listener moved to ``port`` and persistence kept in ``data_dir``.

    The first ``listener`` line keeps its bind address (``host`` when it has none); without a
    listener line one on ``host:port`` is added. ``persistence_location`` is replaced.
    """
    out: list[str] = []
    listener_done = port is None
    for line in text.splitlines():
        words = line.split()
        if words and words[0] == "listener" and not listener_done:
            bind = words[2] if len(words) > 2 else host
            out.append(f"listener {port} {bind}")
            listener_done = True
            continue
        if words and words[0] == "port" and port is not None:
            continue  # the deprecated global port would open a second listener
        if words and words[0] == "persistence_location" and data_dir is not None:
            continue
        out.append(line)
    if not listener_done:
        out.insert(0, f"listener {port} {host}")
    if data_dir is not None:
        out.append(f"persistence_location {data_dir.rstrip('/')}/")
    return "\n".join(out) + "\n"


def _give_to_broker_user(path: Path, config_text: str) -> None:
    """Run as root, Mosquitto drops to the ``mosquitto`` user: let it write its database."""
    if os.geteuid() != 0:
        return
    for line in config_text.splitlines():
        words = line.split()
        if len(words) >= 2 and words[0] == "user" and words[1] == "root":
            return
    try:
        entry = pwd.getpwnam("mosquitto")
        os.chown(path, entry.pw_uid, entry.pw_gid)
    except (KeyError, OSError):
        path.chmod(0o777)  # falls back to "nobody"


class BrokerProcess:
    """One Mosquitto process on ``host:port`` with its own data folder; restartable.

    With ``pid_file`` the running process's id is kept in that file (written on every start,
    removed on stop), so other programs can signal it: ``parley broker --secure`` reloads
    its password and ACL files that way (SIGHUP). Mosquitto's own ``pid_file`` is written
    after it drops root's privileges, where it often may not write.
    """

    def __init__(
        self,
        executable: str,
        config_path: Path,
        *,
        host: str,
        port: int,
        data_dir: Path,
        log_path: Path,
        cleanup: list[Path],
        pid_file: Path | None = None,
    ) -> None:
        self.executable = executable
        self.config_path = config_path
        self.host = host
        self.port = port
        self.data_dir = data_dir
        self.log_path = log_path
        self.process: subprocess.Popen[bytes] | None = None
        self.pid_file = pid_file
        self._cleanup = cleanup
        self._log_file: IO[bytes] | None = None

    @property
    def url(self) -> str:
        return f"mqtt://{self.host}:{self.port}"

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def start(self, timeout: float = 10.0) -> Self:
        """Start Mosquitto and wait until its port accepts connections."""
        if self.running:
            return self
        log = open(self.log_path, "ab")  # noqa: SIM115 - kept open for the process's lifetime
        self._log_file = log
        self.process = subprocess.Popen(
            [self.executable, "-c", str(self.config_path)],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        if self.pid_file is not None:
            write_pid_file(self.pid_file, self.process.pid)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise BrokerError(
                    f"mosquitto exited with {self.process.returncode}:\n{self.log_tail()}"
                )
            # Listening comes before Mosquitto installs its signal handlers; until then SIGHUP
            # (reload) or SIGUSR1 (save) would kill it.
            if port_open(self.host, self.port) and handles_signals(self.process.pid) is not False:
                return self
            time.sleep(0.02)
        self.kill()
        raise BrokerError(
            f"mosquitto did not listen on {self.port} in {timeout} s:\n{self.log_tail()}"
        )

    def stop(self, timeout: float = 10.0) -> None:
        """Stop gracefully (SIGTERM): Mosquitto writes its database, sessions survive a start."""
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._closed_log()

    def kill(self) -> None:
        """Kill at once (SIGKILL), as a crash would: whatever was not saved is gone."""
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self._closed_log()

    def save(self, timeout: float = 5.0) -> None:
        """Make Mosquitto write its database now (SIGUSR1), as its autosave does periodically."""
        if not self.running:
            raise BrokerError("mosquitto is not running")
        db = self.data_dir / "mosquitto.db"
        before = db.stat().st_mtime_ns if db.exists() else None
        assert self.process is not None
        self.process.send_signal(signal.SIGUSR1)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if db.exists() and db.stat().st_mtime_ns != before:
                time.sleep(0.05)  # let it finish writing
                return
            time.sleep(0.01)
        raise BrokerError(f"mosquitto did not write {db} in {timeout} s")

    def restart(self, *, hard: bool = False, downtime: float = 0.0) -> None:
        """Stop (or with ``hard``, kill), stay down ``downtime`` seconds, start on the same port."""
        if hard:
            self.kill()
        else:
            self.stop()
        if downtime:
            time.sleep(downtime)
        self.start()

    def close(self) -> None:
        """Stop and remove the files this broker was started with."""
        self.stop()
        for path in self._cleanup:
            shutil.rmtree(path, ignore_errors=True)

    def log_tail(self, lines: int = 30) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def _closed_log(self) -> None:
        if self.pid_file is not None and self.process is not None:
            remove_pid_file(self.pid_file, self.process.pid)
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        return f"<BrokerProcess {self.url} {state} data={self.data_dir}>"


def start_mosquitto(
    config: str | Path | None = None,
    port: int | None = None,
    data_dir: str | Path | None = None,
    *,
    host: str = DEFAULT_HOST,
    executable: str | None = None,
    timeout: float = 10.0,
) -> BrokerProcess:
    """Start Mosquitto from ``config`` (the project config by default) on ``port`` (a free one).

    The broker runs a copy of the config with its own listener port and persistence folder
    (``data_dir``, a fresh temporary folder by default, removed by :meth:`BrokerProcess.close`).
    Raises :class:`BrokerError` when Mosquitto is not installed or does not come up.
    """
    executable = executable or find_mosquitto()
    if executable is None:
        raise BrokerError(INSTALL_HINT)
    cleanup: list[Path] = []
    work = Path(tempfile.mkdtemp(prefix="parley-mosquitto-"))
    cleanup.append(work)
    if data_dir is None:
        data = work / "data"
        data.mkdir()
    else:
        data = Path(data_dir).resolve()
        data.mkdir(parents=True, exist_ok=True)
    port = port or free_port(host)
    text = Path(config or PROJECT_CONFIG).read_text()
    rendered = render_config(text, port=port, host=host, data_dir=str(data))
    config_path = work / "mosquitto.conf"
    config_path.write_text(rendered)
    work.chmod(0o755)
    _give_to_broker_user(data, rendered)
    broker = BrokerProcess(
        executable,
        config_path,
        host=host,
        port=port,
        data_dir=data,
        log_path=work / "mosquitto.log",
        cleanup=cleanup,
    )
    try:
        return broker.start(timeout)
    except BaseException:
        broker.close()
        raise


def run_broker(config_path: str | None = None, port: int | None = None) -> int:
    """Run Mosquitto in the foreground with parley's config (``parley broker``); its exit code.

    With ``port`` the broker listens there instead of the config's port; its database is kept in
    a folder named after the port in the temporary directory, so a restarted broker finds its
    sessions again. Returns 1 with an install hint when Mosquitto is not installed.
    """
    executable = find_mosquitto()
    if executable is None:
        print(INSTALL_HINT, file=sys.stderr)
        return 1
    source = Path(config_path) if config_path else PROJECT_CONFIG
    try:
        text = source.read_text()
    except OSError as exc:
        print(f"cannot read the broker config {source}: {exc}", file=sys.stderr)
        return 1
    listen = port or _config_port(text) or 1883
    data = Path(tempfile.gettempdir()) / f"parley-mosquitto-{listen}"
    data.mkdir(exist_ok=True)
    rendered = render_config(text, port=port, data_dir=str(data))
    _give_to_broker_user(data, rendered)
    fd, rendered_path = tempfile.mkstemp(prefix="parley-mosquitto-", suffix=".conf")
    with os.fdopen(fd, "w") as fh:
        fh.write(rendered)
    os.chmod(rendered_path, 0o644)
    warning = ""
    if _allows_anonymous(text):
        warning = "; anonymous: any client that reaches the port reads and writes every topic"
    print(
        f"mosquitto on port {listen} (config {source}, data {data}){warning}; Ctrl-C stops it",
        file=sys.stderr,
    )
    try:
        return run_foreground(executable, Path(rendered_path))
    finally:
        os.unlink(rendered_path)


def run_foreground(executable: str, config_path: Path, *, pid_file: Path | None = None) -> int:
    """Run Mosquitto with ``config_path`` until it exits or Ctrl-C (then stop it gracefully, so
    it writes its database); its exit code, 0 after Ctrl-C. ``pid_file`` holds its id meanwhile."""
    process = subprocess.Popen([executable, "-c", str(config_path)])
    # SIGTERM (kill, a service manager) and SIGHUP (the terminal closed) stop it as Ctrl-C does:
    # by default they would end this process at once and leave Mosquitto running, orphaned.
    previous = {}
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGHUP):
            previous[sig] = signal.signal(sig, _interrupt)
    try:
        if pid_file is not None:
            write_pid_file(pid_file, process.pid)
        return process.wait()
    except KeyboardInterrupt:
        process.send_signal(signal.SIGTERM)
        process.wait()
        return 0
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if process.poll() is None:  # left another way (an error): leave no broker behind
            process.terminate()
            process.wait()
        if pid_file is not None:
            remove_pid_file(pid_file, process.pid)


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def handles_signals(
    pid: int, signals: tuple[int, ...] = (signal.SIGHUP, signal.SIGUSR1)
) -> bool | None:
    """Whether process ``pid`` has handlers for ``signals`` yet (Linux: its ``SigCgt`` mask);
    None where that cannot be told."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("SigCgt:"):
                caught = int(line.split()[1], 16)
                return all(caught & (1 << (int(sig) - 1)) for sig in signals)
    except (OSError, ValueError, IndexError):
        return None
    return None


def write_pid_file(path: Path, pid: int) -> None:
    path.write_text(f"{pid}\n")


def remove_pid_file(path: Path, pid: int) -> None:
    """Remove ``path`` if it still names ``pid`` (a newer broker may have taken it over)."""
    try:
        if path.read_text().strip() == str(pid):
            path.unlink()
    except OSError:
        pass


def _config_port(text: str) -> int | None:
    for line in text.splitlines():
        words = line.split()
        if len(words) >= 2 and words[0] == "listener" and words[1].isdigit():
            return int(words[1])
    return None


def _allows_anonymous(text: str) -> bool:
    for line in text.splitlines():
        words = line.split()
        if len(words) >= 2 and words[0] == "allow_anonymous":
            return words[1] == "true"
    return False
