"""Group commit: what arrives while a statement is in flight goes together in the next."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import psycopg
import pytest

from zilean.execution.batching import StatementBatcher


class Recorder:
    """A `send` that records each batch and can be held open or made to fail."""

    def __init__(self) -> None:
        self.batches: list[list[int]] = []
        self.release = asyncio.Event()
        self.release.set()
        self.bad: set[int] = set()
        self.unreachable = False

    async def send(self, items: Sequence[int]) -> list[int]:
        self.batches.append(list(items))
        await self.release.wait()
        if self.unreachable:
            raise psycopg.OperationalError("connection refused")
        if self.bad & set(items):
            raise psycopg.errors.DataError("a bad value")
        return [item * 10 for item in items]


async def test_a_lone_item_is_sent_at_once_by_itself() -> None:
    sent = Recorder()
    batcher = StatementBatcher(sent.send, max_batch=10, max_in_flight=2)
    assert await batcher.submit(7) == 70
    assert sent.batches == [[7]]


async def test_items_submitted_together_share_one_statement() -> None:
    sent = Recorder()
    batcher = StatementBatcher(sent.send, max_batch=10, max_in_flight=2)
    assert await asyncio.gather(*(batcher.submit(n) for n in range(5))) == [0, 10, 20, 30, 40]
    assert sent.batches == [[0, 1, 2, 3, 4]]


async def test_while_statements_are_in_flight_new_items_wait_for_the_next_one() -> None:
    sent = Recorder()
    batcher = StatementBatcher(sent.send, max_batch=3, max_in_flight=1)
    sent.release.clear()
    first = asyncio.ensure_future(batcher.submit(1))
    await asyncio.sleep(0)  # its statement starts
    await asyncio.sleep(0)
    later = [asyncio.ensure_future(batcher.submit(n)) for n in range(2, 7)]
    await asyncio.sleep(0)
    assert sent.batches == [[1]]  # one in flight: the others wait
    sent.release.set()
    assert await asyncio.gather(first, *later) == [10, 20, 30, 40, 50, 60]
    assert sent.batches == [[1], [2, 3, 4], [5, 6]]  # then at most `max_batch` a statement
    assert (batcher.batches_sent, batcher.items_sent) == (3, 6)


async def test_one_bad_item_fails_alone() -> None:
    sent = Recorder()
    sent.bad = {3}
    batcher = StatementBatcher(sent.send, max_batch=10, max_in_flight=1)
    results = await asyncio.gather(
        *(batcher.submit(n) for n in (1, 2, 3, 4)), return_exceptions=True
    )
    assert results[:2] == [10, 20]
    assert results[3] == 40
    assert isinstance(results[2], psycopg.errors.DataError)
    assert sent.batches == [[1, 2, 3, 4], [1], [2], [3], [4]]  # sent again one by one


async def test_an_unreachable_database_fails_every_item_of_the_batch() -> None:
    sent = Recorder()
    sent.unreachable = True
    batcher = StatementBatcher(sent.send, max_batch=10, max_in_flight=1)
    results = await asyncio.gather(*(batcher.submit(n) for n in (1, 2)), return_exceptions=True)
    assert all(isinstance(result, psycopg.OperationalError) for result in results)
    assert sent.batches == [[1, 2]]  # not resent one by one: it would fail the same way


async def test_the_batcher_keeps_working_after_a_failure() -> None:
    sent = Recorder()
    sent.unreachable = True
    batcher = StatementBatcher(sent.send, max_batch=10, max_in_flight=1)
    with pytest.raises(psycopg.OperationalError):
        await batcher.submit(1)
    sent.unreachable = False
    assert await batcher.submit(2) == 20
