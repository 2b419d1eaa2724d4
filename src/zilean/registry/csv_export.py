"""The jobs CSV format, and the two files written in it: the import template and the export.

There is one column per settable `JobWrite` field, in the model's order, so a field added
to the model becomes a column without touching this module. Cells are text:

- objects, arrays and `body` hold JSON text; `capabilities` travels as `capabilities_json`;
- booleans are `true`/`false`, numbers plain decimals, `run_at` an RFC 3339 timestamp;
- an empty cell means "no value": the field's default on create or overwrite, and
  "keep the existing value" in a merge (see `csv_import.py`).

`csv_import.py` reads exactly what this module writes. Auth secrets are never written:
`auth_config` carries only its public fields (`username`, `header_name`), and an import
over the same job keeps the stored secret, as a `PUT` with an empty secret does.
"""

from __future__ import annotations

import csv
import io
import json
import types
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Union, get_args, get_origin

from sqlalchemy.ext.asyncio import AsyncConnection

from zilean.registry.fields import JobWrite
from zilean.registry.jobs import list_jobs
from zilean.registry.kinds import NOTIFY_FIELDS
from zilean.registry.validation import RegistryContext

CAPABILITIES_COLUMN = "capabilities_json"
TEMPLATE_FILENAME = "zilean-jobs-template.csv"
EXPORT_FILENAME = "zilean-jobs.csv"
MEDIA_TYPE = "text/csv; charset=utf-8"


def _holds_json(annotation: Any) -> bool:
    """Whether a field's values travel as JSON text: objects, arrays and free JSON."""
    if annotation is Any:
        return True
    origin = get_origin(annotation)
    if origin in (dict, list):
        return True
    return origin in (Union, types.UnionType) and any(_holds_json(a) for a in get_args(annotation))


def _column_of(field: str) -> str:
    return CAPABILITIES_COLUMN if field == "capabilities" else field


FIELDS: tuple[str, ...] = tuple(JobWrite.model_fields)
COLUMNS: tuple[str, ...] = tuple(_column_of(field) for field in FIELDS)
FIELD_OF: dict[str, str] = dict(zip(COLUMNS, FIELDS, strict=True))
JSON_FIELDS = frozenset(
    field for field, info in JobWrite.model_fields.items() if _holds_json(info.annotation)
)

# Imported verbatim, this row must create a job cleanly. It is disabled so that doing so
# does not start calling example.com every night.
TEMPLATE_EXAMPLE = JobWrite.model_validate(
    {
        "name": "Nightly report",
        "group_name": "Examples/Reports",
        "enabled": False,
        "cron_expression": "0 3 * * *",
        "http_method": "POST",
        "url": "https://example.com/api/reports",
        "query_params": {"format": "csv"},
        "body": {"since": "yesterday"},
        "headers": {"X-Team": "ops"},
    }
)


def encode_cell(field: str, value: Any) -> str:
    """Return the cell text for one field's value, as the import reads it back."""
    if value is None:
        return ""
    if field in JSON_FIELDS:
        # An empty object or array is the default, so a blank cell says the same thing;
        # for `capabilities` a blank cell also keeps a declaration the API shows as `{}`
        # because it is unreadable. A `body` of `{}` is a real body, unlike no body.
        if field != "body" and value in ({}, []):
            return ""
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, datetime):
        return value.isoformat()
    return str(value)


def encode_job(job: Mapping[str, Any]) -> list[str]:
    """Return the row for a job given as the API shows it (or as a `JobWrite` dump)."""
    return [encode_cell(field, job.get(field)) for field in FIELDS]


def render(rows: Iterable[Sequence[str]]) -> str:
    """Return a CSV document: the header, then `rows`."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\r\n")
    writer.writerow(COLUMNS)
    writer.writerows(rows)
    return buffer.getvalue()


def template_csv() -> str:
    """Return the import template: every column, and one example row that imports cleanly."""
    return render([encode_job(TEMPLATE_EXAMPLE.model_dump())])


@dataclass(frozen=True)
class ExportFilter:
    """The jobs list's filters, so an export holds exactly the rows the list shows.

    `group` takes its subgroups too; `state` is `enabled` (the job and its groups are on)
    or `disabled` (the job or one of its groups is off); `search` matches name, group or
    URL, ignoring case. None means "any".
    """

    group: str | None = None
    job_type: str | None = None
    schedule_type: str | None = None
    state: str | None = None
    search: str | None = None

    def keeps(self, job: Mapping[str, Any]) -> bool:
        group_name: str = job["group_name"]
        if self.group and not (group_name == self.group or group_name.startswith(f"{self.group}/")):
            return False
        if self.job_type and job["job_type"] != self.job_type:
            return False
        if self.schedule_type and job["schedule_type"] != self.schedule_type:
            return False
        if self.state:
            running = bool(job["enabled"]) and not job.get("group_gated")
            if running != (self.state == "enabled"):
                return False
        if self.search:
            needle = self.search.lower()
            haystack = (job["name"], group_name, job.get("url") or "")
            if not any(needle in text.lower() for text in haystack):
                return False
        return True


async def export_csv(
    conn: AsyncConnection,
    context: RegistryContext,
    *,
    show_notify: bool = True,
    where: ExportFilter | None = None,
) -> str:
    """Return the jobs `where` keeps (all by default), ordered by group and name, in the
    template's columns.

    Without `show_notify` the notify columns are left blank (the caller may not read them).
    """
    jobs = await list_jobs(conn, context)
    if where is not None:
        jobs = [job for job in jobs if where.keeps(job)]
    if not show_notify:
        jobs = [{k: v for k, v in job.items() if k not in NOTIFY_FIELDS} for job in jobs]
    return render(encode_job(job) for job in jobs)
