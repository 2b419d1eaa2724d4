"""Zilean: a self-hosted scheduled job runner whose every behaviour is a database row."""

from __future__ import annotations

import sys

__version__ = "0.1.0"

# httpx imports its command-line tool on import, and with it click, and pygments and rich
# when they are installed: about 2 MiB in every process, for a CLI we never run. Marking
# the module absent makes httpx fall back to its stub, as it does without those packages.
sys.modules.setdefault("httpx._main", None)  # type: ignore[arg-type]
