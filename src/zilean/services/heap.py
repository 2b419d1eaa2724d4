"""A worker's start-up objects, set aside from the garbage collector.

Imports and start-up leave tens of thousands of objects that live as long as the
process, and CPython's full collection walks every one of them each time, with the
event loop stopped: about 50 ms per collection in the HTTP worker under load, a few
times a minute (docs/performance.md), which is that much lateness for every attempt
due meanwhile. Frozen, they are never walked again, and a full collection covers only
what the worker allocated since (about 20 ms there).

Only the workers freeze. A frozen heap also makes full collections more frequent (one
comes once the surviving objects grow by a quarter of those not frozen), and with core
frozen too, schedule lag at 10,000 jobs was 8-15 % higher in each of four alternated
runs: within this machine's noise, but with no gain measured there to set against it.
"""

from __future__ import annotations

import gc

_frozen = False  # this process's heap was frozen already


def freeze_startup_heap() -> None:
    """Collect start-up's garbage, then exempt everything still alive from collection.

    Call when start-up is done and before the worker takes work. Only the first call in
    a process freezes: `zilean up` runs several script workers in one process, and a
    later one's call would freeze what the others' running attempts hold, which would
    then never be freed.
    """
    global _frozen
    if _frozen:
        return
    _frozen = True
    gc.collect()
    gc.freeze()
