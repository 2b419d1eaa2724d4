"""The baselines' worker: bare Procrastinate, none of Zilean's attempt path.

Run as `python -m benchmarks.baseline_worker --queue Q --concurrency C` with
DATABASE_URL and BENCH_TARGET_URL set. It is built like `zilean worker` wherever the
comparison is not about Zilean's own work: the same queue app and pool size
(`create_queue_app`, concurrency + 2 connections), the same heartbeat interval, the same
logging set-up (so Procrastinate's own log lines cost both sides alike) and, for
`bench.http`, the same HTTP client. Tasks:

- `bench.noop`: returns at once (Procrastinate's own cost per job);
- `bench.http`: the GET an HTTP job makes, body read in full, nothing recorded;
- `bench.chain`: defers the next link until `remaining` reaches 1 (a loop's skeleton),
  after the same GET first when given a `url`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os

import procrastinate

from zilean.execution.queues import create_queue_app
from zilean.jobkinds.http.call import new_client
from zilean.logs import configure_logging
from zilean.services.engine import WORKER_HEARTBEAT_INTERVAL

NOOP_TASK = "bench.noop"
HTTP_TASK = "bench.http"
CHAIN_TASK = "bench.chain"
BASELINE_QUEUE = "bench-baseline"


def build_app(database_url: str, target_url: str, concurrency: int) -> procrastinate.App:
    app = create_queue_app(database_url, max_connections=concurrency + 2)
    client = new_client(max_connections=2 * concurrency)

    @app.task(name=NOOP_TASK)
    async def noop() -> None:
        return None

    @app.task(name=HTTP_TASK)
    async def http() -> None:
        response = await client.get(target_url)
        await response.aread()

    @app.task(name=CHAIN_TASK, pass_context=True)
    async def chain(
        context: procrastinate.JobContext, remaining: int, url: str | None = None
    ) -> None:
        if url is not None:
            response = await client.get(url)
            await response.aread()
        if remaining > 1:
            queue = context.job.queue
            await app.configure_task(CHAIN_TASK, queue=queue).defer_async(
                remaining=remaining - 1, url=url
            )

    del noop, http, chain  # registered on `app` by the decorators
    return app


async def run(queue: str, concurrency: int) -> None:
    app = build_app(os.environ["DATABASE_URL"], os.environ["BENCH_TARGET_URL"], concurrency)
    async with app.open_async():
        await app.run_worker_async(
            queues=[queue],
            name="bench-baseline",
            concurrency=concurrency,
            update_heartbeat_interval=WORKER_HEARTBEAT_INTERVAL,
            shutdown_graceful_timeout=5.0,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description="bare Procrastinate worker for baselines")
    parser.add_argument("--queue", default=BASELINE_QUEUE)
    parser.add_argument("--concurrency", type=int, required=True)
    args = parser.parse_args()
    configure_logging("bench-baseline")
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(run(args.queue, args.concurrency))


if __name__ == "__main__":
    main()
