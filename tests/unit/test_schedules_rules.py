"""parse_schedule's rules per schedule type, error messages, upcoming() and the caches."""

from __future__ import annotations

import random
import time
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from zilean.errors import InvalidInput
from zilean.schedules import (
    CronSchedule,
    OneOffSchedule,
    RateSchedule,
    Schedule,
    ScheduleError,
    ScheduleType,
    WebhookSchedule,
    compile_cron,
    parse_schedule,
    upcoming,
)
from zilean.schedules.rate import SECOND, parse_duration

UTC_ZONE = ZoneInfo("UTC")
NEW_YORK = ZoneInfo("America/New_York")
NOON = datetime(2025, 6, 11, 12, 0, tzinfo=UTC)  # a Wednesday


def error_for(schedule_type: str, expression: str | None, run_at: datetime | None = None) -> str:
    with pytest.raises(ScheduleError) as caught:
        parse_schedule(schedule_type, expression, run_at=run_at, timezone=UTC_ZONE)
    return str(caught.value)


# Per-type rules


def test_cron_takes_an_expression_or_a_descriptor() -> None:
    assert isinstance(parse_schedule("cron", "0 9 * * 1-5", timezone=UTC_ZONE), CronSchedule)
    assert isinstance(parse_schedule(ScheduleType.CRON, "@daily", timezone=UTC_ZONE), CronSchedule)


def test_a_cron_every_descriptor_is_the_rate_schedule_whatever_the_zone() -> None:
    tokyo = ZoneInfo("Asia/Tokyo")
    cron = parse_schedule(ScheduleType.CRON, " @every 1h30m ", timezone=tokyo)
    assert cron == parse_schedule(ScheduleType.RATE, "@every 1h30m", timezone=UTC_ZONE)
    assert cron == RateSchedule(timedelta(minutes=90))


@pytest.mark.parametrize(
    ("schedule_type", "expression", "message"),
    [
        ("cron", None, 'cron_expression: is required for a cron schedule, e.g. "0 9 * * 1-5"'),
        ("cron", "  ", 'cron_expression: is required for a cron schedule, e.g. "0 9 * * 1-5"'),
        ("rate", None, 'cron_expression: is required for a rate schedule, e.g. "@every 5m"'),
        ("rate", "", 'cron_expression: is required for a rate schedule, e.g. "@every 5m"'),
        # cron takes @every (robfig's one parser does), but its duration must be valid
        ("cron", "@every", 'cron_expression: "@every" needs a duration, such as "@every 5m"'),
        ("rate", "@every", 'cron_expression: "@every" needs a duration, such as "@every 5m"'),
        (
            "cron",
            "@every 5",
            'cron_expression: invalid @every duration "5": missing unit '
            "(use ns, us, ms, s, m or h)",
        ),
        (
            "cron",
            "@everyday",
            'cron_expression: unknown descriptor "@everyday" (supported: @yearly, @annually, '
            "@monthly, @weekly, @daily, @midnight, @hourly, @every <duration>)",
        ),
        # rate refuses everything but @every
        (
            "rate",
            "*/5 * * * *",
            'cron_expression: a rate schedule must be written "@every <duration>", '
            'such as "@every 5m"; got "*/5 * * * *"',
        ),
        (
            "rate",
            "@hourly",
            'cron_expression: a rate schedule must be written "@every <duration>", '
            'such as "@every 5m"; got "@hourly"',
        ),
        # seconds are not supported
        (
            "cron",
            "0 0 * * * *",
            'cron_expression: expected exactly 5 fields, got 6 ("0 0 * * * *")',
        ),
        (
            "cron",
            "* * * * 8",
            'cron_expression: invalid day-of-week "8": 8 is outside 0-6 (0 is Sunday) or SUN-SAT',
        ),
        (
            "cron",
            "0 0 * * mon,7",
            'cron_expression: invalid day-of-week "7": 7 is outside 0-6 (0 is Sunday) or SUN-SAT',
        ),
        (
            "cron",
            "*-5 * * * *",
            "cron_expression: invalid minute \"*-5\": '*' cannot start a range",
        ),
        ("cron", "+5 * * * *", 'cron_expression: invalid minute "+5": expected a number 0-59'),
        (
            "cron",
            "0 0 1 jan-dex *",
            'cron_expression: invalid month "jan-dex": expected a number 1-12 or JAN-DEC',
        ),
        (
            "cron",
            "CRON_TZ=UTC 0 0 * * *",
            "cron_expression: time zone prefixes (TZ=..., CRON_TZ=...) are not supported; "
            "the schedule's time zone is configured separately",
        ),
        (
            "cron",
            "@reboot",
            'cron_expression: unknown descriptor "@reboot" (supported: @yearly, @annually, '
            "@monthly, @weekly, @daily, @midnight, @hourly, @every <duration>)",
        ),
        (
            "rate",
            "@every 1d",
            'cron_expression: invalid @every duration "1d": unknown unit "d" '
            "(use ns, us, ms, s, m or h)",
        ),
        (
            "rate",
            "@every 10",
            'cron_expression: invalid @every duration "10": missing unit '
            "(use ns, us, ms, s, m or h)",
        ),
        (
            "rate",
            "@every -1m",
            'cron_expression: invalid @every duration "-1m": must not be negative',
        ),
        (
            "rate",
            "@every 3000000h",
            'cron_expression: invalid @every duration "3000000h": too long',
        ),
        (
            "nightly",
            "0 0 * * *",
            'schedule_type: must be one of cron, rate, one_off, webhook; got "nightly"',
        ),
    ],
)
def test_invalid_definitions_get_a_message_naming_the_field(
    schedule_type: str, expression: str | None, message: str
) -> None:
    assert error_for(schedule_type, expression) == message


