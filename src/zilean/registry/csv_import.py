"""Import jobs from a CSV file: each data row is created, updated, skipped or refused alone.

A row matches an existing job on its normalised `group_name` plus its trimmed `name`.
No match creates a job; a match is handled by the `on_collision` mode. Every write goes
through `jobs.create_job` or `jobs.update_job`, so an imported row meets exactly the
validation, permission checks and audit entry of the API, with the API's error text.

Guarantees: each row runs in its own transaction and commits before the next row starts,
so a refused row never blocks or undoes another, and a later row sees the jobs earlier
rows created. Non-guarantees: the file is not applied atomically, and a client that
disconnects stops the import after the current row, with the rows before it committed.
"""

from __future__ import annotations

import csv
import io
import json
import uuid
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, TypeVar

import structlog
from pydantic import ValidationError
from sqlalchemy import select
from sqlalchemy.exc import DataError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from zilean.audit.log import Actor
from zilean.auth.principal import Principal
from zilean.db.tables import scheduled_jobs
from zilean.errors import UNSTORABLE_MESSAGE, ApiError, Conflict, InvalidInput
from zilean.input_models import validation_message
from zilean.registry.csv_export import FIELD_OF, FIELDS, JSON_FIELDS
from zilean.registry.fields import JobWrite
from zilean.registry.groups import normalise_group_name, valid_group_name
from zilean.registry.jobs import create_job, get_job, load_row, update_job
from zilean.registry.validation import RegistryContext

log = structlog.get_logger(__name__)

MAX_UPLOAD_BYTES = 5 * 1024 * 1024  # 5 MiB
# The API's text for a value Postgres cannot hold (a NUL character, say).
UNEXPECTED_MESSAGE = "this row could not be imported because of a server error"


E = TypeVar("E", bound=StrEnum)


class Collision(StrEnum):
    """What to do with a row that matches an existing job."""

    OVERWRITE = "overwrite"  # replace the job with the row; blank cells take defaults
    SKIP = "skip"  # leave the job untouched
    MERGE = "merge"  # combine field by field; `MergePriority` settles fields both sides set


class MergePriority(StrEnum):
    SOURCE = "source"  # the CSV row's value wins
    TARGET = "target"  # the existing job's value wins


# The spec names no default mode; `skip` is the one that never changes an existing job.
DEFAULT_COLLISION = Collision.SKIP
DEFAULT_MERGE_PRIORITY = MergePriority.SOURCE


class RowStatus(StrEnum):
    CREATED = "created"  # no job matched; a new one was created
    UPDATED = "updated"  # a job matched and was overwritten or merged into
    SKIPPED = "skipped"  # a job matched and `skip` left it alone
    ERROR = "error"  # the row was refused; `error` says why and nothing was written


def parse_choice(name: str, value: str | None, kind: type[E], default: E) -> E:
    """Return the option's member; an absent or blank value means `default`."""
    if value is None or not value.strip():
        return default
    try:
        return kind(value.strip())
    except ValueError:
        choices = ", ".join(member.value for member in kind)
        raise InvalidInput(f"{name}: must be one of {choices} (got {value!r})") from None


@dataclass(frozen=True)
class CsvRow:
    number: int  # 1-based, counting data rows only (the header is not a row)
    cells: dict[str, str]  # column -> cell text, for the columns the header names
    stray_values: int = 0  # non-blank cells under no column name, or past the header


