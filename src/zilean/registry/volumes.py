"""Script volumes: the catalog of named storage directories a script job may declare.

The catalog is rows only. Creating a volume makes no directory (a worker makes it on first
use) and deleting one never touches files. A job declares volumes in `capabilities`:
`validate_capabilities` checks a declaration against the catalog when the job is saved.
That is no guarantee at run time: the script worker must check it again on every attempt,
so a job whose volume was since deleted or capped at `ro` fails instead of running with
less access than it asked for.

Workflows will declare volumes too; until they exist, `workflow_usage` and
`workflows_declaring` are the seam that reports none.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import (
    ColumnElement,
    RowMapping,
    Text,
    cast,
    delete,
    func,
    insert,
    literal_column,
    select,
    update,
)
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection

from zilean.audit.log import Actor, record
from zilean.db.tables import scheduled_jobs, script_volumes
from zilean.errors import Conflict, InvalidInput, NotFound
from zilean.registry.volume_declarations import (
    MODE_ERROR,
    NAME_PATTERN,
    VOLUME_NAME,
    VolumeMode,
    declared_entries,
    listed_volumes,
    mode_of,
    normalised,
)

RESOURCE_TYPE = "script_volume"
# The `scheduled_jobs.job_type` of an HTTP job, which may declare no capabilities.
HTTP_JOB_TYPE = "http"


@dataclass(frozen=True)
class Reference:
    """A job or workflow that declares a volume."""

    id: uuid.UUID
    name: str

    def public(self) -> dict[str, Any]:
        return {"id": str(self.id), "name": self.name}


class VolumeInUse(Conflict):
    """The volume is still declared by a job or workflow."""

    def __init__(
        self, name: str, jobs: Sequence[Reference], workflows: Sequence[Reference]
    ) -> None:
        counts = [f"{len(jobs)} job(s)"] if jobs else []
        counts += [f"{len(workflows)} workflow(s)"] if workflows else []
        super().__init__(f'script volume "{name}" is still declared by {" and ".join(counts)}')
        self.jobs = list(jobs)
        self.workflows = list(workflows)

    def body(self) -> dict[str, Any]:
        """Return the 409 body: the error and everything that still declares the volume."""
        return {
            "error": self.message,
            "jobs": [job.public() for job in self.jobs],
            "workflows": [workflow.public() for workflow in self.workflows],
        }


@dataclass(frozen=True)
class Volume:
    name: str
    max_mode: VolumeMode
    description: str
    created_at: datetime
    updated_at: datetime

    def snapshot(self) -> dict[str, Any]:
        """Return the catalog row, as the audit log records it."""
        return {
            "name": self.name,
            "max_mode": str(self.max_mode),
            "description": self.description,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
        }

    def public(self, usage: int) -> dict[str, Any]:
        return {**self.snapshot(), "usage": usage}


def _from_row(row: RowMapping) -> Volume:
    return Volume(
        name=row["name"],
        max_mode=VolumeMode(row["max_mode"]),
        description=row["description"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
    )


def declares_volume(name: ColumnElement[Any]) -> ColumnElement[bool]:
    """Build the SQL test that a job's `capabilities` declare the volume `name`, in any mode.

    It is JSONB containment, `capabilities->'volumes' @> '[{"name": ...}]'`, so a malformed
    declaration matches nothing instead of failing the query.
    """
    wanted = func.jsonb_build_array(func.jsonb_build_object(literal_column("'name'"), name))
    return scheduled_jobs.c.capabilities["volumes"].contains(wanted)


async def workflow_usage(conn: AsyncConnection) -> dict[str, int]:
    """Count, per volume name, the workflows with a script block declaring it.

    Each workflow is counted a single time, even when several of its blocks use the volume.
    Workflows do not exist yet, so the answer is empty; when they do, keep this one query
    for all volumes.
    """
    return {}


async def workflows_declaring(conn: AsyncConnection, name: str) -> list[Reference]:
    """Return the workflows with a script block declaring `name` (none until workflows exist)."""
    return []


async def _with_usage(conn: AsyncConnection, name: str | None = None) -> list[dict[str, Any]]:
    """Return volumes (all, or the one named) in the API shape, usage counted in one query."""
    query = (
        select(script_volumes, func.count(scheduled_jobs.c.id).label("jobs"))
        .select_from(
            script_volumes.outerjoin(scheduled_jobs, declares_volume(script_volumes.c.name))
        )
        .group_by(script_volumes.c.name)
        .order_by(script_volumes.c.name)
    )
    if name is not None:
        query = query.where(script_volumes.c.name == name)
    rows = (await conn.execute(query)).mappings().all()
    workflows = await workflow_usage(conn)
    return [_from_row(row).public(row["jobs"] + workflows.get(row["name"], 0)) for row in rows]


async def list_volumes(conn: AsyncConnection) -> list[dict[str, Any]]:
    """Return every volume by name, each with how many jobs and workflows declare it."""
    return await _with_usage(conn)


async def _lock(conn: AsyncConnection, name: str) -> Volume:
    # FOR UPDATE: a job save share-locks the volumes it declares (`validate_capabilities`),
    # so a change here and a save declaring this volume run one after the other.
    row = (
        (
            await conn.execute(
                select(script_volumes).where(script_volumes.c.name == name).with_for_update()
            )
        )
        .mappings()
        .one_or_none()
    )
    if row is None:
        raise NotFound(f'script volume "{name}" not found')
    return _from_row(row)


def _check_max_mode(max_mode: str) -> VolumeMode:
    mode = mode_of(max_mode)
    if mode is None:
        raise InvalidInput(f"max_mode: {MODE_ERROR}")
    return mode


async def create_volume(
    conn: AsyncConnection, actor: Actor, *, name: str, max_mode: str, description: str
) -> dict[str, Any]:
    """Add a volume to the catalog; no directory is created."""
    if not VOLUME_NAME.fullmatch(name):
        raise InvalidInput(f"name: must match {NAME_PATTERN}")
    mode = _check_max_mode(max_mode)
    try:
        async with conn.begin_nested():
            row = (
                (
                    await conn.execute(
                        insert(script_volumes)
                        .values(name=name, max_mode=str(mode), description=description.strip())
                        .returning(script_volumes)
                    )
                )
                .mappings()
                .one()
            )
    except IntegrityError:
        raise Conflict(f'a script volume named "{name}" already exists') from None
    volume = _from_row(row)
    await record(conn, actor, "script_volume.create", RESOURCE_TYPE, name, after=volume.snapshot())
    return (await _with_usage(conn, name))[0]


async def update_volume(
    conn: AsyncConnection, actor: Actor, name: str, *, max_mode: str, description: str
) -> dict[str, Any]:
    """Set a volume's ceiling and description; a volume is never renamed.

    Lowering the ceiling below what a job declares is allowed: that job's attempts fail
    until its declaration is changed.
    """
    mode = _check_max_mode(max_mode)
    before = await _lock(conn, name)
    row = (
        (
            await conn.execute(
                update(script_volumes)
                .where(script_volumes.c.name == name)
                .values(max_mode=str(mode), description=description.strip(), updated_at=func.now())
                .returning(script_volumes)
            )
        )
        .mappings()
        .one()
    )
    after = _from_row(row)
    await record(
        conn,
        actor,
        "script_volume.update",
        RESOURCE_TYPE,
        name,
        before=before.snapshot(),
        after=after.snapshot(),
    )
    return (await _with_usage(conn, name))[0]


async def jobs_declaring(conn: AsyncConnection, name: str) -> list[Reference]:
    """Return the jobs whose `capabilities` declare `name`, by job name."""
    rows = await conn.execute(
        select(scheduled_jobs.c.id, scheduled_jobs.c.name)
        .where(declares_volume(cast(name, Text)))
        .order_by(scheduled_jobs.c.name, scheduled_jobs.c.id)
    )
    return [Reference(id=row.id, name=row.name) for row in rows]


async def delete_volume(conn: AsyncConnection, actor: Actor, name: str) -> None:
    """Remove a volume from the catalog (its files stay on disk).

    Raises VolumeInUse (409) while a job or workflow still declares it.
    """
    before = await _lock(conn, name)
    jobs = await jobs_declaring(conn, name)
    workflows = await workflows_declaring(conn, name)
    if jobs or workflows:
        raise VolumeInUse(name, jobs, workflows)
    await conn.execute(delete(script_volumes).where(script_volumes.c.name == name))
    await record(conn, actor, "script_volume.delete", RESOURCE_TYPE, name, before=before.snapshot())


async def validate_capabilities(
    conn: AsyncConnection, raw: object, *, job_type: str
) -> dict[str, Any]:
    """Check a job's `capabilities` against the catalog and return its normalised form.

    `{}` and `{"volumes": []}` both come back as `{}`; anything else as
    `{"volumes": [{"name", "mode"}, ...]}` in the order given. Raises InvalidInput (400)
    naming the offending field. Call it in the transaction that saves the job: it
    share-locks the declared volumes, so a concurrent delete waits and then sees the job.
    """
    listed = listed_volumes(raw)
    if not listed:
        return {}
    if job_type == HTTP_JOB_TYPE:
        raise InvalidInput("capabilities: must be empty on an HTTP job")
    declared = declared_entries(listed)
    rows = await conn.execute(
        select(script_volumes.c.name, script_volumes.c.max_mode)
        .where(script_volumes.c.name.in_(sorted({name for name, _ in declared})))
        .with_for_update(read=True)
    )
    ceilings = {row.name: VolumeMode(row.max_mode) for row in rows}
    for index, (name, mode) in enumerate(declared):
        ceiling = ceilings.get(name)
        if ceiling is None:
            raise InvalidInput(
                f'capabilities.volumes[{index}].name: unknown script volume "{name}"'
            )
        if mode.exceeds(ceiling):
            raise InvalidInput(
                f'capabilities.volumes[{index}].mode: script volume "{name}" allows at most '
                f'"{ceiling}"'
            )
    return normalised(declared)