def test_schedule_error_is_a_value_error_and_a_400() -> None:
    with pytest.raises(ScheduleError) as caught:
        parse_schedule("cron", "61 * * * *", timezone=UTC_ZONE)
    error = caught.value
    assert isinstance(error, ValueError)
    assert isinstance(error, InvalidInput)
    assert error.status_code == 400
    assert error.field == "cron_expression"
    assert error.message == 'cron_expression: invalid minute "61": 61 is outside 0-59'


def test_rate_takes_exactly_every_and_a_duration() -> None:
    schedule = parse_schedule("rate", " @every 1h30m ", timezone=UTC_ZONE)
    assert schedule == RateSchedule(timedelta(minutes=90))


def test_one_off_ignores_the_expression_and_needs_an_aware_run_at() -> None:
    run_at = datetime(2030, 1, 1, 9, 0, tzinfo=NEW_YORK)
    schedule = parse_schedule("one_off", "not a cron expression", run_at=run_at, timezone=UTC_ZONE)
    assert schedule == OneOffSchedule(run_at, fired=False)
    assert schedule.next_fire(NOON) == datetime(2030, 1, 1, 14, 0, tzinfo=UTC)
    assert error_for("one_off", None) == "run_at: is required for a one_off schedule"
    naive = datetime(2030, 1, 1, 9, 0)
    assert error_for("one_off", None, run_at=naive) == "run_at: must include a UTC offset"


def test_a_fired_one_off_never_fires_again_and_an_overdue_one_fires_at_once() -> None:
    past = NOON - timedelta(days=1)
    assert parse_schedule("one_off", None, run_at=past, timezone=UTC_ZONE).next_fire(NOON) == past
    fired = parse_schedule("one_off", None, run_at=past, run_at_fired=True, timezone=UTC_ZONE)
    assert fired.next_fire(NOON) is None


def test_webhook_ignores_every_schedule_field() -> None:
    schedule = parse_schedule("webhook", "garbage ***", run_at=NOON, timezone=UTC_ZONE)
    assert schedule == WebhookSchedule()
    assert schedule.next_fire(NOON) is None


def test_next_fire_needs_an_aware_datetime() -> None:
    naive = datetime(2025, 1, 1)
    with pytest.raises(ValueError, match="aware"):
        compile_cron("* * * * *", "UTC").next_fire(naive)
    with pytest.raises(ValueError, match="aware"):
        RateSchedule(timedelta(seconds=5)).next_fire(naive)


# upcoming


def test_upcoming_lists_the_next_runs() -> None:
    schedule = parse_schedule("cron", "0 9 * * 1-5", timezone=NEW_YORK)
    runs = upcoming(schedule, NOON, 5)
    assert [run.isoformat() for run in runs] == [
        "2025-06-11T13:00:00+00:00",  # 09:00 EDT, an hour after noon UTC (08:00 EDT)
        "2025-06-12T13:00:00+00:00",
        "2025-06-13T13:00:00+00:00",
        "2025-06-16T13:00:00+00:00",  # skips the weekend
        "2025-06-17T13:00:00+00:00",
    ]


