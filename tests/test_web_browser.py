"""The dashboard end to end in headless Chromium (Debian's ``chromium``, driven by Playwright):
sign in with a tenant token, see the jobs, search and filter them, trigger one and watch its
run appear (a real node runs it), pause it, see failures that need attention; a job's
occurrence grid (hover, click to the run), the runs page and a run's page with every attempt
and the output, the cluster page's handlers and shard map, the alerts slot; another tenant
sees none of it, and a revoked token is signed out at once.

Screenshots go to the test's temporary folder; with ``PGPULSE_DOCS_SCREENSHOTS=1`` they also
replace ``docs/dashboard.png``, ``docs/dashboard-job.png``, ``docs/dashboard-run.png`` and
``docs/dashboard-cluster.png`` (the README shows them).
"""

from __future__ import annotations

import asyncio
import http.server
import os
import re
import shutil
import threading
from pathlib import Path
from typing import Any

import httpx
import pytest

from pgpulse.core.policy import WebSettings
from pgpulse.node.handlers import HandlerFailed, RunContext
from web_helpers import LiveServer, node_config, sync_token

CHROMIUM = "/usr/bin/chromium"
DOCS = Path(__file__).resolve().parent.parent / "docs"

pytestmark = pytest.mark.skipif(
    not Path(CHROMIUM).exists(),
    reason=f"{CHROMIUM} is missing: apt-get install -y chromium (CI installs it)",
)


async def work(ctx: RunContext) -> str:
    """A handler that takes a little time, more for later occurrences (a visible chart)."""
    await asyncio.sleep(0.05 + (ctx.scheduled_for.second % 5) * 0.04)
    return f"done {ctx.scheduled_for:%H:%M:%S}"


async def flaky(ctx: RunContext) -> str:
    """A handler whose upstream is down."""
    raise HandlerFailed("upstream answered 503 Service Unavailable")


async def retry_once(ctx: RunContext) -> str:
    """A handler whose first attempt times out upstream and whose retry succeeds."""
    if ctx.attempt == 1:
        raise HandlerFailed("upstream timed out after 30 s", output="fetched 0 of 42 rows")
    return "fetched 42 of 42 rows\nwrote 42 rows to ledger"


def _create(client: httpx.Client, **body: Any) -> dict[str, Any]:
    response = client.post("/api/v1/jobs", json=body)
    assert response.status_code == 201, response.text
    return dict(response.json())


def _shot(page: Any, tmp_path: Path, name: str) -> Path:
    path = tmp_path / name
    page.screenshot(path=str(path), full_page=True)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 10_000
    if os.environ.get("PGPULSE_DOCS_SCREENSHOTS") == "1":
        DOCS.mkdir(exist_ok=True)
        shutil.copyfile(path, DOCS / name)
    return path


def _revoke(dsn: str, token: str) -> None:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "UPDATE pgpulse_api_tokens SET revoked_at = now() WHERE prefix = %s", (token[:12],)
        )


