"""The dashboard's alerts in the nav and on a job's page (real rows, the in-process client): the
nav counts the open alerts the token sees (a tenant's own only), a job's page lists its rules
and open alerts and links to all of its runs."""

from __future__ import annotations

import html
from datetime import datetime
from typing import Any

import httpx

from helpers import add, spec
from pgpulse.alerts.store import AlertStore
from pgpulse.db.store import Store
from web_helpers import OWN_PAGE, api_client, make_token

BASE = datetime.fromisoformat("2026-01-01T00:00:00+00:00")


def _run(db: Any, job_id: int, at: datetime, outcome: str, error: str | None = None) -> None:
    """A run row as a node writes it when an attempt ends (finished at the database's now)."""
    db.execute(
        "INSERT INTO pgpulse_runs (job_id, scheduled_for, attempts, outcome, started_at, "
        "finished_at, error) VALUES (%s, %s, 1, %s, now(), now(), %s)",
        (job_id, at, outcome, error),
    )
    db.execute(
        "UPDATE pgpulse_jobs SET last_outcome = %s, last_finished_at = now() WHERE id = %s",
        (outcome, job_id),
    )


async def _page(store: Store, token: str, path: str) -> httpx.Response:
    async with api_client(store) as client:
        login = await client.post("/ui/login", data={"token": token}, headers=OWN_PAGE)
        assert login.status_code == 303, login.text
        return await client.get(path)


def _nav_count(page: str) -> str | None:
    if 'data-testid="open-alerts"' not in page:
        return None
    return page.split('data-testid="open-alerts"', 1)[1].split(">", 1)[1].split("<", 1)[0]


async def test_nav_counts_visible_open_alerts_and_a_job_page_shows_its_rules_and_alerts(
    store: Store, db: Any
) -> None:
    nightly, other, rival = await add(
        store,
        spec("nightly", tenant="acme"),
        spec("other", tenant="acme"),
        spec("rival", tenant="globex"),
    )
    alerts = AlertStore(store.pool)
    await alerts.add_notifier("ops", "webhook", {"url": "https://93.184.215.14/hook"})
    await alerts.set_rule("failures", ["ops"], threshold=1, job=("acme", "nightly"))
    await alerts.set_rule("failures", ["ops"], threshold=1, job=("globex", "rival"))
    acme, admin = await make_token(store, "acme"), await make_token(store, admin=True)
    assert _nav_count((await _page(store, acme, "/ui/")).text) is None  # none open yet
    _run(db, nightly, BASE, "failed", "exit 1")
    _run(db, rival, BASE, "failed", "exit 9")
    _run(db, other, BASE, "succeeded")
    assert (await alerts.evaluate(node="n1", leader=False))["fired"] == 2

    # the nav: the admin sees both open alerts, acme its own one, on every page
    assert _nav_count((await _page(store, admin, "/ui/")).text) == "2"
    for path in ("/ui/", "/ui/runs", "/ui/alerts", f"/ui/jobs/{nightly}"):
        assert _nav_count((await _page(store, acme, path)).text) == "1", path
    listed = (await _page(store, acme, "/ui/alerts")).text
    assert "exit 1" in listed and "rival" not in listed and "exit 9" not in listed

    # the job's page: its rule, its open alert, and the link to all its runs
    page = html.unescape((await _page(store, acme, f"/ui/jobs/{nightly}")).text)
    rules = page.split('data-testid="job-rules"', 1)[1].split("</table>", 1)[0]
    assert '<tr data-rule="failures"><td>failures</td><td>1.0</td><td>ops</td></tr>' in rules
    open_ = page.split('data-testid="job-alerts"', 1)[1].split("</table>", 1)[0]
    assert open_.count("<tr data-alert=") == 1 and "exit 1" in open_ and "exit 9" not in open_
    assert f'href="/ui/runs?job={nightly}" data-testid="older-runs"' in page
    quiet = (await _page(store, acme, f"/ui/jobs/{other}")).text
    assert 'data-testid="no-job-alerts"' in quiet and 'data-testid="no-job-rules"' in quiet

    # the runs page for one job lists its runs only, and keeps the filter in its form
    runs = (await _page(store, acme, f"/ui/runs?job={nightly}")).text
    assert 'data-job="nightly"' in runs and 'data-job="other"' not in runs
    assert f'<input type="hidden" name="job" value="{nightly}">' in runs
    # another tenant's job: no runs shown, as for a job that does not exist
    assert 'data-job="rival"' not in (await _page(store, acme, f"/ui/runs?job={rival}")).text
    bad = await _page(store, acme, "/ui/runs?job=x")
    assert bad.status_code == 422 and "job 'x' is not a job id" in html.unescape(bad.text)

    # acknowledged, an alert is no longer counted as open
    [event] = [a for a in await alerts.list_alerts() if a["job"] == "nightly"]
    await alerts.acknowledge(event["id"], by="ops")
    assert _nav_count((await _page(store, acme, "/ui/")).text) is None
    assert _nav_count((await _page(store, admin, "/ui/")).text) == "1"
