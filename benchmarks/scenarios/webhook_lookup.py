"""webhook_lookup: whether a refused webhook call's timing tells a caller that a job exists.

The real `zilean webhook` serves a database holding one enabled webhook job and one
disabled one. Each round sends `webhook_requests` sequential calls of each kind, all
answered with the same 404: an unknown job id (the baseline), the real id with a wrong
token, the disabled job with its real token, and a malformed id, the kinds alternating
call by call in a random order. Each call comes from a
fresh address (X-Forwarded-For, trusted for the run) so the per-address limiter never
answers first. The figures are the median of the per-round p50s, and their ratio to the
unknown id's: a ratio near 1 means the answer's timing carries nothing to measure.
"""

from __future__ import annotations

import random
import secrets
import time
import uuid
from collections.abc import Callable

import httpx

from benchmarks.context import BenchContext
from benchmarks.figures import Figure, FigureSpec, On, at_most
from benchmarks.harness import BenchError, interleave
from benchmarks.scenario import Scenario
from benchmarks.seeding import api_client, create_job, http_job
from benchmarks.services import start_webhook
from benchmarks.stats import percentile
from zilean.db.engine import create_engine

# Within 10 % of the unknown id's p50, and the rounds' spread decides the rest.
WRONG_TOKEN = FigureSpec("webhook_wrong_token_404_p50", "ms", at_most(1.1, on=On.RATIO))
DISABLED = FigureSpec("webhook_disabled_job_404_p50", "ms", at_most(1.1, on=On.RATIO))
MALFORMED = FigureSpec("webhook_malformed_id_404_p50", "ms", at_most(1.1, on=On.RATIO))
NOT_FOUND = {"error": "webhook not found"}
BODY = b'{"event": "bench"}'


async def run(ctx: BenchContext) -> list[Figure]:
    url = ctx.postgres.clone("webhook")
    engine = create_engine(url)
    try:
        async with api_client(engine, url, ctx.postgres.session) as client:
            target = ctx.target_url + "/"
            live = await create_job(client, **http_job("hook", target, schedule_type="webhook"))
            off = await create_job(
                client, **http_job("hook off", target, schedule_type="webhook", enabled=False)
            )
        with ctx.processes.scope():
            _, base_url = await start_webhook(ctx.processes, url)
            paths = {
                "unknown": lambda: f"/api/webhooks/{uuid.uuid4()}/{secrets.token_urlsafe(32)}",
                "wrong_token": lambda: f"/api/webhooks/{live['id']}/{secrets.token_urlsafe(32)}",
                "disabled": lambda: f"/api/webhooks/{off['id']}/{off['webhook_token']}",
                "malformed": lambda: f"/api/webhooks/not-a-uuid/{secrets.token_urlsafe(32)}",
            }
            results = await _measure(ctx, base_url, paths)
    finally:
        await engine.dispose()
        ctx.postgres.drop(url)
    note = (
        f"{ctx.scale.webhook_requests} sequential calls per kind per round, the kinds "
        "alternating, over loopback to `zilean webhook`, each from its own address; "
        "baseline: an unknown job id"
    )
    baseline = results["unknown"]
    return [
        WRONG_TOKEN.figure(results["wrong_token"], baseline, note=note),
        DISABLED.figure(results["disabled"], baseline, note=note),
        MALFORMED.figure(results["malformed"], baseline, note=note),
    ]


async def _measure(
    ctx: BenchContext, base_url: str, paths: dict[str, Callable[[], str]]
) -> dict[str, list[float]]:
    """Each round's p50 per kind. The kinds alternate call by call, in a fresh random
    order each time, so load that comes and goes on the machine lands on all of them."""
    headers = {"Content-Type": "application/json"}
    address = iter(range(1, 1 << 24))
    rng = random.Random(7)  # noqa: S311 - an order of calls, not a secret
    async with httpx.AsyncClient(base_url=base_url, timeout=10.0) as client:

        async def call(path: str) -> float:
            n = next(address)
            forwarded = f"10.{n >> 16 & 255}.{n >> 8 & 255}.{n & 255}"
            started = time.perf_counter()
            response = await client.post(
                path, content=BODY, headers={**headers, "X-Forwarded-For": forwarded}
            )
            elapsed = (time.perf_counter() - started) * 1000.0
            if response.status_code != 404 or response.json() != NOT_FOUND:
                raise BenchError(f"a refused call answered {response.status_code}: {response.text}")
            return elapsed

        async def round_p50s() -> dict[str, float]:
            times: dict[str, list[float]] = {kind: [] for kind in paths}
            kinds = list(paths)
            for _ in range(ctx.scale.webhook_requests):
                rng.shuffle(kinds)
                for kind in kinds:
                    times[kind].append(await call(paths[kind]()))
            return {kind: percentile(values, 50) for kind, values in times.items()}

        rounds = (await interleave(ctx.scale.pairs, [("round", round_p50s)]))["round"]
    return {kind: [each[kind] for each in rounds] for kind in paths}


SCENARIO = Scenario("webhook_lookup", (WRONG_TOKEN, DISABLED, MALFORMED), run)
