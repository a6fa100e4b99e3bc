"""The ``parley`` command line."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shlex
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table

from parley import event_loop
from parley.memory.across import MemoryStoreError
from parley.records import NewerSchema
from parley.runtime.config import ConfigError, ExperimentConfig
from parley.runtime.preflight import add_check_command, add_run_arguments, check_before_run
from parley.runtime.quick_config import EXAMPLES, command_words, run_config
from parley.runtime.quick_config import add_arguments as add_model_arguments

if TYPE_CHECKING:
    from parley.observability.dashboard.server import Dashboard
    from parley.runtime.run_display import RunDisplay
    from parley.runtime.run_scheduler import RunScheduler
    from parley.runtime.scheduler import RunOutcome

console = Console(stderr=True)


def say_error(text: str) -> None:
    """``text`` in red on stderr, as it is: paths and values in it may hold ``[`` … ``]``,
    which rich would otherwise read as markup."""
    console.print(text, style="red", markup=False, highlight=False, soft_wrap=True)


def _cmd_run(args: argparse.Namespace) -> int:
    """``parley run``: check, play, report, and say how it went (the exit code: EXIT_*)."""
    # The config first: a bad one is refused before the runtime (schedulers, model clients,
    # tracing) is imported, without waiting for those imports.
    overrides = [
        *args.set,
        *([f"workers={args.workers}"] if args.workers else []),
        *([f"limit={args.limit}"] if args.limit else []),
    ]
    config = run_config(args, overrides)  # a YAML file, or games and --model
    out = Path(args.out) if args.out else Path("runs") / config.name
    resume = resume_command(args, out)
    if not (args.resume or args.retry_errors or args.force_resume):
        taken = folder_taken(config, out, resume)
        if taken is not None:  # the same command run twice: what is there, and what to type
            say_error(taken)
            return EXIT_FAILED
    if config.workers != "remote" and not (args.resume or args.retry_errors):
        from parley.runtime.workers import prestart

        # Worker processes start now: they import while the models are checked.
        prestart(config)
    _warn_broken_plugins()  # after the config: loading every game takes a while
    if (refused := check_before_run(config, args)) is not None:  # parley check, first
        return refused
    if args.credentials:  # a credentials file from parley broker --secure: its URL, user, CA
        from parley.runtime.remote_worker import worker_url

        args.bus = worker_url(None, args.credentials)
    # A broker that is down or refuses us: one line, before the run folder is made.
    problem = event_loop.run(bus_problem(args.bus or config.bus))
    if problem is not None:
        say_error(str(problem))
        return 1
    outcome = _played(config, out, args, resume)
    if isinstance(outcome, int):
        return outcome
    report = _run_report(outcome, args)
    return _say_results(outcome, report, resume)


def folder_taken(config: ExperimentConfig, out: Path, resume: str) -> str | None:
    """Why ``parley run`` without ``--resume`` cannot use ``out``: it already holds a run
    (finished, unfinished, or of another config), said with the commands that go on from
    there; None when the folder holds no run."""
    from parley.records import FINISHED, read_records
    from parley.runtime.config import redacted
    from parley.runtime.results import config_differences
    from parley.user_files import YamlFileError, read_mapping

    if not (out / "run.json").is_file():
        return None
    again = "or --out NEW to play it again in a new folder"
    try:
        saved = read_mapping(out / "config.yaml")
    except YamlFileError:
        saved = None
    if saved is not None and (differences := config_differences(saved, redacted(config))):
        return (
            f"{out} holds a run of another config ({'; '.join(differences[:2])}): "
            f"choose another folder with --out NEW (or --force-resume to add to that run)"
        )
    try:
        planned = int(json.loads((out / "run.json").read_text("utf-8")).get("planned") or 0)
    except (OSError, ValueError, AttributeError):
        planned = 0
    records = read_records(out)
    done = [r for r in records if r.outcome in FINISHED]
    errors = sum(r.outcome == "error" for r in done)
    count = f"{len(done)} of {planned} episodes" if planned else f"{len(done)} episodes"
    limited = saved.get("limit") if saved is not None else None
    if limited and limited != config.limit and planned and len(done) >= planned:
        return (
            f"{out} holds a finished run of this config limited to {limited} episodes a game "
            f"({count}): `{resume}` plays the rest (the episodes it holds are kept), {again}"
        )
    if planned and len(done) >= planned and not errors:
        return (
            f"{out} already holds a finished run of this config ({count}): "
            f"`parley report {shlex.quote(str(out))}` to see it, {again}"
        )
    if planned and len(done) >= planned:
        return (
            f"{out} already holds a finished run of this config ({count}, {errors} ended in "
            f"error): `parley report {shlex.quote(str(out))}` to see it, "
            f"`{resume} --retry-errors` to play the errors again, {again}"
        )
    return (
        f"{out} holds an unfinished run of this config ({count} recorded): "
        f"`{resume}` to continue it, {again}"
    )


def _played(
    config: ExperimentConfig, out: Path, args: argparse.Namespace, resume: str
) -> RunOutcome | int:
    """The run, played to its end; or the exit code of one refused or stopped because its
    folder is in use, was made by another config, or cannot be written."""
    from parley.runtime.results import RunFolderError

    try:
        return event_loop.run(_play_run(config, out, args))
    except RunFolderError as exc:  # in use by another run, or made by another config
        say_error(str(exc))
        return 1
    except Exception as exc:
        failure = recording_failure(exc)
        if failure is None:
            raise
        say_error(str(failure))
        _say_resume(
            "the run stopped; every episode recorded before is whole. Once the folder can be "
            "written again, continue with:",
            resume,
        )
        return 1


class _RunSession:
    """What ``parley run`` holds while its run plays: the scheduler once the run has one (for
    ``display`` too), the dashboard served from this process (``--dashboard``), and Ctrl-C (or
    SIGTERM): the first stops the run, its running episodes recorded as cancelled; a second
    exits at once. Once the run is over and only the dashboard is left, Ctrl-C ends that wait."""

    def __init__(
        self, config: ExperimentConfig, out: Path, args: argparse.Namespace, display: RunDisplay
    ) -> None:
        self.config = config
        self.out = out
        self.args = args
        self.display = display
        self.scheduler: RunScheduler | None = None
        self.dashboard: Dashboard | None = None
        self.interrupts = 0
        self._leave: asyncio.Event | None = None  # set: the last wait for the dashboard ends
        self._serving: list[asyncio.Task[None]] = []  # held, or the loop may drop the task

    def catch_signals(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, self.on_signal)

    def on_signal(self) -> None:
        if self._leave is not None:  # the run is over; only the dashboard was left
            self._leave.set()
            return
        self.interrupts += 1
        if self.interrupts > 1:
            raise SystemExit(130)
        console.print("[yellow]interrupted: recording running episodes as cancelled…[/]")
        if self.scheduler is not None:
            self.scheduler.stop()

    def started(self, scheduler: RunScheduler) -> None:
        """The run has its scheduler (run_experiment's ``on_start``)."""
        self.scheduler = scheduler
        self.display.scheduler = scheduler
        if self.args.dashboard is not None:
            self._serving.append(asyncio.create_task(self._serve(scheduler)))

    async def _serve(self, scheduler: RunScheduler) -> None:
        self.dashboard = await serve_dashboard(scheduler, self.config, self.out, self.args)

    def stays(self) -> bool:
        """Whether the dashboard stays once the run is over: someone is at the terminal."""
        return self.dashboard is not None and sys.stdin.isatty() and not self.interrupts

    async def stay(self) -> None:
        """Keep the dashboard, with the finished episodes, until Ctrl-C."""
        assert self.dashboard is not None
        console.print(
            f"the run is over; the dashboard stays at {self.dashboard.url} until Ctrl-C",
            highlight=False,
            soft_wrap=True,
        )
        self._leave = asyncio.Event()
        await self._leave.wait()

    async def close(self) -> None:
        if self.dashboard is not None:
            await self.dashboard.stop()


async def _play_run(config: ExperimentConfig, out: Path, args: argparse.Namespace) -> RunOutcome:
    """The run, with its progress display, its dashboard and Ctrl-C."""
    from parley.runtime.run_display import RunDisplay
    from parley.runtime.scheduler import run_experiment

    display = RunDisplay(console, config.name, quiet=args.quiet, log_every_s=args.log_every)
    session = _RunSession(config, out, args, display)
    session.catch_signals()
    display.start()
    try:
        outcome = await run_experiment(
            config,
            out,
            resume=args.resume or args.retry_errors,
            bus_url=args.bus,
            concurrency=args.concurrency,
            on_start=session.started,
            retry_errors=args.retry_errors,
            force_resume=args.force_resume,
        )
        display.show_final()
        if session.stays():
            display.stop()
            await session.stay()
        return outcome
    finally:
        await session.close()
        display.stop()


def _run_report(outcome: RunOutcome, args: argparse.Namespace) -> Path | str:
    """The run's report.md (its path, or why there is none) and its summary table on stdout.

    The results are safe on disk by now; the report (tables, intervals, plots) comes after
    them, and --no-report leaves it to `parley report` (benchmarks time the run alone)."""
    from parley.runtime.report import summary_rows, write_report

    report: Path | str = f"not written; parley report {outcome.folder.path}"
    if getattr(args, "no_report", False):
        return report
    try:
        report = write_report(outcome.folder.path)
    except OSError as exc:  # the records are safe: a report that cannot be written waits
        report = f"not written ({exc.strerror or exc}); parley report {outcome.folder.path}"
    header, rows = summary_rows(outcome.records)
    table = Table(title=f"run {outcome.run_id}")
    for name in header:
        # fold, never "…": a narrow terminal wraps game names and intervals instead
        left = name in ("game", "pairing")
        table.add_column(name, justify="left" if left else "right", overflow="fold")
    for row in rows:
        table.add_row(*row)
    Console(width=None if sys.stdout.isatty() else 200).print(table)
    return report


def _say_results(outcome: RunOutcome, report: Path | str, resume: str) -> int:
    """How the run went, what ended in error and how to go on; the exit code of the run."""
    from parley.runtime.report import failed_models, failure_reasons

    p = outcome.progress
    lag = max((x["p99_ms"] for x in outcome.loop_lag), default=0.0)
    console.print(
        f"{p.done} played now, {p.skipped} already done; {p.turns_per_s:,.0f} turns/s; "
        f"event-loop lag p99 {lag:,.0f} ms. Results: {outcome.folder.path} (report: {report})"
    )
    reasons = failure_reasons(outcome.records)
    if reasons:
        errors = sum(row[0] for row in reasons)
        every = f" (all in {report})" if isinstance(report, Path) else ""
        console.print(
            f"[red]{errors} episodes ended in error[/]; the top reasons{every}:",
            highlight=False,
            soft_wrap=True,
        )
        for n, head, where, _ in reasons[:5]:
            console.print(f"  {n:>5} × {head} ({', '.join(where)})", markup=False, soft_wrap=True)
    for error in outcome.errors:
        say_error(str(error))
    dead = failed_models(outcome.records)
    ended = [r for r in outcome.records if r["outcome"] != "cancelled"]
    if dead:
        say_error(f"every episode of {', '.join(dead)} ended in error: none of its episodes played")
    elif ended and all(r["outcome"] == "error" for r in ended):
        dead = ["the run"]  # a game or player that cannot start: nothing played at all
        say_error("every episode ended in error: none played")
    if reasons:
        console.print(
            f"once the cause is fixed, play them again with: {resume} --retry-errors",
            highlight=False,
            markup=False,
            soft_wrap=True,
        )
    return _run_exit(outcome, bool(dead), resume)


def _run_exit(outcome: RunOutcome, dead: bool, resume: str) -> int:
    """The exit code of ``parley run`` (and how to continue a run that did not finish);
    ``dead``: every episode of some model, or of the run, ended in error."""
    if outcome.errors:
        _say_resume("some episodes were not played; continue with:", resume)
        return EXIT_FAILED
    if outcome.stopped_by is not None:
        say_error(str(outcome.stopped_by))
        _say_resume("to continue anyway:", resume)
        return EXIT_TOO_MANY_ERRORS
    if outcome.interrupted:
        _say_resume("interrupted; continue with:", resume)
        return EXIT_INTERRUPTED
    if dead:
        return EXIT_MODEL_FAILED
    return 0


# Exit codes of `parley run` (docs/runtime.md, "Exit codes").
EXIT_FAILED = 1  # refused or stopped: folder in use, another config's folder, a write failed
EXIT_MODEL_FAILED = 3  # every episode of some model (or of the run) ended in error
EXIT_TOO_MANY_ERRORS = 4  # fail_on_error stopped the run
EXIT_INTERRUPTED = 130  # Ctrl-C or SIGTERM; the folder resumes


def _say_resume(what: str, command: str) -> None:
    console.print(f"[yellow]{what}[/] ", end="", highlight=False)
    console.print(command, highlight=False, markup=False, soft_wrap=True)


def resume_command(args: argparse.Namespace, out: Path) -> str:
    """The ``parley run`` command that continues this run: the same config, ``--set``
    overrides and every flag that changes what is played, where, or how it is watched and
    joined (a browser-seat run left without ``--dashboard`` waits for players forever); quoted
    for a POSIX shell."""
    parts = ["parley", "run", *command_words(args), "--out", str(out), "--resume"]
    for item in args.set:
        parts += ["--set", item]
    # With --credentials the bus URL comes from that file (and may hold its password).
    valued = ("workers", "credentials" if args.credentials else "bus", "concurrency", "limit")
    for flag in (*valued, "check_timeout", "log_every"):
        value = getattr(args, flag, None)
        if value is not None and value != "":
            parts += [
                f"--{flag.replace('_', '-')}",
                f"{value:g}" if isinstance(value, float) else str(value),
            ]
    dashboard = getattr(args, "dashboard", None)
    if dashboard is not None:  # 0: the config's port, as --dashboard alone gives
        parts += ["--dashboard", *([str(dashboard)] if dashboard else [])]
    for flag in ("no_check", "no_report", "quiet"):
        if getattr(args, flag, False):
            parts.append(f"--{flag.replace('_', '-')}")
    return shlex.join(parts)


async def serve_dashboard(
    scheduler: RunScheduler, config: ExperimentConfig, out: Path, args: argparse.Namespace
) -> Dashboard | None:
    """``parley run --dashboard``: serve the dashboard from the run's process, print its URL;
    None when it cannot be served (the run goes on without it)."""
    from parley.observability.dashboard.embed import start_embedded
    from parley.observability.dashboard.server import DashboardError

    port = args.dashboard or config.dashboard.port
    host = config.dashboard.host
    try:
        dashboard = await start_embedded(scheduler, out, name=config.name, host=host, port=port)
    except DashboardError as exc:
        console.print(f"[yellow]{exc}; the run goes on without it[/]", highlight=False)
        return None
    console.print(f"dashboard: {dashboard.url}", highlight=False, soft_wrap=True)
    # Human players at browser seats (docs/humans.md): a link for each, to hand to its person.
    seats = dashboard.seats
    planned = seats.plan(scheduler.options.run, scheduler.specs)
    if planned and getattr(scheduler, "bus", None) is None:
        console.print(
            "[yellow]human seats need the run's bus, which this dashboard does not see with "
            "worker processes: use workers: 1, or an MQTT bus and parley dashboard --bus "
            "(docs/humans.md)[/]",
            highlight=False,
            soft_wrap=True,
        )
    for seat in planned:
        if config.dashboard.seat_links:
            console.print(
                f"seat: {seat.role} of {seat.episode}: {seats.link(seat)}",
                highlight=False,
                soft_wrap=True,
            )
    return dashboard


def recording_failure(exc: BaseException) -> BaseException | None:
    """The :class:`RecordingFailed` behind ``exc`` (itself, or inside an exception group)."""
    from parley.runtime.results import RecordingFailed

    if isinstance(exc, RecordingFailed):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            found = recording_failure(inner)
            if found is not None:
                return found
    return None


async def bus_problem(url: str, timeout_s: float = 10.0) -> str | None:
    """Why the bus at ``url`` cannot be used, in one line naming the URL (its password
    masked) and the cause; ``None`` when it can (a local bus always can)."""
    from parley import bus as bus_module
    from parley.bus.mqtt import MqttBus, MqttConnectError
    from parley.runtime.config import masked_url

    shown = masked_url(url)
    try:
        bus = bus_module.connect(url)
    except ValueError as exc:
        return f"bus {shown}: {str(exc).replace(url, shown)}"
    if not isinstance(bus, MqttBus):
        return None
    try:
        # A refused or unknown address fails at once here; the MQTT client would retry it
        # until its connect timeout.
        _, writer = await asyncio.wait_for(asyncio.open_connection(bus.host, bus.port), timeout_s)
        writer.close()
    except ConnectionRefusedError:
        return f"cannot reach the broker at {shown}: connection refused (is it running?)"
    except TimeoutError:
        return f"cannot reach the broker at {shown}: no answer in {timeout_s:g} s"
    except OSError as exc:
        return f"cannot reach the broker at {shown}: {exc.strerror or exc}"
    try:
        await bus.start(timeout_s)
    except MqttConnectError as exc:
        return f"cannot connect to the broker at {shown}: {exc}"
    finally:
        await bus.close()
    return None


def _cmd_instances(args: argparse.Namespace) -> int:

    from parley.environments import registry
    from parley.runtime.config import settings_problems
    from parley.runtime.experiment import write_instances

    try:
        info = registry.get(args.game)
    except KeyError as exc:
        say_error(str(exc.args[0]))
        return 2
    values = _settings_given(args.set)
    assert info.settings is not None
    problems = settings_problems(args.game, info.settings, values, "--set")
    if problems:
        say_error(str(ConfigError(problems)))
        return 2
    settings = info.resolve_settings(values)
    seeds = range(args.start, args.start + args.count)
    instances = [info.instance(seed, settings) for seed in seeds]
    try:
        write_instances(args.out, instances)
    except OSError as exc:
        say_error(f"--out {args.out}: cannot write it ({exc.strerror or exc})")
        return 1
    console.print(f"wrote {args.count} {args.game} instances to {args.out}")
    return 0


def _positive(value: str) -> int:
    number = int(value) if value.isdigit() else 0
    if number < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of at least 1, got {value!r}")
    return number


def _settings_given(overrides: list[str]) -> dict[str, Any]:
    """``--set key=value`` settings of one game, values read as YAML (one line when not)."""
    from parley.runtime.config import override_value

    given = {}
    for item in overrides:
        key, _, value = item.partition("=")
        given[key] = override_value(item, value)
    return given


def _cmd_check_game(args: argparse.Namespace) -> int:
    import fnmatch

    from parley.environments import registry
    from parley.runtime.checkgame import check_game
    from parley.runtime.config import settings_problems

    games = registry.all_games()
    names: list[str] = []
    for pattern in args.game:
        matched = [name for name in games if fnmatch.fnmatchcase(name, pattern)]
        if not matched:
            say_error(f"no game matches {pattern!r}; {registry.known_games_hint()}")
            return 2
        names += [name for name in matched if name not in names]
    values = _settings_given(args.set)
    failed = []
    for name in names:
        info = games[name]
        assert info.settings is not None
        problems = settings_problems(name, info.settings, values, "--set")
        if problems:
            say_error(str(ConfigError(problems)))
            return 2
        report = check_game(info, args.seeds, values)
        table = Table(title=f"check-game {name} (seeds {', '.join(map(str, report.seeds))})")
        for column in ("check", "result", "detail"):
            table.add_column(column, overflow="fold")
        style = {"pass": "green", "FAIL": "bold red", "exempt": "yellow"}
        for result in report.results:
            detail = result.detail + (f"\nexempt: {result.exempt}" if result.exempt else "")
            table.add_row(result.name, f"[{style[result.status]}]{result.status}[/]", detail)
        out = Console(width=None if sys.stdout.isatty() else 160, highlight=False)
        out.print(table)
        if args.verbose:
            for note in report.notes:
                out.print(f"  {note}", markup=False)
        if not report.passed:
            failed.append(name)
    if len(names) > 1:
        console.print(f"{len(names) - len(failed)} of {len(names)} games pass")
    if failed:
        say_error(f"failed: {', '.join(failed)}")
        return 1
    return 0


def _cmd_games(args: argparse.Namespace) -> int:
    from parley.environments import registry

    header = ("game", "roles", "built-in players", "description")
    rows = [
        (
            name,
            ", ".join(info.roles),
            "; ".join(f"{role}: {', '.join(kinds)}" for role, kinds in info.players.items()),
            info.description,
        )
        for name, info in registry.all_games().items()
    ]
    if not sys.stdout.isatty():  # piped or in a file: whole lines, tab-separated, for grep/cut
        text = "".join(
            "\t".join(" ".join(c.split()) for c in row) + "\n" for row in (header, *rows)
        )
        try:
            sys.stdout.write(text)
            sys.stdout.flush()
        except BrokenPipeError:  # `parley games | head`: the reader had enough
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    table = Table(title="games")
    # A game's name is what one types: never cut it; the other columns wrap instead.
    longest = max((len(row[0]) for row in rows), default=4)
    table.add_column(header[0], no_wrap=True, min_width=longest)
    for column in header[1:]:
        table.add_column(column, overflow="fold")
    for row in rows:
        table.add_row(*row)
    Console(highlight=False).print(table)
    return 0


def _cmd_report(args: argparse.Namespace) -> int:
    from parley.runtime.report import write_report

    run = _run_folder(args.run)
    if run is None:
        return 2
    try:
        path = write_report(run)
    except OSError as exc:  # reading the folder, or writing report.md or a plot
        where = f" ({exc.filename})" if exc.filename else ""
        say_error(f"cannot make the report of {run}: {exc.strerror or exc}{where}")
        return 1
    print(path.read_text(encoding="utf-8"))  # not built twice: reading every transcript is slow
    console.print(f"written to {path}")
    return 0


def _cmd_export(args: argparse.Namespace) -> int:
    run = _run_folder(args.run)
    if run is None:
        return 2
    from parley.results import ExportError, export

    try:
        written = export(run, args.format, args.out)
    except ExportError as exc:
        say_error(str(exc))
        return 2
    for path in written:
        console.print(f"written {path}", highlight=False, soft_wrap=True)
    return 0


def _run_folder(value: str | None) -> Path | None:
    run = Path(value) if value else None
    if run is None:
        say_error("name a run folder (one with an episodes.jsonl)")
        return None
    if not (run / "episodes.jsonl").is_file():
        say_error(f"{run} is not a run folder (no episodes.jsonl file)")
        return None
    return run


def _analysed_folder(value: str | None) -> Path | None:
    """A run folder, or one rebuilt beside an exported trace set (observability/trace_runs.py)."""
    from parley.observability.trace_runs import (
        TraceSetError,
        default_folder,
        is_trace_set,
        materialise,
    )

    if not value or not is_trace_set(value):
        return _run_folder(value)
    try:
        folder = materialise(value, default_folder(value))
    except TraceSetError as exc:
        say_error(str(exc))
        return None
    console.print(f"read the episodes of trace set {value} (as a run folder: {folder})")
    return folder


def _cmd_traces(args: argparse.Namespace) -> int:
    import asyncio

    from parley.observability.otlp_json import ExportError, export, trace_files

    if not trace_files(args.run):
        say_error(f"{args.run} holds no traces (no traces.jsonl or OTLP JSON files)")
        return 2
    headers = dict(args.header)
    try:
        requests, spans = asyncio.run(
            export(args.run, args.otlp, protocol=args.protocol, headers=headers)
        )
    except ExportError as exc:
        say_error(str(exc))
        return 1
    console.print(f"sent {spans} spans in {requests} requests to {args.otlp}", highlight=False)
    return 0


def _cmd_leaks(args: argparse.Namespace) -> int:
    if args.eval is not None:
        from parley.observability.leaks import LabelledSetError, evaluate, load_labelled

        try:
            items = load_labelled(args.eval or None)
        except LabelledSetError as exc:
            say_error(f"--eval {exc}")
            return 2
        table = Table(title=f"leak detection on {len(items)} labelled utterances")
        for column in ("split", "method", "precision", "recall", "F1", "pairs"):
            table.add_column(column, justify="left" if column in ("split", "method") else "right")
        for split in (None, *sorted({i.get("split", "") for i in items} - {""})):
            scores = evaluate(items, split)
            for method in ("detector", "baseline"):
                s = scores[method]["all"]
                table.add_row(
                    split or "all",
                    "normalised" if method == "detector" else "substring (COMMA)",
                    f"{s.precision:.3f}",
                    f"{s.recall:.3f}",
                    f"{s.f1:.3f}",
                    str(s.tp + s.fp + s.fn + s.tn),
                )
        Console().print(table)
        return 0
    run = _analysed_folder(args.run)
    if run is None:
        return 2
    from parley.runtime.reports.analysis import leaks_text

    print(leaks_text(run, args.limit))
    return 0


def _cmd_errors(args: argparse.Namespace) -> int:
    run = _analysed_folder(args.run)
    if run is None:
        return 2
    from parley.runtime.reports.analysis import errors_text

    print(errors_text(run, args.limit))
    if not args.judge:
        return 0
    from pydantic import ValidationError

    from parley.agents.backends.client import ModelUnavailable
    from parley.agents.backends.spec import ModelSpec
    from parley.observability.judge import judge_run, write_verdicts
    from parley.runtime.reports.analysis import judge_text
    from parley.user_files import YamlFileError, read_mapping

    source = Path(args.models) if args.models else run / "config.yaml"
    try:
        loaded = read_mapping(source)
    except YamlFileError as exc:
        say_error(f"--models {source}: {exc}")
        return 2
    registry = loaded.get("models") or {}
    if args.judge not in registry:
        say_error(f"no model {args.judge!r} in the models of {source}")
        return 2
    try:  # only the judge's entry: the others are not needed here
        spec = ModelSpec.model_validate(registry[args.judge])
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(map(str, e['loc'])) or 'entry'}: {e['msg']}" for e in exc.errors()
        )
        say_error(f"model {args.judge} in {source}: {problems}")
        return 2
    if spec.launch is not None and not spec.base_urls:
        # launch: servers live only as long as the run that started them.
        say_error(
            f"model {args.judge} is started by a run (launch:) and has no base_url to "
            "judge with: serve it and give its base_url, or judge with another model"
        )
        return 2
    from parley.runtime.preflight import check_models

    # Checked once first, as a run checks its models: an unreachable judge is one line now,
    # not a minute of retries per episode and a file of "unjudged" over the last verdicts.
    failed = [
        c
        for c in event_loop.run(check_models({args.judge: spec}, {args.judge: False}))
        if c.status == "failed"
    ]
    if failed:
        check = failed[0]
        fix = f" ({check.fix})" if check.fix else ""
        say_error(f"the judge cannot be reached: {check.endpoint}: {check.detail}{fix}")
        return 1
    try:
        verdicts = event_loop.run(
            judge_run(
                run,
                args.judge,
                {args.judge: spec},
                failed_only=not args.all,
                concurrency=args.concurrency,
            )
        )
    except ModelUnavailable as exc:
        say_error(f"the judge cannot be reached: {exc}")
        return 1
    if not verdicts:
        which = "ended" if args.all else "lost or was aborted"
        console.print(f"no episode of {run} {which}: nothing to judge", markup=False)
        return 0
    if all(v.category == "unjudged" for v in verdicts):
        # It went away meanwhile: the verdicts of an earlier judging, if any, stay.
        say_error(f"the judge cannot be reached: {verdicts[0].error}")
        return 1
    path = write_verdicts(run, verdicts)
    print(judge_text(run, verdicts))
    console.print(f"verdicts written to {path}")
    return 0


