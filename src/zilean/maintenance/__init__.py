"""Core's daily retention sweeps and the queue-job retention setting."""

from __future__ import annotations
