"""The queue engine's boundary: PgQueuer 1.6's schema, and everything that knows it.

Nothing outside this package names PgQueuer's tables, status words or classes:
producers insert with `statements.enqueue`, the attempt's recording statement embeds
`statements.CONTINUATION_CTES`, workers consume with `consumer.QueueConsumer` (ours, not
PgQueuer's `QueueManager`, which only the raw-engine benchmark runs, via `stock.py`), and
monitoring and retention use `statements.queue_depth` and `sweep_finished_batch`. The
schema itself is applied by Alembic revision 0009. Moving to another engine means
rewriting this package and its tests (`tests/integration/test_queue_engine.py`), plus
a migration.

`docs/faults.md` says what the engine guarantees under faults and how it is measured.
"""