@pytest.mark.timeout(120)
def test_dashboard_in_a_real_browser(dsn: str, db: Any, tmp_path: Path) -> None:
    sync_api = pytest.importorskip("playwright.sync_api")
    acme, globex = sync_token(dsn, "acme"), sync_token(dsn, "globex")
    settings = WebSettings(refresh_seconds=0.4)
    handlers = {"demo.work": work, "demo.flaky": flaky, "demo.retry_once": retry_once}
    with LiveServer(dsn, settings, handlers=handlers, node_config=node_config()) as server:
        with httpx.Client(
            base_url=server.base_url, headers={"Authorization": f"Bearer {acme}"}
        ) as api:
            report = _create(
                api,
                name="nightly-report",
                schedule="30 2 * * *",
                timezone="Europe/Paris",
                handler="demo.work",
            )
            _create(api, name="heartbeat", schedule="@every 1s", handler="demo.work")
            invoices = _create(
                api,
                name="sync-invoices",
                schedule="*/15 * * * *",
                timezone="America/New_York",
                handler="demo.flaky",
                max_attempts=1,
            )
            assert api.post(f"/api/v1/jobs/{invoices['id']}/trigger").status_code == 200
            ledger = _create(
                api,
                name="ledger-import",
                schedule="0 4 * * *",
                handler="demo.retry_once",
                max_attempts=3,
                retry_backoff=0.001,
            )
            assert api.post(f"/api/v1/jobs/{ledger['id']}/trigger").status_code == 200
        with httpx.Client(
            base_url=server.base_url, headers={"Authorization": f"Bearer {globex}"}
        ) as api:
            _create(api, name="globex-secret", schedule="@hourly", handler="demo.work")

        with sync_api.sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True)
            try:
                page = browser.new_page(viewport={"width": 1280, "height": 800})
                page.set_default_timeout(15_000)
                page.goto(f"{server.base_url}/ui/")
                assert page.url.endswith("/ui/login")
                page.fill("#token", acme)
                page.click("button[type=submit]")
                page.wait_for_selector('tr[data-job="nightly-report"]')
                assert page.locator("[data-testid=who]").inner_text() == "tenant acme"
                assert page.locator("tr[data-job]").count() == 4
                assert "globex-secret" not in page.content()

                # search and filters: a GET form, so the filtered page is a link that refreshes
                page.fill("[data-testid=filter-q]", "INVOICES")
                page.click("[data-testid=filter-apply]")
                page.wait_for_url("**/ui/?q=INVOICES*")
                sync_api.expect(page.locator("tr[data-job]")).to_have_count(1)
                sync_api.expect(page.locator('tr[data-job="sync-invoices"]')).to_be_visible()
                page.select_option("[data-testid=filter-status]", "paused")
                page.click("[data-testid=filter-apply]")
                sync_api.expect(page.locator("[data-testid=no-jobs]")).to_have_text(
                    "No job matches these filters."
                )
                page.goto(f"{server.base_url}/ui/")

                # trigger: the node runs it and the page shows the outcome without a reload
                page.click("[data-testid=trigger-nightly-report]")
                sync_api.expect(page.locator("#notice")).to_have_text("triggered nightly-report")
                sync_api.expect(page.locator("[data-testid=outcome-nightly-report]")).to_have_text(
                    "succeeded"
                )
                sync_api.expect(
                    page.locator("[data-testid=attention-sync-invoices]")
                ).to_contain_text("upstream answered 503")
                sync_api.expect(page.locator("[data-testid=outcome-heartbeat]")).to_have_text(
                    "succeeded"
                )
                page.wait_for_timeout(1500)  # a few more heartbeat runs for the pictures
                recent = page.locator('[data-testid=recent-heartbeat] a[data-state="succeeded"]')
                assert recent.count() >= 2  # the strip of recent runs, each a link to its run
                _shot(page, tmp_path, "dashboard.png")

                page.click('tr[data-job="nightly-report"] a')
                page.wait_for_selector('tr[data-outcome="succeeded"]')
                assert page.locator("svg.chart polyline.series-duration").count() == 1
                page.click("[data-testid=pause-nightly-report]")
                sync_api.expect(page.locator("[data-testid=job-status]")).to_have_text("paused")
                status = db.execute(
                    "SELECT status FROM pgpulse_jobs WHERE id = %s", (report["id"],)
                ).fetchone()["status"]
                assert status == "paused"

                page.click('a[href="/ui/"]')
                page.click('tr[data-job="heartbeat"] a')
                page.wait_for_selector('tr[data-outcome="succeeded"]')
                # the occurrence grid: a cell per occurrence; hover says what became of it
                cell = page.locator('[data-testid=grid] a[data-state="succeeded"]').first
                cell.hover()
                # (attempt 1, or 2 when a loaded machine let the first one's lease run out)
                assert re.search(
                    r" UTC · succeeded · attempt \d+ on web-test-node · lag ",
                    str(cell.get_attribute("data-tip")),
                )
                _shot(page, tmp_path, "dashboard-job.png")
                cell = page.locator('[data-testid=grid] a[data-state="succeeded"]').first
                at = cell.get_attribute("data-at")
                cell.click()  # ...and a click opens its run
                page.wait_for_url("**/ui/runs/*")
                sync_api.expect(page.locator("[data-testid=run-outcome]")).to_have_text("succeeded")
                assert (
                    at is not None and at[:19].replace("T", " ") in page.locator("h1").inner_text()
                )

                # the runs page: filtered to the retried job, then its run with both attempts
                page.click('nav a[href="/ui/runs"]')
                page.fill("[data-testid=filter-q]", "ledger")
                page.click("[data-testid=filter-apply]")
                row = page.locator('tr[data-job="ledger-import"][data-outcome="succeeded"]')
                sync_api.expect(row).to_have_count(1)
                assert page.locator('tr[data-job="heartbeat"]').count() == 0
                row.locator("a[data-testid^=run-link]").click()
                sync_api.expect(page.locator("[data-testid=run-attempts]")).to_have_text("2")
                sync_api.expect(page.locator("tr[data-attempt]")).to_have_count(2)
                sync_api.expect(page.locator("[data-testid=attempt-error-1]")).to_have_text(
                    "upstream timed out after 30 s"
                )
                assert (
                    page.locator("[data-testid=attempt-node-2]")
                    .inner_text()
                    .startswith("web-test-node")
                )
                sync_api.expect(page.locator("[data-testid=run-output]")).to_have_text(
                    "fetched 42 of 42 rows\nwrote 42 rows to ledger"
                )
                page.click("[data-testid=attempt-output-1] summary")
                sync_api.expect(page.locator("[data-testid=attempt-output-1] pre")).to_have_text(
                    "fetched 0 of 42 rows"
                )
                _shot(page, tmp_path, "dashboard-run.png")

                page.click('nav a[href="/ui/alerts"]')
                sync_api.expect(page.locator("[data-testid=no-alerts]")).to_be_visible()

                page.click('a[href="/ui/cluster"]')
                node = page.locator('tr[data-node="web-test-node"]')
                sync_api.expect(node).to_contain_text("64: 0 1 2")
                sync_api.expect(page.locator("[data-testid=leader]")).to_have_text("web-test-node")
                sync_api.expect(page.locator("[data-testid=handlers-web-test-node]")).to_have_text(
                    "demo.flaky demo.retry_once demo.work"
                )
                shards = page.locator("[data-testid=shard-map] [data-shard]")
                sync_api.expect(shards).to_have_count(64)
                assert page.locator('[data-shard][data-owner="web-test-node"]').count() == 64
                _shot(page, tmp_path, "dashboard-cluster.png")

                # another tenant: sees none of acme's jobs, and acme's job page is a plain 404
                other = browser.new_page()
                other.goto(f"{server.base_url}/ui/login")
                other.fill("#token", globex)
                other.click("button[type=submit]")
                other.wait_for_selector('tr[data-job="globex-secret"]')
                assert other.locator("tr[data-job]").count() == 1
                assert "nightly-report" not in other.content()
                response = other.goto(f"{server.base_url}/ui/jobs/{report['id']}")
                assert response is not None and response.status == 404
                assert other.locator("[data-testid=error]").inner_text() == (
                    f"no job with id {report['id']}"
                )

                # revoking acme's token signs its browser out at the next refresh
                _revoke(dsn, acme)
                page.wait_for_url("**/ui/login")
            finally:
                browser.close()


