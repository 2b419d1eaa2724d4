"""The typed definitions of Zilean's own tables (the queue engine's are in `queue_engine/`).

Alembic revisions create these tables; `tests/integration/test_schema.py` checks that the
migrated database matches this metadata exactly.
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    Column,
    DateTime,
    Float,
    ForeignKey,
    Identity,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    SmallInteger,
    Table,
    Text,
    Uuid,
    func,
    text,
)
from sqlalchemy.dialects.postgresql import ARRAY, JSONB

metadata = MetaData(
    naming_convention={
        "ix": "ix_%(table_name)s_%(column_0_N_name)s",
        "uq": "uq_%(table_name)s_%(column_0_N_name)s",
        "ck": "ck_%(table_name)s_%(constraint_name)s",
        "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
        "pk": "pk_%(table_name)s",
    }
)

users = Table(
    "users",
    metadata,
    Column("id", Uuid, primary_key=True),
    Column("email", Text, nullable=False),
    # NULL until an invited user accepts and sets a password.
    Column("password_hash", Text, nullable=True),
    Column("status", Text, nullable=False, server_default="active"),
    Column("must_change_password", Boolean, nullable=False, server_default=text("false")),
    # Short-circuits every permission check.
    Column("is_super_admin", Boolean, nullable=False, server_default=text("false")),
    # The account seeded from ADMIN_USERNAME: protected from lock-out operations.
    Column("is_bootstrap", Boolean, nullable=False, server_default=text("false")),
    # The hidden account behind an MCP token: no password, never listed or managed as a user.
    Column("is_service_account", Boolean, nullable=False, server_default=text("false")),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    Column("updated_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    Column("last_login_at", DateTime(timezone=True), nullable=True),
    CheckConstraint("status IN ('invited', 'active', 'disabled')", name="status"),
)
Index("uq_users_email_lower", func.lower(users.c.email), unique=True)
# At most one bootstrap account, even when two cores race on first boot.
Index(
    "uq_users_bootstrap",
    users.c.is_bootstrap,
    unique=True,
    postgresql_where=users.c.is_bootstrap,
)

app_settings = Table(
    "app_settings",
    metadata,
    Column("key", Text, primary_key=True),
    Column("value", JSONB, nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
)

roles = Table(
    "roles",
    metadata,
    Column("id", Uuid, primary_key=True),
    Column("name", Text, nullable=False),
    Column("description", Text, nullable=False, server_default=""),
    # 'super_admin', 'admin' or 'read_only' for the seeded roles; NULL for custom roles.
    Column("system_key", Text, nullable=True, unique=True),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    Column("updated_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
)
Index("uq_roles_name_lower", func.lower(roles.c.name), unique=True)

role_permissions = Table(
    "role_permissions",
    metadata,
    Column("role_id", Uuid, ForeignKey("roles.id", ondelete="CASCADE"), primary_key=True),
    Column("permission", Text, primary_key=True),
)

user_roles = Table(
    "user_roles",
    metadata,
    Column("user_id", Uuid, ForeignKey("users.id", ondelete="CASCADE"), primary_key=True),
    # RESTRICT: a role still held by someone cannot disappear from under them.
    Column("role_id", Uuid, ForeignKey("roles.id", ondelete="RESTRICT"), primary_key=True),
)
Index("ix_user_roles_role_id", user_roles.c.role_id)

sessions = Table(
    "sessions",
    metadata,
    Column("token_hash", LargeBinary, primary_key=True),  # SHA-256 of the cookie value
    Column("user_id", Uuid, ForeignKey("users.id", ondelete="CASCADE"), nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    Column("expires_at", DateTime(timezone=True), nullable=False),
    Column("ip", Text, nullable=True),
    Column("user_agent", Text, nullable=True),
)
Index("ix_sessions_user_id", sessions.c.user_id)
Index("ix_sessions_expires_at", sessions.c.expires_at)

invites = Table(
    "invites",
    metadata,
    Column("id", Uuid, primary_key=True),
    Column("user_id", Uuid, ForeignKey("users.id", ondelete="CASCADE"), nullable=False),
    Column("token_hash", LargeBinary, nullable=False, unique=True),
    Column("created_by", Uuid, nullable=True),  # no FK: the inviter may be deleted later
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    Column("expires_at", DateTime(timezone=True), nullable=False),
    Column("accepted_at", DateTime(timezone=True), nullable=True),
)
Index("ix_invites_user_id", invites.c.user_id)

api_tokens = Table(
    "api_tokens",
    metadata,
    Column("id", Uuid, primary_key=True),
    Column("user_id", Uuid, ForeignKey("users.id", ondelete="CASCADE"), nullable=False),
    Column("role_id", Uuid, ForeignKey("roles.id", ondelete="RESTRICT"), nullable=False),
    Column("name", Text, nullable=False),
    Column("token_hash", LargeBinary, nullable=False, unique=True),
    Column("token_hint", Text, nullable=False),  # the last characters, to tell tokens apart
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    Column("expires_at", DateTime(timezone=True), nullable=True),
    Column("last_used_at", DateTime(timezone=True), nullable=True),
    Column("revoked_at", DateTime(timezone=True), nullable=True),
)
Index("ix_api_tokens_user_id", api_tokens.c.user_id)
Index("ix_api_tokens_role_id", api_tokens.c.role_id)

# A bearer credential for the MCP endpoint. Its hidden service account (`user_id`) holds
# the token's role and is the actor of everything the token does; deleting the account
# deletes the token.
mcp_tokens = Table(
    "mcp_tokens",
    metadata,
    Column("id", Uuid, primary_key=True),
    Column(
        "user_id", Uuid, ForeignKey("users.id", ondelete="CASCADE"), nullable=False, unique=True
    ),
    Column("name", Text, nullable=False),
    Column("token_hash", LargeBinary, nullable=False, unique=True),  # SHA-256 of the token
    Column("token_hint", Text, nullable=False),  # the last characters, to tell tokens apart
    Column("created_by", Uuid, nullable=True),  # no FK: the creator may be deleted later
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    Column("expires_at", DateTime(timezone=True), nullable=True),
    Column("last_used_at", DateTime(timezone=True), nullable=True),
)

audit_log = Table(
    "audit_log",
    metadata,
    Column("id", BigInteger, Identity(), primary_key=True),
    Column("occurred_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    # No FK: entries outlive the users who made them.
    Column("actor_user_id", Uuid, nullable=True),
    Column("actor_email", Text, nullable=True),
    Column("action", Text, nullable=False),
    Column("resource_type", Text, nullable=False),
    Column("resource_id", Text, nullable=True),
    Column("before", JSONB, nullable=True),
    Column("after", JSONB, nullable=True),
    Column("ip", Text, nullable=True),
)
Index("ix_audit_log_occurred_at_id", audit_log.c.occurred_at.desc(), audit_log.c.id.desc())
Index("ix_audit_log_actor_user_id", audit_log.c.actor_user_id)

scheduled_jobs = Table(
    "scheduled_jobs",
    metadata,
    Column("id", Uuid, primary_key=True),
    Column("name", Text, nullable=False),
    Column("group_name", Text, nullable=False, server_default=""),
    Column("enabled", Boolean, nullable=False, server_default=text("true")),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    Column("updated_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    # Scheduling
    Column("schedule_type", Text, nullable=False, server_default="cron"),
    Column("cron_expression", Text, nullable=False, server_default=""),
    Column("timezone", Text, nullable=False, server_default=""),  # empty: the process TZ
    Column("run_at", DateTime(timezone=True), nullable=True),
    Column("run_at_fired_at", DateTime(timezone=True), nullable=True),
    Column("one_off_after_run", Text, nullable=False, server_default="keep"),
    Column("webhook_token_hash", LargeBinary, nullable=True, unique=True),
    Column("webhook_token_hint", Text, nullable=True),
    Column("webhook_token_rotated_at", DateTime(timezone=True), nullable=True),
    # Type
    Column("job_type", Text, nullable=False, server_default="http"),
    # HTTP
    Column("http_method", Text, nullable=False, server_default="GET"),
    Column("url", Text, nullable=False, server_default=""),
    Column("query_params", JSONB, nullable=False, server_default=text("'{}'::jsonb")),
    Column("body", Text, nullable=True),  # raw JSON text, sent verbatim
    Column("headers", JSONB, nullable=False, server_default=text("'{}'::jsonb")),
    Column("auth_type", Text, nullable=False, server_default="none"),
    Column("auth_config", JSONB, nullable=False, server_default=text("'{}'::jsonb")),
    Column("auth_secret", LargeBinary, nullable=True),  # AES-256-GCM under the master key
    # Script
    Column("script_body", Text, nullable=False, server_default=""),
    Column("script_args", JSONB, nullable=False, server_default=text("'[]'::jsonb")),
    Column("script_secret_vars", JSONB, nullable=False, server_default=text("'[]'::jsonb")),
    Column("capabilities", JSONB, nullable=False, server_default=text("'{}'::jsonb")),
    # Execution
    Column("exec_timeout_ms", Integer, nullable=False, server_default="60000"),
    Column("pool_count", Integer, nullable=False, server_default="1"),
    Column("overlap_policy", Text, nullable=False, server_default="skip"),
    # Loop
    Column("loop_enabled", Boolean, nullable=False, server_default=text("false")),
    Column("loop_response_path", Text, nullable=False, server_default="result.remaining"),
    Column("loop_delay_ms", Integer, nullable=False, server_default="1000"),
    Column("loop_jitter_ms", Integer, nullable=False, server_default="0"),
    Column("loop_max_iterations", Integer, nullable=False, server_default="50"),
    # Retry
    Column("retry_enabled", Boolean, nullable=False, server_default=text("true")),
    Column("retry_mode", Text, nullable=False, server_default="exponential"),
    Column("retry_base_delay_ms", Integer, nullable=False, server_default="1000"),
    Column("retry_multiplier", Float, nullable=False, server_default="2"),
    Column("retry_max_delay_ms", Integer, nullable=False, server_default="30000"),
    Column("retry_max_attempts", Integer, nullable=False, server_default="5"),
    Column("on_failure_url", Text, nullable=False, server_default=""),
    # Notifications
    Column("notify_on", Text, nullable=False, server_default="none"),
    Column("notify_all_targets", Boolean, nullable=False, server_default=text("false")),
    Column("notify_targets", JSONB, nullable=False, server_default=text("'[]'::jsonb")),
    # Alert policy (revision 0013): the Nth consecutive failed run notifies, and while the
    # streak lasts a positive reminder interval spaces out the notices that follow.
    Column("notify_after_failures", Integer, nullable=False, server_default="1"),
    Column("notify_reminder_minutes", Integer, nullable=False, server_default="0"),
    # Server-managed
    Column("running_since_by_pool", JSONB, nullable=False, server_default=text("'{}'::jsonb")),
    Column("invocations_total", BigInteger, nullable=False, server_default="0"),
    Column("invocations_completed", BigInteger, nullable=False, server_default="0"),
    Column("invocations_failed", BigInteger, nullable=False, server_default="0"),
)
Index("ix_scheduled_jobs_group_name_name", scheduled_jobs.c.group_name, scheduled_jobs.c.name)

disabled_groups = Table(
    "disabled_groups",
    metadata,
    Column("group_name", Text, primary_key=True),
    Column("disabled_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
)

global_variables = Table(
    "global_variables",
    metadata,
    Column("id", Uuid, primary_key=True),
    Column("name", Text, nullable=False, unique=True),
    Column("value", Text, nullable=False, server_default=""),  # plaintext; empty when secret
    Column("secret_value", LargeBinary, nullable=True),  # AES-256-GCM (master key) when secret
    # A second copy under the derived script key, only while allow_in_scripts is on, so
    # script workers can decrypt exactly the secrets opted into scripts and nothing else.
    Column("script_secret_value", LargeBinary, nullable=True),
    Column("is_secret", Boolean, nullable=False, server_default=text("false")),
    Column("allow_in_scripts", Boolean, nullable=False, server_default=text("false")),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    Column("updated_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
)

script_volumes = Table(
    "script_volumes",
    metadata,
    Column("name", Text, primary_key=True),
    Column("max_mode", Text, nullable=False),
    Column("description", Text, nullable=False, server_default=""),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    Column("updated_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    CheckConstraint("max_mode IN ('ro', 'rw')", name="max_mode"),
)

# One row per attempt, whatever its outcome: the call history behind /api/jobs/{id}/calls.
job_attempts = Table(
    "job_attempts",
    metadata,
    Column("id", BigInteger, Identity(), primary_key=True),
    Column("job_id", Uuid, ForeignKey("scheduled_jobs.id", ondelete="CASCADE"), nullable=False),
    Column("queue_job_id", BigInteger, nullable=True),
    Column("state", Text, nullable=False),  # execution.recording.AttemptState
    Column("attempt", Integer, nullable=False),
    Column("max_attempts", Integer, nullable=False),
    Column("trigger", Text, nullable=False),
    Column("pool_index", Integer, nullable=False),
    Column("loop_iteration", Integer, nullable=False),
    Column("scheduled_at", DateTime(timezone=True), nullable=True),
    Column("attempted_at", DateTime(timezone=True), nullable=False),
    Column("finalized_at", DateTime(timezone=True), nullable=True),
    Column("duration_ms", Integer, nullable=True),
    Column("error", Text, nullable=True),  # redacted
    Column("last_call", JSONB, nullable=True),  # redacted; see recording.last_call
)
Index("ix_job_attempts_job_id_id", job_attempts.c.job_id, job_attempts.c.id.desc())
Index("ix_job_attempts_attempted_at", job_attempts.c.attempted_at)
# One attempt per queue job: its start marker, and the recording that finishes it.
Index(
    "ux_job_attempts_queue_job_id",
    job_attempts.c.queue_job_id,
    unique=True,
    postgresql_where=job_attempts.c.queue_job_id.isnot(None),
)

# Epoch-aligned one-minute buckets per job: activity charts and heartbeats read these.
job_call_stats = Table(
    "job_call_stats",
    metadata,
    Column("job_id", Uuid, ForeignKey("scheduled_jobs.id", ondelete="CASCADE"), primary_key=True),
    Column("bucket_start", DateTime(timezone=True), primary_key=True),
    Column("total", Integer, nullable=False, server_default="0"),
    Column("completed", Integer, nullable=False, server_default="0"),
    Column("failed", Integer, nullable=False, server_default="0"),
    Column("duration_sum_ms", BigInteger, nullable=False, server_default="0"),
    Column("duration_max_ms", Integer, nullable=False, server_default="0"),
)
Index("ix_job_call_stats_bucket_start", job_call_stats.c.bucket_start)

# The duplicate-firing guard: one row per job and scheduled instant, inserted with the
# queue jobs of that firing, so two schedulers (or two ticks) cannot both fire it.
job_firings = Table(
    "job_firings",
    metadata,
    Column("job_id", Uuid, ForeignKey("scheduled_jobs.id", ondelete="CASCADE"), primary_key=True),
    Column("scheduled_for", DateTime(timezone=True), primary_key=True),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
)

# One row per service per minute: each process samples itself once a minute
# (`monitoring/sampling.py`) and stores the figures under every label it hosts, in one
# statement; `process_services` lists those labels (`zilean up` hosts four in one
# process). Replicas share a label; `hostname` and `pid` tell them apart.
worker_metrics = Table(
    "worker_metrics",
    metadata,
    Column("id", BigInteger, Identity(always=False), primary_key=True),
    Column("service", Text, nullable=False),
    Column("sampled_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    Column("hostname", Text, nullable=False),
    Column("pid", Integer, nullable=False),
    Column("cpu_percent", Float, nullable=False),
    Column("rss_bytes", BigInteger, nullable=False),
    Column("anon_rss_bytes", BigInteger),  # NULL on samples from before revision 0010
    Column("python_allocated_blocks", BigInteger, nullable=False),
    Column("threads", Integer, nullable=False),
    Column("asyncio_tasks", Integer, nullable=False),
    Column("open_fds", Integer, nullable=False),
    Column("process_services", ARRAY(Text), nullable=False),
)
Index("ix_worker_metrics_service_sampled_at", worker_metrics.c.service, worker_metrics.c.sampled_at)
Index("ix_worker_metrics_sampled_at", worker_metrics.c.sampled_at)

# What each script worker found at start-up, repeated every minute: one row per queue.
script_worker_status = Table(
    "script_worker_status",
    metadata,
    Column("queue", Text, primary_key=True),
    Column("hostname", Text, nullable=False),
    Column("pid", Integer, nullable=False),
    Column("sandbox_enforced", Boolean, nullable=False),
    Column("volumes_root_mounted", Boolean, nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
)

# One row, bumped by the triggers that NOTIFY the scheduler (revision 0007): an idle
# reconcile compares this version instead of re-reading every job.
registry_version = Table(
    "registry_version",
    metadata,
    Column("id", SmallInteger, primary_key=True, server_default="1"),
    Column("version", BigInteger, nullable=False, server_default="0"),
    CheckConstraint("id = 1", name="single_row"),
)

# Where notifications go (revision 0013). An Apprise service URL embeds credentials: it is
# sealed under the master key (`sealed_url`), and only `address_hint` is shown. An email
# target's address and a webhook's URL are plaintext in `address`; a webhook's signing
# secret is sealed. `events` is the target's event filter (empty: the four spec events).
notify_targets = Table(
    "notify_targets",
    metadata,
    Column("id", Integer, Identity(), primary_key=True),
    Column("name", Text, nullable=False),
    Column("kind", Text, nullable=False),
    Column("address", Text, nullable=False, server_default=""),
    Column("address_hint", Text, nullable=False, server_default=""),
    Column("sealed_url", LargeBinary, nullable=True),
    Column("sealed_signing_secret", LargeBinary, nullable=True),
    Column("events", JSONB, nullable=False, server_default=text("'[]'::jsonb")),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    Column("updated_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    CheckConstraint("kind IN ('apprise', 'email', 'webhook')", name="kind"),
)

# The outbox between the workers and core: a worker adds a row when a run ends (or a loop
# is capped, or a firing skips busy members) and core delivers it, so no worker needs the
# settings key or waits on a target. Rows are deleted once handled.
notify_events = Table(
    "notify_events",
    metadata,
    Column("id", BigInteger, Identity(), primary_key=True),
    Column("job_id", Uuid, ForeignKey("scheduled_jobs.id", ondelete="CASCADE"), nullable=False),
    Column("kind", Text, nullable=False),
    Column("pool_index", Integer, nullable=False, server_default="0"),
    Column("firing", Text, nullable=False, server_default=""),
    Column("fired_members", Integer, nullable=False, server_default="1"),
    Column("detail", JSONB, nullable=False, server_default=text("'{}'::jsonb")),
    Column("occurred_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
)
Index("ix_notify_events_job_id", notify_events.c.job_id)

# Per job: the failure streak the alert policy counts, and whether a skip streak is open.
job_notify_state = Table(
    "job_notify_state",
    metadata,
    Column("job_id", Uuid, ForeignKey("scheduled_jobs.id", ondelete="CASCADE"), primary_key=True),
    Column("consecutive_failures", Integer, nullable=False, server_default="0"),
    Column("failure_notified", Boolean, nullable=False, server_default=text("false")),
    Column("last_notified_at", DateTime(timezone=True), nullable=True),
    Column("skipping", Boolean, nullable=False, server_default=text("false")),
)

# What the no-silent-failures events leave on the job: a capped loop, a skipped firing.
# Shown with the job's call history and activity; retention follows the call history.
job_events = Table(
    "job_events",
    metadata,
    Column("id", BigInteger, Identity(), primary_key=True),
    Column("job_id", Uuid, ForeignKey("scheduled_jobs.id", ondelete="CASCADE"), nullable=False),
    Column("kind", Text, nullable=False),
    Column("detail", JSONB, nullable=False, server_default=text("'{}'::jsonb")),
    Column("occurred_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
)
Index("ix_job_events_job_id_id", job_events.c.job_id, job_events.c.id.desc())

# Per-job invocation alarms, evaluated each minute by the leading core.
job_alarms = Table(
    "job_alarms",
    metadata,
    Column("id", Integer, Identity(), primary_key=True),
    Column("job_id", Uuid, ForeignKey("scheduled_jobs.id", ondelete="CASCADE"), nullable=False),
    Column("enabled", Boolean, nullable=False, server_default=text("true")),
    Column("metric", Text, nullable=False),
    Column("threshold", Integer, nullable=False),
    Column("window_minutes", Integer, nullable=False),
    Column("last_state", Text, nullable=False, server_default="ok"),
    Column("last_changed_at", DateTime(timezone=True), nullable=True),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    CheckConstraint("metric IN ('total', 'failed')", name="metric"),
    CheckConstraint("last_state IN ('ok', 'breached')", name="last_state"),
)
Index("ix_job_alarms_job_id", job_alarms.c.job_id)

# One CPU/memory alarm per service, notifying Apprise and email targets on each transition.
metric_thresholds = Table(
    "metric_thresholds",
    metadata,
    Column("service", Text, primary_key=True),
    Column("enabled", Boolean, nullable=False, server_default=text("true")),
    Column("cpu_percent", Float, nullable=True),
    Column("memory_mb", Float, nullable=True),
    Column("target_ids", JSONB, nullable=False, server_default=text("'[]'::jsonb")),
    Column("last_state", Text, nullable=False, server_default="ok"),
    Column("last_changed_at", DateTime(timezone=True), nullable=True),
    Column("updated_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    CheckConstraint("last_state IN ('ok', 'breached')", name="last_state"),
)
