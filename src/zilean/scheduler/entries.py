"""The scheduler's in-memory entries and the queue that orders them by due time."""

from __future__ import annotations

import heapq
import itertools
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import NamedTuple

from zilean.schedules import Schedule, ScheduleType, is_every, load_zone, parse_schedule


class EntryKey(NamedTuple):
    """What an entry's timing depends on; an unchanged key keeps the entry and its next time.

    `zone` is the resolved zone name for wall-clock cron rows (the job's own or the
    process zone) and empty for `@every` rows of either type, whose elapsed-time
    intervals ignore zones: a zone edit on such a job does not restart its interval.
    """

    schedule_type: str
    expression: str
    zone: str

    @property
    def wall_clock(self) -> bool:
        """Whether the schedule follows a zone's clock (cron) rather than elapsed time."""
        return bool(self.zone)


def entry_key(schedule_type: str, expression: str, timezone: str, default_zone: str) -> EntryKey:
    """Return the key for a stored row; an empty `timezone` means the process zone."""
    wall_clock = schedule_type == ScheduleType.CRON and not is_every(expression)
    return EntryKey(schedule_type, expression, (timezone or default_zone) if wall_clock else "")


def build_schedule(key: EntryKey) -> Schedule:
    """Parse the schedule a key describes, or raise ScheduleError as the API would.

    Cron schedules come from `compile_cron`'s cache, so each distinct (expression, zone)
    is parsed once however many jobs share it.
    """
    zone = load_zone(key.zone or "UTC")
    return parse_schedule(key.schedule_type, key.expression, timezone=zone)


class NextFires:
    """Next fire times memoized per (key, after) for one pass over many entries.

    Jobs sharing a schedule are added (reconcile) or advanced (a firing batch) from the
    same instant, so each distinct expression's next time is computed once per pass.
    """

    def __init__(self) -> None:
        self._memo: dict[tuple[EntryKey, datetime], datetime | None] = {}

    def after(self, key: EntryKey, schedule: Schedule, after: datetime) -> datetime | None:
        memo_key = (key, after)
        try:
            return self._memo[memo_key]
        except KeyError:
            value = self._memo[memo_key] = schedule.next_fire(after)
            return value


@dataclass(eq=False, slots=True)
class Entry:
    """One cron or rate job the scheduler will fire.

    `next_fire` is the instant the next firing is for (the `job_firings` key); None
    when the schedule never fires again. `due_at` is when to try it, later than
    `next_fire` only while a failed firing waits to be retried.
    """

    job_id: uuid.UUID
    key: EntryKey
    schedule: Schedule
    next_fire: datetime | None
    due_at: datetime | None = None
    # Heap bookkeeping: the sequence number of this entry's live heap item, -1 for none.
    seq: int = field(default=-1, repr=False)


class DueQueue:
    """Entries ordered by `due_at`: a heap with lazy deletion.

    Rescheduling or dropping an entry does not search the heap; its old item is left
    behind and recognised as stale (its sequence number no longer matches) when it
    reaches the top. `compact` rebuilds the heap once stale items pile up.
    """

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, Entry]] = []
        self._numbers = itertools.count()

    def __len__(self) -> int:
        return len(self._heap)

    def put(self, entry: Entry, due_at: datetime | None) -> None:
        """(Re)schedule `entry` to be due at `due_at`; None takes it off the queue."""
        entry.due_at = due_at
        if due_at is None:
            entry.seq = -1
            return
        entry.seq = next(self._numbers)
        heapq.heappush(self._heap, (due_at.timestamp(), entry.seq, entry))

    @staticmethod
    def drop(entry: Entry) -> None:
        entry.seq = -1

    def _discard_stale(self) -> None:
        heap = self._heap
        while heap and heap[0][2].seq != heap[0][1]:
            heapq.heappop(heap)

    def next_due(self) -> float | None:
        """Return the earliest due time as a POSIX timestamp, or None when nothing is queued."""
        self._discard_stale()
        return self._heap[0][0] if self._heap else None

    def pop_due(self, now: datetime, limit: int) -> list[Entry]:
        """Take up to `limit` entries due at or before `now`, earliest first."""
        cutoff = now.timestamp()
        taken: list[Entry] = []
        heap = self._heap
        while len(taken) < limit:
            self._discard_stale()
            if not heap or heap[0][0] > cutoff:
                break
            _, _, entry = heapq.heappop(heap)
            entry.seq = -1
            taken.append(entry)
        return taken

    def compact(self, live: Iterable[Entry]) -> None:
        """Rebuild the heap from the live entries, dropping every stale item."""
        self._heap = [
            (entry.due_at.timestamp(), entry.seq, entry)
            for entry in live
            if entry.seq >= 0 and entry.due_at is not None
        ]
        heapq.heapify(self._heap)
