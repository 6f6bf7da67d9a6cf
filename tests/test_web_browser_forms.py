"""The dashboard's writing pages end to end in headless Chromium (Playwright): create a job from
the form (its schedule previewed as it is typed, a refused field named, the plan reviewed before
the save), edit it (the plan shows each changed field, old and new), backfill a range (the dry
run first; a real node then runs each occurrence), pause it with a reason and an end; a write
without the page's CSRF value is refused.

Screenshots go to the test's temporary folder; with ``PGPULSE_DOCS_SCREENSHOTS=1`` they also
replace ``docs/dashboard-new.png``, ``docs/dashboard-edit.png`` and
``docs/dashboard-backfill.png`` (docs/dashboard.md shows them).
"""

from __future__ import annotations

import asyncio
import os
import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from pgpulse.core.policy import WebSettings
from pgpulse.node.handlers import RunContext
from web_helpers import LiveServer, node_config, sync_token

CHROMIUM = "/usr/bin/chromium"
DOCS = Path(__file__).resolve().parent.parent / "docs"

pytestmark = pytest.mark.skipif(
    not Path(CHROMIUM).exists(),
    reason=f"{CHROMIUM} is missing: apt-get install -y chromium (CI installs it)",
)


async def work(ctx: RunContext) -> str:
    await asyncio.sleep(0.01)
    return f"done {ctx.scheduled_for:%Y-%m-%d}"


