"""Daylight saving time: our Debian-cron policy, case by case, in real zones.

America/New_York 2025: clocks jump 02:00 EST -> 03:00 EDT on 9 March and fall back
02:00 EDT -> 01:00 EST on 2 November (01:00-01:59 happens twice).
Europe/London 2025: 01:00 GMT -> 02:00 BST on 30 March, 02:00 BST -> 01:00 GMT on
26 October (01:00-01:59 happens twice).
All expectations are UTC instants, compared with timestamp().
"""

from __future__ import annotations

from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import pytest

from zilean.schedules import ScheduleType, parse_schedule, upcoming

NEW_YORK = ZoneInfo("America/New_York")
LONDON = ZoneInfo("Europe/London")
SANTIAGO = ZoneInfo("America/Santiago")
SAO_PAULO = ZoneInfo("America/Sao_Paulo")


def utc(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def fires(expression: str, zone: ZoneInfo, after: datetime, count: int) -> list[float]:
    schedule = parse_schedule(ScheduleType.CRON, expression, timezone=zone)
    return [fire.timestamp() for fire in upcoming(schedule, after, count)]


def stamps(*texts: str) -> list[float]:
    return [utc(text).timestamp() for text in texts]


@pytest.mark.parametrize(
    ("expression", "zone", "after", "expected"),
    [
        # 01:30 every day in New York: 01:30 EDT on the fall-back day, not 01:30 EST too.
        (
            "30 1 * * *",
            NEW_YORK,
            "2025-11-01T16:00",
            ["2025-11-02T05:30", "2025-11-03T06:30"],
        ),
        # Every half hour during 1am, but fixed minutes and hour: still once.
        (
            "0,30 1 * * *",
            NEW_YORK,
            "2025-11-02T04:00",
            ["2025-11-02T05:00", "2025-11-02T05:30", "2025-11-03T06:00"],
        ),
        # 01:15 every day in London: 01:15 BST on the fall-back day only.
        (
            "15 1 * * *",
            LONDON,
            "2025-10-25T12:00",
            ["2025-10-26T00:15", "2025-10-27T01:15"],
        ),
        # Santiago falls back across midnight (00:00 -03 -> 23:00 -04 on the Saturday):
        # 23:30 runs once, on the first pass.
        (
            "30 23 * * *",
            SANTIAGO,
            "2024-04-06T12:00",
            ["2024-04-07T02:30", "2024-04-08T03:30"],
        ),
    ],
)
def test_a_fixed_time_job_fires_once_in_the_repeated_hour(
    expression: str, zone: ZoneInfo, after: str, expected: list[str]
) -> None:
    assert fires(expression, zone, utc(after), len(expected)) == stamps(*expected)


@pytest.mark.parametrize(
    ("after", "expected"),
    [
        ("2025-11-02T05:15", "2025-11-02T05:30"),  # 01:15 EDT, first pass: the run is ahead
        ("2025-11-02T05:30", "2025-11-03T06:30"),  # exactly at the run
        ("2025-11-02T06:15", "2025-11-03T06:30"),  # 01:15 EST, second pass: already ran
    ],
)
def test_the_second_pass_does_not_fire_a_fixed_time_job_again(after: str, expected: str) -> None:
    assert fires("30 1 * * *", NEW_YORK, utc(after), 1) == stamps(expected)


@pytest.mark.parametrize(
    ("expression", "zone", "after", "expected"),
    [
        # 02:30 does not exist on 9 March in New York: it runs at 03:00 EDT, then as usual.
        ("30 2 * * *", NEW_YORK, "2025-03-08T12:00", ["2025-03-09T07:00", "2025-03-10T06:30"]),
        # Two times in the gap still make one run, at the end of the gap.
        ("0,30 2 * * *", NEW_YORK, "2025-03-09T05:00", ["2025-03-09T07:00", "2025-03-10T06:00"]),
        # A time in the gap and one just after it meet at 03:00; the 03:30 run still happens.
        (
            "30 2,3 * * *",
            NEW_YORK,
            "2025-03-09T05:00",
            ["2025-03-09T07:00", "2025-03-09T07:30", "2025-03-10T06:30"],
        ),
        # 01:30 does not exist on 30 March in London: it runs at 02:00 BST.
        ("30 1 * * *", LONDON, "2025-03-29T12:00", ["2025-03-30T01:00", "2025-03-31T00:30"]),
        # Sao Paulo started DST at midnight (2018-11-04 00:00 -> 01:00): a midnight job
        # runs at 01:00 that day.
        ("0 0 * * *", SAO_PAULO, "2018-11-03T12:00", ["2018-11-04T03:00", "2018-11-05T02:00"]),
    ],
)
def test_a_fixed_time_job_in_the_gap_fires_at_the_first_instant_after_it(
    expression: str, zone: ZoneInfo, after: str, expected: list[str]
) -> None:
    assert fires(expression, zone, utc(after), len(expected)) == stamps(*expected)


@pytest.mark.parametrize(
    ("expression", "zone", "after", "expected"),
    [
        # Hourly: 01:00 EDT, 01:00 EST, 02:00 EST.
        (
            "0 * * * *",
            NEW_YORK,
            "2025-11-02T04:30",
            ["2025-11-02T05:00", "2025-11-02T06:00", "2025-11-02T07:00"],
        ),
        # Every half hour: both passes of 01:00 and 01:30.
        (
            "*/30 * * * *",
            NEW_YORK,
            "2025-11-02T04:45",
            [
                "2025-11-02T05:00",
                "2025-11-02T05:30",
                "2025-11-02T06:00",
                "2025-11-02T06:30",
                "2025-11-02T07:00",
            ],
        ),
        # @hourly is "0 * * * *": London's 01:00 runs in BST and again in GMT.
        (
            "@hourly",
            LONDON,
            "2025-10-25T23:30",
            ["2025-10-26T00:00", "2025-10-26T01:00", "2025-10-26T02:00"],
        ),
        # Santiago's repeated 23:xx on the Saturday, then Sunday's 00:30.
        (
            "30 * * * *",
            SANTIAGO,
            "2024-04-07T01:45",
            ["2024-04-07T02:30", "2024-04-07T03:30", "2024-04-07T04:30"],
        ),
    ],
)
def test_a_job_with_a_wildcard_hour_fires_in_both_passes(
    expression: str, zone: ZoneInfo, after: str, expected: list[str]
) -> None:
    assert fires(expression, zone, utc(after), len(expected)) == stamps(*expected)


@pytest.mark.parametrize(
    ("expression", "zone", "after", "expected"),
    [
        # Hourly across the gap: 01:00 EST then 03:00 EDT; no 02:00 exists.
        ("0 * * * *", NEW_YORK, "2025-03-09T05:30", ["2025-03-09T06:00", "2025-03-09T07:00"]),
        # A wildcard job whose times all fall in the gap does not run that day (Debian cron
        # treats wildcard jobs by the new clock).
        ("*/20 2 * * *", NEW_YORK, "2025-03-09T05:00", ["2025-03-10T06:00"]),
        ("45 * * * *", LONDON, "2025-03-30T00:00", ["2025-03-30T00:45", "2025-03-30T01:45"]),
    ],
)
def test_a_wildcard_job_skips_wall_times_that_do_not_exist(
    expression: str, zone: ZoneInfo, after: str, expected: list[str]
) -> None:
    assert fires(expression, zone, utc(after), len(expected)) == stamps(*expected)


def test_a_wildcard_minute_with_a_fixed_hour_runs_the_whole_repeated_hour_twice() -> None:
    # Debian cron counts a '*' in the minute as a wildcard job too: "* 1 * * *" runs every
    # minute of both 01:00 hours on the fall-back day.
    times = fires("* 1 * * *", NEW_YORK, utc("2025-11-02T04:00"), 121)
    assert [times[0], times[59]] == stamps("2025-11-02T05:00", "2025-11-02T05:59")  # EDT
    assert [times[60], times[119]] == stamps("2025-11-02T06:00", "2025-11-02T06:59")  # EST
    assert times[120] == utc("2025-11-03T06:00").timestamp()


def test_next_fire_reads_the_fold_of_an_ambiguous_input() -> None:
    schedule = parse_schedule(ScheduleType.CRON, "*/30 * * * *", timezone=NEW_YORK)
    first_pass = datetime(2025, 11, 2, 1, 15, tzinfo=NEW_YORK)  # fold=0: EDT
    second_pass = datetime(2025, 11, 2, 1, 15, fold=1, tzinfo=NEW_YORK)  # EST
    assert schedule.next_fire(first_pass) == utc("2025-11-02T05:30")
    assert schedule.next_fire(second_pass) == utc("2025-11-02T06:30")


@pytest.mark.parametrize(
    ("duration", "after", "expected"),
    [
        # One elapsed hour at a time through New York's repeated hour: 01:30 EDT, 01:30 EST.
        ("1h", "2025-11-02T04:30", ["2025-11-02T05:30", "2025-11-02T06:30", "2025-11-02T07:30"]),
        # 24 hours from noon EST the day before spring forward is 13:00 EDT, not noon.
        ("24h", "2025-03-08T17:00", ["2025-03-09T17:00", "2025-03-10T17:00"]),
        # London's spring-forward night: still exactly 90 minutes apart.
        ("90m", "2025-03-30T00:00", ["2025-03-30T01:30", "2025-03-30T03:00"]),
    ],
)
def test_every_is_plain_elapsed_time_across_dst(
    duration: str, after: str, expected: list[str]
) -> None:
    schedule = parse_schedule(ScheduleType.RATE, f"@every {duration}", timezone=NEW_YORK)
    times = upcoming(schedule, utc(after), len(expected))
    assert [t.timestamp() for t in times] == stamps(*expected)
