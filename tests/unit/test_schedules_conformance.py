"""robfig/cron v3 conformance: every case of tests/data/conformance/cron-robfig-v3.json.

Each case runs. Where we deliberately differ from robfig, the case asserts our documented
behaviour instead, and the tables below say why:

* Zone prefixes (`TZ=...`, `CRON_TZ=...`) are refused: a schedule's zone is configured
  separately. Such a case asserts the refusal, then evaluates the rest of the expression
  in the prefix's zone, which is what the prefix meant.
* DST follows Debian cron, not robfig (see OUR_DST_POLICY).
* A negative `@every` duration is refused; robfig clamps it to one second.

`@every` cases run under both schedule types: robfig has one parser, so a cron job may
use the descriptor too, and it must mean exactly what it means for a rate job.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from zilean.schedules import (
    CronSchedule,
    RateSchedule,
    ScheduleError,
    ScheduleType,
    parse_schedule,
)

VECTORS = Path(__file__).parents[1] / "data" / "conformance" / "cron-robfig-v3.json"
DATA: dict[str, Any] = json.loads(VECTORS.read_text(encoding="utf-8"))
ZONE_PREFIX = re.compile(r"^(CRON_)?TZ=\S*\s*")
UTC_ZONE = ZoneInfo("UTC")

# Expected fire times (UTC) where our DST policy replaces robfig's; keyed by
# (expression without zone prefix, from). Both the TZ= form and the "input time in a
# named zone" form of a case share a key. America/New_York, 2012.
OUR_DST_POLICY: dict[tuple[str, str], str] = {
    # A fixed-time job whose time falls in the spring-forward gap fires once at the first
    # instant after the gap (03:00 EDT); robfig skips it for the day (or the year).
    ("30 2 11 Mar ?", "2012-03-11T00:00:00-05:00"): "2012-03-11T07:00:00Z",
    ("0 2 * * ?", "2012-03-11T00:00:00-05:00"): "2012-03-11T07:00:00Z",
    # A fixed-time job in the repeated fall-back hour fires once, on the first pass (EDT);
    # robfig fires it again on the second pass (EST), so the next fire moves on a day/year.
    ("30 1 04 Nov ?", "2012-11-04T01:45:00-04:00"): "2013-11-04T06:30:00Z",
    ("0 1 * * ?", "2012-11-04T01:00:00-04:00"): "2012-11-05T06:00:00Z",
}

# Our field names, the vectors' names for them, and each field's full range.
FIELDS = {
    "minute": ("minute", frozenset(range(60))),
    "hour": ("hour", frozenset(range(24))),
    "day-of-month": ("dom", frozenset(range(1, 32))),
    "month": ("month", frozenset(range(1, 13))),
    "day-of-week": ("dow", frozenset(range(7))),
}

# robfig clamps a negative `@every` to one second; we refuse it as meaningless.
REFUSED_EVERY = {"@every -5s"}


def case_id(case: dict[str, Any]) -> str:
    when = case.get("from") or case.get("time") or ""
    return f"{case['name']} [{case['spec']}] {when}".strip()


def cases(section: str) -> pytest.MarkDecorator:
    return pytest.mark.parametrize("case", DATA[section], ids=[case_id(c) for c in DATA[section]])


def instant(text: str) -> float:
    return datetime.fromisoformat(text).timestamp()


def strip_zone_prefix(spec: str) -> str:
    """Assert that a zone prefix is refused, and return the expression without it."""
    if not ZONE_PREFIX.match(spec):
        return spec
    with pytest.raises(ScheduleError, match="time zone prefixes"):
        parse_schedule(ScheduleType.CRON, spec, timezone=UTC_ZONE)
    return ZONE_PREFIX.sub("", spec)


def evaluation_zone(case: dict[str, Any]) -> ZoneInfo | timezone:
    name: str = case["eval_zone"]
    if name[0] in "+-":  # the input was a plain fixed offset, e.g. +05:30
        hours, minutes = name[1:].split(":")
        sign = 1 if name[0] == "+" else -1
        return timezone(sign * timedelta(hours=int(hours), minutes=int(minutes)))
    return ZoneInfo(name)


def test_every_section_has_the_documented_number_of_cases() -> None:
    counts = {section: len(DATA[section]) for section in ("next", "activation", "parse_errors")}
    counts |= {section: len(DATA[section]) for section in ("parse_ok", "every")}
    assert counts == {"next": 76, "activation": 39, "parse_errors": 44, "parse_ok": 70, "every": 23}


def test_every_dst_override_names_a_real_case() -> None:
    keys = {(ZONE_PREFIX.sub("", c["spec"]), c["from"]) for c in DATA["next"]}
    assert set(OUR_DST_POLICY) <= keys


@cases("next")
def test_next(case: dict[str, Any]) -> None:
    spec = strip_zone_prefix(case["spec"])
    zone = evaluation_zone(case)
    if isinstance(zone, ZoneInfo):
        schedule = parse_schedule(ScheduleType.CRON, spec, timezone=zone)
    else:
        schedule = CronSchedule(spec, zone)
    expected = OUR_DST_POLICY.get((spec, case["from"]), case["expected_utc"])
    fire = schedule.next_fire(datetime.fromisoformat(case["from"]))
    if not expected:  # robfig's zero time: the expression never fires
        assert fire is None
    else:
        assert fire is not None
        assert fire.tzinfo is UTC
        assert fire.timestamp() == instant(expected)


@cases("activation")
def test_activation(case: dict[str, Any]) -> None:
    schedule = parse_schedule(ScheduleType.CRON, case["spec"], timezone=UTC_ZONE)
    moment = datetime.fromisoformat(case["time"])
    fires_then = schedule.next_fire(moment - timedelta(seconds=1)) == moment
    assert fires_then is case["activates"]


@cases("parse_errors")
def test_parse_errors(case: dict[str, Any]) -> None:
    # The vectors come from robfig's one parser for both; neither of our types accepts them.
    for kind in (ScheduleType.CRON, ScheduleType.RATE):
        with pytest.raises(ScheduleError, match=r"^cron_expression: ") as caught:
            parse_schedule(kind, case["spec"], timezone=UTC_ZONE)
        assert caught.value.field == "cron_expression"


@cases("parse_ok")
def test_parse_ok(case: dict[str, Any]) -> None:
    spec = strip_zone_prefix(case["spec"])
    if case["kind"] == "every":
        for kind in ScheduleType.CRON, ScheduleType.RATE:
            if spec in REFUSED_EVERY:
                with pytest.raises(ScheduleError, match="must not be negative"):
                    parse_schedule(kind, spec, timezone=UTC_ZONE)
                continue
            rate = parse_schedule(kind, spec, timezone=UTC_ZONE)
            assert rate == RateSchedule(timedelta(seconds=case["delay_seconds"])), kind
        return
    fields = CronSchedule(spec, UTC).fields
    for name, (key, full) in FIELDS.items():
        expected = case["fields"][key]
        wanted = full if expected["values"] == "all" else frozenset(expected["values"])
        assert fields.values(name) == wanted, name
        assert (name in fields.starred) is expected["star"], name


@cases("every")
@pytest.mark.parametrize("kind", [ScheduleType.CRON, ScheduleType.RATE])
def test_every(case: dict[str, Any], kind: ScheduleType) -> None:
    if case["spec"] in REFUSED_EVERY:
        with pytest.raises(ScheduleError, match="must not be negative"):
            parse_schedule(kind, case["spec"], timezone=UTC_ZONE)
        return
    # The zone must not matter: an interval is elapsed time.
    schedule = parse_schedule(kind, case["spec"], timezone=ZoneInfo("America/New_York"))
    assert isinstance(schedule, RateSchedule)
    assert schedule.interval.total_seconds() == case["effective_delay_seconds"]
    fire = schedule.next_fire(datetime.fromisoformat(case["from"]))
    assert fire is not None
    assert fire.timestamp() == instant(case["expected"])
