"""What the MQTT transport touches beneath aiomqtt's and paho's public API, in one place.

``parley.bus.mqtt`` publishes and acknowledges through paho directly and runs paho's socket
callbacks itself (see its docstring); for that it needs four things aiomqtt keeps private: the
paho client inside an ``aiomqtt.Client``, the future that ends a connection, the housekeeping
task (keepalive pings) aiomqtt starts when a socket opens, and, for a log line, a message's
raw topic bytes. QoS 1 PUBLISH packets are built by the transport and queued on paho's
outgoing packet queue (:func:`queue_packets`), their packet identifiers counted on from paho's
own counter (:func:`last_mid`), and their PUBACKs handed back before paho looks for a message it
never saw (:func:`route_pubacks`): paho's ``publish`` builds a message object, a message-info
object and a log line per message, and that was the largest part of what a message cost.
They are read and written only here. :func:`problems` checks that the
installed versions still have each of them, and everything else the transport relies on, in
the expected shape; :func:`ensure_compatible` runs it once per process when the first MQTT bus
starts, so an incompatible upgrade fails at once with the list of what changed
(``tests/bus/test_mqtt_adapter.py`` checks it in CI) rather than in the middle of a run.
"""

from __future__ import annotations

import asyncio
import inspect
import socket
import ssl
import sys
from array import array
from collections.abc import Callable
from importlib.metadata import version
from typing import Any

import aiomqtt
import paho.mqtt.client as paho_mqtt

# Public paho methods and callback slots the transport uses (beside what aiomqtt uses itself).
PAHO_METHODS = (
    "socket",
    "loop_read",
    "loop_write",
    "loop_misc",
    "manual_ack_set",
    "ack",
    "publish",
    "disconnect",
    "is_connected",
)
PAHO_CALLBACKS = (
    "on_socket_open",
    "on_socket_close",
    "on_socket_register_write",
    "on_socket_unregister_write",
    "on_message",
    "on_publish",
    "on_connect",
)


class IncompatibleMqttLibrary(RuntimeError):
    """The installed aiomqtt or paho-mqtt lacks something the MQTT transport relies on."""


def paho_of(client: aiomqtt.Client) -> paho_mqtt.Client:
    """The paho client an aiomqtt client drives."""
    return client._client


def disconnected(client: aiomqtt.Client) -> asyncio.Future[None]:
    """The future that completes when the client's current connection ends (aiomqtt replaces it
    on every connect, so ask again after each)."""
    return client._disconnected


def end_connection(client: aiomqtt.Client, exc: BaseException) -> None:
    """End the current connection with ``exc`` (its socket broke), as aiomqtt itself would."""
    future = client._disconnected
    if not future.done():
        future.set_exception(exc)


def start_housekeeping(client: aiomqtt.Client, loop: asyncio.AbstractEventLoop) -> None:
    """Start aiomqtt's once-a-second task (paho's ``loop_misc``: keepalive pings, timeouts) if
    it is not running; aiomqtt's own socket callbacks would, and the transport replaces them."""
    if client._misc_task is None or client._misc_task.done():
        client._misc_task = loop.create_task(client._misc_loop())


def stop_housekeeping(client: aiomqtt.Client) -> None:
    """Cancel the task :func:`start_housekeeping` started (the socket closed)."""
    if client._misc_task is not None and not client._misc_task.done():
        client._misc_task.cancel()


def last_mid(paho: paho_mqtt.Client) -> int:
    """The packet identifier paho's counter gave last. The transport numbers its packets on
    from it and hands the last one back (:func:`queue_packets`), so they never clash with
    paho's own packets (SUBSCRIBE, UNSUBSCRIBE) on the connection; paho's ``_mid_generate``
    takes a lock per identifier, as dear as the rest of a packet: every caller of either (the
    transport, and paho's subscribe and unsubscribe as aiomqtt calls them) runs on the event
    loop's thread."""
    return paho._last_mid


def can_queue(paho: paho_mqtt.Client) -> bool:
    """Whether the connection has a socket to write queued packets to."""
    return paho._sock is not None


# Packets queued one after another join one entry of paho's queue up to this size, so paho
# writes them with one send() (it sends each entry on its own); larger entries would cost
# paho a copy of the rest of the entry for every partial write.
JOIN_BYTES = 64 * 1024


def queue_packets(paho: paho_mqtt.Client, packets: bytes, mid: int) -> None:
    """Queue ready QoS 1 PUBLISH packets, one after another in ``packets``, for paho to write
    (call :func:`can_queue` first), and move paho's packet identifier counter on to ``mid``,
    the last of their identifiers (counted on from :func:`last_mid`, 65535 wrapping to 1).
    They join the queue's last entry when that is one of these and has room."""
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
    (reason 0 when the broker sent none: success); paho handles the others."""
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


def raw_topic(message: paho_mqtt.MQTTMessage) -> bytes:
    """A received message's topic as the broker sent it (for a topic that is not UTF-8)."""
    return getattr(message, "_topic", b"")


