"""What every scenario receives: the shared Postgres, the HTTP target, the scale."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import psutil

from benchmarks.cpu import CpuMeter, postgres_processes
from benchmarks.postgres import BenchPostgres
from benchmarks.processes import ManagedProcess, Processes
from benchmarks.scales import Scale


@dataclass
class BenchContext:
    postgres: BenchPostgres
    processes: Processes
    target: ManagedProcess
    target_url: str
    scale: Scale
    workdir: Path

    def cpu_meter(self, unit: str = "attempt", **services: ManagedProcess) -> CpuMeter:
        """A meter over `services`, Postgres, the HTTP target and the suite's own process."""
        postmaster = self.postgres.postmaster_pid()
        groups = {name: _tree(process) for name, process in services.items()}
        if postmaster is not None:
            groups["postgres"] = lambda: postgres_processes(postmaster)
        groups["target"] = _tree(self.target)
        suite = psutil.Process()
        groups["suite"] = lambda: [suite]
        return CpuMeter(groups, unit)


def _tree(process: ManagedProcess) -> Callable[[], list[psutil.Process]]:
    def get() -> list[psutil.Process]:
        try:
            return [process.process(), *process.children()]
        except psutil.Error:
            return []

    return get
