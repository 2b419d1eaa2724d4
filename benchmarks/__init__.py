"""Zilean's benchmark suite (issue 7): throughput, loop rate, schedule lag, burst,
reconcile cost, API latency and footprint, each against a baseline run interleaved
with it on the same machine, the same Postgres and the same concurrency.

Run `python -m benchmarks --quick` (about 3 minutes) or `make bench`. The suite starts
its own embedded Postgres and HTTP target in a temporary directory and stops every
process it started on the way out. `scales.py` lists every size; `figures.py` what a
reported figure means (value, baseline, ratio, target, meets).
"""
