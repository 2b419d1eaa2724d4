"""HTTP jobs: build the request from the job row, send it once, describe what happened."""

from __future__ import annotations