def _seconds(value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        number = -1.0
    if not 0 < number < float("inf"):
        raise argparse.ArgumentTypeError(f"expected a number of seconds above 0, got {value!r}")
    return number


def _header(value: str) -> tuple[str, str]:
    name, equals, text = value.partition("=")
    if not equals or not name.strip():
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {value!r}")
    return name.strip(), text


def _port_from(lowest: int) -> Callable[[str], int]:
    """An argparse type: a port number from ``lowest`` to 65535."""

    def port(value: str) -> int:
        number = int(value) if value.isdigit() else -1
        if not lowest <= number <= 65535:
            raise argparse.ArgumentTypeError(
                f"expected a port number {lowest}-65535, got {value!r}"
            )
        return number

    return port


_port = _port_from(0)  # 0: any free one
# A port a broker listens on: one it can be told about (0, any free one, cannot be).
_listener_port = _port_from(1)


def _cmd_dashboard(args: argparse.Namespace) -> int:
    if args.export:
        from parley.observability.transcript_html import write_html

        run = _run_folder(args.export)
        if run is None:
            return 2
        index = write_html(run)
        console.print(f"episode pages written to {index.parent} (open {index})")
        return 0
    if args.credentials:  # parley broker --secure's file (dashboard, operator or coordinator)
        from parley.runtime.remote_worker import worker_url

        args.bus = worker_url(None, args.credentials)
    if not args.bus and not args.runs:
        say_error("parley dashboard needs --bus mqtt://host:port, --runs DIR, or both")
        return 2
    if args.runs and not Path(args.runs).is_dir():
        say_error(f"--runs {args.runs}: no such folder")
        return 2
    if args.runs:  # a newer parley's run folder would be misread: refused (main says why)
        from parley.records import check_folder

        for folder in [Path(args.runs), *Path(args.runs).iterdir()]:
            check_folder(folder)
    if args.bus:
        problem = event_loop.run(bus_problem(args.bus))
        if problem is not None:
            say_error(str(problem))
            return 1
    from parley.observability.dashboard.serve import serve

    return event_loop.run(serve(args.bus, args.runs, args.host, args.port, console.print))


def _cmd_broker(args: argparse.Namespace) -> int:
    if args.secure is None:
        if args.seat or args.rotate or args.revoke or args.host or args.hostname:
            say_error("--seat, --rotate, --revoke, --host and --hostname need --secure")
            return 2
        from parley.bus.broker import run_broker

        return run_broker(args.config, args.port)
    if args.config:
        say_error("--secure DIR writes its own config: leave out --config")
        return 2
    from parley.bus.secure import main as secure_broker

    return secure_broker(
        args.secure,
        host=args.host,
        port=args.port,
        hostnames=args.hostname,
        seat=args.seat,
        rotate=args.rotate,
        revoke=args.revoke,
    )


def _cmd_worker(args: argparse.Namespace) -> int:
    from parley.runtime.remote_worker import command

    return command(args)


def _cmd_sim_server(args: argparse.Namespace) -> int:
    from parley.agents.backends.simserver import run_from_args

    return run_from_args(args)


class _VersionAction(argparse.Action):
    """``parley --version``: the installed distribution's version, looked up only when asked
    (importlib.metadata is a costly import for every other command)."""

    def __init__(self, option_strings: list[str], dest: str, help: str | None = None) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, help=help)

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        import parley

        print(f"parley {parley.__version__}")
        parser.exit()


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The ``parley`` parser. ``command``: the subcommand about to run, where known; the
    arguments of ``worker`` and ``sim-server`` come from modules that import the whole runtime
    or a web server, so only that command's parser loads them (``parley run`` starts faster)."""
    parser = argparse.ArgumentParser(
        prog="parley", description="Play many multi-agent game episodes at once."
    )
    parser.add_argument(
        "--version", action=_VersionAction, help="print the installed parley's version and exit"
    )
    sub = parser.add_subparsers(dest="command", required=True)

    _add_run_command(sub)
    add_check_command(sub)  # parley check CONFIG
    from parley.runtime.plan import add_plan_command

    add_plan_command(sub)  # parley plan CONFIG

    _add_game_commands(sub)
    _add_run_folder_commands(sub)
    _add_dashboard_command(sub)
    _add_broker_command(sub)
    _add_process_commands(sub, command)

    from parley.agents.backends import cache as response_cache

    cache = sub.add_parser(
        "cache", help="the response cache of `cache: true` runs: stats or clear [PATH]"
    )
    response_cache.add_arguments(cache)
    cache.set_defaults(fn=response_cache.run_from_args)
    return parser


