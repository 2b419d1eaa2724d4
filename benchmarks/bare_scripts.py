"""The script baseline: the least a Python process can do to run a script file many times.

One process, one asyncio loop, no database and no queue. Each run gets what Zilean's
runner gives it at least: a fresh temporary directory holding the body in a 0600 file,
`bash <file>` started there as an asyncio subprocess with stdin closed and stdout and
stderr read to the end, the directory removed afterwards. Left out: the job row, the
environment built per job, the process-group kill, the output cap, the history and
everything the queue does.

`--loop asyncio` is the standard library's loop (its subprocesses go through
`subprocess.Popen`, which uses vfork here, and a thread per child waits for it);
`--loop uvloop` is the loop Zilean's workers run on, whose libuv spawns and reaps
children its own way. Measured against both, the subject's gap splits into what the
event loop costs and what the rest of Zilean costs.

It runs `--count` scripts, `--concurrency` at a time, each time it receives SIGUSR1,
and prints `round K: N scripts, F failed, S s` (S from the signal to the last removed
directory, on the monotonic clock). Run as `python -m benchmarks.bare_scripts --loop L
--count N --concurrency C --body 'exit 0'`; it prints `ready` once it waits for the first
signal.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import signal
import tempfile
import time
from pathlib import Path

LOOPS = ("asyncio", "uvloop")
READY = "ready"
SIGNAL = signal.SIGUSR1  # starts a round
ROUND_LINE = r"(?m)^round {number}: (\d+) scripts, (\d+) failed, ([0-9.]+) s$"


def write_script(body: str) -> Path:
    """Write `body` to a new 0600 file in a new directory, synchronously as the runner does."""
    script = Path(tempfile.mkdtemp(prefix="bench-run-")) / "script.sh"
    script.touch(mode=0o600, exist_ok=False)
    script.write_text(body)
    return script


async def run_once(bash: str, body: str, env: dict[str, str]) -> bool:
    """Write `body` to a file of its own, run it with bash; return whether it exited 0."""
    script = write_script(body)
    run_dir = script.parent
    try:
        process = await asyncio.create_subprocess_exec(
            bash,
            str(script),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=env,
            cwd=run_dir,
        )
        await process.communicate()
        return process.returncode == 0
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)


async def run_round(bash: str, body: str, count: int, concurrency: int) -> int:
    """Run `count` scripts, at most `concurrency` at once; return how many failed."""
    env = {"PATH": os.environ.get("PATH", os.defpath)}
    left = count
    failed = 0

    async def lane() -> None:
        nonlocal left, failed
        while left > 0:
            left -= 1
            if not await run_once(bash, body, env):
                failed += 1

    await asyncio.gather(*(lane() for _ in range(concurrency)))
    return failed


async def serve(body: str, count: int, concurrency: int) -> None:
    bash = shutil.which("bash")
    if bash is None:
        raise SystemExit("bash not found on PATH")
    loop = asyncio.get_running_loop()
    go: asyncio.Queue[float] = asyncio.Queue()
    loop.add_signal_handler(SIGNAL, lambda: go.put_nowait(time.monotonic()))
    stop = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    print(READY, flush=True)
    number = 0
    while True:
        signalled = asyncio.ensure_future(go.get())
        stopped = asyncio.ensure_future(stop.wait())
        await asyncio.wait({signalled, stopped}, return_when=asyncio.FIRST_COMPLETED)
        if stop.is_set():
            signalled.cancel()
            return
        stopped.cancel()
        started = signalled.result()
        failed = await run_round(bash, body, count, concurrency)
        number += 1
        elapsed = time.monotonic() - started
        print(f"round {number}: {count} scripts, {failed} failed, {elapsed:.6f} s", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bare_scripts")
    parser.add_argument("--loop", choices=LOOPS, required=True)
    parser.add_argument("--count", type=int, required=True)
    parser.add_argument("--concurrency", type=int, required=True)
    parser.add_argument("--body", required=True)
    args = parser.parse_args()
    served = serve(args.body, args.count, args.concurrency)
    if args.loop == "uvloop":
        import uvloop

        uvloop.run(served)
    else:
        asyncio.run(served)


if __name__ == "__main__":
    main()
