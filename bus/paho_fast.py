"""The MQTT transport's accelerator: QoS 1 publishing and PUBACK reading beneath paho's API.

Everything here touches paho's internals, and nothing outside this module does. It is used only
where :func:`enabled` says so: the installed paho-mqtt is one of :data:`TESTED_PAHO` (the
versions this module was written and tested against) and has every internal it reads, in the
expected shape. Anything else turns it off, and the transport publishes through paho's public
``publish`` instead: same messages, same order, same acknowledgements
(``tests/bus/test_paho_fast.py`` compares the two against a real broker). The log says why
once: at debug level for a paho-mqtt that is not one of :data:`TESTED_PAHO` (an ordinary
install of a supported release), as a warning where ``PARLEY_MQTT_ACCELERATOR=1`` asked for the
accelerator or where a tested release lacks an internal it reads.

What it saves: paho's ``publish`` builds a message object, a message-info object and a log line
for every message and writes each packet with a send of its own, and paho decodes every PUBACK
into reason-code and property objects. Here QoS 1 PUBLISH packets are built by the transport
(:func:`publish_packet`), joined, and queued on paho's outgoing packet queue
(:func:`queue_packets`), numbered on from paho's own packet identifier counter
(:func:`last_mid`); the PUBACKs for them are taken from the socket in one read
(:func:`take_pubacks`) or routed to the transport before paho looks for a message it never saw
(:func:`route_pubacks`). Every change is made on a paho client the transport created, never on
paho's classes or modules.

Set ``PARLEY_MQTT_ACCELERATOR=0`` to force the public path.
"""

from __future__ import annotations

import logging
import os
import socket
import ssl
import sys
from array import array
from collections.abc import Callable
from importlib.metadata import PackageNotFoundError, version
from typing import Any

import paho.mqtt.client as paho_mqtt

log = logging.getLogger("parley.bus.mqtt")

# The paho-mqtt releases whose internals this module was written against and is tested with.
# A release outside it may have moved them: the transport then takes the public path.
TESTED_PAHO = ("2.1.0", "2.2.0")
# The environment variable that turns the accelerator off ("0", "off", "false", "no") or asks
# for it by name ("1", "on", "true", "yes": a warning if it cannot be used).
ENV = "PARLEY_MQTT_ACCELERATOR"

# Packets queued one after another join one entry of paho's queue up to this size, so paho
# writes them with one send() (it sends each entry on its own); larger entries would cost
# paho a copy of the rest of the entry for every partial write.
JOIN_BYTES = 64 * 1024

_checked: bool | None = None


def enabled() -> bool:
    """Whether the transport may use this module: not turned off by :data:`ENV`, and the
    installed paho passes the start-up check (made once per process; a failure is logged once
    and the public path is used)."""
    setting = os.environ.get(ENV, "").strip().lower()
    if setting in ("0", "off", "false", "no"):
        return False
    global _checked
    if _checked is None:
        found = problems()
        if found:
            # An untested paho release is an ordinary supported install: said at debug level,
            # unless the user asked for the accelerator; a tested release that fails the check
            # is unexpected, and a warning.
            expected = installed_paho() in TESTED_PAHO or setting in ("1", "on", "true", "yes")
            log.log(
                logging.WARNING if expected else logging.DEBUG,
                "MQTT accelerator off, publishing through paho's public API (%s)",
                "; ".join(found),
            )
        _checked = not found
    return _checked


def installed_paho() -> str:
    """The installed paho-mqtt's version ("unknown" if its metadata is missing)."""
    try:
        return version("paho-mqtt")
    except PackageNotFoundError:
        return "unknown"


def problems(paho: paho_mqtt.Client | None = None) -> list[str]:
    """Why this module cannot be used with the installed paho (or with ``paho``, a client not
    yet connected); empty if it can."""
    installed = installed_paho()
    if installed not in TESTED_PAHO:
        return [f"paho-mqtt {installed} is not one of the tested {', '.join(TESTED_PAHO)}"]
    if paho is None:
        paho = paho_mqtt.Client(paho_mqtt.CallbackAPIVersion.VERSION2)
    found: list[str] = []
    if not isinstance(getattr(paho, "_last_mid", None), int):
        found.append("paho Client._last_mid (the packet identifier counter) is missing")
    for name in (
        "_call_socket_register_write",
        "_handle_pubackcomp",
        "_packet_read",
        "_loop_rc_handle",
    ):
        if not callable(getattr(paho, name, None)):
            found.append(f"paho Client.{name}() is missing")
    if not hasattr(getattr(paho, "_out_packet", None), "append"):
        found.append("paho Client._out_packet (the outgoing packet queue) is missing")
    if not isinstance(getattr(paho, "_in_packet", None), dict):
        found.append("paho Client._in_packet (the packet being read) is not a dict")
    elif "command" not in paho._in_packet or "packet" not in paho._in_packet:
        found.append("paho Client._in_packet lacks 'command' or 'packet'")
    if "_sock" not in vars(paho):
        found.append("paho Client._sock is missing")
    for name in ("_out_messages", "_in_messages"):
        if not hasattr(getattr(paho, name, None), "__len__"):
            found.append(f"paho Client.{name} is missing")
    return found


