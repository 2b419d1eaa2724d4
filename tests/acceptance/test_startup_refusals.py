"""Each misconfiguration stops the real CLI with a non-zero exit and names the variable."""

from __future__ import annotations

import pytest

from tests.support.cli import base_environment, run_cli

pytestmark = pytest.mark.acceptance

KEY = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="
# Nothing listens here: every refusal below must happen before any connection attempt.
DB = "postgres://zilean:changeme@127.0.0.1:1/zilean"


@pytest.mark.parametrize(
    ("command", "env", "expected"),
    [
        (["core"], {"SETTINGS_ENCRYPTION_KEY": KEY, "ADMIN_USERNAME": "admin"},
         'ADMIN_USERNAME must be an email address (got "admin")'),
        (["worker"], {"SETTINGS_ENCRYPTION_KEY": KEY, "WORKER_MAX_CONCURRENCY": "0"},
         "WORKER_MAX_CONCURRENCY must be an integer from 1 to 200 (got '0')"),
        (["worker"], {"SETTINGS_ENCRYPTION_KEY": KEY, "WORKER_MAX_CONCURRENCY": "500"},
         "WORKER_MAX_CONCURRENCY must be an integer from 1 to 200 (got '500')"),
        (["worker"], {"SETTINGS_ENCRYPTION_KEY": KEY, "WORKER_MAX_CONCURRENCY": "lots"},
         "WORKER_MAX_CONCURRENCY must be an integer from 1 to 200 (got 'lots')"),
        (["ui"], {"UI_LOGIN_RATE_PER_MINUTE": "-1"},
         "UI_LOGIN_RATE_PER_MINUTE must be a positive integer (got '-1')"),
        (["ui"], {"UI_LOGIN_RATE_BURST": "five"},
         "UI_LOGIN_RATE_BURST must be a positive integer (got 'five')"),
        (["core"], {"SETTINGS_ENCRYPTION_KEY": "dG9vIHNob3J0"},
         "SETTINGS_ENCRYPTION_KEY must be 32 bytes encoded as base64 (got 9 bytes)"),
        (["worker"], {"SETTINGS_ENCRYPTION_KEY": "%%%"},
         "SETTINGS_ENCRYPTION_KEY must be 32 bytes encoded as base64"),
        (["mcp"], {"SETTINGS_ENCRYPTION_KEY": KEY}, "SETTINGS_ENCRYPTION_KEY is set"),
        (["mcp"], {"SCRIPT_SECRETS_KEY": KEY}, "SCRIPT_SECRETS_KEY is set"),
        (["webhook"], {"SETTINGS_ENCRYPTION_KEY": KEY}, "SETTINGS_ENCRYPTION_KEY is set"),
        (["webhook"], {"SCRIPT_SECRETS_KEY": KEY}, "SCRIPT_SECRETS_KEY is set"),
        (["script-worker", "--runtime", "bash"], {}, "SCRIPT_SECRETS_KEY is required"),
        (["script-worker", "--runtime", "groovy"], {"SCRIPT_SECRETS_KEY": KEY,
         "SCRIPT_VOLUMES_ROOT": "/"}, "SCRIPT_VOLUMES_ROOT cannot be / (got '/')"),
        # `true` (or a quoted "1" from an env_file) must not silently mean off
        (["script-worker", "--runtime", "node"], {"SCRIPT_SECRETS_KEY": KEY,
         "SCRIPT_SANDBOX_ENABLED": "true"},
         "SCRIPT_SANDBOX_ENABLED must be 1 (on), 0 or empty (off) (got 'true')"),
        (["script-worker", "--runtime", "bash"], {"SCRIPT_SECRETS_KEY": KEY,
         "SCRIPT_SANDBOX_ENABLED": '"1"'},
         "SCRIPT_SANDBOX_ENABLED must be 1 (on), 0 or empty (off) (got '\"1\"')"),
        (["core"], {"SETTINGS_ENCRYPTION_KEY": KEY, "DATABASE_URL": ""},
         "DATABASE_URL is required"),
        (["worker"], {"SETTINGS_ENCRYPTION_KEY": KEY, "ZILEAN_LOG_LEVEL": "loud"},
         "ZILEAN_LOG_LEVEL must be one of debug, info, warning, error (got 'loud')"),
    ],
)  # fmt: skip
def test_the_service_exits_non_zero_naming_the_variable(
    command: list[str], env: dict[str, str], expected: str
) -> None:
    result = run_cli(command, base_environment(**{"DATABASE_URL": DB, **env}))
    assert result.returncode != 0
    assert expected in result.stderr


def test_an_invalid_audit_retention_only_warns() -> None:
    # Core gets past configuration (the warning) and fails later, on the database.
    env = base_environment(
        DATABASE_URL=DB, SETTINGS_ENCRYPTION_KEY=KEY, DEFAULT_AUDIT_RETENTION_DAYS="never"
    )
    result = run_cli(["core"], env)
    assert "invalid DEFAULT_AUDIT_RETENTION_DAYS, using the default" in result.stderr
    assert "DEFAULT_AUDIT_RETENTION_DAYS" not in result.stderr.split("zilean core:")[-1]


def test_helpers_print_keys_and_hashes() -> None:
    key = run_cli(["gen-key"], base_environment()).stdout.strip()
    derived = run_cli(["derive-script-key"], base_environment(SETTINGS_ENCRYPTION_KEY=KEY))
    assert derived.stdout.strip() == "xP6keDtsZu5E0w3Ogw2uHI+qo1RExrYyDeL3PqX3IdM="
    assert len(key) == 44
    hashed = run_cli(["hash-password"], base_environment(), stdin="a password\n")
    assert hashed.returncode == 0
    assert hashed.stdout.startswith("$2b$10$")
    empty = run_cli(["hash-password"], base_environment(), stdin="\n")
    assert empty.returncode != 0
    assert "empty" in empty.stderr
