"""`python -m benchmarks [--quick] [--json PATH] [--only NAME ...]`: run the suite, print the table.

The run owns a temporary directory (embedded Postgres data, one log file per child
process). Whatever happens (success, a failed scenario, Ctrl-C, SIGTERM) every child
is stopped, then Postgres, then the directory is removed; when a scenario failed, the
logs are kept and their path printed. The exit status is 0 when every figure was
measured, met or not; 1 when some could not be; 130 when interrupted.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import shutil
import signal
import sys
import tempfile
import time
import traceback
from collections.abc import Sequence
from pathlib import Path

from benchmarks.context import BenchContext
from benchmarks.figures import Figure
from benchmarks.harness import say
from benchmarks.postgres import BenchPostgres, bench_postgres
from benchmarks.processes import Processes
from benchmarks.report import render_table, write_json
from benchmarks.scales import FULL, QUICK, Scale
from benchmarks.scenario import Scenario
from benchmarks.scenarios import all_scenarios
from benchmarks.services import start_target
from zilean.logs import configure_logging

EXIT_UNMEASURED = 1  # some figure could not be measured (missing a target is not an error)
EXIT_INTERRUPTED = 130


def parse_args(argv: Sequence[str] | None, names: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks", description="Zilean's benchmark suite (issue 7)."
    )
    parser.add_argument(
        "--quick", action="store_true", help="3 pairs and smaller scales (see benchmarks/scales.py)"
    )
    parser.add_argument("--json", type=Path, metavar="PATH", help="also write the figures here")
    parser.add_argument(
        "--only", nargs="+", metavar="NAME", choices=list(names), help="run only these scenarios"
    )
    return parser.parse_args(argv)


async def run_suite(
    scenarios: Sequence[Scenario],
    postgres: BenchPostgres,
    processes: Processes,
    scale: Scale,
    workdir: Path,
    figures: list[Figure],
) -> bool:
    """Run each scenario in turn, appending its figures; return whether all of them ran."""
    target, target_url = await start_target(processes)
    ctx = BenchContext(postgres, processes, target, target_url, scale, workdir)
    clean = True
    for scenario in scenarios:
        say(f"{scenario.name} ...")
        started = time.monotonic()
        try:
            produced = await scenario.run(ctx)
        except Exception as exc:
            clean = False
            say(f"{scenario.name} failed: {type(exc).__name__}: {exc}")
            traceback.print_exc(file=sys.stderr)
            produced = scenario.failed(f"{type(exc).__name__}: {exc}".splitlines()[0])
        figures.extend(produced)
        say(f"{scenario.name} done in {time.monotonic() - started:.1f} s")
    return clean


def main(argv: Sequence[str] | None = None) -> int:
    scenarios = all_scenarios()
    args = parse_args(argv, [s.name for s in scenarios])
    if args.only:
        scenarios = [s for s in scenarios if s.name in args.only]
    scale = QUICK if args.quick else FULL
    # Zilean's modules log through structlog; keep their chatter off the table.
    configure_logging("bench")
    logging.getLogger().setLevel(logging.WARNING)
    # SIGTERM takes the same road as Ctrl-C, through every clean-up below.
    signal.signal(signal.SIGTERM, signal.default_int_handler)

    workdir = Path(tempfile.mkdtemp(prefix="zilean-bench-"))
    logs = workdir / "logs"
    logs.mkdir()
    processes = Processes(logs)
    figures: list[Figure] = []
    clean = False
    interrupted = False
    started = time.monotonic()
    mode = "quick" if args.quick else "full"
    say(f"{mode} run, {scale.pairs} pairs per scenario, work directory {workdir}")
    try:
        with bench_postgres(workdir) as postgres:
            try:
                clean = asyncio.run(
                    run_suite(scenarios, postgres, processes, scale, workdir, figures)
                )
            finally:
                processes.stop_all()
    except KeyboardInterrupt:
        interrupted = True
        say("interrupted; every process stopped")
    finally:
        processes.stop_all()
        shutil.rmtree(workdir / "pgdata", ignore_errors=True)
        if clean:
            shutil.rmtree(workdir, ignore_errors=True)
        else:
            say(f"child process logs kept in {logs}")
    wall = time.monotonic() - started
    print(render_table(figures))
    print(f"\n{mode} run: {len(figures)} figures in {wall:.0f} s wall time")
    if args.json is not None:
        write_json(args.json, figures)
        print(f"JSON written to {args.json}")
    if interrupted:
        return EXIT_INTERRUPTED
    unmeasured = [figure.name for figure in figures if figure.value is None]
    if unmeasured:
        print(f"not measured: {', '.join(unmeasured)}")
        return EXIT_UNMEASURED
    return 0
