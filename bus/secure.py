"""`parley broker --secure DIR`: Mosquitto with TLS, a password per principal, and ACLs.

The broker ``parley broker`` starts from ``configs/mosquitto.conf`` is anonymous and listens on
loopback only: every process of the machine may read and write every topic, private events and
agent inboxes included. To put a broker on a network, this module writes everything Mosquitto
needs into one folder and starts it from there:

- ``ca.pem`` / ``ca.key``: a self-signed certificate authority; clients trust ``ca.pem``;
- ``server.pem`` / ``server.key``: the broker's certificate, for the host names and addresses
  clients dial (subject alternative names), signed by that CA;
- ``credentials/<principal>.json`` (and ``credentials/seats/``): a username and a random
  password per principal, with the URL and the CA; mode 0600, one file to hand each program;
- ``passwd``: Mosquitto's password file, hashed here (PBKDF2-SHA512, the ``$7$`` format
  ``mosquitto_passwd`` writes), so users need no ``mosquitto_passwd``;
- ``acl``: who may read and write which topics (:data:`POLICY`, :func:`seat_policy`);
- ``mosquitto.conf``: the project config's flow control and persistence (rendered from
  ``configs/mosquitto.conf`` like every other broker parley starts) with a TLS listener,
  ``allow_anonymous false``, the password file and the ACL file; its database in ``data/``;
- ``setup.json``: the listener and the seats issued; ``mosquitto.pid`` while a broker runs.

Everything is generated once and reused: running again keeps the CA and every password (a new
server certificate is issued when the host names change). Issuing a seat or rotating a password
rewrites ``passwd`` and ``acl`` and makes a running broker reload them (SIGHUP).

How Mosquitto 2.0 applies the ACL file, which the policy is written for: a PUBLISH the ACL does
not allow is dropped (MQTT 5: PUBACK "not authorized"); a message is delivered to a subscriber
only when the ACL lets it read the message's topic. A SUBSCRIBE itself is never refused, not
even ``#`` (the default ACL check grants every subscription and filters at delivery): such a
subscription is granted and receives only what the client may read. Shared subscriptions
(``$share/parley-workers/parley/+/jobs``) are checked the same way, at delivery, against the
job's own topic, so a worker's rule is ``topic read parley/+/jobs``. EMQX checks subscriptions
when they are made as well (docs/security.md has its rules).

Run as root, Mosquitto drops to the ``mosquitto`` user before it reads the password and ACL
files, the server key and its database, so those are owned by that user (mode 0600), and the
folder is searchable (0711) but not listable by others.
"""

from __future__ import annotations

import base64
import contextlib
import datetime as dt
import fcntl
import hashlib
import ipaddress
import json
import os
import pwd
import re
import secrets
import signal
import ssl
import stat
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlparse

from parley.bus import topics
from parley.bus.broker import (
    INSTALL_HINT,
    PROJECT_CONFIG,
    BrokerError,
    BrokerProcess,
    find_mosquitto,
    handles_signals,
    render_config,
    run_foreground,
)

PRINCIPALS = ("coordinator", "worker", "dashboard", "operator")
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8883
DEFAULT_HOSTNAMES = ("localhost",)
# mosquitto_passwd's own count. The passwords are 192 random bits: no count of iterations
# changes what guessing one costs, while every CONNECT pays for them on the broker.
PBKDF2_ITERATIONS = 101
CA_DAYS = 3650
SERVER_DAYS = 825
RENEW_BEFORE = dt.timedelta(days=30)
_HOSTNAME = re.compile(
    r"^(?=.{1,253}$)[A-Za-z0-9*]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$"
)
_WILDCARD_HOSTS = ("0.0.0.0", "::", "")