def read_csv(data: bytes) -> list[CsvRow]:
    """Parse an uploaded file into rows, or refuse the whole file with InvalidInput.

    The file is UTF-8, with or without a byte-order mark. The header must name a `name`
    column and only known columns (in any case), each once; a column left out is blank
    on every row. Columns with a blank name (a spreadsheet's trailing commas) must stay
    blank. Rows whose cells are all blank (a spreadsheet's trailing lines) are left out
    but keep their number, so numbers still count from the first data row.
    """
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise InvalidInput("the file must be UTF-8 encoded CSV") from None
    # A script body may be far larger than the csv module's default field limit (128 KiB);
    # nothing larger than the upload itself can arrive.
    csv.field_size_limit(max(csv.field_size_limit(), MAX_UPLOAD_BYTES))
    reader = csv.reader(io.StringIO(text, newline=""), strict=True)
    try:
        header = [column.strip().lower() for column in next(reader, [])]
        if not any(header):
            raise InvalidInput("the file is empty: it needs a header row naming the columns")
        _check_header(header)
        rows = []
        for number, cells in enumerate(reader, start=1):
            if all(not cell.strip() for cell in cells):
                continue
            named = list(zip(header, cells, strict=False))
            stray = [cell for cell in cells[len(header) :] if cell.strip()]
            stray += [cell for column, cell in named if not column and cell.strip()]
            rows.append(
                CsvRow(
                    number=number,
                    cells={column: cell for column, cell in named if column},
                    stray_values=len(stray),
                )
            )
    except csv.Error as exc:
        raise InvalidInput(f"the file is not valid CSV (line {reader.line_num}: {exc})") from None
    return rows


def _check_header(header: list[str]) -> None:
    unknown = [column for column in header if column and column not in FIELD_OF]
    if unknown:
        raise InvalidInput(
            f"unknown column(s): {', '.join(unknown)}; the template lists the accepted columns"
        )
    repeated = sorted({column for column in header if column and header.count(column) > 1})
    if repeated:
        raise InvalidInput(f"column(s) named more than once: {', '.join(repeated)}")
    if "name" not in header:
        raise InvalidInput("the header must include a name column")


def decode_cells(cells: Mapping[str, str]) -> dict[str, Any]:
    """Return a row's non-blank cells as `JobWrite` input, keyed by field.

    JSON columns are parsed here, so a malformed one is refused naming its column; other
    cells stay text for the model to convert (`true`, `60000`, an RFC 3339 `run_at`).
    """
    values: dict[str, Any] = {}
    for column, text in cells.items():
        if not text.strip():
            continue
        field_name = FIELD_OF[column]
        if field_name in JSON_FIELDS:
            try:
                values[field_name] = json.loads(text)
            except ValueError as exc:
                raise InvalidInput(f"{column}: not valid JSON ({exc})") from None
        else:
            values[field_name] = text
    return values


def _blank(value: Any) -> bool:
    if isinstance(value, str):
        return not value.strip()
    return value is None or value == {} or value == []


def merge(
    target: Mapping[str, Any], source: Mapping[str, Any], priority: MergePriority
) -> dict[str, Any]:
    """Combine an existing job (as the API shows it) with a row's non-blank cells.

    Where only one side has a value it is used, whatever the priority, so a blank cell
    never clears anything; where both have one, `priority` picks. Two fields differ:
    `job_type` always comes from the row when the row sets it, so the registry's
    immutability rule judges it rather than the priority hiding it; and `capabilities`
    taken from the job is left out, which keeps the stored declaration untouched (even
    one the API shows as `{}` because it is unreadable).
    """
    merged: dict[str, Any] = {}
    for name in FIELDS:
        theirs = target.get(name)
        target_blank = _blank(theirs)
        if name == "auth_config":
            # The secret is not shown, but it is a value the row must not override.
            target_blank = target_blank and not target.get("has_auth_secret")
        if name in source and (
            target_blank or priority is MergePriority.SOURCE or name == "job_type"
        ):
            merged[name] = source[name]
        elif name != "capabilities" and theirs is not None:
            merged[name] = theirs
    return merged


def _job_write(values: Mapping[str, Any], row: CsvRow) -> JobWrite:
    """Validate a row's values; a `body` cell's text is kept as written (see `_body_text`)."""
    body_cell = row.cells.get("body", "").strip()
    try:
        # Cells are text: `true` and `60000` are read as the column's type.
        job = JobWrite.model_validate(values, strict=False)
    except ValidationError as exc:
        # Worded as the API words a request body's first error.
        raise InvalidInput(validation_message(exc.errors())) from None
    return job.with_body_text(body_cell or None)


