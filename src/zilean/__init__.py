"""Zilean: a self-hosted scheduled job runner whose every behaviour is a database row."""

from __future__ import annotations

__version__ = "0.1.0"
