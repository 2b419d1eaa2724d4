"""Every scale parameter of every scenario, in one place: the full run and `--quick`.

Every scenario runs one warm-up round (dropped), then `pairs` interleaved rounds.
`--quick` keeps each target's own conditions wherever they are cheap (1,000 and 10,000
jobs for schedule lag and reconcile cost, 1,000 jobs with 24 h of buckets for the API,
both delays of delay_precision) and shrinks what only buys precision: 3 pairs instead
of 5, 300 attempts per throughput round instead of 1,000, 3 s lag windows instead of
5, fewer delay runs and shorter chains, 3 requests per route instead of 10, shorter RSS
sampling. Where it shrinks a target's own condition, the figure's note says so: the
loop runs 200 iterations instead of 1,000, and the burst fires 1,000 jobs instead of
10,000, its seconds scaled linearly to 10,000.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Scale:
    pairs: int  # interleaved (baseline, subject) rounds per scenario, after one warm-up
    concurrency: int = 20  # WORKER_MAX_CONCURRENCY for `zilean worker` and the baselines
    # http_target: seconds of load per round, and keep-alive connections
    target_seconds: float = 1.0
    target_connections: int = 20
    # attempt_throughput, scale_out and script_throughput: jobs fired by run-now per
    # round, each with `throughput_pool` members
    throughput_jobs: int = 100
    throughput_pool: int = 10
    # loop_rate: iterations of one looping run (the figure is 1,000), and the
    # subject worker's concurrency (one run loops, so it uses one slot at a time)
    loop_iterations: int = 1_000
    loop_concurrency: int = 20
    # schedule_lag: registered jobs (a tenth due every second), seconds of warm-up, of each
    # window, and of draining the worker after core stops (what is left counts censored)
    lag_sizes: tuple[int, ...] = (1_000, 10_000)
    lag_warmup: float = 3.0
    lag_window: float = 5.0
    lag_drain: float = 10.0
    # burst: jobs due at the same instant (the figure is 10,000)
    burst_jobs: int = 10_000
    # reconcile_cost: registered jobs, and idle ticks timed per round
    reconcile_sizes: tuple[int, ...] = (1_000, 10_000)
    reconcile_ticks: int = 20
    # api_latency: jobs, hours of one-minute buckets each, and requests per route per round
    api_jobs: int = 1_000
    api_hours: int = 24
    api_requests: int = 10
    # webhook_lookup: refused calls per kind per round
    webhook_requests: int = 200
    # footprint: seconds of RSS sampling per round, idle and under load (script_throughput
    # samples idle as long, and under load through each batch)
    footprint_idle: float = 1.0
    footprint_load: float = 4.0
    # delay_precision: runs per (kind, delay), seconds each run's continuations span (a
    # run of delay d makes 1 + chain // d attempts), seconds its firings are spread over
    delay_jobs: int = 10
    delay_chain: float = 6.0
    delay_stagger: float = 1.0

    def delay_attempts(self, delay_ms: int) -> int:
        """Attempts per delay_precision run whose continuations wait `delay_ms` each."""
        return 1 + int(self.delay_chain * 1000) // delay_ms


FULL = Scale(pairs=5)
QUICK = Scale(
    pairs=3,
    target_seconds=0.5,
    throughput_jobs=30,
    loop_iterations=200,
    lag_warmup=2.0,
    lag_window=3.0,
    lag_drain=5.0,
    burst_jobs=1_000,
    reconcile_ticks=5,
    api_requests=3,
    webhook_requests=50,
    footprint_idle=0.5,
    footprint_load=2.0,
    delay_jobs=6,
    delay_chain=3.0,
)