# Who may do what, as Mosquitto ACL rules: (access, topic filter); ``+`` stands for any run,
# episode, role or process. Mosquitto grants a rule's access on every topic its filter matches.
# What carries private facts: agent inboxes (TurnRequest: the role's own observation), ``private``
# events and private states, job results (records and transcripts); see docs/security.md.
POLICY: dict[str, tuple[tuple[str, str], ...]] = {
    # Publishes jobs and control; reads everything of its runs; plays episodes itself in local
    # mode, so it may also publish what an episode publishes.
    "coordinator": (
        ("read", "parley/#"),
        ("write", "parley/+/jobs"),
        ("write", "parley/+/control"),
        ("write", "parley/+/+/control"),
        ("write", "parley/+/status/+"),
        ("write", "parley/+/results"),
        ("write", "parley/+/+/events"),
        ("write", "parley/+/+/state"),
        ("write", "parley/+/+/state/private"),
        ("write", "parley/+/+/private/+"),
        ("write", "parley/+/+/agent/+"),
        ("write", "parley/+/+/gm"),
        ("write", "parley/+/+/gm/+"),
    ),
    # Takes jobs (through $share/parley-workers/...: checked at delivery against parley/<run>/jobs),
    # follows control, plays whole episodes (inboxes and gm) and reports what they produce.
    "worker": (
        ("read", "parley/+/jobs"),
        ("read", "parley/+/control"),
        ("read", "parley/+/+/control"),
        ("readwrite", "parley/+/+/agent/+"),
        ("readwrite", "parley/+/+/gm"),
        ("read", "parley/+/+/gm/+"),
        ("write", "parley/+/jobs/done"),
        ("write", "parley/+/workers/+"),
        ("write", "parley/+/+/events"),
        ("write", "parley/+/+/state"),
        ("write", "parley/+/+/state/private"),
        ("write", "parley/+/+/private/+"),
        ("write", "parley/+/results"),
        # Read only: a coordinator's final status ends its run here, and a worker's credential
        # must not be able to claim one (only the coordinator publishes a run's status).
        ("read", "parley/+/status/+"),
    ),
    # A spectator: the public topics only, nothing private, nothing written.
    "dashboard": (
        ("read", "parley/+/status/+"),
        ("read", "parley/+/results"),
        ("read", "parley/+/+/events"),
        ("read", "parley/+/+/state"),
    ),
    # Reads every topic of every run (private ones included) and writes nothing.
    "operator": (("read", "parley/#"),),
}


def seat_policy(run: str, episode: str, role: str) -> tuple[tuple[str, str], ...]:
    """A human seat: its own role's inbox and private events of one episode, that episode's
    public events and state and the run's results; it answers the game master for its own role
    (:func:`~parley.bus.topics.seat_replies`) and writes nothing else."""
    return (
        ("read", topics.agent_inbox(run, episode, role)),
        ("read", topics.private(run, episode, role)),
        ("read", topics.events(run, episode)),
        ("read", topics.state(run, episode)),
        ("read", topics.results(run)),
        ("write", topics.seat_replies(run, episode, role)),
    )


class SecureError(RuntimeError):
    """The secure broker's folder or a credentials file is missing, broken or unusable."""


