"""The settings and monitoring pages in a real browser, through `zilean up`'s single origin:
a user created with a temporary password and their forced change, a role edit taking a
control away from that user, an API token used by curl, a secret variable never shown
again, a webhook target's test delivery to a local receiver, the MCP token and snippets,
and the audit log filtered to one user. One server and one Chromium serve the whole walk,
which also screenshots each section for docs/ui.md and checks it with axe at 1280 and
390 pixels wide."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import time
from typing import Any

import pytest
from playwright.sync_api import Browser, Page, expect, sync_playwright
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.support.actors import add_user
from tests.support.notify import MailServer, mail_server, verify
from tests.support.servers import live_server
from tests.support.target import HttpTarget, http_target
from tests.support.ui_browser import (
    DESKTOP,
    PHONE,
    assert_accessible,
    assert_no_horizontal_overflow,
    launch,
    origin_apps,
    require_built_app,
    screenshot,
    sign_in,
)
from zilean.auth.permissions import SystemRole
from zilean.auth.roles import system_role_id

pytestmark = [pytest.mark.acceptance, pytest.mark.timeout(240)]

ADMIN = "sam@example.com"
NEWBIE = "newbie@example.com"
NEW_PASSWORD = "a passphrase of my own"
SECRET_VALUE = "s3cr3t-never-shown"


def shown_once(page: Page, label: str) -> str:
    return page.get_by_role("status", name=label).locator("code").inner_text()


def make_role(page: Page, base: str) -> None:
    page.goto(f"{base}/settings/roles")
    page.get_by_label("Role name").fill("Job runners")
    page.get_by_role("button", name="Create role").click()
    expect(page.get_by_text(re.compile("^Created the role Job runners"))).to_be_visible()
    page.get_by_role("button", name="Job runners", exact=True).click()
    grid = page.get_by_role("form", name="Permissions of Job runners")
    for permission in ("jobs:read", "jobs:write"):
        grid.get_by_label(permission, exact=True).check()
    grid.get_by_role("button", name="Save permissions of Job runners").click()
    expect(page.get_by_text("Saved the permissions of Job runners.")).to_be_visible()


def create_user(page: Page, base: str) -> str:
    """Create the user in the UI; return the temporary password it showed once."""
    page.goto(f"{base}/settings/users")
    form = page.get_by_role("form", name="New user")
    form.get_by_label("Email").fill(NEWBIE)
    form.get_by_role("group", name="Roles").get_by_label("Job runners").check()
    form.get_by_role("button", name="Create with a temporary password").click()
    temporary = shown_once(page, f"Temporary password for {NEWBIE}")
    assert len(temporary) >= 12
    expect(page.get_by_role("cell", name=re.compile(f"^{NEWBIE}"))).to_contain_text(
        "temporary password"
    )
    form.get_by_label("Email").fill("invited@example.com")
    form.get_by_role("group", name="Roles").get_by_label("Job runners").check()
    form.get_by_role("button", name="Send an invite").click()
    link = shown_once(page, "Invite link for invited@example.com")
    assert "/admin/accept-invite?token=" in link
    expect(page.get_by_text("No email was sent")).to_be_visible()  # SMTP is not set up
    expect(
        page.get_by_role("button", name="Resend the invite to invited@example.com")
    ).to_be_visible()
    assert_accessible(page, "users")
    screenshot(page, "settings-users")
    return temporary


def forced_change(page: Page, base: str, temporary: str) -> None:
    sign_in(page, base, NEWBIE, temporary)
    expect(page.get_by_text(f"{NEWBIE} is using a temporary password.")).to_be_visible()
    page.get_by_label("Current password").fill(temporary)
    page.get_by_label("New password", exact=True).fill(NEW_PASSWORD)
    page.get_by_label("Repeat new password").fill(NEW_PASSWORD)
    page.get_by_role("button", name="Change password").click()
    expect(page.get_by_role("heading", name="Jobs", exact=True)).to_be_visible()
    expect(page.get_by_role("link", name="New job")).to_be_visible()


def remove_permission(admin: Page, base: str, newbie: Page) -> None:
    admin.goto(f"{base}/settings/roles")
    admin.get_by_role("button", name="Job runners", exact=True).click()
    grid = admin.get_by_role("form", name="Permissions of Job runners")
    expect(grid.get_by_label("jobs:write", exact=True)).to_be_checked()
    grid.get_by_label("jobs:write", exact=True).uncheck()
    grid.get_by_role("button", name="Save permissions of Job runners").click()
    expect(admin.get_by_text("Saved the permissions of Job runners.")).to_be_visible()
    assert_accessible(admin, "roles")
    screenshot(admin, "settings-roles")
    newbie.reload()
    expect(newbie.get_by_role("heading", name="Jobs", exact=True)).to_be_visible()
    expect(newbie.get_by_text("Needs the jobs:write permission.")).to_be_visible()
    expect(newbie.get_by_role("link", name="New job")).to_have_count(0)
    refused = newbie.request.post(f"{base}/api/jobs", data={"name": "x"})
    assert refused.status == 403
    newbie.get_by_role("link", name="Settings").click()
    expect(newbie.get_by_role("navigation", name="Settings").get_by_role("link")).to_have_text(
        ["Account", "API tokens"]
    )
    expect(newbie.get_by_role("link", name="Monitoring")).to_have_count(0)
    newbie.goto(f"{base}/settings/users")
    expect(newbie.get_by_text("Users needs one of: users:read.")).to_be_visible()


def token_for_curl(page: Page, base: str) -> None:
    page.goto(f"{base}/settings/tokens")
    form = page.get_by_role("form", name="New API token")
    form.get_by_label("Token name").fill("ci")
    form.get_by_label("Role").select_option(label="Admin")
    form.get_by_role("button", name="Create token").click()
    secret = shown_once(page, "New API token")
    assert secret.startswith("zat_")
    expect(page.get_by_role("cell", name=f"…{secret[-4:]}")).to_be_visible()
    assert_accessible(page, "tokens")
    screenshot(page, "settings-tokens")
    answer = subprocess.run(
        ["curl", "-sS", "--fail", "-H", f"Authorization: Bearer {secret}", f"{base}/api/jobs"],
        capture_output=True,
        text=True,
        timeout=15,
        check=True,
    )
    assert json.loads(answer.stdout) == []  # the Admin role reads the (empty) job list
    # The same token is refused once revoked in the UI.
    page.get_by_role("button", name="Revoke token ci").click()
    page.get_by_role("dialog", name="Confirm").get_by_role("button", name="Revoke").click()
    expect(page.get_by_text("Revoked the token ci.")).to_be_visible()
    code = subprocess.run(
        ["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}",
         "-H", f"Authorization: Bearer {secret}", f"{base}/api/jobs"],
        capture_output=True, text=True, timeout=15, check=True,
    ).stdout  # fmt: skip
    assert code == "401"


def secret_variable(page: Page, base: str) -> None:
    page.goto(f"{base}/settings/variables")
    form = page.get_by_role("form", name="New variable")
    form.get_by_label("Variable name").fill("DB_PASSWORD")
    form.get_by_label("Secret (write-only)").check()
    form.get_by_label("Value", exact=True).fill(SECRET_VALUE)
    form.get_by_label("Allow in scripts").check()
    expect(form.get_by_role("note")).to_contain_text("gets its value as GLOBALVAR_DB_PASSWORD")
    screenshot(page, "settings-variables")
    form.get_by_role("button", name="Create variable").click()
    expect(page.get_by_text("Saved DB_PASSWORD.")).to_be_visible()
    expect(page.get_by_role("cell", name="secret (set, hidden)")).to_be_visible()
    assert SECRET_VALUE not in page.content()
    page.reload()
    page.get_by_role("button", name="Edit DB_PASSWORD").click()
    expect(
        page.get_by_role("form", name="Edit DB_PASSWORD").get_by_label("Value", exact=True)
    ).to_have_value("")
    assert SECRET_VALUE not in page.content()
    listed = page.request.get(f"{base}/api/global-variables").json()
    assert [(v["name"], v["value"], v["has_value"]) for v in listed] == [("DB_PASSWORD", "", True)]
    assert_accessible(page, "variables")


def webhook_target_test(page: Page, base: str, target: HttpTarget) -> None:
    page.goto(f"{base}/settings/notifications")
    form = page.get_by_role("form", name="New target")
    form.get_by_label("Target name").fill("ops hook")
    form.get_by_label("Kind").select_option("webhook")
    form.get_by_label("Address").fill(f"{target.base_url}/hook")
    form.get_by_label("Signing secret").fill("hook-signing-secret")
    form.get_by_label("firing_skipped").check()
    form.get_by_role("button", name="Create target").click()
    expect(page.get_by_text("Saved the target ops hook.")).to_be_visible()
    row = page.get_by_role("row", name=re.compile("^ops hook"))
    expect(row).to_contain_text("firing_skipped")
    expect(row).to_contain_text("signed")
    seen = len(target.requests)
    row.get_by_role("button", name="Send a test to ops hook").click()
    expect(page.get_by_text("The test notice reached ops hook.")).to_be_visible()
    delivered = target.wait_for_requests(seen + 1, timeout=15)[-1]
    assert (delivered.method, delivered.path) == ("POST", "/hook")
    assert verify("hook-signing-secret", delivered.headers, delivered.body)
    assert "hook-signing-secret" not in page.content()
    assert_accessible(page, "notifications")
    screenshot(page, "settings-notifications")


def smtp_with_test(page: Page, base: str, mail: MailServer) -> None:
    page.goto(f"{base}/settings/smtp")
    form = page.get_by_role("form", name="SMTP settings")
    form.get_by_label("Send email").check()
    form.get_by_label("Host").fill("127.0.0.1")
    form.get_by_label("Port").fill(str(mail.port))
    form.get_by_label("Username").fill(mail.user)
    form.get_by_label("Password").fill(mail.password)
    form.get_by_label("From address").fill("zilean@example.com")
    form.get_by_role("button", name="Save SMTP settings").click()
    expect(page.get_by_text("SMTP settings saved.")).to_be_visible()
    page.get_by_label("Send a test to").fill("ops@example.com")
    page.get_by_role("button", name="Send test").click()
    expect(page.get_by_text("A test message was sent to ops@example.com.")).to_be_visible()
    deadline = time.monotonic() + 10
    while not mail.messages and time.monotonic() < deadline:
        time.sleep(0.05)
    assert [m["To"] for m in mail.messages] == ["ops@example.com"]
    page.reload()
    expect(page.get_by_label("Password")).to_have_value("")
    expect(page.get_by_label("Password")).to_have_attribute(
        "placeholder", "stored; leave empty to keep it"
    )
    assert mail.password not in page.content()
    assert_accessible(page, "smtp")
    screenshot(page, "settings-smtp")


def retention(page: Page, base: str) -> None:
    page.goto(f"{base}/settings/retention")
    form = page.get_by_role("form", name="Keep ended queue jobs")
    form.get_by_label("Keep ended queue jobs (days)").fill("14")
    form.get_by_role("button", name="Save").click()
    expect(page.get_by_text("Ended queue jobs are kept 14 days.")).to_be_visible()
    audit = page.get_by_role("form", name="Keep audit entries")
    audit.get_by_label("Keep audit entries (days)").fill("400")
    audit.get_by_role("button", name="Save").click()
    expect(page.get_by_text("Audit entries are kept 400 days.")).to_be_visible()
    queue_days = page.request.get(f"{base}/api/settings/queue-jobs").json()
    audit_days = page.request.get(f"{base}/api/settings/audit").json()
    assert (queue_days, audit_days) == (
        {"queue_job_retention_days": 14},
        {"audit_retention_days": 400},
    )


def disable_and_reset(page: Page, base: str, newbie: Page) -> None:
    """Disable ends the user's session; enable lets them back; reset gives a new temporary
    password; delete removes a pending invitee."""
    page.goto(f"{base}/settings/users")
    page.get_by_role("button", name=f"Disable {NEWBIE}").click()
    dialog = page.get_by_role("dialog", name="Confirm")
    expect(dialog).to_contain_text("they are signed out")
    dialog.get_by_role("button", name="Disable").click()
    expect(page.get_by_text(f"Disabled {NEWBIE}.")).to_be_visible()
    newbie.goto(f"{base}/")
    expect(newbie).to_have_url(re.compile("/login"))
    page.get_by_role("button", name=f"Enable {NEWBIE}").click()
    expect(page.get_by_text(f"Enabled {NEWBIE}.")).to_be_visible()
    page.get_by_role("button", name=f"Reset password of {NEWBIE}").click()
    page.get_by_role("dialog", name="Confirm").get_by_role("button", name="Reset password").click()
    temporary = shown_once(page, f"Temporary password for {NEWBIE}")
    sign_in(newbie, base, NEWBIE, temporary)
    expect(newbie.get_by_text(f"{NEWBIE} is using a temporary password.")).to_be_visible()
    page.get_by_role("button", name="Delete invited@example.com").click()
    page.get_by_role("dialog", name="Confirm").get_by_role("button", name="Delete").click()
    expect(page.get_by_text("Deleted invited@example.com.")).to_be_visible()
    expect(page.get_by_role("cell", name="invited@example.com")).to_have_count(0)


def mcp_token_and_snippet(page: Page, base: str) -> None:
    page.goto(f"{base}/settings/mcp")
    toggle = page.get_by_label("Serve /mcp to agents")
    expect(toggle).not_to_be_checked()
    toggle.click()  # saved at once; the box follows the stored setting
    expect(page.get_by_text("MCP is on.")).to_be_visible()
    expect(toggle).to_be_checked()
    assert page.request.get(f"{base}/api/settings/mcp").json()["enabled"] is True
    form = page.get_by_role("form", name="New MCP token")
    form.get_by_label("Token name").fill("claude")
    form.get_by_label("Role").select_option(label="Job runners")
    form.get_by_role("button", name="Create MCP token").click()
    token = shown_once(page, "New MCP token")
    assert token.startswith("zmcp_")
    code = page.get_by_label("Claude Code configuration").inner_text()
    assert f"claude mcp add --transport http zilean {base}/mcp" in code
    assert f"Authorization: Bearer {token}" in code
    vscode = json.loads(page.get_by_label("VS Code (.vscode/mcp.json) configuration").inner_text())
    assert vscode["servers"]["zilean"] == {
        "type": "http",
        "url": f"{base}/mcp",
        "headers": {"Authorization": f"Bearer {token}"},
    }
    # The snippet's URL and token really reach the MCP endpoint.
    listed = page.request.post(
        f"{base}/mcp",
        headers={
            "Authorization": f"Bearer {token}",
            "Accept": "application/json, text/event-stream",
        },
        data={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
    )
    assert listed.ok, listed.text()
    assert_accessible(page, "mcp")
    screenshot(page, "settings-mcp")
    page.reload()
    expect(page.get_by_role("cell", name="claude", exact=True)).to_be_visible()
    assert token not in page.content()


def audit_for_one_user(page: Page, base: str, newbie: Page) -> str:
    """Give jobs:write back, let the newbie create a job, then filter the log to them;
    return the job's id."""
    page.goto(f"{base}/settings/roles")
    page.get_by_role("button", name="Job runners", exact=True).click()
    grid = page.get_by_role("form", name="Permissions of Job runners")
    grid.get_by_label("jobs:write", exact=True).check()
    grid.get_by_role("button", name="Save permissions of Job runners").click()
    expect(page.get_by_text("Saved the permissions of Job runners.")).to_be_visible()
    made = newbie.request.post(
        f"{base}/api/jobs",
        data={"name": "newbie job", "url": "http://127.0.0.1:9/x", "schedule_type": "cron",
              "cron_expression": "0 3 * * *"},
    )  # fmt: skip
    assert made.status == 201, made.text()
    page.goto(f"{base}/settings/audit")
    table = page.get_by_role("table", name="Audit entries")
    expect(table.get_by_role("cell", name=ADMIN).first).to_be_visible()
    page.get_by_label("User").select_option(label=NEWBIE)
    page.get_by_role("button", name="Apply filters").click()
    rows = table.locator(":scope > tbody > tr")
    expect(rows.locator(":scope > td:nth-child(3)")).to_have_text(
        ["job.create", "user.password_reset", "auth.login"]
    )
    expect(rows.locator(":scope > td:nth-child(2)")).to_have_text([NEWBIE] * 3)
    page.get_by_label("User").select_option(label=ADMIN)
    page.get_by_label("Action").fill("role.update")
    page.get_by_role("button", name="Apply filters").click()
    expect(rows).to_have_count(3)  # granted, removed, granted again
    removal = rows.nth(1)
    removal.get_by_text("1 field changed").click()
    change = removal.get_by_role("row", name=re.compile("^permissions"))
    expect(change.get_by_role("cell").nth(0)).to_have_text('["jobs:read","jobs:write"]')
    expect(change.get_by_role("cell").nth(1)).to_have_text('["jobs:read"]')
    assert_accessible(page, "audit log")
    screenshot(page, "settings-audit")
    job_id: str = made.json()["id"]
    return job_id


