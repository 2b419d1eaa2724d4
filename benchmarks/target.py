"""The HTTP target every benchmarked call goes to: raw asyncio HTTP/1.1 on loopback.

It runs as its own process (`python -m benchmarks.target`) so it never shares a core's
event loop with what is measured. It parses only what a keep-alive client needs
(request line, Content-Length, Connection: close) and answers at once:
`/loop...` with a body that keeps a looping job going, `/unavailable...` with a 503
(a failure that is retried), anything else with `ok`.
`measure_capacity` checks it is far from being the bottleneck.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
import time
from urllib.parse import urlsplit

OK_BODY = b"ok"
# `result.remaining` > 0: a looping job continues until its loop_max_iterations.
LOOP_BODY = b'{"result":{"remaining":1}}'
LOOP_PATH = "/loop"
UNAVAILABLE_PATH = "/unavailable"
MAX_HEAD = 64 * 1024  # bytes


def _response(body: bytes, content_type: bytes, status: bytes = b"200 OK") -> bytes:
    head = b"HTTP/1.1 %s\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n"
    return head % (status, content_type, len(body)) + body


_OK = _response(OK_BODY, b"text/plain")
_LOOP = _response(LOOP_BODY, b"application/json")
_UNAVAILABLE = _response(b"unavailable", b"text/plain", b"503 Service Unavailable")


def _answer(path: bytes) -> bytes:
    if path.startswith(LOOP_PATH.encode()):
        return _LOOP
    if path.startswith(UNAVAILABLE_PATH.encode()):
        return _UNAVAILABLE
    return _OK


async def _serve_connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            request_line, _, header_block = head.partition(b"\r\n")
            parts = request_line.split(b" ")
            path = parts[1] if len(parts) > 1 else b"/"
            length = 0
            close = False
            for line in header_block.split(b"\r\n"):
                name, _, value = line.partition(b":")
                lowered = name.strip().lower()
                if lowered == b"content-length":
                    length = int(value.strip() or b"0")
                elif lowered == b"connection" and value.strip().lower() == b"close":
                    close = True
            if length:
                await reader.readexactly(length)
            writer.write(_answer(path))
            if writer.transport.get_write_buffer_size() > MAX_HEAD:
                await writer.drain()
            if close:
                break
    except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError, ValueError):
        pass
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()


async def serve(host: str, port: int) -> None:
    """Serve until SIGTERM or SIGINT; print the bound address first (the parent waits on it)."""
    server = await asyncio.start_server(_serve_connection, host, port, backlog=1024)
    bound = server.sockets[0].getsockname()
    print(f"listening on http://{bound[0]}:{bound[1]}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with server:
        await stop.wait()


async def _hammer(host: str, port: int, path: str, deadline: float, counts: list[int]) -> None:
    reader, writer = await asyncio.open_connection(host, port)
    request = f"GET {path} HTTP/1.1\r\nHost: {host}\r\n\r\n".encode()
    done = 0
    try:
        while time.monotonic() < deadline:
            writer.write(request)
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n"):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":", 1)[1])
            await reader.readexactly(length)
            done += 1
    finally:
        counts.append(done)
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()


async def measure_capacity(base_url: str, *, connections: int, seconds: float) -> float:
    """Return requests/s the target answers to `connections` keep-alive clients in a row.

    The client is as lean as the server (raw asyncio), so the figure is a floor on the
    target's capacity on this machine, not httpx's.
    """
    parts = urlsplit(base_url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    counts: list[int] = []
    started = time.monotonic()
    deadline = started + seconds
    await asyncio.gather(*(_hammer(host, port, "/", deadline, counts) for _ in range(connections)))
    return sum(counts) / (time.monotonic() - started)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args(argv)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve(args.host, args.port))
    sys.exit(0)


if __name__ == "__main__":
    main()