@dataclass
class SecureSetup:
    """A folder made by :func:`create_secure_dir`: the broker's listener and where things are.

    ``host`` is the address the broker binds; ``connect_host`` the one clients dial (the first of
    ``hostnames`` when ``host`` is a wildcard such as ``0.0.0.0``). ``process`` is the broker
    :func:`start_secure_broker` started for this setup, if any.
    """

    dir: Path
    host: str
    port: int
    ca_path: Path
    hostnames: tuple[str, ...] = DEFAULT_HOSTNAMES
    process: BrokerProcess | None = field(default=None, repr=False, compare=False)

    @property
    def connect_host(self) -> str:
        if self.host in _WILDCARD_HOSTS and self.hostnames:
            return self.hostnames[0]
        return self.host

    @property
    def broker_url(self) -> str:
        """``mqtts://host:port``: the broker, without credentials."""
        host = self.connect_host
        if ":" in host:
            host = f"[{host}]"
        return f"mqtts://{host}:{self.port}"

    @property
    def config_path(self) -> Path:
        return self.dir / "mosquitto.conf"

    @property
    def pid_path(self) -> Path:
        return self.dir / "mosquitto.pid"

    def credentials(self, principal: str) -> Path:
        """The credentials file (JSON) of a principal of :data:`PRINCIPALS` or of a seat's user."""
        if principal in PRINCIPALS:
            return self.dir / "credentials" / f"{principal}.json"
        if principal in self.seats():
            return self.dir / "credentials" / "seats" / f"{principal}.json"
        raise SecureError(
            f"no credentials for {principal!r} in {self.dir}: principals are "
            f"{', '.join(PRINCIPALS)} and the seats issued ({len(self.seats())})"
        )

    def url(self, principal: str) -> str:
        """``mqtts://user:pass@host:port?ca=/abs/ca.pem``, for :func:`parley.bus.connect`."""
        return bus_url(self.credentials(principal))

    def seats(self) -> dict[str, dict[str, str]]:
        """The seats issued: username → ``{"run", "episode", "role"}``."""
        return dict(_read_state(self.dir).get("seats", {}))

    def issue_seat(self, run: str, episode: str, role: str) -> Path:
        """New credentials for one role of one episode (a human seat); the file's path.

        Issuing the same seat again gives it a new password (the old one stops working). The
        password and ACL files are rewritten, and a running broker reloads them at once.
        """
        for value, what in ((run, "run"), (episode, "episode"), (role, "role")):
            try:
                topics.check_id(value, what)
            except topics.TopicError as exc:
                raise SecureError(str(exc)) from None
        with _locked(self.dir):
            state = _read_state(self.dir)
            seats: dict[str, dict[str, str]] = state.setdefault("seats", {})
            wanted = {"run": run, "episode": episode, "role": role}
            username = _seat_username(run, episode, role, seats)
            seats[username] = wanted
            path = self.dir / "credentials" / "seats" / f"{username}.json"
            password = secrets.token_urlsafe(24)
            _write_credentials(self, path, "seat", username, password, wanted)
            _write_state(self.dir, state)
            _write_security_files(self)
        if self.reload():
            self._settle(username, password, accepted=True)
        return path

    def rotate(self, principal: str) -> Path:
        """A new password for ``principal`` (after a leak); a running broker reloads and
        disconnects the clients still using the old one. The credentials file's path."""
        with _locked(self.dir):
            path = self.credentials(principal)
            data = _read_credentials(path)
            kept = ("run", "episode", "role", "job_group")
            extra: dict[str, str] = {k: data[k] for k in kept if k in data}
            password = secrets.token_urlsafe(24)
            _write_credentials(self, path, data["principal"], data["username"], password, extra)
            _write_security_files(self)
        if self.reload():
            self._settle(data["username"], password, accepted=True)
        return path

    def revoke_seat(self, username: str) -> None:
        """Take a seat back: its credentials file is deleted, its user and rules leave the
        password and ACL files, and a running broker reloads (disconnecting the seat)."""
        with _locked(self.dir):
            state = _read_state(self.dir)
            seats: dict[str, dict[str, str]] = state.get("seats", {})
            if username not in seats:
                raise SecureError(
                    f"no seat {username!r} in {self.dir} (seats: {', '.join(seats) or 'none'})"
                )
            path = self.dir / "credentials" / "seats" / f"{username}.json"
            password = _read_credentials(path)["password"] if path.exists() else None
            path.unlink(missing_ok=True)
            del seats[username]
            _write_state(self.dir, state)
            _write_security_files(self)
        if self.reload() and password is not None:
            self._settle(username, password, accepted=False)

    def reload(self) -> bool:
        """Make the running broker of this folder reread its password and ACL files (SIGHUP);
        False when none runs."""
        pid = running_pid(self.pid_path)
        if pid is None:
            return False
        # A broker that has just started may not handle SIGHUP yet, and would die of it.
        deadline = time.monotonic() + 10
        while handles_signals(pid, (signal.SIGHUP,)) is False and time.monotonic() < deadline:
            time.sleep(0.01)
        os.kill(pid, signal.SIGHUP)
        return True

    def _settle(
        self, username: str, password: str, *, accepted: bool, timeout: float = 10.0
    ) -> None:
        """Wait until the broker has reloaded: until it lets ``username`` in with ``password``
        (or, ``accepted=False``, refuses it), so a caller may use what it changed at once."""
        deadline = time.monotonic() + timeout
        while _login_works(self, username, password) != accepted:
            if time.monotonic() > deadline:
                raise SecureError(
                    f"the broker from {self.dir} did not take its new password and ACL files in "
                    f"{timeout:g} s (see its log)"
                )
            time.sleep(0.02)