def job_alarm(page: Page, base: str, job_id: str) -> None:
    page.goto(f"{base}/jobs/{job_id}")
    alarms = page.get_by_role("group", name="Invocation alarms")
    expect(alarms.get_by_text("No invocation alarm on this job.")).to_be_visible()
    alarms.get_by_label("At or above").fill("3")
    alarms.get_by_label("Window (minutes)").fill("15")
    alarms.get_by_role("button", name="Add alarm").click()
    expect(
        alarms.get_by_text(re.compile(r"^3 or more failed attempts in 15 minutes: ok"))
    ).to_be_visible()
    stored = page.request.get(f"{base}/api/jobs/{job_id}/alarms").json()
    assert [(a["metric"], a["threshold"], a["window_minutes"]) for a in stored] == [
        ("failed", 3, 15)
    ]
    assert_accessible(page, "job page with an alarm")
    page.get_by_role("combobox", name=re.compile(r"^Window(?! \()")).select_option("7 days")
    expect(page.get_by_role("img", name="Call volume")).to_be_visible()
    expect(page.get_by_text("Activity could not be read")).to_have_count(0)


SECTIONS = ("account", "volumes", "smtp", "retention", "users", "roles", "tokens",
            "variables", "notifications", "mcp", "audit")  # fmt: skip