def _add_run_command(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``parley run``."""
    run = sub.add_parser(
        "run",
        help="run an experiment config, or games with a model (--model)",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_model_arguments(run)  # CONFIG | GAME …, --model, --base-url, --seeds, --pair
    run.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config field, e.g. --set games.0.seeds.count=5",
    )
    run.add_argument("--bus", help="bus URL: local (default) or mqtt://host:port")
    run.add_argument(
        "--concurrency", type=_positive, help="episodes at once (overrides the config)"
    )
    run.add_argument(
        "--workers",
        help="processes playing the episodes: a number, auto (one per core), or remote (parley "
        "worker processes over an MQTT --bus); overrides the config",
    )
    run.add_argument(
        "--credentials",
        metavar="FILE",
        help="connect with a credentials file from parley broker --secure (instead of --bus)",
    )
    run.add_argument(
        "--limit",
        type=_positive,
        metavar="N",
        help="play only the first N episodes of each game, in the run's order (a fair sample); "
        "a later --resume with a larger N, or none, plays the rest",
    )
    run.add_argument("--out", help="run folder (default runs/<name>)")
    run.add_argument(
        "--resume", action="store_true", help="continue a run folder, skipping finished episodes"
    )
    run.add_argument(
        "--retry-errors",
        action="store_true",
        help="resume, and play the episodes recorded as error again (the new record counts)",
    )
    run.add_argument(
        "--force-resume",
        action="store_true",
        help="resume a folder even though it was made by a config that asks for other episodes",
    )
    run.add_argument(
        "--log-every",
        type=_seconds,
        metavar="S",
        help="outside a terminal (nohup, Slurm): print a status line every S seconds (default 30)",
    )
    run.add_argument("--quiet", action="store_true", help="no live progress display")
    run.add_argument(
        "--no-report",
        action="store_true",
        help="write no report.md and print no summary table (later: parley report FOLDER)",
    )
    run.add_argument(
        "--dashboard",
        nargs="?",
        const=0,
        type=_port,
        metavar="PORT",
        help="serve the live dashboard from this run (default port: the config's, 8765)",
    )
    add_run_arguments(run)  # --no-check, --check-timeout
    run.set_defaults(fn=_cmd_run)


def _add_game_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``parley games``, ``check-game`` and ``instances``: the games themselves."""
    games = sub.add_parser("games", help="list the games and their roles")
    games.set_defaults(fn=_cmd_games)

    check = sub.add_parser(
        "check-game",
        help="check that a game keeps the contract (determinism, oracle wins, garbage replies, "
        "scores, observation data); exit 1 if not",
    )
    check.add_argument("game", nargs="+", help="game name or pattern, e.g. comma.wire or 'comma.*'")
    check.add_argument(
        "--seeds", type=_positive, default=3, help="seeds 0..N-1 to play (default 3)"
    )
    check.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="SETTING=VALUE",
        help="a game setting, e.g. --set variant=text",
    )
    check.add_argument(
        "-v", "--verbose", action="store_true", help="also list what could not be checked"
    )
    check.set_defaults(fn=_cmd_check_game)

    instances = sub.add_parser(
        "instances", help="write a game's instances for seeds to JSONL (for instances_file:)"
    )
    instances.add_argument("game", help="game name (see parley games)")
    instances.add_argument("--start", type=int, default=0, help="first seed (default 0)")
    instances.add_argument(
        "--count", type=_positive, default=10, help="how many seeds (default 10)"
    )
    instances.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="SETTING=VALUE",
        help="a game setting for the generator, e.g. --set variant=text",
    )
    instances.add_argument("--out", required=True, help="JSONL file to write")
    instances.set_defaults(fn=_cmd_instances)


