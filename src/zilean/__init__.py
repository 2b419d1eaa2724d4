"""Zilean: a self-hosted scheduled job runner whose every behaviour is a database row."""

from __future__ import annotations

import sys

__version__ = "0.1.0"

# `rich` is installed only because PgQueuer's command-line tool needs it; structlog would
# import it (with pygments) in every process for its pretty tracebacks, about 4 MiB each.
# Marking it absent makes structlog use its plain ones, as it does without the package.
sys.modules.setdefault("rich", None)  # type: ignore[arg-type]
