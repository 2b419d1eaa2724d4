"""Zilean's benchmark suite (issue 7): throughput, scale-out, loop rate, delay precision,
schedule lag, burst, reconcile cost, API latency and footprint, each against a baseline
run interleaved with it on the same machine, the same Postgres and the same concurrency:
the limit (`raw_queue.py`), the alternative (`alternative.py`) or the raw engine
(`raw_engine.py`), each a process of its own; docs/performance.md says which is which.

Run `python -m benchmarks --quick` (about 4 minutes) or `make bench`. The suite starts
its own embedded Postgres and HTTP target in a temporary directory and stops every
process it started on the way out. `scales.py` lists every size; `figures.py` what a
reported figure means (value, baseline, ratio, target, meets).
"""
