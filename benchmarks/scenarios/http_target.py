"""The HTTP target's own capacity: proof that it is not what limits the other figures.

No baseline and no target: it is a property of the bench, compared by eye with
`attempt_throughput` (it should be several times higher). The target process's CPU
use during the load is reported too: below one full core, it still had headroom.
"""

from __future__ import annotations

import time

import psutil

from benchmarks.context import BenchContext
from benchmarks.figures import Figure, FigureSpec
from benchmarks.harness import interleave
from benchmarks.scenario import Scenario
from benchmarks.target import measure_capacity

CAPACITY = FigureSpec("http_target_capacity", "req/s")


async def run(ctx: BenchContext) -> list[Figure]:
    scale = ctx.scale
    process = psutil.Process(ctx.target.pid)
    cpu_shares: list[float] = []

    async def load() -> float:
        before = process.cpu_times()
        started = time.monotonic()
        rate = await measure_capacity(
            ctx.target_url, connections=scale.target_connections, seconds=scale.target_seconds
        )
        after = process.cpu_times()
        busy = (after.user + after.system) - (before.user + before.system)
        cpu_shares.append(busy / (time.monotonic() - started))
        return rate

    results = await interleave(scale.pairs, [("load", load)])
    shares = cpu_shares[-scale.pairs :]
    note = (
        f"{scale.target_connections} keep-alive connections from a raw asyncio client in the "
        f"suite's process; target process CPU {min(shares):.0%}-{max(shares):.0%} of one core "
        "(the client shares the same 2 cores, so this is a floor on capacity)"
    )
    return [CAPACITY.figure(results["load"], note=note, target_cpu_share=max(shares))]


SCENARIO = Scenario("http_target", (CAPACITY,), run)
