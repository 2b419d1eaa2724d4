"""The scenarios of issue 7, one module each, in the order the suite runs them.

Each module exposes `SCENARIO` (see `benchmarks/scenario.py`).
"""

from __future__ import annotations

from benchmarks.scenario import Scenario


def all_scenarios() -> list[Scenario]:
    """Return every scenario; imported lazily so `--help` stays instant."""
    from benchmarks.scenarios import (
        api_latency,
        attempt_throughput,
        burst,
        delay_precision,
        footprint,
        http_target,
        loop_rate,
        reconcile_cost,
        scale_out,
        schedule_lag,
        script_throughput,
        webhook_lookup,
    )

    return [
        http_target.SCENARIO,
        attempt_throughput.SCENARIO,
        scale_out.SCENARIO,
        loop_rate.SCENARIO,
        delay_precision.SCENARIO,
        schedule_lag.SCENARIO,
        burst.SCENARIO,
        reconcile_cost.SCENARIO,
        api_latency.SCENARIO,
        footprint.SCENARIO,
        script_throughput.SCENARIO,
        webhook_lookup.SCENARIO,
    ]