def _shot(page: Any, tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    page.screenshot(path=str(path), full_page=True)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 10_000
    if os.environ.get("PGPULSE_DOCS_SCREENSHOTS") == "1":
        DOCS.mkdir(exist_ok=True)
        shutil.copyfile(path, DOCS / name)


@pytest.mark.timeout(120)
def test_create_edit_and_backfill_a_job_in_a_real_browser(
    dsn: str, db: Any, tmp_path: Path
) -> None:
    sync_api = pytest.importorskip("playwright.sync_api")
    expect = sync_api.expect
    acme = sync_token(dsn, "acme")
    settings = WebSettings(refresh_seconds=0.5)
    with (
        LiveServer(
            dsn, settings, handlers={"demo.work": work}, node_config=node_config()
        ) as server,
        sync_api.sync_playwright() as playwright,
    ):
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 800})
            page.set_default_timeout(15_000)
            page.goto(f"{server.base_url}/ui/login")
            page.fill("#token", acme)
            page.click("button[type=submit]")
            page.wait_for_url("**/ui/")

            # -- create ------------------------------------------------------------------------
            page.click("[data-testid=new-job]")
            page.wait_for_url("**/ui/jobs/new")
            assert page.locator("[data-testid=field-tenant]").input_value() == "acme"
            page.fill("[data-testid=field-name]", "invoice-sync")
            page.fill("[data-testid=field-schedule]", "0 9 * * 1-5")
            page.fill("[data-testid=field-timezone]", "Europe/Paris")
            words = page.locator("[data-testid=preview-words]")
            expect(words).to_contain_text("09:00")
            rows = page.locator("[data-testid=preview-table] tr")
            expect(rows).to_have_count(6)  # the header, then five occurrences
            assert rows.nth(0).inner_text().split("\t") == ["UTC", "Europe/Paris"]
            utc, local = rows.nth(1).inner_text().split("\t")
            assert local[11:19] == "09:00:00" and local[19:] in ("+01:00", "+02:00")
            assert utc.endswith("Z") and utc[11:16] in ("08:00", "07:00")
            # a schedule the API refuses: its message, under the field, as it is typed
            page.fill("[data-testid=field-schedule]", "0 25 * * *")
            expect(page.locator("[data-testid=preview-error]")).to_contain_text("schedule")
            page.fill("[data-testid=field-schedule]", "0 9 * * 1-5")
            expect(rows).to_have_count(6)
            page.fill("[data-testid=field-handler]", "demo.work")
            page.fill("[data-testid=field-payload]", '{"ledger": "eu"}')
            # a refused field: the API's one line, the field marked, nothing written
            page.fill("[data-testid=field-max_attempts]", "0")
            page.click("[data-testid=plan-button]")
            expect(page.locator("[data-testid=form-error]")).to_have_text(
                "max_attempts must be at least 1, got 0"
            )
            assert page.locator("[data-testid=field-max_attempts]").get_attribute(
                "aria-invalid"
            ) == ("true")
            assert page.locator("[data-testid=save-button]").is_disabled()
            page.fill("[data-testid=field-max_attempts]", "3")
            page.click("[data-testid=plan-button]")
            expect(page.locator("[data-testid=plan-lines]")).to_contain_text(
                "+ acme/invoice-sync: create"
            )
            expect(page.locator("[data-testid=form-error]")).to_be_hidden()
            assert db.execute("SELECT count(*) AS n FROM pgpulse_jobs").fetchone()["n"] == 0
            _shot(page, tmp_path, "dashboard-new.png")
            page.click("[data-testid=save-button]")
            page.wait_for_url("**/ui/jobs/*")
            expect(page.locator("h1")).to_contain_text("invoice-sync")
            job = db.execute("SELECT * FROM pgpulse_jobs").fetchone()
            assert (job["tenant"], job["schedule"], job["timezone"], job["max_attempts"]) == (
                "acme",
                "0 9 * * 1-5",
                "Europe/Paris",
                3,
            )
            assert job["payload"] == {"ledger": "eu"} and job["source"] == "api"

            # -- edit: a change is reviewed (old and new) before it is saved ------------------
            page.click("[data-testid=edit-link]")
            page.wait_for_url(f"**/ui/jobs/{job['id']}/edit")
            assert page.locator("[data-testid=field-schedule]").input_value() == "0 9 * * 1-5"
            page.fill("[data-testid=field-schedule]", "30 6 * * *")
            page.fill("[data-testid=field-max_attempts]", "5")
            page.select_option("[data-testid=field-overlap]", "replace")
            expect(page.locator("[data-testid=preview-words]")).to_contain_text("06:30")
            page.click("[data-testid=plan-button]")
            lines = page.locator("[data-testid=plan-lines]")
            expect(lines).to_contain_text("~ acme/invoice-sync: update")
            text = lines.inner_text()
            assert '    schedule: "0 9 * * 1-5" -> "30 6 * * *"' in text
            assert "    max_attempts: 3 -> 5" in text
            assert '    overlap: "forbid" -> "replace"' in text
            assert "payload" not in text  # an unchanged field is not sent, nor shown
            _shot(page, tmp_path, "dashboard-edit.png")
            # a change after the review needs another review
            page.fill("[data-testid=field-max_attempts]", "6")
            assert page.locator("[data-testid=save-button]").is_disabled()
            page.fill("[data-testid=field-max_attempts]", "5")
            page.click("[data-testid=plan-button]")
            page.click("[data-testid=save-button]")
            page.wait_for_url(f"**/ui/jobs/{job['id']}")
            expect(page.locator("[data-testid=history] tr[data-action=update]")).to_have_count(1)
            edited = db.execute("SELECT * FROM pgpulse_jobs").fetchone()
            assert (edited["schedule"], edited["max_attempts"], edited["overlap"]) == (
                "30 6 * * *",
                5,
                "replace",
            )
            assert edited["revision"] == job["revision"] + 1

            # -- backfill: the dry run, then the runs ------------------------------------------
            page.click("[data-testid=backfill-link]")
            page.wait_for_url(f"**/ui/jobs/{job['id']}/backfill")
            today = datetime.now(UTC).date()
            start, end = today - timedelta(days=3), today - timedelta(days=1)
            page.fill("[data-testid=backfill-from]", f"{start}T00:00:00Z")
            page.fill("[data-testid=backfill-to]", f"{end}T23:59:59Z")
            page.check("[data-testid=backfill-only-all]")
            page.fill("[data-testid=backfill-max]", "2")
            page.click("[data-testid=dry-run-button]")
            expect(page.locator("[data-testid=plan-summary]")).to_have_text(
                "3 of 3 occurrences would run"
            )
            assert page.locator("#plan-rows tr").count() == 3
            assert db.execute("SELECT count(*) AS n FROM pgpulse_occurrences").fetchone()["n"] == 0
            _shot(page, tmp_path, "dashboard-backfill.png")
            page.click("[data-testid=backfill-button]")
            expect(page.locator("[data-testid=plan-summary]")).to_contain_text(
                "3 occurrences queued"
            )
            page.click("[data-testid=backfill-done]")
            page.wait_for_url(f"**/ui/jobs/{job['id']}")
            expect(page.locator('tr[data-outcome="succeeded"]')).to_have_count(3)
            ran = db.execute(
                "SELECT scheduled_for FROM pgpulse_runs WHERE kind = 'backfill' ORDER BY 1"
            ).fetchall()
            # 06:30 in Paris (winter or summer time), on each of the three days
            assert [r["scheduled_for"].date() for r in ran] == [
                start,
                start + timedelta(days=1),
                end,
            ]

            # -- pause with a reason and an end --------------------------------------------------
            page.fill("[data-testid=pause-reason]", "ledger migration")
            page.fill("[data-testid=pause-until]", "2h")
            page.click("[data-testid=pause-invoice-sync]")
            expect(page.locator("[data-testid=job-pause]")).to_contain_text("ledger migration")
            paused = db.execute("SELECT status, pause_reason FROM pgpulse_jobs").fetchone()
            assert (paused["status"], paused["pause_reason"]) == ("paused", "ledger migration")

            # -- a write without the page's CSRF value, from the signed-in page itself ---------
            status = page.evaluate(
                """() => fetch('/ui/api/v1/jobs', {method: 'POST',
                    headers: {'Content-Type': 'application/json'},
                    body: JSON.stringify({name: 'forged', schedule: '@hourly',
                                          handler: 'demo.work'})}).then(r => r.status)"""
            )
            assert status == 403
            assert db.execute("SELECT count(*) AS n FROM pgpulse_jobs").fetchone()["n"] == 1
        finally:
            browser.close()
