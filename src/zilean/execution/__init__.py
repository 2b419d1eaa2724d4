"""Attempt orchestration: queues, loop, retry, pooling and overlap locks."""
