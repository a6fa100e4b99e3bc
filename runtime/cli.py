"""The ``parley`` command line."""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from pathlib import Path

from rich.console import Console
from rich.live import Live
from rich.table import Table

from runtime.config import ConfigError

console = Console(stderr=True)


def _cmd_run(args: argparse.Namespace) -> int:
    from runtime.config import load_config
    from runtime.report import summary_rows, write_report
    from runtime.scheduler import RunOutcome, Scheduler, run_experiment

    config = load_config(args.config, args.set)
    out = Path(args.out) if args.out else Path("runs") / config.name
    state: dict[str, Scheduler] = {}

    def status() -> Table:
        table = Table.grid(padding=(0, 2))
        sched = state.get("s")
        if sched is None:
            table.add_row("starting…")
            return table
        p = sched.progress
        table.add_row(
            f"[bold]{config.name}[/]",
            f"done {p.done}/{p.planned}",
            f"running {p.running}",
            f"[red]failed {p.failed}[/]" if p.failed else "failed 0",
            f"skipped {p.skipped}" if p.skipped else "",
            f"{p.turns_per_s:,.0f} turns/s",
        )
        return table

    async def main() -> RunOutcome:
        loop = asyncio.get_running_loop()
        interrupts = 0

        def on_signal() -> None:
            nonlocal interrupts
            interrupts += 1
            if interrupts > 1:
                raise SystemExit(130)
            console.print("[yellow]interrupted: recording running episodes as cancelled…[/]")
            if "s" in state:
                state["s"].stop()

        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, on_signal)
        show = not args.quiet and console.is_terminal
        live = Live(status(), console=console, refresh_per_second=4, transient=True)
        if show:
            live.start()

        async def refresh() -> None:
            while True:
                live.update(status())
                await asyncio.sleep(0.25)

        ticker = asyncio.create_task(refresh()) if show else None
        try:
            return await run_experiment(
                config,
                out,
                resume=args.resume,
                bus_url=args.bus,
                concurrency=args.concurrency,
                on_start=lambda s: state.__setitem__("s", s),
            )
        finally:
            if ticker is not None:
                ticker.cancel()
                live.stop()

    outcome = asyncio.run(main())
    report = write_report(outcome.folder.path)
    header, rows = summary_rows(outcome.records)
    table = Table(title=f"run {outcome.run_id}")
    for name in header:
        table.add_column(name, justify="left" if name in ("game", "pairing") else "right")
    for row in rows:
        table.add_row(*row)
    Console(width=None if sys.stdout.isatty() else 200).print(table)
    p = outcome.progress
    console.print(
        f"{p.done} played now, {p.skipped} already done; {p.turns_per_s:,.0f} turns/s. "
        f"Results: {outcome.folder.path} (report: {report})"
    )
    if outcome.interrupted:
        console.print(
            f"[yellow]interrupted; continue with: parley run {args.config} --out {out} --resume[/]"
        )
        return 130
    return 0


def _cmd_games(args: argparse.Namespace) -> int:
    from environments import registry

    table = Table(title="games")
    for column in ("game", "roles", "built-in players", "description"):
        table.add_column(column)
    for name, info in registry.all_games().items():
        players = "; ".join(f"{role}: {', '.join(kinds)}" for role, kinds in info.players.items())
        table.add_row(name, ", ".join(info.roles), players, info.description)
    Console().print(table)
    return 0


def _cmd_report(args: argparse.Namespace) -> int:
    from runtime.report import build_report, write_report

    run = Path(args.run)
    if not (run / "episodes.jsonl").exists():
        console.print(f"[red]{run} is not a run folder (no episodes.jsonl)[/]")
        return 2
    path = write_report(run)
    print(build_report(run))
    console.print(f"written to {path}")
    return 0


def _cmd_broker(args: argparse.Namespace) -> int:
    from bus.broker import run_broker

    return run_broker(args.config, args.port)


def _cmd_sim_server(args: argparse.Namespace) -> int:
    from agents.backends.simserver import run_from_args

    return run_from_args(args)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="parley", description="Play many multi-agent game episodes at once."
    )
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="run an experiment config")
    run.add_argument("config", help="experiment YAML")
    run.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config field, e.g. --set games.0.seeds.count=5",
    )
    run.add_argument("--bus", help="bus URL: local (default) or mqtt://host:port")
    run.add_argument("--concurrency", type=int, help="episodes at once (overrides the config)")
    run.add_argument("--out", help="run folder (default runs/<name>)")
    run.add_argument(
        "--resume", action="store_true", help="continue a run folder, skipping finished episodes"
    )
    run.add_argument("--quiet", action="store_true", help="no live progress display")
    run.set_defaults(fn=_cmd_run)

    games = sub.add_parser("games", help="list the games and their roles")
    games.set_defaults(fn=_cmd_games)

    report = sub.add_parser("report", help="print and write the report of a run folder")
    report.add_argument("run", help="run folder")
    report.set_defaults(fn=_cmd_report)

    broker = sub.add_parser("broker", help="start Mosquitto with the project's broker config")
    broker.add_argument("--config", help="broker config (default configs/mosquitto.conf)")
    broker.add_argument("--port", type=int, help="listener port (default 1883)")
    broker.set_defaults(fn=_cmd_broker)

    from agents.backends.simserver import add_arguments as sim_arguments

    sim = sub.add_parser(
        "sim-server",
        help="a stand-in model server (OpenAI and Anthropic APIs) for tests without GPUs or keys",
    )
    sim_arguments(sim)
    sim.set_defaults(fn=_cmd_sim_server)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.fn(args) or 0)
    except ConfigError as exc:
        console.print(f"[red]{exc}[/]", highlight=False)
        return 2


if __name__ == "__main__":
    sys.exit(main())
