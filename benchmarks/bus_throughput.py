"""Bus throughput and latency: local, MQTT within one process, MQTT across two processes.

For 1 KB and 200 KB messages (size of the encoded payload) it measures
- round-trip latency (p50/p99): a message goes out, an echo subscriber publishes it back on
  another topic, the sender receives it; one at a time;
- throughput: one publisher sends N messages as fast as ``publish`` lets it, one subscriber
  receives them; msgs/s = N / (last receive - first publish); messages lost = N - received
  (distinct ids) once the subscriber has waited ``--grace`` seconds after the last publish.
  The CPU seconds of every process in the run (clients, broker) are recorded too, with the
  rate that CPU work allows on two idle cores ("CPU-bound msgs/s"): on a shared machine the
  wall-clock rate measures the neighbours as much as the bus.

"mqtt 1 process" uses two MqttBus clients in this process (every message through the broker);
"mqtt 2 processes" runs the subscriber (or the echo) in a second process. A Mosquitto from
configs/mosquitto.conf is started on a free loopback port. Prints a table and writes
benchmarks/results/bus_throughput.json.

    python benchmarks/bus_throughput.py [--quick] [--no-mqtt]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import platform
import statistics
import subprocess
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from parley.bus import topics
from parley.bus.base import Bus
from parley.bus.broker import find_mosquitto, start_mosquitto
from parley.bus.codec import encode
from parley.bus.local import LocalBus
from parley.bus.messages import ImagePart, StateUpdate, TextPart
from parley.bus.mqtt import MqttBus

RESULTS = Path(__file__).parent / "results"
RUN = "bench"
PING, PONG, FLOW = (
    topics.gm_inbox(RUN, "ping"),
    topics.gm_inbox(RUN, "pong"),
    topics.events(RUN, "flow"),
)
SIZES = {"1 KB": 1024, "200 KB": 200 * 1024}


def make_message(i: int, size: int) -> StateUpdate:
    """A message whose encoded payload is about ``size`` bytes (an image for the large ones)."""
    base = StateUpdate(run=RUN, episode="e", sender="bench", data={"i": i})
    room = size - len(encode(base)) - 40
    if size >= 10_000:
        image = ImagePart.from_bytes(os.urandom(room * 3 // 4 - 120))
        return base.model_copy(update={"content": [image]})
    return base.model_copy(update={"content": [TextPart(text="x" * max(room, 0))]})


def template(size: int) -> StateUpdate:
    return make_message(0, size)


def numbered(tpl: StateUpdate, i: int) -> StateUpdate:
    """A fresh message (new id) sharing the template's content: no per-message image hashing."""
    return tpl.model_copy(update={"data": {"i": i}, "id": f"{os.getpid():x}-{i:012d}"})


# -- the measurements -------------------------------------------------------------------------


async def latency(sender: Bus, receiver_ready: Any, tpl: StateUpdate, count: int) -> list[float]:
    """Round trips through an echo that is already running; seconds per round trip."""
    pongs = sender.subscribe(PONG, maxsize=10)
    await pongs.ready()
    await receiver_ready()
    times = []
    for i in range(count + 20):
        start = time.perf_counter()
        await sender.publish(PING, numbered(tpl, i))
        await asyncio.wait_for(pongs.get(), 10)
        if i >= 20:  # warm-up
            times.append(time.perf_counter() - start)
    await pongs.close()
    return times


async def echo(bus: Bus, stop: asyncio.Event, ready: asyncio.Event | None = None) -> None:
    pings = bus.subscribe(PING, maxsize=10)
    await pings.ready()
    if ready is not None:
        ready.set()
    getter = asyncio.ensure_future(pings.get())
    stopper = asyncio.ensure_future(stop.wait())
    while True:
        done, _ = await asyncio.wait({getter, stopper}, return_when=asyncio.FIRST_COMPLETED)
        if stopper in done:
            getter.cancel()
            break
        delivery = getter.result()
        await bus.publish(PONG, delivery.message)
        getter = asyncio.ensure_future(pings.get())
    await pings.close()


async def consume(
    bus: Bus, count: int, ready: Any, grace: float, deadline: float, finished: Any
) -> dict:
    """Receive up to ``count`` messages on FLOW; report distinct ids and the last receive time.

    Gives up when nothing arrived for ``grace`` seconds after the publisher has finished
    (``finished()``), or after ``deadline`` seconds."""
    sub = bus.subscribe(FLOW, maxsize=1000)
    await sub.ready()
    ready()
    cpu = time.process_time()
    seen: set[str] = set()
    last = 0.0
    limit = time.monotonic() + deadline
    while len(seen) < count:
        remaining = limit - time.monotonic()
        if remaining <= 0:
            break
        try:
            if len(sub.mailbox):
                delivery = await sub.get()
            else:
                done = finished()
                delivery = await asyncio.wait_for(sub.get(), min(grace if done else 0.5, remaining))
        except TimeoutError:
            if done:
                break  # nothing for `grace` seconds after the last publish: the rest is lost
            continue
        seen.add(delivery.message.id)
        last = time.monotonic()
    await sub.close()
    return {"received": len(seen), "last": last, "cpu_s": time.process_time() - cpu}