def create_secure_dir(
    dir: Path | str,
    *,
    host: str | None = None,
    port: int | None = None,
    hostnames: Sequence[str] | None = None,
) -> SecureSetup:
    """Make (or bring up to date) a secure broker's folder; idempotent.

    ``host`` is the address to bind (default 127.0.0.1; ``0.0.0.0`` for every interface),
    ``port`` the TLS port (default 8883), ``hostnames`` the names clients dial, written into
    the server certificate (default ``localhost``). Left out, each keeps what ``dir`` already
    has. An existing CA, server certificate and passwords are reused.
    """
    root = Path(dir).expanduser().resolve()
    if root.exists() and not root.is_dir():
        raise SecureError(f"{root} is not a folder")
    state = _read_state(root) if (root / "setup.json").exists() else {}
    host = host if host is not None else state.get("host", DEFAULT_HOST)
    port = port if port is not None else state.get("port", DEFAULT_PORT)
    names = tuple(hostnames) if hostnames else tuple(state.get("hostnames", DEFAULT_HOSTNAMES))
    if not isinstance(port, int) or not 0 < port < 65536:
        raise SecureError(f"port {port!r} is not a TCP port (1-65535)")
    _check_names(host, names)
    account = _broker_account()
    root.mkdir(parents=True, exist_ok=True)
    with _locked(root):
        return _create(root, host, port, names, account)


def _create(
    root: Path, host: str, port: int, names: tuple[str, ...], account: tuple[int, int] | None
) -> SecureSetup:
    root.chmod(0o711 if account else 0o700)
    if account:
        _check_reachable(root, account)
    (root / "credentials" / "seats").mkdir(parents=True, exist_ok=True)
    (root / "credentials").chmod(0o700)
    (root / "credentials" / "seats").chmod(0o700)
    data = root / "data"
    data.mkdir(exist_ok=True)
    data.chmod(0o700)
    if account:
        os.chown(data, *account)

    setup = SecureSetup(dir=root, host=host, port=port, ca_path=root / "ca.pem", hostnames=names)
    ca_key, ca_cert = _ensure_ca(root)
    _ensure_server_certificate(setup, ca_key, ca_cert, account)
    state = _read_state(root) if (root / "setup.json").exists() else {}
    state.update({"host": host, "port": port, "hostnames": list(names)})
    state.setdefault("seats", {})
    # Mosquitto checks a shared subscription when it delivers, not when it is made: any client
    # could join a known group and take turns at the jobs (which then wait out their lease).
    # The workers' group name is a secret only their credentials file holds.
    state.setdefault("job_group", f"parley-workers-{secrets.token_hex(12)}")
    _write_state(root, state)
    for principal in PRINCIPALS:
        path = setup.credentials(principal)
        old = _read_credentials(path) if path.exists() else None
        password = old["password"] if old else secrets.token_urlsafe(24)
        extra = {"job_group": state["job_group"]} if principal == "worker" else {}
        _write_credentials(setup, path, principal, principal, password, extra)
    for username, seat in setup.seats().items():
        path = setup.credentials(username)
        if path.exists():  # the URL and CA follow a changed listener; the password stays
            _write_credentials(
                setup, path, "seat", username, _read_credentials(path)["password"], seat
            )
    _write_security_files(setup)
    _write_file(setup.config_path, render_secure_config(setup).encode(), 0o644)
    return setup