@pytest.mark.parametrize(
    ("schedule", "expected"),
    [
        (RateSchedule(timedelta(minutes=5)), 3),
        (OneOffSchedule(NOON + timedelta(hours=1)), 1),  # once, then nothing
        (OneOffSchedule(NOON - timedelta(hours=1)), 1),  # overdue: once, in the past
        (OneOffSchedule(NOON, fired=True), 0),
        (OneOffSchedule(None), 0),
        (WebhookSchedule(), 0),
        (compile_cron("0 0 31 2 *", "UTC"), 0),  # never fires
    ],
)
def test_upcoming_stops_when_the_schedule_runs_out(schedule: Schedule, expected: int) -> None:
    assert len(upcoming(schedule, NOON, 3)) == expected


def test_upcoming_with_a_zero_count_is_empty() -> None:
    assert upcoming(compile_cron("* * * * *", "UTC"), NOON, 0) == []


# Expressions that never fire, or rarely


@pytest.mark.parametrize(
    "expression",
    ["0 0 30 2 *", "0 0 31 4,6,9,11 *", "* * 30,31 feb ?", "59 23 31 2 *"],
)
def test_an_expression_that_never_fires_returns_none_quickly(expression: str) -> None:
    schedule = compile_cron(expression, "America/New_York")
    assert not schedule.can_fire
    started = time.perf_counter()
    assert schedule.next_fire(NOON) is None
    assert upcoming(schedule, NOON, 100) == []
    assert time.perf_counter() - started < 0.05  # seconds


def test_a_leap_day_job_finds_its_date_across_2100_which_is_not_a_leap_year() -> None:
    schedule = compile_cron("0 0 29 2 *", "UTC")
    started = time.perf_counter()
    fire = schedule.next_fire(datetime(2096, 3, 1, tzinfo=UTC))
    assert time.perf_counter() - started < 0.05  # seconds
    assert fire == datetime(2104, 2, 29, tzinfo=UTC)


@pytest.mark.parametrize(
    "after",
    [datetime(9999, 12, 31, 23, 59, tzinfo=UTC), datetime(1, 1, 1, tzinfo=UTC)],
)
def test_the_ends_of_the_calendar_give_none_rather_than_an_overflow(after: datetime) -> None:
    assert compile_cron("* * * * *", "Pacific/Kiritimati").next_fire(after) is None
    assert RateSchedule(timedelta(hours=1)).next_fire(datetime.max.replace(tzinfo=UTC)) is None


# Go duration syntax (time.ParseDuration) and robfig's truncation


@pytest.mark.parametrize(
    ("text", "nanoseconds"),
    [
        ("90s", 90 * SECOND),
        ("5m", 300 * SECOND),
        ("1h30m", 5400 * SECOND),
        ("1.5h", 5400 * SECOND),
        ("300ms", 300_000_000),
        ("2h45m30.5s", 9930 * SECOND + 500_000_000),
        ("1us", 1_000),
        ("1µs", 1_000),  # micro sign
        ("1μs", 1_000),  # Greek mu
        ("7ns", 7),
        ("0", 0),
        ("+5m", 300 * SECOND),
        (".5m", 30 * SECOND),
        ("1.m", 60 * SECOND),
        ("1h0m0.000000001s", 3600 * SECOND + 1),
        ("9223372036854775807ns", (1 << 63) - 1),  # Go's largest duration
        ("0.1234567890123456789012345s", 123_456_789),  # extra fraction digits ignored
    ],
)
def test_durations_parse_as_go_parses_them(text: str, nanoseconds: int) -> None:
    assert parse_duration(text) == nanoseconds


@pytest.mark.parametrize(
    "text",
    [
        "",
        "5",  # missing unit
        "1d",  # no day unit in Go
        "-5s",
        "-0",
        "s",
        ".s",
        "1.5.5s",
        "1h-5m",
        "5 m",
        "1H",  # units are case-sensitive
        "١s",  # only ASCII digits
        "9223372036854775808ns",  # one past Go's range
        "2562048h",
        "1" * 5000 + "s",
    ],
)
def test_bad_durations_are_schedule_errors(text: str) -> None:
    with pytest.raises(ScheduleError, match=r"^cron_expression: invalid @every duration"):
        parse_duration(text)


