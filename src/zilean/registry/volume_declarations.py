"""A job's volume declaration (`capabilities`): its shape, without the catalog.

Kept apart from `volumes.py` (the catalog service) so that script workers, which re-read
every declaration on every attempt and load no SQLAlchemy, can parse it too.
"""

from __future__ import annotations

import re
from enum import StrEnum
from typing import Any

from zilean.errors import InvalidInput

NAME_PATTERN = r"^[a-z][a-z0-9_]{0,62}$"
VOLUME_NAME = re.compile(NAME_PATTERN)


class VolumeMode(StrEnum):
    """How much access to a volume: a volume's ceiling, or what a job declares."""

    RO = "ro"  # read-only
    RW = "rw"  # read and write

    def exceeds(self, ceiling: VolumeMode) -> bool:
        return self is VolumeMode.RW and ceiling is VolumeMode.RO


MODE_ERROR = 'must be "ro" or "rw"'


def mode_of(value: object) -> VolumeMode | None:
    if isinstance(value, str) and value in VolumeMode._value2member_map_:
        return VolumeMode(value)
    return None


Declaration = list[tuple[str, VolumeMode]]  # (volume name, mode), in the order given


def listed_volumes(raw: object) -> list[Any]:
    """Check the top level of a declaration and return its `volumes` list."""
    if not isinstance(raw, dict):
        raise InvalidInput("capabilities: must be an object")
    for key in raw:
        if key == "egress":
            raise InvalidInput("capabilities.egress: is not supported yet")
        if key != "volumes":
            raise InvalidInput(f"capabilities.{key}: is not a known capability")
    listed = raw.get("volumes", [])
    if not isinstance(listed, list):
        raise InvalidInput("capabilities.volumes: must be a list")
    return listed


def _entry(index: int, entry: object) -> tuple[str, VolumeMode]:
    where = f"capabilities.volumes[{index}]"
    if not isinstance(entry, dict):
        raise InvalidInput(f"{where}: must be an object with name and mode")
    unknown = sorted(str(key) for key in entry if key not in ("name", "mode"))
    if unknown:
        raise InvalidInput(f"{where}.{unknown[0]}: is not a known field")
    name = entry.get("name")
    if not isinstance(name, str) or not name:
        raise InvalidInput(f"{where}.name is required")
    mode = mode_of(entry.get("mode"))
    if mode is None:
        raise InvalidInput(f"{where}.mode: {MODE_ERROR}")
    return name, mode


def declared_entries(listed: list[Any]) -> Declaration:
    declared = [_entry(index, entry) for index, entry in enumerate(listed)]
    seen: set[str] = set()
    for index, (name, _) in enumerate(declared):
        if name in seen:
            raise InvalidInput(
                f'capabilities.volumes[{index}]: script volume "{name}" is declared more than once'
            )
        seen.add(name)
    return declared


def normalised(declared: Declaration) -> dict[str, Any]:
    if not declared:
        return {}
    return {"volumes": [{"name": name, "mode": str(mode)} for name, mode in declared]}


def read_capabilities(stored: object) -> tuple[dict[str, Any], bool]:
    """Return a stored declaration, normalised, and whether it could not be read.

    Checks the shape only, not the catalog. An unreadable declaration comes back as
    `({}, True)`: the job must then be cancelled at run time, never run without volumes.
    """
    try:
        return normalised(declared_entries(listed_volumes(stored))), False
    except InvalidInput:
        return {}, True