def problems(client: Any) -> list[str]:
    """What ``client`` (an ``aiomqtt.Client``, made on a running loop; no connection needed)
    and the installed paho lack of what this module and the transport use; empty if nothing."""
    found: list[str] = []
    paho = getattr(client, "_client", None)
    if not isinstance(paho, paho_mqtt.Client):
        found.append(f"aiomqtt.Client._client is {type(paho).__name__}, not a paho Client")
    else:
        for name in PAHO_METHODS:
            if not callable(getattr(paho, name, None)):
                found.append(f"paho Client.{name}() is missing")
        for name in PAHO_CALLBACKS:
            if not hasattr(paho, name):
                found.append(f"paho Client.{name} (callback) is missing")
        if not callable(getattr(paho, "on_connect", None)):
            found.append("aiomqtt no longer sets paho's on_connect (the transport chains it)")
        if not isinstance(getattr(paho, "_last_mid", None), int):
            found.append("paho Client._last_mid (the packet identifier counter) is missing")
        for name in (
            "_mid_generate",
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
        if "_sock" not in vars(paho):
            found.append("paho Client._sock is missing")
        for name in ("_out_messages", "_in_messages"):
            if not hasattr(getattr(paho, name, None), "__len__"):
                found.append(f"paho Client.{name} is missing")
    future = getattr(client, "_disconnected", None)
    if not isinstance(future, asyncio.Future):
        found.append(f"aiomqtt.Client._disconnected is {type(future).__name__}, not a Future")
    task = getattr(client, "_misc_task", "missing")
    if not (task is None or isinstance(task, asyncio.Task)):
        found.append(f"aiomqtt.Client._misc_task is {task!r}, not None or a Task")
    if not inspect.iscoroutinefunction(getattr(client, "_misc_loop", None)):
        found.append("aiomqtt.Client._misc_loop() is missing or not a coroutine function")
    # The transport's on_publish takes paho's version-2 callback arguments, as aiomqtt's does.
    on_publish = getattr(client, "_on_publish", None)
    if on_publish is None or len(inspect.signature(on_publish).parameters) != 5:
        found.append(
            "aiomqtt's on_publish no longer takes (client, userdata, mid, reason_code, properties)"
        )
    if "_topic" not in getattr(paho_mqtt.MQTTMessage, "__slots__", ()):
        found.append("paho MQTTMessage has no _topic slot (the raw topic bytes)")
    return found


_checked = False


def ensure_compatible(client: Any | None = None) -> None:
    """Raise :class:`IncompatibleMqttLibrary`, naming every problem and the installed versions,
    when :func:`problems` finds any; checks once per process (call on a running loop)."""
    global _checked
    if _checked and client is None:
        return
    found = problems(client if client is not None else aiomqtt.Client("127.0.0.1"))
    if found:
        versions = f"aiomqtt {version('aiomqtt')}, paho-mqtt {version('paho-mqtt')}"
        raise IncompatibleMqttLibrary(
            f"the MQTT transport does not work with {versions} (it needs aiomqtt 2.x on "
            f"paho-mqtt 2.x): " + "; ".join(found)
        )
    if client is None:
        quick_pubacks()
        _checked = True


def quick_pubacks() -> None:
    """Decode the common PUBACK (a message id, success, no properties: what Mosquitto sends
    for an accepted message) without the ReasonCode and Properties objects
    paho builds for every acknowledgement: with QoS 1, one PUBACK per message published, and
    building them cost more than the rest of handling it. Other PUBACKs go through paho's own
    decoder; without the shape this expects, nothing changes."""
    from paho.mqtt import _packet
    from paho.mqtt.packettypes import PacketTypes
    from paho.mqtt.properties import Properties
    from paho.mqtt.reasoncodes import ReasonCode

    decode = getattr(_packet, "decode_puback", None)
    packet_type = getattr(_packet, "PubackPacket", None)
    if decode is None or packet_type is None or getattr(decode, "_parley_quick", False):
        return
    # Shared by every such acknowledgement: read, never changed (bus/mqtt.py reads the reason).
    no_properties = Properties(PacketTypes.PUBACK)
    reasons: dict[int, ReasonCode] = {}

    def reason(code: int) -> ReasonCode:
        found = reasons.get(code)
        if found is None:
            found = reasons[code] = ReasonCode(PacketTypes.PUBACK)
            found.unpack(bytes([code]))
        return found

    def quick(header: int, packet: bytes | bytearray, protocol: Any) -> Any:
        # A message id, then (MQTT 5) maybe a success-class reason (0, or 0x10: no matching
        # subscribers, as Mosquitto says) and maybe an empty property length.
        size = len(packet)
        if size == 2 or (size <= 4 and packet[2] < 0x80 and packet[3:] in (b"", b"\x00")):
            return packet_type(
                mid=(packet[0] << 8) | packet[1],
                reason=reason(packet[2] if size > 2 else 0),
                properties=no_properties,
            )
        return decode(header, packet, protocol)

    quick._parley_quick = True  # type: ignore[attr-defined]
    _packet.decode_puback = quick