@pytest.mark.parametrize(
    ("expression", "seconds"),
    [
        ("@every 1999ms", 1),  # truncated, not rounded
        ("@every 300ms", 1),  # below one second: one second
        ("@every 0", 1),
        ("@every 15m50ns", 900),
        ("@every 2h45m30.5s", 9930),
    ],
)
def test_rate_intervals_are_whole_seconds_of_at_least_one(expression: str, seconds: int) -> None:
    schedule = parse_schedule("rate", expression, timezone=UTC_ZONE)
    assert schedule == RateSchedule(timedelta(seconds=seconds))


def test_a_rate_fires_an_interval_after_the_whole_second() -> None:
    schedule = RateSchedule(timedelta(minutes=1))
    after = datetime(2025, 6, 11, 14, 45, 30, 700_000, tzinfo=NEW_YORK)
    assert schedule.next_fire(after) == datetime(2025, 6, 11, 18, 46, 30, tzinfo=UTC)


def test_a_rate_interval_must_be_whole_seconds() -> None:
    with pytest.raises(ValueError, match="whole number of seconds"):
        RateSchedule(timedelta(milliseconds=1500))


# Caches


def test_compile_cron_parses_each_expression_and_zone_once() -> None:
    compile_cron.cache_clear()
    first = compile_cron("*/5 * * * *", "Europe/London")
    assert compile_cron("*/5 * * * *", "Europe/London") is first
    assert compile_cron("*/5 * * * *", "UTC") is not first
    assert compile_cron.cache_info().hits == 1
    via_parse = parse_schedule("cron", "*/5 * * * *", timezone=ZoneInfo("Europe/London"))
    assert via_parse is first


def test_compile_cron_rejects_bad_input_every_time() -> None:
    for _ in range(2):
        with pytest.raises(ScheduleError, match="cron_expression: expected exactly 5 fields"):
            compile_cron("* * *", "UTC")
    with pytest.raises(ScheduleError, match=r'^timezone: unknown time zone "Mars/Olympus"$'):
        compile_cron("* * * * *", "Mars/Olympus")
    for key in ("", "America", "../etc/passwd", "/etc/localtime"):
        with pytest.raises(ScheduleError, match=r"^timezone: "):
            compile_cron("* * * * *", key)


def test_a_schedule_gives_the_same_answers_after_its_day_cache_fills() -> None:
    schedule = CronSchedule("17 3 * * *", NEW_YORK)
    starts = [NOON + timedelta(days=day) for day in range(200)]
    first = [schedule.next_fire(start) for start in starts]
    assert [schedule.next_fire(start) for start in starts] == first
    assert first == [CronSchedule("17 3 * * *", NEW_YORK).next_fire(start) for start in starts]


# Robustness


@pytest.mark.parametrize(
    "expression",
    [
        "\x00",
        "@",
        "@ daily",
        "5,,6 * * * *",
        "1- * * * *",
        "- * * * *",
        ", * * * *",
        "*/ * * * *",
        "1--2 * * * *",
        "١ * * * *",  # Arabic-Indic digit
        "１ * * * *",  # full-width digit
        "*/1000000 * * * *",
        "9" * 5000 + " * * * *",
        "MON * * * *",
        "0 0 * JAN-FEB-MAR *",
        "0 0 * * */",
        "? ? ? ? ? ?",
    ],
)
def test_malformed_expressions_are_schedule_errors(expression: str) -> None:
    with pytest.raises(ScheduleError, match=r"^cron_expression: "):
        parse_schedule("cron", expression, timezone=UTC_ZONE)


def test_random_input_only_ever_raises_schedule_error_and_never_hangs() -> None:
    pieces = ["*", "?", "/", "-", ",", " ", "0", "1", "5", "7", "12", "31", "59", "60", "jan"]
    pieces += ["sun", "L", "#", "@daily", "@every ", "1h", "5m", ".", "ms", "\t", "TZ=UTC "]
    rng = random.Random(20250611)
    zones = [ZoneInfo(key) for key in ("UTC", "America/New_York", "Australia/Lord_Howe")]
    parsed = 0
    started = time.perf_counter()
    for _ in range(3000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 14)))
        for kind in ("cron", "rate"):
            try:
                schedule = parse_schedule(kind, text, timezone=rng.choice(zones))
            except ScheduleError:
                continue
            parsed += 1
            after = NOON + timedelta(seconds=rng.randint(-(10**9), 10**9))
            fire = schedule.next_fire(after)
            assert fire is None or fire > after
    assert parsed > 10
    assert time.perf_counter() - started < 5  # seconds