@dataclass
class RowResult:
    row: int
    status: RowStatus = RowStatus.ERROR
    job_id: uuid.UUID | None = None
    name: str = ""
    group_name: str = ""
    error: str | None = None
    # A webhook token issued by this row, shown here once as the API shows it once.
    webhook: dict[str, str] = field(default_factory=dict)

    def succeeded(self, status: RowStatus, job: Mapping[str, Any]) -> None:
        self.status = status
        self.job_id = job["id"]
        self.webhook = {key: job[key] for key in ("webhook_token", "webhook_url") if key in job}

    def failed(self, message: str) -> None:
        self.status = RowStatus.ERROR
        self.error = message
        self.webhook = {}

    def public(self) -> dict[str, Any]:
        return {
            "row": self.row,
            "status": str(self.status),
            "job_id": None if self.job_id is None else str(self.job_id),
            "name": self.name,
            "group_name": self.group_name,
            "error": self.error,
            **self.webhook,
        }


@dataclass
class Tally:
    """How many rows ended in each status."""

    counts: dict[RowStatus, int] = field(default_factory=lambda: dict.fromkeys(RowStatus, 0))

    def add(self, result: RowResult) -> None:
        self.counts[result.status] += 1

    def public(self) -> dict[str, int]:
        return {
            "created": self.counts[RowStatus.CREATED],
            "updated": self.counts[RowStatus.UPDATED],
            "skipped": self.counts[RowStatus.SKIPPED],
            "errors": self.counts[RowStatus.ERROR],
        }


@dataclass(frozen=True)
class ImportRun:
    """Who imports, and how collisions are handled: the same for every row of a file."""

    principal: Principal
    actor: Actor
    context: RegistryContext
    on_collision: Collision = DEFAULT_COLLISION
    merge_priority: MergePriority = DEFAULT_MERGE_PRIORITY


async def import_rows(
    engine: AsyncEngine, rows: list[CsvRow], run: ImportRun
) -> AsyncIterator[RowResult]:
    """Import `rows` in order, yielding each row's result once its transaction has ended."""
    for row in rows:
        result = RowResult(
            row=row.number,
            name=row.cells.get("name", "").strip(),
            group_name=normalise_group_name(row.cells.get("group_name", "")),
        )
        try:
            async with engine.begin() as conn:
                await _import_row(conn, row, result, run)
        except ApiError as exc:
            result.failed(exc.message)
        except DataError:
            result.failed(UNSTORABLE_MESSAGE)
        except Exception:
            # One broken row must not end the batch; the rows after it still get a turn.
            log.exception("jobs.import_row_failed", action="jobs.import", row=row.number)
            result.failed(UNEXPECTED_MESSAGE)
        yield result


async def _matching_ids(conn: AsyncConnection, group_name: str, name: str) -> list[uuid.UUID]:
    found = await conn.execute(
        select(scheduled_jobs.c.id)
        .where(scheduled_jobs.c.group_name == group_name, scheduled_jobs.c.name == name)
        .order_by(scheduled_jobs.c.created_at)
    )
    return list(found.scalars())


async def _import_row(
    conn: AsyncConnection, row: CsvRow, result: RowResult, run: ImportRun
) -> None:
    if row.stray_values:
        raise InvalidInput(
            f"the row has {row.stray_values} value(s) outside the header's named columns"
        )
    values = decode_cells(row.cells)
    if not result.name:
        raise InvalidInput("name is required")
    # Checked before the lookup: an over-limit group is an error in every mode, never a skip.
    valid_group_name(result.group_name)
    matches = await _matching_ids(conn, result.group_name, result.name)
    if len(matches) > 1:
        raise Conflict(
            f"{len(matches)} jobs match this group_name and name; change them one at a time "
            "through the API"
        )
    if not matches:
        job = await create_job(conn, run.principal, run.actor, run.context, _job_write(values, row))
        result.succeeded(RowStatus.CREATED, job)
        return
    job_id = result.job_id = matches[0]
    if run.on_collision is Collision.SKIP:
        result.status = RowStatus.SKIPPED
        return
    if run.on_collision is Collision.MERGE:
        await load_row(conn, job_id, lock=True)  # held until the update below commits
        target = await get_job(conn, run.context, job_id)
        values = merge(target, values, run.merge_priority)
    write = _job_write(values, row)
    job = await update_job(conn, run.principal, run.actor, run.context, job_id, write)
    result.succeeded(RowStatus.UPDATED, job)
