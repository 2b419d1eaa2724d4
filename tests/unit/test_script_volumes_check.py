"""A script's declared volumes, checked on every attempt: against the catalog, and on disk."""

from __future__ import annotations

from pathlib import Path

import pytest

from zilean.jobkinds.errors import PermanentCallError
from zilean.jobkinds.script.process import VolumeMount
from zilean.jobkinds.script.volumes import declared_volumes

DECLARED = {"volumes": [{"name": "reports", "mode": "rw"}, {"name": "inbox", "mode": "ro"}]}
CATALOG = {"reports": "rw", "inbox": "rw"}


def test_each_declared_volume_is_a_directory_under_the_root_created_on_first_use(
    tmp_path: Path,
) -> None:
    assert declared_volumes(DECLARED, CATALOG, tmp_path) == [
        VolumeMount("reports", tmp_path / "reports", read_only=False),
        VolumeMount("inbox", tmp_path / "inbox", read_only=True),
    ]
    assert (tmp_path / "reports").is_dir()
    assert (tmp_path / "inbox").is_dir()


def test_no_declaration_needs_no_root() -> None:
    assert declared_volumes({}, {}, None) == []


@pytest.mark.parametrize(
    ("capabilities", "catalog", "message"),
    [
        ({"volumes": "reports"}, CATALOG, "the job's volume declaration cannot be read"),
        (DECLARED, {"inbox": "rw"}, 'script volume "reports" is no longer in the catalog'),
        (DECLARED, {**CATALOG, "reports": "ro"}, "declared rw, but the catalog now allows"),
    ],
)
def test_a_declaration_the_catalog_no_longer_allows_is_a_configuration_error(
    tmp_path: Path, capabilities: object, catalog: dict[str, str], message: str
) -> None:
    with pytest.raises(PermanentCallError, match=message):
        declared_volumes(capabilities, catalog, tmp_path)


def test_a_declaration_without_a_usable_root_is_a_configuration_error() -> None:
    with pytest.raises(PermanentCallError, match="no usable SCRIPT_VOLUMES_ROOT"):
        declared_volumes(DECLARED, CATALOG, None)


def test_a_volume_directory_that_is_a_symbolic_link_is_refused(tmp_path: Path) -> None:
    root, elsewhere = tmp_path / "root", tmp_path / "elsewhere"
    root.mkdir()
    elsewhere.mkdir()
    (root / "reports").symlink_to(elsewhere)
    with pytest.raises(PermanentCallError, match='"reports": its directory is a symbolic link'):
        declared_volumes(DECLARED, CATALOG, root)