async def produce(bus: Bus, tpl: StateUpdate, count: int) -> float:
    first = time.monotonic()
    for i in range(count):
        await bus.publish(FLOW, numbered(tpl, i))
    return first


def broker_cpu(broker: Any) -> float:
    """CPU seconds Mosquitto has used so far (Linux /proc), 0 when unknown."""
    if broker is None or broker.process is None:
        return 0.0
    try:
        fields = Path(f"/proc/{broker.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return 0.0


def load() -> float | None:
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:
        return None


def summary(
    times: list[float],
    count: int,
    received: int,
    elapsed: float,
    cpu: dict[str, float],
    cores: int = 2,
) -> dict:
    """``cpu``: CPU seconds each process spent on the throughput run. ``cpu_bound_msgs_per_s``
    is what that CPU work allows on ``cores`` idle cores: limited by the busiest process, or
    by all of them sharing the cores."""
    ordered = sorted(times)
    busiest = max(cpu.values(), default=0.0)
    shared = sum(cpu.values()) / cores
    bound = max(busiest, shared)
    return {
        "latency_p50_ms": round(statistics.median(ordered) * 1000, 3),
        "latency_p99_ms": round(ordered[int(len(ordered) * 0.99) - 1] * 1000, 3),
        "messages": count,
        "received": received,
        "lost": count - received,
        "seconds": round(elapsed, 3),
        "msgs_per_s": round(received / elapsed) if elapsed > 0 else None,
        "cpu_s": {k: round(v, 3) for k, v in cpu.items()},
        "cpu_us_per_msg": {k: round(v / count * 1e6, 1) for k, v in cpu.items()},
        "cpu_bound_msgs_per_s": round(received / bound) if bound > 0 else None,
        "load_average": load(),
    }


async def in_process(
    make: Any, size: int, count: int, pings: int, grace: float, broker: Any = None
) -> dict:
    """Publisher and subscriber in this process: on one LocalBus, or two MQTT clients."""
    sender, receiver = await make()
    tpl = template(size)
    try:
        stop, echo_ready = asyncio.Event(), asyncio.Event()
        echoer = asyncio.create_task(echo(receiver, stop, echo_ready))
        times = await latency(sender, echo_ready.wait, tpl, pings)
        stop.set()
        await echoer

        ready, published = asyncio.Event(), asyncio.Event()
        consumer = asyncio.create_task(
            consume(receiver, count, ready.set, grace, 120, published.is_set)
        )
        await ready.wait()
        cpu, mosquitto = time.process_time(), broker_cpu(broker)
        first = await produce(sender, tpl, count)
        published.set()
        result = await consumer
        cpu_s = {"clients": time.process_time() - cpu}
        if broker is not None:
            cpu_s["broker"] = broker_cpu(broker) - mosquitto
        return summary(times, count, result["received"], result["last"] - first, cpu_s)
    finally:
        for bus in {id(sender): sender, id(receiver): receiver}.values():
            await bus.close()


# -- the second process -----------------------------------------------------------------------


def child(url: str, role: str, count: int, grace: float, conn: Any) -> None:
    """Runs in a spawned process: an echo (role "echo") or a counting subscriber ("consume")."""

    async def main() -> None:
        async with MqttBus.from_url(url) as bus:
            if role == "echo":
                stop = asyncio.Event()
                ready = asyncio.Event()
                task = asyncio.create_task(echo(bus, stop, ready))
                await ready.wait()
                conn.send("ready")
                await asyncio.to_thread(conn.recv)  # "stop"
                stop.set()
                await task
                conn.send("done")
            else:
                result = await consume(
                    bus, count, lambda: conn.send("ready"), grace, 120, conn.poll
                )
                conn.send(result)

    asyncio.run(main())


async def across_processes(
    url: str, size: int, count: int, pings: int, grace: float, broker: Any = None
) -> dict:
    ctx = mp.get_context("spawn")
    tpl = template(size)
    async with MqttBus.from_url(url) as sender:
        ours, theirs = ctx.Pipe()
        proc = ctx.Process(target=child, args=(url, "echo", 0, grace, theirs), daemon=True)
        proc.start()
        try:
            times = await latency(sender, lambda: asyncio.to_thread(ours.recv), tpl, pings)
            ours.send("stop")
            await asyncio.to_thread(ours.recv)
        finally:
            proc.join(10)

        ours, theirs = ctx.Pipe()
        proc = ctx.Process(target=child, args=(url, "consume", count, grace, theirs), daemon=True)
        proc.start()
        try:
            await asyncio.to_thread(ours.recv)  # "ready": subscribed
            cpu, mosquitto = time.process_time(), broker_cpu(broker)
            first = await produce(sender, tpl, count)
            publisher_cpu = time.process_time() - cpu
            ours.send("published")
            result = await asyncio.to_thread(ours.recv)
            broker_s = broker_cpu(broker) - mosquitto
        finally:
            proc.join(10)
    cpu_s = {"publisher": publisher_cpu, "subscriber": result["cpu_s"], "broker": broker_s}
    return summary(times, count, result["received"], result["last"] - first, cpu_s)


# -- driver -----------------------------------------------------------------------------------


async def run(args: argparse.Namespace) -> dict:
    counts = {"1 KB": args.count_small, "200 KB": args.count_large}
    results: list[dict] = []
    broker = None
    if not args.no_mqtt:
        if find_mosquitto() is None:
            print("Mosquitto is not installed: measuring the local bus only")
        else:
            broker = start_mosquitto()
    try:

        async def local_pair() -> tuple[Bus, Bus]:
            bus = LocalBus()
            return bus, bus

        async def mqtt_pair() -> tuple[Bus, Bus]:
            assert broker is not None
            return await MqttBus.from_url(broker.url).start(), await MqttBus.from_url(
                broker.url
            ).start()

        for label, size in SIZES.items():
            count = counts[label]
            payload = len(encode(template(size)))
            runs = [
                (
                    "local",
                    lambda s=size, c=count: in_process(local_pair, s, c, args.pings, args.grace),
                )
            ]
            if broker is not None:
                runs += [
                    (
                        "mqtt, 1 process",
                        lambda s=size, c=count: in_process(
                            mqtt_pair, s, c, args.pings, args.grace, broker
                        ),
                    ),
                    (
                        "mqtt, 2 processes",
                        lambda s=size, c=count: across_processes(
                            broker.url, s, c, args.pings, args.grace, broker
                        ),
                    ),
                ]
            for transport, measure in runs:
                result = await asyncio.wait_for(measure(), args.timeout)
                results.append(
                    {"transport": transport, "size": label, "payload_bytes": payload, **result}
                )
                print(f"  {transport:18} {label:7} {result['msgs_per_s']} msgs/s", flush=True)
    finally:
        if broker is not None:
            broker.close()
    return {
        "benchmark": "bus_throughput",
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "machine": {
            "python": platform.python_version(),
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "mosquitto": _mosquitto_version(),
        },
        "settings": {k: v for k, v in vars(args).items() if k != "out"},
        "results": results,
    }


def _mosquitto_version() -> str | None:
    executable = find_mosquitto()
    if executable is None:
        return None
    done = subprocess.run([executable, "-h"], capture_output=True, text=True)
    first = (done.stdout or done.stderr).splitlines()
    return first[0].strip() if first else None


def show(report: dict) -> None:
    table = Table(title="parley bus: round trip and throughput (loopback)")
    for column in (
        "transport",
        "size",
        "p50 ms",
        "p99 ms",
        "msgs/s",
        "CPU-bound msgs/s",
        "sent",
        "lost",
        "load",
    ):
        table.add_column(column, justify="left" if column in ("transport", "size") else "right")
    for r in report["results"]:
        table.add_row(
            r["transport"],
            r["size"],
            f"{r['latency_p50_ms']:.3f}",
            f"{r['latency_p99_ms']:.3f}",
            f"{r['msgs_per_s'] or 0:,}",
            f"{r['cpu_bound_msgs_per_s'] or 0:,}",
            f"{r['messages']:,}",
            str(r["lost"]),
            str(r["load_average"]),
        )
    Console(width=120).print(table)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--count-small", type=int, default=20_000, help="1 KB messages per run")
    parser.add_argument("--count-large", type=int, default=1_000, help="200 KB messages per run")
    parser.add_argument("--pings", type=int, default=1_000, help="round trips per run")
    parser.add_argument("--grace", type=float, default=5.0, help="seconds of silence = lost")
    parser.add_argument("--timeout", type=float, default=180.0, help="seconds per run at most")
    parser.add_argument("--quick", action="store_true", help="a tenth of the counts")
    parser.add_argument("--no-mqtt", action="store_true", help="local bus only")
    parser.add_argument("--out", type=Path, default=RESULTS / "bus_throughput.json")
    args = parser.parse_args()
    if args.quick:
        args.count_small, args.count_large, args.pings = 2_000, 100, 200
    report = asyncio.run(run(args))
    show(report)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