def last_mid(paho: paho_mqtt.Client) -> int:
    """The packet identifier paho's counter gave last. The transport numbers its packets on
    from it and hands the last one back (:func:`queue_packets`), so they never clash with
    paho's own packets (SUBSCRIBE, UNSUBSCRIBE, QoS 2) on the connection; every caller of
    either runs on the event loop's thread."""
    return paho._last_mid


def publish_packet(
    name: bytes, payload: bytes, mid: int, properties: bytes | None, retain: bool
) -> bytes:
    """A QoS 1 PUBLISH packet: ``name`` the topic with its length first, ``properties`` packed
    with their length (MQTT 5) or None."""
    remaining = 2 + len(name) + len(payload) + (len(properties) if properties is not None else 0)
    first = 0x33 if retain else 0x32  # PUBLISH, QoS 1
    # The remaining length, 7 bits a byte: one or two bytes for nearly every message.
    if remaining < 0x80:
        header = bytes((first, remaining))
    elif remaining < 0x4000:
        header = bytes((first, remaining & 0x7F | 0x80, remaining >> 7))
    else:
        varint = bytearray((first,))
        while True:
            byte, remaining = remaining & 0x7F, remaining >> 7
            varint.append(byte | 0x80 if remaining else byte)
            if not remaining:
                break
        header = bytes(varint)
    return b"".join((header, name, mid.to_bytes(2, "big"), properties or b"", payload))


def queue_packets(paho: paho_mqtt.Client, packets: bytes, mid: int) -> None:
    """Queue ready QoS 1 PUBLISH packets, one after another in ``packets``, for paho to write
    (only while ``paho.socket()`` is not None), and move paho's packet identifier counter on to
    ``mid``, the last of their identifiers (counted on from :func:`last_mid`, 65535 wrapping to
    1). They join the queue's last entry when that is one of these and has room."""
    paho._last_mid = mid
    queue = paho._out_packet
    size = len(packets)
    if queue:
        last: Any = queue[-1]
        if last.get("parley") and last["to_process"] + size <= JOIN_BYTES:
            last["packet"] += packets  # a bytearray of its own
            last["to_process"] += size
            return
    entry: Any = {
        "command": packets[0],
        "mid": mid,
        "qos": 1,  # QoS 1 or 2: paho touches a QoS 0 packet's message info once written
        "pos": 0,
        "to_process": size,
        "packet": bytearray(packets),
        "info": None,
        "parley": True,
    }
    queue.append(entry)
    paho._call_socket_register_write()


def route_pubacks(
    paho: paho_mqtt.Client, owns: Callable[[int], bool], acked: Callable[[int, int], None]
) -> None:
    """Send each PUBACK whose packet identifier ``owns`` claims to ``acked(mid, reason)``
    (reason 0 when the broker sent none: success); paho handles the others. Changes this one
    client only."""
    original = paho._handle_pubackcomp

    def handle(cmd: Any) -> Any:
        if cmd == "PUBACK":
            packet = paho._in_packet["packet"]
            size = len(packet)
            if size >= 2:
                mid = (packet[0] << 8) | packet[1]
                if owns(mid):
                    acked(mid, packet[2] if size > 2 else 0)
                    return paho_mqtt.MQTT_ERR_SUCCESS
        return original(cmd)

    paho._handle_pubackcomp = handle  # type: ignore[method-assign]