class _Attacker:
    """Another site (http://localhost:PORT, not the dashboard's 127.0.0.1) whose page posts a
    form to the dashboard as soon as it loads: ``/signin`` with the attacker's token, ``/signout``
    to sign the visitor out."""

    def __init__(self, dashboard: str, token: str) -> None:
        forms = {
            "/signin": f'<form method="post" action="{dashboard}/ui/login">'
            f'<input name="token" value="{token}"></form>',
            "/signout": f'<form method="post" action="{dashboard}/ui/logout"></form>',
        }

        class Page(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body = (
                    f"<html><body>{forms[self.path]}"
                    "<script>document.forms[0].submit()</script></body></html>"
                ).encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Page)
        self.url = f"http://localhost:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> _Attacker:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.mark.timeout(120)
def test_a_cross_site_form_cannot_sign_a_browser_in_or_out(dsn: str) -> None:
    """Login CSRF: another site's page that posts the dashboard's sign-in
    form with the attacker's token must not sign the visitor in as the attacker, nor its
    sign-out form sign the visitor out; the dashboard's own form still works."""
    sync_api = pytest.importorskip("playwright.sync_api")
    attacker_token, visitor_token = sync_token(dsn, "evil"), sync_token(dsn, "acme")
    with (
        LiveServer(dsn, WebSettings()) as server,
        _Attacker(server.base_url, attacker_token) as attacker,
        sync_api.sync_playwright() as playwright,
    ):
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True)
        try:
            page = browser.new_page()
            page.set_default_timeout(15_000)
            with page.expect_response(f"{server.base_url}/ui/login") as posted:
                page.goto(f"{attacker.url}/signin")
            assert posted.value.status == 403
            assert page.context.cookies(server.base_url) == []  # no session was set
            page.goto(f"{server.base_url}/ui/")
            assert page.url.endswith("/ui/login")  # not signed in as the attacker

            page.fill("#token", visitor_token)  # the dashboard's own form signs in
            page.click("button[type=submit]")
            page.wait_for_selector("[data-testid=who]")
            assert page.locator("[data-testid=who]").inner_text() == "tenant acme"

            with page.expect_response(f"{server.base_url}/ui/logout") as posted:
                page.goto(f"{attacker.url}/signout")
            assert posted.value.status == 403
            page.goto(f"{server.base_url}/ui/")
            assert page.locator("[data-testid=who]").inner_text() == "tenant acme"
            page.click("button.link")  # its own sign-out button does sign out
            page.wait_for_url("**/ui/login")
        finally:
            browser.close()
