"""The call history in its new words: a failure that was retried reads `retrying`, and
every finished attempt's `last_call` holds the fields all job kinds share.

Before this revision `failed` meant both "failed, retried" and "failed, run over". The
worker that wrote those rows retried a failure exactly when its attempt number was
below its budget (a configuration error or disabled retries were `cancelled`), so
`attempt < max_attempts` tells the two apart without guessing.

`last_call` gains `job_name`, `timeout_ms`, `duration_ms` and `error`. The name and
timeout were not recorded at the time: the job's current ones stand in. An attempt
that had no `last_call` (a configuration error, a lost worker) gets the HTTP fields as
nulls, as one recorded now does.

Revision ID: 0011
Revises: 0010
"""

from __future__ import annotations

from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        "UPDATE job_attempts SET state = 'retrying'"
        " WHERE state = 'failed' AND attempt < max_attempts"
    )
    op.execute(
        """
        UPDATE job_attempts attempt
           SET last_call = jsonb_build_object(
                   'job_name', job.name,
                   'timeout_ms', CASE WHEN job.exec_timeout_ms > 0 THEN job.exec_timeout_ms
                                      ELSE 60000 END,
                   'duration_ms', attempt.duration_ms,
                   'error', attempt.error
               ) || coalesce(attempt.last_call, jsonb_build_object(
                   'method', NULL, 'url', NULL, 'status_code', NULL, 'response_snippet', NULL))
          FROM scheduled_jobs job
         WHERE job.id = attempt.job_id AND attempt.state <> 'running'
        """
    )


def downgrade() -> None:
    op.execute("UPDATE job_attempts SET state = 'failed' WHERE state = 'retrying'")
    op.execute(
        """
        UPDATE job_attempts
           SET last_call = CASE WHEN last_call ->> 'method' IS NULL THEN NULL
                                ELSE last_call - 'job_name' - 'timeout_ms' - 'error' END
         WHERE last_call IS NOT NULL
        """
    )