def every_page_at_both_widths(page: Page, base: str) -> None:
    """axe and overflow on every settings section, monitoring and the queue inspector."""
    for name in SECTIONS:
        page.goto(f"{base}/settings/{name}")
        expect(page.get_by_role("region", name=re.compile("."))).not_to_have_count(0)
        expect(page.locator(".notice-loading")).to_have_count(0)
        if name in ("account", "volumes", "retention"):
            assert_accessible(page, f"settings: {name}")
            screenshot(page, f"settings-{name}")
        assert_no_horizontal_overflow(page, f"settings {name} at 1280 px")
        page.set_viewport_size(PHONE)
        assert_no_horizontal_overflow(page, f"settings {name} at 390 px")
        page.set_viewport_size(DESKTOP)
    page.goto(f"{base}/monitoring")
    expect(page.get_by_role("table", name="Services")).to_be_visible()
    expect(page.get_by_role("img", name=re.compile("^core CPU"))).to_be_visible(timeout=15_000)
    expect(page.get_by_role("cell", name="worker", exact=True)).to_be_visible()
    expect(page.get_by_role("row", name=re.compile("^worker never seen"))).to_contain_text(
        "Start zilean worker"
    )
    assert_accessible(page, "monitoring")
    screenshot(page, "monitoring")
    page.get_by_label("Window").select_option(label="1 hour")
    expect(page.get_by_text(re.compile(r"^60 slots of 1 min "))).to_be_visible()
    page.get_by_role("img", name=re.compile("^Attempts per slot")).scroll_into_view_if_needed()
    screenshot(page, "monitoring-metrics")
    for path in ("/monitoring", "/queue"):
        page.goto(f"{base}{path}")
        page.set_viewport_size(PHONE)
        assert_no_horizontal_overflow(page, f"{path} at 390 px")
        page.set_viewport_size(DESKTOP)


