"""The volumes one run may reach: its declaration, checked again against the catalog.

A job's declaration was valid when it was saved; on every attempt it is checked again,
because a volume can be removed from the catalog or lowered to `ro` since. Any problem
fails the attempt as a configuration error (not retried), naming the volume: a run never
goes ahead with less, or other, storage than it declared.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from zilean.errors import InvalidInput
from zilean.jobkinds.errors import PermanentCallError
from zilean.jobkinds.script.process import VolumeMount
from zilean.registry.volume_declarations import (
    VolumeMode,
    declared_entries,
    listed_volumes,
    mode_of,
)


def declared_volumes(
    capabilities: Any, catalog: Mapping[str, str], root: Path | None
) -> list[VolumeMount]:
    """The mounts for a job's declaration, their directories created on first use.

    `catalog` maps each declared volume that still exists to its `max_mode`; `root` is
    `SCRIPT_VOLUMES_ROOT` when the start-up probe found it usable, else None.
    """
    try:
        declared = declared_entries(listed_volumes(capabilities or {}))
    except InvalidInput as exc:
        raise PermanentCallError(
            f"the job's volume declaration cannot be read ({exc.message})"
        ) from None
    if not declared:
        return []
    if root is None:
        raise PermanentCallError(
            "the job declares script volumes, but this worker has no usable SCRIPT_VOLUMES_ROOT"
        )
    mounts = []
    for name, mode in declared:
        ceiling = mode_of(catalog.get(name))
        if ceiling is None:
            raise PermanentCallError(f'script volume "{name}" is no longer in the catalog')
        if mode.exceeds(ceiling):
            raise PermanentCallError(
                f'script volume "{name}" is declared rw, but the catalog now allows only ro'
            )
        mounts.append(VolumeMount(name, _directory(root, name), mode is VolumeMode.RO))
    return mounts


def _directory(root: Path, name: str) -> Path:
    """`root/name`, a real directory directly under the root (created if missing)."""
    path = root / name
    try:
        if path.is_symlink():
            raise PermanentCallError(f'script volume "{name}": its directory is a symbolic link')
        path.mkdir(mode=0o700, exist_ok=True)
        if path.resolve().parent != root.resolve() or not path.is_dir():
            raise PermanentCallError(
                f'script volume "{name}": its directory resolves outside the volumes root'
            )
    except OSError as exc:
        raise PermanentCallError(
            f'script volume "{name}": its directory cannot be used ({exc.strerror})'
        ) from None
    return path
