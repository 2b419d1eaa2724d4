"""The reconcile rules and the due-time queue, in memory with a pinned clock."""

from __future__ import annotations

import logging
import uuid
from datetime import UTC, datetime, timedelta

import pytest

from zilean.scheduler.entries import DueQueue, Entry, EntryKey, build_schedule, entry_key
from zilean.scheduler.reconciler import Scheduler, StoredSchedule

T0 = datetime(2025, 3, 3, 12, 0, 10, tzinfo=UTC)  # a Monday, ten seconds past noon
LONG_AGO = datetime(2020, 1, 1, tzinfo=UTC)
A, B, C = (uuid.UUID(int=n) for n in (1, 2, 3))


def row(
    job_id: uuid.UUID,
    expression: str = "*/5 * * * *",
    schedule_type: str = "cron",
    timezone: str = "",
    updated_at: datetime = LONG_AGO,
) -> StoredSchedule:
    return StoredSchedule(job_id, schedule_type, expression, timezone, updated_at)


def scheduler(default_zone: str = "UTC", *, catch_up: timedelta = timedelta(0)) -> Scheduler:
    return Scheduler(None, default_zone, catch_up=catch_up)  # type: ignore[arg-type]


def test_new_rows_become_entries_with_their_next_fire_time() -> None:
    s = scheduler()
    result = s.apply([row(A), row(B, "@every 90s", "rate")], T0)
    assert (result.added, result.removed, result.invalid) == (2, 0, 0)
    assert s.entries[A].next_fire == datetime(2025, 3, 3, 12, 5, tzinfo=UTC)
    assert s.entries[B].next_fire == datetime(2025, 3, 3, 12, 1, 40, tzinfo=UTC)
    assert s.next_due() == datetime(2025, 3, 3, 12, 1, 40, tzinfo=UTC)


def test_an_unchanged_expression_keeps_its_entry_and_next_time_across_reconciles() -> None:
    s = scheduler()
    s.apply([row(A, "@every 1h", "rate")], T0)
    entry = s.entries[A]
    later = T0 + timedelta(minutes=40)
    result = s.apply([row(A, "@every 1h", "rate")], later)
    assert not result.changed
    assert s.entries[A] is entry
    assert entry.next_fire == T0.replace(microsecond=0) + timedelta(hours=1)


def test_a_changed_expression_is_re_added_from_now() -> None:
    s = scheduler()
    s.apply([row(A, "@every 1h", "rate")], T0)
    later = T0 + timedelta(minutes=40)
    result = s.apply([row(A, "@every 2h", "rate")], later)
    assert (result.added, result.removed) == (1, 0)
    assert s.entries[A].next_fire == later + timedelta(hours=2)


@pytest.mark.parametrize(
    ("first", "second", "re_added"),
    [
        # a cron job's own zone is part of its schedule
        (
            row(A, "0 9 * * *", timezone="Europe/Paris"),
            row(A, "0 9 * * *", timezone="Asia/Tokyo"),
            True,
        ),
        # an empty zone means the process zone, so naming that zone changes nothing
        (row(A, "0 9 * * *", timezone=""), row(A, "0 9 * * *", timezone="UTC"), False),
        # a rate interval ignores zones: editing one does not restart it
        (
            row(A, "@every 1h", "rate", "Europe/Paris"),
            row(A, "@every 1h", "rate", "Asia/Tokyo"),
            False,
        ),
        # so does a cron job's @every descriptor, which is the same interval
        (
            row(A, "@every 1h", "cron", "Europe/Paris"),
            row(A, "@every 1h", "cron", "Asia/Tokyo"),
            False,
        ),
        # the same text under another schedule type is another schedule
        (row(A, "@every 1h", "rate"), row(A, "@hourly", "cron"), True),
    ],
)
def test_what_counts_as_a_changed_schedule(
    first: StoredSchedule, second: StoredSchedule, re_added: bool
) -> None:
    s = scheduler()
    s.apply([first], T0)
    entry = s.entries[A]
    s.apply([second], T0 + timedelta(seconds=1))
    assert (s.entries[A] is not entry) is re_added


def test_rows_no_longer_returned_are_removed_and_never_fire() -> None:
    s = scheduler()
    s.apply([row(A), row(B), row(C)], T0)
    result = s.apply([row(B)], T0)
    assert result.removed == 2
    assert set(s.entries) == {B}
    assert s.next_due() == s.entries[B].next_fire


def test_a_scoped_reconcile_only_touches_the_named_jobs() -> None:
    s = scheduler()
    s.apply([row(A), row(B)], T0)
    result = s.apply([], T0, scope=[A])
    assert result.removed == 1
    assert set(s.entries) == {B}


def test_an_invalid_schedule_is_skipped_and_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    s = scheduler()
    with caplog.at_level(logging.WARNING):
        for tick in range(3):
            s.apply([row(A, "61 * * * *"), row(B)], T0 + timedelta(seconds=30 * tick))
    assert set(s.entries) == {B}
    assert list(s.invalid) == [A]
    assert caplog.text.count("scheduler.invalid_schedule") == 1
    fixed = s.apply([row(A, "1 * * * *"), row(B)], T0)
    assert fixed.added == 1
    assert A in s.entries
    assert not s.invalid