def load_setup(dir: Path | str) -> SecureSetup:
    """The setup of a folder :func:`create_secure_dir` made (nothing is changed)."""
    root = Path(dir).expanduser().resolve()
    state = _read_state(root)
    try:
        return SecureSetup(
            dir=root,
            host=str(state["host"]),
            port=int(state["port"]),
            ca_path=root / "ca.pem",
            hostnames=tuple(state["hostnames"]),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise SecureError(
            f"{root / 'setup.json'} is broken ({exc!r}): run parley broker --secure {root} again"
        ) from None


def start_secure_broker(setup: SecureSetup, timeout: float = 10.0) -> BrokerProcess:
    """Start Mosquitto with ``setup``'s config in the background (also kept as
    ``setup.process``); ``restart()``, ``kill()`` and ``stop()`` work as for any broker."""
    executable = find_mosquitto()
    if executable is None:
        raise BrokerError(INSTALL_HINT)
    broker = BrokerProcess(
        executable,
        setup.config_path,
        host=_local_host(setup.host),
        port=setup.port,
        data_dir=setup.dir / "data",
        log_path=setup.dir / "mosquitto.log",
        cleanup=[],
        pid_file=setup.pid_path,
    )
    broker.start(timeout)
    setup.process = broker
    return broker


def job_group(credentials_file: Path | str) -> str | None:
    """The workers' shared-subscription group a worker's credentials file names (None for
    other principals' files, and for files written before groups were secret)."""
    group = _read_credentials(Path(credentials_file)).get("job_group")
    return str(group) if group else None


def bus_url(credentials_file: Path | str) -> str:
    """The URL in a credentials file, with its username, password and CA, ready for
    :func:`parley.bus.connect` (``--credentials FILE`` of ``parley run``/``worker``/``dashboard``)."""
    data = _read_credentials(Path(credentials_file))
    parsed = urlparse(data["url"])
    if parsed.scheme != "mqtts" or not parsed.hostname:
        raise SecureError(f"{credentials_file}: url {data['url']!r} is not mqtts://host:port")
    user = quote(data["username"], safe="")
    password = quote(data["password"], safe="")
    ca = quote(str(data["ca"]), safe="/")
    return f"mqtts://{user}:{password}@{parsed.netloc}?ca={ca}"


def running_pid(pid_file: Path) -> int | None:
    """The id of the Mosquitto process named in ``pid_file``, if it still runs."""
    try:
        pid = int(pid_file.read_text().strip())
    except (OSError, ValueError):
        return None
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, PermissionError):
        return None
    comm = Path(f"/proc/{pid}/comm")
    if comm.exists() and "mosquitto" not in comm.read_text():
        return None  # the id was reused by another program
    return pid


def render_secure_config(setup: SecureSetup) -> str:
    """Mosquitto's config for ``setup``: the project config's settings (flow control,
    persistence in ``data/``, logging) with the TLS listener and the security files."""
    base = render_config(
        PROJECT_CONFIG.read_text(), port=setup.port, data_dir=str(setup.dir / "data")
    )
    out = [
        "# Written by `parley broker --secure` from configs/mosquitto.conf (whose comments explain",
        "# the flow-control and persistence settings); regenerated on every run: edit that file, or",
        "# the code in bus/secure.py (parley.bus.secure), not this one.",
        "",
    ]
    for line in base.splitlines():
        words = line.split()
        if not words or words[0].startswith("#") or words[0] == "allow_anonymous":
            continue  # the project's comments speak of its anonymous loopback listener
        if words[0] == "listener":
            bind = f" {setup.host}" if setup.host else ""
            out += [
                f"listener {setup.port}{bind}",
                f"cafile {setup.ca_path}",
                f"certfile {setup.dir / 'server.pem'}",
                f"keyfile {setup.dir / 'server.key'}",
                "tls_version tlsv1.2",
                "require_certificate false",
            ]
            continue
        out.append(line)
    out += [
        "",
        "# Every client names a user and its password; the ACL file says what each may do.",
        "allow_anonymous false",
        f"password_file {setup.dir / 'passwd'}",
        f"acl_file {setup.dir / 'acl'}",
    ]
    return "\n".join(out) + "\n"


def render_acl(setup: SecureSetup) -> str:
    """The ACL file: :data:`POLICY` for the principals, :func:`seat_policy` for each seat."""
    lines = [
        "# Written by `parley broker --secure` (bus/secure.py, docs/security.md).",
        "# Mosquitto checks each PUBLISH against `write` rules and each delivery against `read`",
        "# rules; what no rule allows is denied.",
    ]
    blocks: list[tuple[str, Iterable[tuple[str, str]]]] = list(POLICY.items())
    for username, seat in sorted(setup.seats().items()):
        if setup.credentials(username).exists():
            blocks.append((username, seat_policy(seat["run"], seat["episode"], seat["role"])))
    for username, rules in blocks:
        lines += ["", f"user {username}"]
        lines += [f"topic {access} {topic}" for access, topic in rules]
    return "\n".join(lines) + "\n"


def password_hash(
    password: str, *, salt: bytes | None = None, iterations: int = PBKDF2_ITERATIONS
) -> str:
    """Mosquitto's ``$7$`` entry: PBKDF2-HMAC-SHA512, 12 bytes of salt, 64 bytes of hash."""
    salt = salt if salt is not None else secrets.token_bytes(12)
    digest = hashlib.pbkdf2_hmac("sha512", password.encode(), salt, iterations, 64)
    return f"$7${iterations}${base64.b64encode(salt).decode()}${base64.b64encode(digest).decode()}"


