from __future__ import annotations

import logging
from pathlib import Path

import pytest

from zilean.config import (
    CoreSettings,
    ListenAddress,
    ScriptRuntime,
    ScriptWorkerSettings,
    Service,
    UiSettings,
    WorkerSettings,
    load_settings,
    machine_zone,
    script_worker_service,
)
from zilean.errors import ConfigError

KEY = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="
BASE = {"DATABASE_URL": "postgres://zilean:changeme@db:5432/zilean"}
HASH = "$2y$10$" + "a" * 53


def load(service: Service, runtime: ScriptRuntime | None = None, **env: str) -> object:
    return load_settings(service, {**BASE, **env}, runtime=runtime)


def test_core_reads_its_defaults() -> None:
    settings = load(Service.CORE, SETTINGS_ENCRYPTION_KEY=KEY)
    assert isinstance(settings, CoreSettings)
    assert settings.listen == ListenAddress("", 8091)
    assert settings.timezone == machine_zone()  # TZ unset
    assert settings.default_audit_retention_days == 180
    assert settings.settings_encryption_key == bytes(range(32))
    assert settings.public_base_url == ""


def test_worker_concurrency_defaults_to_twenty_and_accepts_the_bounds() -> None:
    for value, expected in [("", 20), ("1", 1), ("200", 200)]:
        settings = load(Service.WORKER, SETTINGS_ENCRYPTION_KEY=KEY, WORKER_MAX_CONCURRENCY=value)
        assert isinstance(settings, WorkerSettings)
        assert settings.max_concurrency == expected


def test_the_worker_failure_callback_url_is_optional() -> None:
    unset = load(Service.WORKER, SETTINGS_ENCRYPTION_KEY=KEY)
    url = "https://hooks.example.com/zilean-failed"
    given = load(Service.WORKER, SETTINGS_ENCRYPTION_KEY=KEY, ZILEAN_ON_FAILURE_URL=url)
    assert isinstance(unset, WorkerSettings)
    assert isinstance(given, WorkerSettings)
    assert (unset.on_failure_url, given.on_failure_url) == (None, url)


def test_ui_limiter_settings_default_to_ten_per_minute_burst_five() -> None:
    settings = load(Service.UI)
    assert isinstance(settings, UiSettings)
    assert (settings.login_rate_per_minute, settings.login_rate_burst) == (10, 5)
    assert settings.listen == ListenAddress("", 8090)


def test_script_worker_reads_its_runtime_and_volume_root(tmp_path: Path) -> None:
    settings = load(
        script_worker_service(ScriptRuntime.BASH),
        ScriptRuntime.BASH,
        SCRIPT_SECRETS_KEY=KEY,
        SCRIPT_VOLUMES_ROOT=str(tmp_path),
        SCRIPT_SANDBOX_ENABLED="1",
    )
    assert isinstance(settings, ScriptWorkerSettings)
    assert settings.max_concurrency == 5
    assert settings.volumes_root == tmp_path
    assert settings.sandbox_enabled


@pytest.mark.parametrize(
    ("value", "expected"),
    [("1", True), (" 1 ", True), ("0", False), ("", False), ("  ", False), (None, False)],
)
def test_the_sandbox_switch_reads_one_as_on_and_zero_or_empty_as_off(
    value: str | None, expected: bool
) -> None:
    env = {} if value is None else {"SCRIPT_SANDBOX_ENABLED": value}
    settings = load(
        script_worker_service(ScriptRuntime.NODE), ScriptRuntime.NODE, SCRIPT_SECRETS_KEY=KEY, **env
    )
    assert isinstance(settings, ScriptWorkerSettings)
    assert settings.sandbox_enabled is expected