def sign_out_elsewhere(admin: Page, base: str, browser: Browser) -> None:
    """Account: one click ends the admin's session in another browser, not this one."""
    elsewhere_context: Any = browser.new_context(viewport=DESKTOP)  # type: ignore[arg-type]
    elsewhere = elsewhere_context.new_page()
    sign_in(elsewhere, base, ADMIN)
    expect(elsewhere.get_by_role("heading", name="Jobs", exact=True)).to_be_visible()
    admin.goto(f"{base}/settings/account")
    admin.get_by_role("button", name="Sign out everywhere else").click()
    admin.get_by_role("button", name="Sign out other sessions").click()
    expect(admin.get_by_text("Signed out 1 other session.")).to_be_visible()
    elsewhere.goto(f"{base}/")
    expect(elsewhere).to_have_url(re.compile(r"/login"))
    admin.reload()
    expect(admin.get_by_role("heading", name="Account")).to_be_visible()
    elsewhere_context.close()


def drive(browser: Browser, base: str, target: HttpTarget, mail: MailServer) -> None:
    admin = browser.new_page(viewport=DESKTOP)  # type: ignore[arg-type]
    sign_in(admin, base, ADMIN)
    expect(admin.get_by_role("heading", name="Jobs", exact=True)).to_be_visible()
    make_role(admin, base)
    temporary = create_user(admin, base)
    newbie_context: Any = browser.new_context(viewport=DESKTOP)  # type: ignore[arg-type]
    newbie = newbie_context.new_page()
    forced_change(newbie, base, temporary)
    remove_permission(admin, base, newbie)
    token_for_curl(admin, base)
    secret_variable(admin, base)
    webhook_target_test(admin, base, target)
    smtp_with_test(admin, base, mail)
    mcp_token_and_snippet(admin, base)
    job_id = audit_for_one_user(admin, base, newbie)
    job_alarm(admin, base, job_id)
    retention(admin, base)
    disable_and_reset(admin, base, newbie)
    sign_out_elsewhere(admin, base, browser)
    every_page_at_both_widths(admin, base)


async def test_settings_pages_users_roles_tokens_secrets_targets_mcp_and_audit(
    database_url: str, engine: AsyncEngine
) -> None:
    require_built_app()
    async with engine.begin() as conn:
        super_role = await system_role_id(conn, SystemRole.SUPER_ADMIN)
    await add_user(engine, ADMIN, [super_role], super_admin=True)

    def run(base: str, target: HttpTarget, mail: MailServer) -> None:
        with sync_playwright() as playwright:
            browser = launch(playwright)
            try:
                drive(browser, base, target, mail)
            finally:
                browser.close()

    with (
        http_target() as target,
        mail_server() as mail,
        live_server(origin_apps(database_url, engine)) as base,
    ):
        await asyncio.to_thread(run, base, target, mail)