def main(
    dir: str,
    *,
    host: str | None = None,
    port: int | None = None,
    hostnames: Sequence[str] | None = None,
    seat: str | None = None,
    rotate: str | None = None,
    revoke: str | None = None,
    say: Callable[[str], None] | None = None,
) -> int:
    """``parley broker --secure DIR [...]``: prepare DIR and run Mosquitto in the foreground;
    with ``seat`` (``RUN/EPISODE/ROLE``), ``rotate`` (a principal) or ``revoke`` (a seat's
    user) change DIR (and the running broker) and return."""
    out = say or (lambda line: print(line, flush=True))
    try:
        if seat is not None or rotate is not None or revoke is not None:
            setup = load_setup(dir)
            if seat is not None:
                parts = seat.split("/")
                if len(parts) != 3:
                    raise SecureError(f"--seat {seat!r}: write RUN/EPISODE/ROLE")
                what = f"seat {seat}: {setup.issue_seat(*parts)}"
            elif rotate is not None:
                what = f"a new password for {rotate}: {setup.rotate(rotate)}"
            else:
                assert revoke is not None
                setup.revoke_seat(revoke)
                what = f"seat {revoke} revoked"
            reloaded = running_pid(setup.pid_path) is not None
            out(what)
            out(
                "the running broker reloaded its password and ACL files"
                if reloaded
                else "no broker runs from this folder: it takes effect when one starts"
            )
            return 0
        executable = find_mosquitto()
        if executable is None:
            print(INSTALL_HINT, file=sys.stderr)
            return 1
        # Before anything is rewritten: the running broker's clients use these files.
        if (pid := running_pid(Path(dir).expanduser().resolve() / "mosquitto.pid")) is not None:
            print(f"a broker from {dir} already runs (pid {pid})", file=sys.stderr)
            return 1
        setup = create_secure_dir(dir, host=host, port=port, hostnames=hostnames)
    except (SecureError, OSError) as exc:
        print(f"parley broker --secure: {exc}", file=sys.stderr)
        return 2
    for line in describe(setup):
        out(line)
    return run_foreground(executable, setup.config_path, pid_file=setup.pid_path)


def describe(setup: SecureSetup) -> list[str]:
    """What ``parley broker --secure`` prints: the URL, the CA and each credentials file."""
    width = max(len(p) for p in PRINCIPALS)
    lines = [
        f"secure broker {setup.broker_url} (TLS, a password per principal, ACLs; folder {setup.dir})",
        f"  CA certificate, which every client needs: {setup.ca_path}",
        "  credentials, one file per program (they hold passwords: copy them, mode 0600):",
    ]
    lines += [f"    {p:<{width}}  {setup.credentials(p)}" for p in PRINCIPALS]
    lines += [
        f"  a worker: parley worker --credentials {setup.credentials('worker')}",
        f"  a human seat: parley broker --secure {setup.dir} --seat RUN/EPISODE/ROLE",
        "mosquitto starts; Ctrl-C stops it",
    ]
    return lines


def _login_works(setup: SecureSetup, username: str, password: str, timeout: float = 5.0) -> bool:
    """Whether the broker accepts ``username`` with ``password`` now (one MQTT 5 CONNECT on
    this machine: the CA is checked, not the name, which may be one only clients resolve)."""
    import paho.mqtt.client as paho

    codes: list[int] = []
    client = paho.Client(paho.CallbackAPIVersion.VERSION2, protocol=paho.MQTTv5)
    client.username_pw_set(username, password)
    context = ssl.create_default_context(cafile=str(setup.ca_path))
    context.check_hostname = False
    client.tls_set_context(context)
    client.on_connect = lambda c, u, flags, reason, props: codes.append(reason.value)
    try:
        client.connect(_local_host(setup.host), setup.port, keepalive=10)
        deadline = time.monotonic() + timeout
        while not codes and time.monotonic() < deadline:
            client.loop(timeout=0.02)
    except (OSError, ssl.SSLError):
        return False
    finally:
        client.disconnect()
    return codes == [0]