def _add_run_folder_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The commands that read a run folder: ``report``, ``export``, ``leaks``, ``errors``,
    ``traces``."""
    report = sub.add_parser("report", help="print and write the report of a run folder")
    report.add_argument("run", help="run folder")
    report.set_defaults(fn=_cmd_report)

    export = sub.add_parser(
        "export", help="write a run's episodes and turns as tables (parquet or JSON Lines)"
    )
    export.add_argument("run", help="run folder")
    export.add_argument(
        "--format",
        choices=("parquet", "jsonl"),
        default="parquet",
        help="parquet (column types kept; needs pyarrow: pip install 'parley[parquet]') or jsonl "
        "(JSON Lines, nothing extra); default parquet",
    )
    export.add_argument("--out", help="folder to write into (default: RUN/export)")
    export.set_defaults(fn=_cmd_export)

    leaks = sub.add_parser(
        "leaks", help="private facts one role disclosed to another, per episode and pairing"
    )
    leaks.add_argument("run", nargs="?", help="run folder, or exported traces (OTLP JSON)")
    leaks.add_argument(
        "--limit", type=_positive, default=20, help="disclosures to list (default 20)"
    )
    leaks.add_argument(
        "--eval",
        nargs="?",
        const="",
        metavar="FILE",
        help="instead: precision/recall on a labelled set (default: the one shipped)",
    )
    leaks.set_defaults(fn=_cmd_leaks)

    errors = sub.add_parser("errors", help="error categories per model (rules; optional judge)")
    errors.add_argument("run", help="run folder, or exported traces (OTLP JSON)")
    errors.add_argument("--limit", type=_positive, default=20, help="findings to list (default 20)")
    errors.add_argument("--judge", metavar="MODEL", help="also ask this model (registry name)")
    errors.add_argument(
        "--models", help="YAML with a `models:` registry (default: the run's config.yaml)"
    )
    errors.add_argument(
        "--all", action="store_true", help="judge every episode, not only failed ones"
    )
    errors.add_argument("--concurrency", type=_positive, default=8, help="judge requests at once")
    errors.set_defaults(fn=_cmd_errors)

    traces = sub.add_parser("traces", help="a finished run's traces")
    traces_sub = traces.add_subparsers(dest="traces_command", required=True)
    traces_export = traces_sub.add_parser(
        "export", help="replay a run's traces to an OTLP/HTTP collector or viewer"
    )
    traces_export.add_argument("run", help="run folder, its traces.jsonl, or OTLP JSON files")
    traces_export.add_argument(
        "--otlp",
        required=True,
        metavar="URL",
        help="OTLP/HTTP endpoint, e.g. http://localhost:4318",
    )
    traces_export.add_argument(
        "--protocol",
        choices=("http/protobuf", "http/json"),
        default="http/protobuf",
        help="OTLP/HTTP encoding the endpoint takes (default http/protobuf)",
    )
    traces_export.add_argument(
        "--header",
        action="append",
        default=[],
        type=_header,
        metavar="K=V",
        help="HTTP header to send",
    )
    traces_export.set_defaults(fn=_cmd_traces)


def _add_dashboard_command(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``parley dashboard``."""
    dashboard = sub.add_parser(
        "dashboard", help="watch the runs on a broker, and finished runs in a folder, in a browser"
    )
    dashboard.add_argument("--bus", help="broker to watch every run on: mqtt://host:port")
    dashboard.add_argument("--runs", help="a folder of run folders (or one run folder) to show")
    dashboard.add_argument(
        "--credentials",
        metavar="FILE",
        help="watch through a credentials file from parley broker --secure (instead of --bus; "
        "keeps the password out of the process list)",
    )
    dashboard.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to serve on (default 127.0.0.1; any other needs the printed token)",
    )
    dashboard.add_argument(
        "--port", type=_port, default=8765, help="port (default 8765; 0: any free one)"
    )
    dashboard.add_argument(
        "--export",
        metavar="RUN",
        help="instead: write the episode pages of a run folder as static HTML (RUN/html/)",
    )
    dashboard.set_defaults(fn=_cmd_dashboard)


