"""TZ unset: the machine's zone, read from real /etc/localtime-style files in a temp dir."""

from __future__ import annotations

import logging
import os
import shutil
import time
import zoneinfo
from datetime import UTC, datetime
from pathlib import Path

import pytest

from zilean.config import Service, UiSettings, load_settings, machine_zone

BASE = {"DATABASE_URL": "postgres://zilean:changeme@db:5432/zilean"}


def system_file(key: str) -> Path:
    """The system tzdata file for `key`, where zoneinfo looks first."""
    for directory in zoneinfo.TZPATH:
        path = Path(directory) / key
        if path.is_file():
            return path
    pytest.skip(f"no system tzdata file for {key}")


def resolve(etc: Path, hint: str | None = None) -> str:
    if hint is not None:
        (etc / "timezone").write_text(hint + "\n", encoding="utf-8")
    return machine_zone(etc / "localtime", etc / "timezone")


@pytest.fixture
def etc(tmp_path: Path) -> Path:
    path = tmp_path / "etc"
    path.mkdir()
    return path


@pytest.mark.parametrize(
    ("target", "expected"),
    [
        ("America/New_York", "America/New_York"),
        ("US/Eastern", "US/Eastern"),  # an alias keeps the name the admin chose
        ("posix/Europe/Paris", "Europe/Paris"),  # the posix/ tree holds the same zones
    ],
)
def test_a_symlinked_localtime_names_the_zone(etc: Path, target: str, expected: str) -> None:
    (etc / "localtime").symlink_to(system_file(target))
    # A stale Debian name does not outvote what the C library actually reads.
    assert resolve(etc, hint="Etc/UTC") == expected


def test_a_relative_symlink_names_the_zone_too(etc: Path) -> None:
    (etc / "localtime").symlink_to(os.path.relpath(system_file("Asia/Tokyo"), etc))
    assert resolve(etc) == "Asia/Tokyo"


def test_a_plain_copy_is_matched_by_content(etc: Path) -> None:
    shutil.copy(system_file("Asia/Tokyo"), etc / "localtime")
    assert resolve(etc) == "Asia/Tokyo"  # not its legacy alias "Japan"


def test_a_plain_copy_takes_the_debian_name_when_it_matches(etc: Path) -> None:
    shutil.copy(system_file("America/New_York"), etc / "localtime")
    assert resolve(etc) == "America/New_York"
    assert resolve(etc, hint="US/Eastern") == "US/Eastern"
    assert resolve(etc, hint="Asia/Tokyo") == "America/New_York"  # a stale name is ignored


def test_a_symlink_outside_any_zoneinfo_tree_is_matched_by_content(etc: Path) -> None:
    shutil.copy(system_file("Europe/Paris"), etc / "paris")
    (etc / "localtime").symlink_to(etc / "paris")
    found = resolve(etc)
    # Several names may share Paris's file; whichever is reported keeps Paris's clock.
    paris = zoneinfo.ZoneInfo("Europe/Paris")
    for moment in (datetime(2025, 1, 15, tzinfo=UTC), datetime(2025, 7, 15, tzinfo=UTC)):
        assert moment.astimezone(zoneinfo.ZoneInfo(found)).utcoffset() == (
            moment.astimezone(paris).utcoffset()
        )
    assert "/" in found
    assert not found.startswith("Etc/")


def test_a_copy_of_utc_is_reported_as_utc(etc: Path) -> None:
    shutil.copy(system_file("Etc/UTC"), etc / "localtime")
    assert resolve(etc) == "UTC"


def test_no_localtime_means_utc_as_for_the_c_library(etc: Path) -> None:
    assert resolve(etc, hint="Asia/Tokyo") == "UTC"


def test_an_unrecognisable_localtime_falls_back_to_utc_with_a_warning(
    etc: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (etc / "localtime").write_bytes(b"TZif2 but not really")
    (etc / "broken").symlink_to(etc / "nowhere")
    (etc / "loop").symlink_to(etc / "loop")
    with caplog.at_level(logging.WARNING):
        assert resolve(etc) == "UTC"
    assert "Set TZ to name it" in caplog.text
    assert machine_zone(etc / "broken", etc / "timezone") == "UTC"  # a dangling link
    assert machine_zone(etc / "loop", etc / "timezone") == "UTC"


@pytest.mark.parametrize("tz", [None, "", "  "])
def test_tz_unset_or_empty_means_the_machines_zone(tz: str | None) -> None:
    env = BASE if tz is None else {**BASE, "TZ": tz}
    settings = load_settings(Service.UI, env)
    assert isinstance(settings, UiSettings)
    assert settings.timezone == machine_zone()
    if "TZ" not in os.environ:
        # The C library's own view of local time agrees (this process has no TZ either).
        now = time.time()
        offset = datetime.fromtimestamp(now, zoneinfo.ZoneInfo(settings.timezone)).utcoffset()
        assert offset is not None
        assert offset.total_seconds() == time.localtime(now).tm_gmtoff


def test_tz_wins_over_the_machine() -> None:
    settings = load_settings(Service.UI, {**BASE, "TZ": ":Pacific/Auckland"})
    assert isinstance(settings, UiSettings)
    assert settings.timezone == "Pacific/Auckland"