def _local_host(host: str) -> str:
    """The address to reach a broker bound to ``host`` from its own machine."""
    return {"0.0.0.0": "127.0.0.1", "": "127.0.0.1", "::": "::1"}.get(host, host)


# -- files ---------------------------------------------------------------------------------------


@contextlib.contextmanager
def _locked(root: Path) -> Iterator[None]:
    """One change to the folder at a time (seats issued by several processes at once)."""
    with open(root / ".lock", "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _read_state(root: Path) -> dict[str, Any]:
    path = root / "setup.json"
    try:
        state = json.loads(path.read_text())
    except FileNotFoundError:
        raise SecureError(
            f"no secure broker in {root}: run parley broker --secure {root} first"
        ) from None
    except (OSError, ValueError) as exc:
        raise SecureError(f"cannot read {path}: {exc}") from None
    if not isinstance(state, dict):
        raise SecureError(f"{path} is not a JSON object")
    return state


def _write_state(root: Path, state: dict[str, Any]) -> None:
    _write_file(
        root / "setup.json", (json.dumps(state, indent=2, sort_keys=True) + "\n").encode(), 0o644
    )


def _read_credentials(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except OSError as exc:
        raise SecureError(
            f"cannot read the credentials file {path}: {exc.strerror or exc}"
        ) from None
    except ValueError as exc:
        raise SecureError(f"{path} is not a credentials file (not JSON: {exc})") from None
    missing = [
        k
        for k in ("principal", "url", "username", "password", "ca")
        if not isinstance(data, dict) or not isinstance(data.get(k), str)
    ]
    if missing:
        raise SecureError(f"{path} is not a credentials file: no {', '.join(missing)}")
    return data


def _write_credentials(
    setup: SecureSetup,
    path: Path,
    principal: str,
    username: str,
    password: str,
    extra: dict[str, str],
) -> None:
    data = {
        "principal": principal,
        "url": setup.broker_url,
        "username": username,
        "password": password,
        "ca": str(setup.ca_path),
        **extra,
    }
    _write_file(path, (json.dumps(data, indent=2) + "\n").encode(), 0o600)


def _write_security_files(setup: SecureSetup) -> None:
    """Rewrite ``passwd`` and ``acl`` from the credentials files (the one source of truth)."""
    entries = []
    for principal in PRINCIPALS:
        data = _read_credentials(setup.credentials(principal))
        entries.append(f"{data['username']}:{password_hash(data['password'])}")
    for username in sorted(setup.seats()):
        path = setup.credentials(username)
        if path.exists():  # a deleted seat file revokes the seat
            entries.append(f"{username}:{password_hash(_read_credentials(path)['password'])}")
    account = _broker_account()
    _write_file(setup.dir / "passwd", ("\n".join(entries) + "\n").encode(), 0o600, account)
    _write_file(setup.dir / "acl", render_acl(setup).encode(), 0o600, account)


def _write_file(path: Path, data: bytes, mode: int, owner: tuple[int, int] | None = None) -> None:
    """Write ``data`` whole or not at all (a broker reloading meanwhile reads old or new)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        os.fchmod(fd, mode)
        if owner is not None:
            os.fchown(fd, *owner)
        with os.fdopen(fd, "wb", closefd=False) as fh:
            fh.write(data)
    finally:
        os.close(fd)
    os.replace(temp, path)


def _broker_account() -> tuple[int, int] | None:
    """(uid, gid) Mosquitto runs as when started by root: it drops to the ``mosquitto`` user
    (``nobody`` without one) and only then reads its password and ACL files and its database."""
    if os.geteuid() != 0:
        return None
    for name in ("mosquitto", "nobody"):
        try:
            entry = pwd.getpwnam(name)
        except KeyError:
            continue
        return entry.pw_uid, entry.pw_gid
    return None


def _check_reachable(root: Path, account: tuple[int, int]) -> None:
    """The broker's user must be able to enter every folder above ``root``."""
    uid, gid = account
    for folder in root.parents:
        mode = folder.stat()
        if mode.st_uid == uid:
            ok = bool(mode.st_mode & stat.S_IXUSR)
        elif mode.st_gid == gid:
            ok = bool(mode.st_mode & stat.S_IXGRP)
        else:
            ok = bool(mode.st_mode & stat.S_IXOTH)
        if not ok:
            try:
                user = pwd.getpwuid(uid).pw_name
            except KeyError:
                user = str(uid)
            raise SecureError(
                f"Mosquitto, started by root, runs as user {user}, which may "
                f"not enter {folder}: choose a folder it can reach (e.g. under /var/lib or /srv), "
                f"or allow it (chmod o+x {folder})"
            )


def _seat_username(run: str, episode: str, role: str, seats: dict[str, dict[str, str]]) -> str:
    """``seat-<run>-<episode>-<role>``, unless that is ambiguous or unusable: ids may contain
    ``-`` (two seats could read alike) and ``:`` (the password file's separator), and
    Mosquitto reads a password file line into a fixed buffer."""
    wanted = {"run": run, "episode": episode, "role": role}
    readable = f"seat-{run}-{episode}-{role}"
    if ":" not in readable and len(readable) <= 100 and seats.get(readable, wanted) == wanted:
        return readable
    digest = hashlib.sha256(f"{run}/{episode}/{role}".encode()).hexdigest()[:20]
    return f"seat-{digest}"


# -- certificates -------------------------------------------------------------------------------


def _check_names(host: str, names: Sequence[str]) -> None:
    if not names:
        raise SecureError("give at least one host name clients dial (--hostname)")
    for name in [*names, *([host] if host not in _WILDCARD_HOSTS else [])]:
        if _ip(name) is None and not _HOSTNAME.match(name):
            raise SecureError(f"{name!r} is neither an IP address nor a host name")


def _ip(name: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(name)
    except ValueError:
        return None


def _ensure_ca(root: Path) -> tuple[Any, Any]:
    """The CA's key and certificate: loaded when ``root`` has them, else made."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key_path, cert_path = root / "ca.key", root / "ca.pem"
    if key_path.exists() and cert_path.exists():
        # Never made anew over a damaged one: every certificate and client trusts this CA.
        try:
            key = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
        except (ValueError, TypeError) as exc:
            raise SecureError(
                f"{key_path} is not the CA's private key ({exc}): restore it from a copy, or "
                f"start over with a new folder (its clients then need new credentials files)"
            ) from None
        try:
            cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
        except ValueError as exc:
            raise SecureError(
                f"{cert_path} is not the CA's certificate ({exc}): restore it from a copy, or "
                f"start over with a new folder (its clients then need new credentials files)"
            ) from None
        return key, cert
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "parley"),
            x509.NameAttribute(NameOID.COMMON_NAME, f"parley broker CA {secrets.token_hex(4)}"),
        ]
    )
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=CA_DAYS))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    _write_file(key_path, _pem_key(key), 0o600)
    _write_file(cert_path, cert.public_bytes(serialization.Encoding.PEM), 0o644)
    return key, cert


def _ensure_server_certificate(
    setup: SecureSetup, ca_key: Any, ca_cert: Any, account: tuple[int, int] | None
) -> None:
    """The broker's certificate for ``setup``'s names, reissued when names, CA or dates changed."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    key_path, cert_path = setup.dir / "server.key", setup.dir / "server.pem"
    names: list[x509.GeneralName] = []
    for name in dict.fromkeys(
        [*setup.hostnames, *([setup.host] if setup.host not in _WILDCARD_HOSTS else [])]
    ):
        ip = _ip(name)
        names.append(x509.IPAddress(ip) if ip is not None else x509.DNSName(name))
    now = dt.datetime.now(dt.UTC)
    if key_path.exists() and cert_path.exists():
        try:
            old = x509.load_pem_x509_certificate(cert_path.read_bytes())
            old.verify_directly_issued_by(ca_cert)
            san = old.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
            # The key must be whole and the certificate's, or Mosquitto cannot start.
            spki = serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
            old_key = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
            matches = old_key.public_key().public_bytes(*spki) == old.public_key().public_bytes(
                *spki
            )
            if matches and set(san) == set(names) and old.not_valid_after_utc - now > RENEW_BEFORE:
                if account:
                    os.chown(key_path, *account)
                return
        except Exception:  # unreadable, another CA's, no names: reissued below
            pass
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, setup.connect_host)]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=SERVER_DAYS))
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    _write_file(key_path, _pem_key(key), 0o600, account)
    _write_file(cert_path, cert.public_bytes(serialization.Encoding.PEM), 0o644)


def _pem_key(key: Any) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