def _add_broker_command(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``parley broker``."""
    broker = sub.add_parser(
        "broker",
        help="start Mosquitto: anonymous on loopback (the project config), or with --secure DIR "
        "TLS, passwords and ACLs for a network (docs/security.md)",
        description="Without --secure: Mosquitto from configs/mosquitto.conf, listening on "
        "127.0.0.1 only and anonymous: every process of this machine may read and write every "
        "topic, private ones included. With --secure DIR: a TLS listener, a password per "
        "principal and ACLs, ready for a network (docs/security.md).",
    )
    broker.add_argument("--config", help="broker config (default configs/mosquitto.conf)")
    broker.add_argument(
        "--port", type=_listener_port, help="listener port (default 1883; --secure: 8883)"
    )
    broker.add_argument(
        "--secure",
        metavar="DIR",
        help="generate (or reuse) a CA, certificates, credentials and ACLs in DIR and start "
        "Mosquitto with TLS and passwords from there",
    )
    broker.add_argument("--host", help="--secure: address to listen on (default 127.0.0.1)")
    broker.add_argument(
        "--hostname",
        action="append",
        metavar="NAME",
        help="--secure: a name or address clients dial, for the certificate (repeatable; "
        "default localhost)",
    )
    broker.add_argument(
        "--seat",
        metavar="RUN/EPISODE/ROLE",
        help="--secure: issue credentials for one role of one episode (a human seat) and exit",
    )
    broker.add_argument(
        "--rotate",
        metavar="PRINCIPAL",
        help="--secure: a new password for coordinator, worker, dashboard, operator or a seat "
        "user, and exit",
    )
    broker.add_argument(
        "--revoke", metavar="USER", help="--secure: take a seat's credentials back, and exit"
    )
    broker.set_defaults(fn=_cmd_broker)


def _add_process_commands(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], command: str | None
) -> None:
    """``parley worker`` and ``sim-server``: their arguments only where ``command`` is theirs
    (or unknown), as :func:`build_parser` says."""
    worker = sub.add_parser(
        "worker",
        help="play the episodes of distributed runs (workers: remote) from a broker",
    )
    if command in (None, "worker"):
        from parley.runtime.remote_worker import add_arguments as worker_arguments

        worker_arguments(worker)
    worker.set_defaults(fn=_cmd_worker)

    sim = sub.add_parser(
        "sim-server",
        help="a stand-in model server (OpenAI and Anthropic APIs) for tests without GPUs or keys",
    )
    if command in (None, "sim-server"):
        from parley.agents.backends.simserver import add_arguments as sim_arguments

        sim_arguments(sim)
    sim.set_defaults(fn=_cmd_sim_server)


# The commands that list or play games: a game plugin that failed to load is named first
# (``run`` names it once its config is read).
GAME_COMMANDS = ("games", "check-game", "instances", "report", "worker", "check", "plan")


def _warn_broken_plugins() -> None:
    from parley.environments import registry

    for error in registry.plugin_errors():
        console.print(f"[yellow]warning: {error}[/]", highlight=False, markup=True)


def _command_of(argv: list[str]) -> str | None:
    """The subcommand named in ``argv`` (its first word that is not an option), if any."""
    return next((a for a in argv if not a.startswith("-")), None)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser(_command_of(argv))
    args = parser.parse_args(argv)
    if args.command in GAME_COMMANDS:
        _warn_broken_plugins()
    try:
        return int(args.fn(args) or 0)
    except ConfigError as exc:
        say_error(str(exc))
        return 2
    except NewerSchema as exc:  # any command reading a folder of a newer parley (resume too)
        say_error(str(exc))
        return 2
    except MemoryStoreError as exc:  # a run's memory_store: a damaged file, a folder …
        say_error(str(exc))
        return 1


if __name__ == "__main__":
    sys.exit(main())
