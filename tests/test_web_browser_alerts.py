"""An alert's whole life in headless Chromium (Debian's ``chromium``, driven by Playwright), with a
real node and a real webhook receiver on 127.0.0.1: a failing job fires an alert, the receiver
gets it, the alert shows on the alerts page, it is acknowledged from the page, the job recovers,
and the alert closes itself.

With ``PGPULSE_DOCS_SCREENSHOTS=1`` the screenshot also replaces ``docs/dashboard-alerts.png``
(the README shows it).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from notify_servers import HttpReceiver, run_http_receiver
from pgpulse.alerts.store import AlertStore
from pgpulse.core.egress import HttpAllowList
from pgpulse.core.policy import WebSettings
from pgpulse.db.database import open_pool
from pgpulse.node.handlers import HandlerFailed, RunContext
from test_engine import TRIGGERED_ONLY
from test_web_browser import CHROMIUM, _shot
from web_helpers import LiveServer, node_config, sync_token

pytestmark = pytest.mark.skipif(
    not Path(CHROMIUM).exists(),
    reason=f"{CHROMIUM} is missing: apt-get install -y chromium (CI installs it)",
)

#: Set while the export's upstream is down.
UPSTREAM_DOWN = threading.Event()


async def export(ctx: RunContext) -> str:
    """A handler that fails while :data:`UPSTREAM_DOWN` is set."""
    if UPSTREAM_DOWN.is_set():
        raise HandlerFailed("upstream answered 503 Service Unavailable")
    return "exported 42 rows"


def _set_up_alerts(dsn: str, hook_url: str) -> None:
    """A webhook notifier to the receiver; failures and recovered rules for every job."""

    async def set_up() -> None:
        pool = await open_pool(dsn, application_name="pgpulse-test-alerts", max_size=1)
        try:
            alerts = AlertStore(pool)
            allow = HttpAllowList.parse(["127.0.0.1"])
            config = {"url": hook_url, "timeout": 2, "retry_backoff": 0.1}
            await alerts.add_notifier("ops-hook", "webhook", config, allow=allow)
            await alerts.set_rule("failures", ["ops-hook"])
            await alerts.set_rule("recovered", ["ops-hook"])
        finally:
            await pool.close()

    asyncio.run(set_up())


def _hooks(receiver: HttpReceiver) -> list[dict[str, Any]]:
    return [r.json() for r in list(receiver.requests) if r.path == "/hook"]


def _until(predicate: Any, within: float = 15.0) -> None:
    deadline = time.monotonic() + within
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


@pytest.mark.timeout(90)
def test_an_alert_fires_is_delivered_acknowledged_and_closes(
    dsn: str, db: Any, tmp_path: Path
) -> None:
    sync_api = pytest.importorskip("playwright.sync_api")
    acme = sync_token(dsn, "acme")
    config = node_config(
        alert_interval=0.3, handler_options={"http_allow": HttpAllowList.parse(["127.0.0.1"])}
    )
    UPSTREAM_DOWN.set()
    with contextlib.contextmanager(run_http_receiver)() as receiver:
        _set_up_alerts(dsn, receiver.url("/hook"))
        _live(dsn, receiver, acme, config, sync_api, tmp_path)
    row = db.execute(
        "SELECT acknowledged_by, resolved_at IS NOT NULL AS closed FROM pgpulse_alert_events "
        "WHERE rule = 'failures'"
    ).fetchone()
    assert row["closed"] and row["acknowledged_by"].startswith("token ")


def _live(
    dsn: str, receiver: HttpReceiver, acme: str, config: Any, sync_api: Any, tmp_path: Path
) -> None:
    settings = WebSettings(refresh_seconds=0.3)
    with (
        LiveServer(dsn, settings, handlers={"demo.export": export}, node_config=config) as server,
        httpx.Client(base_url=server.base_url, headers={"Authorization": f"Bearer {acme}"}) as api,
        sync_api.sync_playwright() as playwright,
    ):
        created = api.post(
            "/api/v1/jobs",
            json={
                "name": "ledger-export",
                "schedule": TRIGGERED_ONLY,
                "handler": "demo.export",
                "max_attempts": 1,
            },
        )
        assert created.status_code == 201, created.text
        job_id = created.json()["id"]
        assert api.post(f"/api/v1/jobs/{job_id}/trigger").status_code == 200
        _until(lambda: len(_hooks(receiver)) == 1)  # 1. fired and delivered
        [fired] = _hooks(receiver)
        assert (fired["rule"], fired["state"]) == ("failures", "firing")
        assert fired["job"]["name"] == "ledger-export"
        assert fired["error"] == "upstream answered 503 Service Unavailable"
        alert_id = fired["event_id"]

        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 640})
            page.set_default_timeout(15_000)
            page.goto(f"{server.base_url}/ui/login")
            page.fill("#token", acme)
            page.click("button[type=submit]")
            page.wait_for_selector("tr[data-job]")
            page.click('nav a[href="/ui/alerts"]')  # 2. on the alerts page, open
            state = page.locator(f"[data-testid=alert-state-{alert_id}]")
            sync_api.expect(state).to_have_text("open")
            delivery = page.locator(f"[data-testid=delivery-{alert_id}-ops-hook]")
            sync_api.expect(delivery).to_contain_text("delivered (1 attempt, 200)")
            page.click(f"[data-testid=ack-{alert_id}]")  # 3. acknowledged from the page
            sync_api.expect(page.locator("#notice")).to_have_text("acknowledged")
            sync_api.expect(state).to_have_text("acknowledged")
            _shot(page, tmp_path, "dashboard-alerts.png")

            UPSTREAM_DOWN.clear()  # 4. the job recovers: the alert closes itself
            assert api.post(f"/api/v1/jobs/{job_id}/trigger").status_code == 200
            sync_api.expect(state).to_have_text("resolved")
        finally:
            browser.close()
        _until(lambda: len(_hooks(receiver)) == 2)
        recovered = _hooks(receiver)[1]
        assert (recovered["rule"], recovered["state"]) == ("recovered", "resolved")
        assert recovered["details"]["resolves"] == [int(alert_id)]