def loop_read(paho: paho_mqtt.Client, also: int) -> int:
    """paho's ``loop_read``, reading up to ``also`` more packets a call than paho would: paho
    reads as many as it has messages in flight, and the PUBLISHes :func:`queue_packets` sent
    are not among them, so their PUBACKs would be read one per readiness of the socket."""
    if paho._sock is None:
        return paho_mqtt.MQTT_ERR_NO_CONN
    for _ in range(max(1, len(paho._out_messages) + len(paho._in_messages) + also)):
        if paho._sock is None:
            return paho_mqtt.MQTT_ERR_NO_CONN
        rc = paho._packet_read()
        if rc > 0:
            return paho._loop_rc_handle(rc)
        if rc == paho_mqtt.MQTT_ERR_AGAIN:
            break
    return paho_mqtt.MQTT_ERR_SUCCESS


_PEEK = 65536
# The fixed bytes of a run of ``n`` PUBACKs of one shape, by (size, n): every packet type, then
# every remaining length (bounded memo; a read holds up to a few hundred PUBACKs).
_HEADS: dict[tuple[int, int], bytes] = {}
_LITTLE = sys.byteorder == "little"


def take_pubacks(
    paho: paho_mqtt.Client,
    owns: Callable[[int], bool],
    acked: Callable[[list[int]], None],
) -> bool:
    """Read the plain PUBACKs (a packet identifier ``owns`` claims, then a success-class reason
    or none) at the head of what the socket holds, in one read, before paho reads the rest
    packet by packet (three ``recv`` calls and a parse each), and hand their packet
    identifiers to ``acked`` in one list. Only between packets, and only on a plain TCP socket
    (a TLS socket cannot be peeked at); anything else is left to paho.

    True when it took all the socket held (nothing for paho to read now: a ``recv`` that
    would only say so is saved; the socket's readiness reports what arrives later)."""
    sock = paho._sock
    if (
        not isinstance(sock, socket.socket)
        or isinstance(sock, ssl.SSLSocket)
        or paho._in_packet["command"] != 0
    ):
        return False
    try:
        data = sock.recv(_PEEK, socket.MSG_PEEK)
    except OSError:
        return False  # nothing there, or a broken socket that paho's read reports
    end = len(data)
    mids = _uniform_pubacks(data, end)
    if mids is not None and all(map(owns, mids)):
        i = end
    else:
        mids, i = _pubacks(data, end, owns)
        if not mids:
            return False
    got = 0
    while got < i:  # the bytes are there (peeked): take exactly them
        chunk = sock.recv(i - got)
        if not chunk:
            return False
        got += len(chunk)
    acked(mids)
    return i == end < _PEEK


def _uniform_pubacks(data: bytes, end: int) -> list[int] | None:
    """The packet identifiers of ``data`` when it is nothing but whole PUBACKs of one shape
    (what a broker sends back for a burst of publishes: ``40 02 id id``, or ``40 03 id id
    reason`` with a success-class reason, Mosquitto's 0x10 where no one subscribes), read in a
    few C-level slices rather than packet by packet; None otherwise."""
    if end < 4 or data[0] != 0x40:
        return None
    size = data[1]
    step = size + 2
    if size not in (2, 3) or end % step:
        return None
    n = end // step
    heads = _HEADS.get((size, n))
    if heads is None:
        if len(_HEADS) >= 1024:
            _HEADS.clear()
        heads = _HEADS[(size, n)] = b"\x40" * n + bytes((size,)) * n
    if data[0::step] + data[1::step] != heads:
        return None
    if size == 3 and max(data[4::step]) >= 0x80:
        return None  # a refusal: paho's path, which logs it
    if size == 2:
        ids = array("H", data)[1::2]  # every other 16-bit word is a packet identifier
    else:
        pairs = bytearray(2 * n)
        pairs[0::2] = data[2::step]
        pairs[1::2] = data[3::step]
        ids = array("H", pairs)
    if _LITTLE:
        ids.byteswap()  # packet identifiers are big-endian
    return ids.tolist()


def _pubacks(data: bytes, end: int, owns: Callable[[int], bool]) -> tuple[list[int], int]:
    """The plain PUBACKs at the head of ``data``, one by one: their packet identifiers and the
    bytes they take."""
    mids: list[int] = []
    i = 0
    while i + 4 <= end and data[i] == 0x40:
        size = data[i + 1]
        if size != 2 and not (
            size in (3, 4)
            and i + 2 + size <= end
            and data[i + 4] < 0x80
            and (size == 3 or data[i + 5] == 0)  # no properties
        ):
            break
        mid = (data[i + 2] << 8) | data[i + 3]
        if not owns(mid):
            break
        mids.append(mid)
        i += 2 + size
    return mids, i
