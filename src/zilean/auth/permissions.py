"""The permission keys and the built-in roles' defaults.

Keys live in code, not in a table, so a key added here is granted to every Super Admin
at once, with no migration. `settings:queue_jobs` is our name for the spec's
`settings:river_jobs` (the queue engine is PgQueuer, not River).
"""

from __future__ import annotations

from enum import StrEnum


class Permission(StrEnum):
    JOBS_READ = "jobs:read"
    JOBS_WRITE = "jobs:write"
    JOBS_SCRIPT = "jobs:script"
    WORKFLOWS_READ = "workflows:read"
    WORKFLOWS_WRITE = "workflows:write"
    GLOBALVARS_READ = "globalvars:read"
    GLOBALVARS_WRITE = "globalvars:write"
    METRICS_READ = "metrics:read"
    USERS_READ = "users:read"
    USERS_WRITE = "users:write"
    ROLES_READ = "roles:read"
    ROLES_WRITE = "roles:write"
    INVITES_CREATE = "invites:create"
    AUDIT_READ = "audit:read"
    AUDIT_WRITE = "audit:write"
    SETTINGS_SMTP = "settings:smtp"
    SETTINGS_QUEUE_JOBS = "settings:queue_jobs"
    SETTINGS_MCP = "settings:mcp"
    SCRIPTVOLUMES_READ = "scriptvolumes:read"
    SCRIPTVOLUMES_WRITE = "scriptvolumes:write"
    NOTIFY_READ = "notify:read"
    NOTIFY_WRITE = "notify:write"
    NOTIFY_SETTINGS_READ = "notify_settings:read"
    NOTIFY_SETTINGS_WRITE = "notify_settings:write"


ALL_PERMISSIONS: frozenset[Permission] = frozenset(Permission)


class SystemRole(StrEnum):
    """The seeded roles: they cannot be renamed or deleted."""

    SUPER_ADMIN = "super_admin"
    ADMIN = "admin"
    READ_ONLY = "read_only"


SYSTEM_ROLE_NAMES: dict[SystemRole, str] = {
    SystemRole.SUPER_ADMIN: "Super Admin",
    SystemRole.ADMIN: "Admin",
    SystemRole.READ_ONLY: "Read-Only",
}

# Seeded defaults. Super Admin stores none: its access comes from the user's flag.
# Revision 0002 seeds a copy of these lists; editing them here changes nothing stored.
DEFAULT_ROLE_PERMISSIONS: dict[SystemRole, frozenset[Permission]] = {
    SystemRole.SUPER_ADMIN: frozenset(),
    SystemRole.ADMIN: frozenset(
        {
            Permission.JOBS_READ,
            Permission.JOBS_WRITE,
            Permission.WORKFLOWS_READ,
            Permission.WORKFLOWS_WRITE,
            Permission.GLOBALVARS_READ,
            Permission.GLOBALVARS_WRITE,
            Permission.METRICS_READ,
            Permission.AUDIT_READ,
            Permission.SETTINGS_SMTP,
            Permission.SETTINGS_QUEUE_JOBS,
            Permission.SETTINGS_MCP,
            Permission.SCRIPTVOLUMES_READ,
            Permission.SCRIPTVOLUMES_WRITE,
            Permission.NOTIFY_READ,
            Permission.NOTIFY_WRITE,
            Permission.NOTIFY_SETTINGS_READ,
            Permission.NOTIFY_SETTINGS_WRITE,
        }
    ),
    SystemRole.READ_ONLY: frozenset(
        {
            Permission.JOBS_READ,
            Permission.WORKFLOWS_READ,
            Permission.GLOBALVARS_READ,
            Permission.METRICS_READ,
            Permission.USERS_READ,
            Permission.ROLES_READ,
            Permission.SCRIPTVOLUMES_READ,
        }
    ),
}


def known_permissions(values: object) -> frozenset[Permission]:
    """Keep the stored keys this code knows; a key from a newer version grants nothing here."""
    if not isinstance(values, list | tuple | set | frozenset):
        return frozenset()
    return frozenset(Permission(v) for v in values if v in Permission._value2member_map_)