@pytest.mark.parametrize(
    ("service", "env", "message"),
    [
        # every service needs a database
        (Service.UI, {"DATABASE_URL": ""}, "DATABASE_URL is required"),
        (Service.UI, {"DATABASE_URL": "mysql://x/y"}, "DATABASE_URL must be a postgres"),
        (Service.UI, {"TZ": "Mars/Olympus"}, "TZ must be an IANA time zone"),
        (Service.UI, {"UI_ADDR": "8090"}, "UI_ADDR must look like HOST:PORT"),
        (Service.UI, {"UI_TRUST_PROXY_HEADERS": "maybe"}, "UI_TRUST_PROXY_HEADERS must be"),
        (Service.UI, {"UI_LOGIN_RATE_PER_MINUTE": "0"}, "UI_LOGIN_RATE_PER_MINUTE must be"),
        (Service.UI, {"UI_LOGIN_RATE_BURST": "2.5"}, "UI_LOGIN_RATE_BURST must be"),
        (Service.CORE, {}, "SETTINGS_ENCRYPTION_KEY is required"),
        (Service.CORE, {"SETTINGS_ENCRYPTION_KEY": "c2hvcnQ="}, "got 5 bytes"),
        (Service.CORE, {"SETTINGS_ENCRYPTION_KEY": "not base64!"}, "not base64"),
        (
            Service.CORE,
            {"SETTINGS_ENCRYPTION_KEY": KEY, "ADMIN_USERNAME": "admin"},
            'ADMIN_USERNAME must be an email address (got "admin")',
        ),
        (
            Service.CORE,
            {"SETTINGS_ENCRYPTION_KEY": KEY, "ADMIN_PASSWORD_HASH": "hunter2"},
            "ADMIN_PASSWORD_HASH must be a bcrypt hash",
        ),
        (
            Service.CORE,
            {"SETTINGS_ENCRYPTION_KEY": KEY, "PUBLIC_BASE_URL": "https://z.example.com/"},
            "PUBLIC_BASE_URL must be a scheme and host with no trailing slash",
        ),
        (Service.WORKER, {}, "SETTINGS_ENCRYPTION_KEY is required"),
        (
            Service.WORKER,
            {"SETTINGS_ENCRYPTION_KEY": KEY, "WORKER_MAX_CONCURRENCY": "201"},
            "WORKER_MAX_CONCURRENCY must be an integer from 1 to 200 (got '201')",
        ),
        (
            Service.WORKER,
            {"SETTINGS_ENCRYPTION_KEY": KEY, "ZILEAN_ON_FAILURE_URL": "hooks.example.com/x"},
            "ZILEAN_ON_FAILURE_URL must be an absolute http or https URL",
        ),
        (Service.MCP, {"SETTINGS_ENCRYPTION_KEY": KEY}, "SETTINGS_ENCRYPTION_KEY is set"),
        (Service.WEBHOOK, {"SCRIPT_SECRETS_KEY": KEY}, "SCRIPT_SECRETS_KEY is set"),
    ],
)
def test_it_refuses_a_bad_value_naming_the_variable(
    service: Service, env: dict[str, str], message: str
) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load(service, **env)


def test_the_bcrypt_hash_is_never_echoed_in_the_error() -> None:
    with pytest.raises(ConfigError) as caught:
        load(Service.CORE, SETTINGS_ENCRYPTION_KEY=KEY, ADMIN_PASSWORD_HASH="my-real-password")
    assert "my-real-password" not in str(caught.value)


def test_script_workers_require_the_script_key() -> None:
    with pytest.raises(ConfigError, match="SCRIPT_SECRETS_KEY is required"):
        load(script_worker_service(ScriptRuntime.NODE), ScriptRuntime.NODE)


def test_script_volumes_root_cannot_be_the_filesystem_root() -> None:
    for root in ("/", "//", "/."):
        with pytest.raises(ConfigError, match="SCRIPT_VOLUMES_ROOT cannot be /"):
            load(
                script_worker_service(ScriptRuntime.BASH),
                ScriptRuntime.BASH,
                SCRIPT_SECRETS_KEY=KEY,
                SCRIPT_VOLUMES_ROOT=root,
            )


@pytest.mark.parametrize("value", ["0", "-3", "soon", "1.5"])
def test_invalid_audit_retention_falls_back_to_180_with_a_warning(
    value: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING):
        settings = load(
            Service.CORE, SETTINGS_ENCRYPTION_KEY=KEY, DEFAULT_AUDIT_RETENTION_DAYS=value
        )
    assert isinstance(settings, CoreSettings)
    assert settings.default_audit_retention_days == 180
    assert "DEFAULT_AUDIT_RETENTION_DAYS" in caplog.text


def test_demo_mode_is_on_only_for_exactly_one() -> None:
    for value, expected in [("1", True), ("true", False), ("yes", False), ("", False)]:
        settings = load(Service.UI, DEMO_MODE=value)
        assert isinstance(settings, UiSettings)
        assert settings.demo_mode is expected