def test_an_unknown_zone_makes_the_row_invalid() -> None:
    s = scheduler()
    s.apply([row(A, "0 9 * * *", timezone="Mars/Olympus_Mons")], T0)
    assert A in s.invalid
    assert A not in s.entries


def test_a_valid_entry_that_turns_invalid_stops_firing() -> None:
    s = scheduler()
    s.apply([row(A)], T0)
    s.apply([row(A, "not cron")], T0)
    assert A not in s.entries
    assert s.next_due() is None


def test_cron_times_follow_the_jobs_zone_or_the_process_zone() -> None:
    s = scheduler(default_zone="Asia/Tokyo")
    s.apply([row(A, "30 9 * * *", timezone="America/New_York"), row(B, "30 9 * * *")], T0)
    # 09:30 EST is 14:30 UTC; 09:30 in Tokyo (UTC+9) is 00:30 UTC the next day.
    assert s.entries[A].next_fire == datetime(2025, 3, 3, 14, 30, tzinfo=UTC)
    assert s.entries[B].next_fire == datetime(2025, 3, 4, 0, 30, tzinfo=UTC)


def test_a_starting_scheduler_catches_up_a_recent_instant_but_not_before_the_last_edit() -> None:
    s = scheduler(catch_up=timedelta(seconds=60))
    now = datetime(2025, 3, 3, 12, 0, 20, tzinfo=UTC)
    edited_after_the_instant = now - timedelta(seconds=5)
    s.apply([row(A, "* * * * *"), row(B, "* * * * *", updated_at=edited_after_the_instant)], now)
    assert s.entries[A].next_fire == datetime(2025, 3, 3, 12, 0, tzinfo=UTC)  # missed: due now
    assert s.entries[B].next_fire == datetime(2025, 3, 3, 12, 1, tzinfo=UTC)
    # Only the first reconcile looks back: a job added later starts from now.
    s.apply([row(A, "* * * * *"), row(B, "* * * * *"), row(C, "* * * * *")], now)
    assert s.entries[C].next_fire == datetime(2025, 3, 3, 12, 1, tzinfo=UTC)


def test_a_starting_scheduler_starts_every_intervals_of_both_types_from_now() -> None:
    # Looking back would make a 30 s interval due at once, 30 s after "60 s ago".
    s = scheduler(catch_up=timedelta(seconds=60))
    now = datetime(2025, 3, 3, 12, 0, 20, tzinfo=UTC)
    s.apply([row(A, "@every 30s", "cron"), row(B, "@every 30s", "rate")], now)
    assert s.entries[A].next_fire == s.entries[B].next_fire == now + timedelta(seconds=30)


def test_entry_keys_ignore_the_zone_of_an_every_schedule() -> None:
    assert entry_key("rate", "@every 1s", "Asia/Tokyo", "UTC") == EntryKey("rate", "@every 1s", "")
    assert entry_key("cron", " @every 1s", "Asia/Tokyo", "UTC") == EntryKey(
        "cron", " @every 1s", ""
    )
    assert not entry_key("cron", "@every 1s", "", "UTC").wall_clock
    assert entry_key("cron", "@daily", "", "Europe/Paris") == EntryKey(
        "cron", "@daily", "Europe/Paris"
    )


def test_cron_schedules_are_parsed_once_per_expression_and_zone() -> None:
    key = EntryKey("cron", "7 7 * * *", "Europe/Paris")
    assert build_schedule(key) is build_schedule(key)


def _entry(n: int) -> Entry:
    return Entry(
        uuid.UUID(int=n),
        EntryKey("rate", "@every 1s", ""),
        build_schedule(EntryKey("rate", "@every 1s", "")),
        None,
    )


def test_the_due_queue_pops_due_entries_earliest_first_and_skips_stale_items() -> None:
    queue = DueQueue()
    first, second, third = _entry(1), _entry(2), _entry(3)
    queue.put(second, T0 + timedelta(seconds=2))
    queue.put(first, T0 + timedelta(seconds=1))
    queue.put(third, T0 + timedelta(seconds=3))
    queue.put(third, T0 + timedelta(seconds=9))  # rescheduled: the old item is stale
    queue.drop(second)
    assert queue.pop_due(T0 + timedelta(seconds=5), limit=10) == [first]
    assert queue.next_due() == (T0 + timedelta(seconds=9)).timestamp()
    assert queue.pop_due(T0 + timedelta(seconds=9), limit=10) == [third]
    assert queue.next_due() is None


def test_the_due_queue_hands_out_a_backlog_in_batches() -> None:
    queue = DueQueue()
    entries = [_entry(n) for n in range(5)]
    for n, entry in enumerate(entries):
        queue.put(entry, T0 + timedelta(seconds=n))
    assert queue.pop_due(T0 + timedelta(hours=1), limit=2) == entries[:2]
    assert queue.pop_due(T0 + timedelta(hours=1), limit=2) == entries[2:4]
    assert queue.pop_due(T0 + timedelta(hours=1), limit=2) == entries[4:]


def test_compacting_keeps_only_live_items() -> None:
    queue = DueQueue()
    entry = _entry(1)
    for n in range(10):
        queue.put(entry, T0 + timedelta(seconds=n))
    assert len(queue) == 10
    queue.compact([entry])
    assert len(queue) == 1
    assert queue.pop_due(T0 + timedelta(seconds=9), limit=5) == [entry]
