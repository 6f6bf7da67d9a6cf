"""Alert rules on a real PostgreSQL: each rule fires once per key, recovers, honours silences;
refusals name the field and write nothing."""

from __future__ import annotations

import asyncio
import json
from datetime import datetime, timedelta
from typing import Any

import pytest

from helpers import add, pgpulse, spec
from pgpulse.alerts.store import AlertStore, NotifierInUse
from pgpulse.core.errors import InvalidInput, InvalidNotifierConfig, JobNotFound
from pgpulse.db.store import Store

WEBHOOK = {"url": "https://hooks.example.com/pulse", "secret": "s" * 20}


async def _alerts(store: Store) -> AlertStore:
    alerts = AlertStore(store.pool)
    # A public address by literal IP: nothing to resolve, and the policy allows it.
    await alerts.add_notifier("ops", "webhook", {"url": "https://93.184.215.14/hook"})
    return alerts


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


def _events(db: Any) -> list[dict[str, Any]]:
    return list(
        db.execute(
            "SELECT e.rule, e.job_id, e.scheduled_for, e.resolved_at IS NOT NULL AS resolved, "
            "e.silenced, (SELECT count(*) FROM pgpulse_alert_deliveries d "
            "WHERE d.event_id = e.id) AS deliveries FROM pgpulse_alert_events e ORDER BY e.id"
        ).fetchall()
    )


async def test_failures_fire_once_per_streak_and_recovery_closes_them(
    store: Store, db: Any
) -> None:
    alerts = await _alerts(store)
    [job_id] = await add(store, spec("nightly"))
    await alerts.set_rule("failures", ["ops"], threshold=2, job=("default", "nightly"))
    await alerts.set_rule("recovered", ["ops"])  # the cluster-wide default
    base = datetime.fromisoformat("2026-01-01T00:00:00+00:00")
    _run(db, job_id, base, "failed", "exit 1")
    assert (await alerts.evaluate(node="n1", leader=False))["fired"] == 0  # one is not two
    _run(db, job_id, base + timedelta(minutes=1), "failed", "exit 2")
    _run(db, job_id, base + timedelta(minutes=2), "failed", "exit 3")  # the streak goes on
    first = await asyncio.gather(*(alerts.evaluate(node=f"n{i}", leader=False) for i in range(3)))
    assert sum(r["fired"] for r in first) == 1  # three nodes at once: one event
    assert _events(db) == [
        {
            "rule": "failures",
            "job_id": job_id,
            "scheduled_for": base + timedelta(minutes=1),
            "resolved": False,
            "silenced": False,
            "deliveries": 1,
        }
    ]
    _run(db, job_id, base + timedelta(minutes=3), "succeeded")
    assert (await alerts.evaluate(node="n1", leader=False))["fired"] == 1
    rules = [(e["rule"], e["resolved"]) for e in _events(db)]
    assert rules == [("failures", True), ("recovered", True)]
    listed = await alerts.list_alerts(job=("default", "nightly"))
    assert [a["state"] for a in listed] == ["resolved", "resolved"]
    assert listed[1]["deliveries"][0]["notifier"] == "ops"


async def test_a_new_failures_rule_does_not_fire_on_failures_older_than_itself(
    store: Store, db: Any
) -> None:
    """Found by a new-user trial: a rule set at 13:32 sent four alerts for earlier failures."""
    alerts = await _alerts(store)
    [job_id] = await add(store, spec("flaky"))
    base = datetime.fromisoformat("2026-01-01T00:00:00+00:00")
    for minute in range(3):
        _run(db, job_id, base + timedelta(minutes=minute), "failed", "exit 1")
    await alerts.set_rule("failures", ["ops"], threshold=1, job=("default", "flaky"))
    assert (await alerts.evaluate(node="n1", leader=False))["fired"] == 0
    _run(db, job_id, base + timedelta(minutes=3), "succeeded")
    _run(db, job_id, base + timedelta(minutes=4), "failed", "exit 1")  # a new streak
    assert (await alerts.evaluate(node="n1", leader=False))["fired"] == 1
    assert [e["scheduled_for"] for e in _events(db)] == [base + timedelta(minutes=4)]


async def test_a_failing_backfill_of_older_occurrences_continues_the_streak(
    store: Store, db: Any
) -> None:
    """Found by the fifth new-user trial: a job failing at every occurrence had its alert; a
    backfill of older occurrences that failed too fired a second `failures` event, as if a
    streak began at the oldest of them. The streak is the runs as they were recorded."""
    alerts = await _alerts(store)
    [job_id] = await add(store, spec("flaky"))
    await alerts.set_rule("failures", ["ops"], threshold=1, job=("default", "flaky"))
    base = datetime.fromisoformat("2026-01-01T01:00:00+00:00")
    for minute in range(2):
        _run(db, job_id, base + timedelta(minutes=minute), "failed", "exit 1")
    assert (await alerts.evaluate(node="n1", leader=False))["fired"] == 1
    for minute in (30, 20, 10):  # a backfill of the hour before, failing as well
        db.execute(
            "INSERT INTO pgpulse_runs (job_id, scheduled_for, attempts, outcome, started_at, "
            "finished_at, error, kind) VALUES (%s, %s, 1, 'failed', now(), now(), 'exit 1', "
            "'backfill')",
            (job_id, base - timedelta(minutes=minute)),
        )
    assert (await alerts.evaluate(node="n1", leader=False))["fired"] == 0
    assert [e["scheduled_for"] for e in _events(db)] == [base]
    _run(db, job_id, base + timedelta(minutes=2), "succeeded")
    _run(db, job_id, base + timedelta(minutes=3), "failed", "exit 1")  # a new streak: one more
    assert (await alerts.evaluate(node="n1", leader=False))["fired"] >= 1
    failures = [e["scheduled_for"] for e in _events(db) if e["rule"] == "failures"]
    assert failures == [base, base + timedelta(minutes=3)]


async def test_silence_fires_once_per_silent_stretch_and_a_silence_mutes_it(
    store: Store, db: Any
) -> None:
    alerts = await _alerts(store)
    [job_id] = await add(store, spec("heartbeat", schedule="@every 60s"))
    db.execute(
        "UPDATE pgpulse_jobs SET created_at = now() - interval '1 hour' WHERE id = %s", (job_id,)
    )
    await alerts.set_rule("silence", ["ops"], threshold=600, job=("default", "heartbeat"))
    await alerts.silence(3600, reason="maintenance")
    assert (await alerts.evaluate(node="n1", leader=True))["fired"] == 1
    assert (await alerts.evaluate(node="n1", leader=True))["fired"] == 0
    [event] = _events(db)
    assert event["rule"] == "silence" and event["silenced"] and event["deliveries"] == 0


async def test_late_and_skipped_fire_for_their_occurrence(store: Store, db: Any) -> None:
    alerts = await _alerts(store)
    [job_id] = await add(store, spec("report"))
    await alerts.set_rule("late", ["ops"], threshold=30)
    await alerts.set_rule("skipped", ["ops"])
    due = db.execute(
        "UPDATE pgpulse_jobs SET scheduled_for = now() - interval '5 minutes', "
        "next_run_at = now() - interval '5 minutes' WHERE id = %s RETURNING scheduled_for",
        (job_id,),
    ).fetchone()["scheduled_for"]
    db.execute(
        "INSERT INTO pgpulse_runs (job_id, scheduled_for, outcome, finished_at, occurrences, "
        "last_scheduled_for) VALUES (%s, %s, 'skipped', now(), 3, %s)",
        (job_id, due - timedelta(minutes=3), due - timedelta(minutes=1)),
    )
    assert (await alerts.evaluate(node="n1", leader=False))["fired"] == 2
    got = {(e["rule"], e["scheduled_for"]) for e in _events(db)}
    assert got == {("late", due), ("skipped", due - timedelta(minutes=3))}


async def test_cluster_rules_fire_on_the_leader_only(store: Store, db: Any, dsn: str) -> None:
    alerts = await _alerts(store)
    await alerts.set_rule("node_died", ["ops"])
    await alerts.set_rule("leader_changed", ["ops"])
    db.execute(
        "INSERT INTO pgpulse_nodes (node_id, hostname, pid, last_heartbeat, running, ttl) "
        "VALUES ('gone', 'h', 1, now() - interval '1 minute', 2, 3)"
    )
    assert (await alerts.evaluate(node="a", leader=False))["fired"] == 0
    # the first leader is no change: recorded, not fired
    assert (await alerts.evaluate(node="a", leader=True))["fired"] == 1  # died
    assert (await alerts.evaluate(node="a", leader=True))["fired"] == 0
    assert (await alerts.evaluate(node="b", leader=True))["fired"] == 1  # b took over
    assert (await alerts.evaluate(node="b", leader=True))["fired"] == 0
    assert (await alerts.evaluate(node="a", leader=True))["fired"] == 1  # and back to a
    rows = db.execute(
        "SELECT rule, details, (SELECT count(*) FROM pgpulse_alert_deliveries d "
        "WHERE d.event_id = e.id) AS n FROM pgpulse_alert_events e ORDER BY rule, id"
    ).fetchall()
    assert [(r["rule"], r["n"]) for r in rows] == [
        ("leader_changed", 1),
        ("leader_changed", 1),
        ("node_died", 1),
    ]
    assert rows[0]["details"] == {"leader": "b", "previous": "a"}
    assert rows[1]["details"] == {"leader": "a", "previous": "b"}
    listed = pgpulse("alert", "list", "--json", dsn=dsn)
    assert [a["rule"] for a in json.loads(listed.stdout)] == [
        "leader_changed",
        "leader_changed",
        "node_died",
    ]


async def test_no_live_node_fires_once_for_the_gap_a_starting_node_finds(
    store: Store, db: Any
) -> None:
    alerts = await _alerts(store)
    assert await alerts.cluster_outage() is None  # no rule: nothing read
    await alerts.set_rule("no_live_node", ["ops"], threshold=120)
    assert await alerts.cluster_outage() is None  # a fresh cluster: no heartbeat ever
    db.execute(
        "INSERT INTO pgpulse_nodes (node_id, hostname, pid, last_heartbeat, state, ttl) VALUES "
        "('a', 'h', 1, now() - interval '10 minutes', 'stopped', 3), "
        "('b', 'h', 2, now() - interval '5 minutes', 'alive', 3)"  # killed: stale, not live
    )
    outage = await alerts.cluster_outage()
    assert outage is not None
    since, until = outage
    assert 299 < (until - since).total_seconds() < 310  # from b's last heartbeat
    fired = await asyncio.gather(
        *(alerts.evaluate(node=n, leader=False, outage=outage) for n in ("c", "d"))
    )
    assert sum(r["fired"] for r in fired) == 1  # two nodes back at once: one event
    [event] = _events(db)
    # a notice: open (its webhook says firing) until acknowledged
    assert event["rule"] == "no_live_node" and not event["resolved"] and event["deliveries"] == 1
    details = db.execute("SELECT details FROM pgpulse_alert_events").fetchone()["details"]
    assert details["gap_seconds"] == (until - since).total_seconds()
    assert details["threshold_seconds"] == 120
    short = (until - timedelta(seconds=60), until)  # a gap under the threshold fires nothing
    assert (await alerts.evaluate(node="c", leader=False, outage=short))["fired"] == 0
    db.execute("UPDATE pgpulse_nodes SET last_heartbeat = now() WHERE node_id = 'b'")
    assert await alerts.cluster_outage() is None  # b is live: no outage


async def test_notifier_secrets_are_never_listed_and_a_used_one_stays(store: Store) -> None:
    alerts = await _alerts(store)
    [listed] = await alerts.list_notifiers()
    assert listed["config"]["url"] == "https://93.184.215.14/hook"  # a word is no secret
    url = "https://93.184.215.14/services/T0123ABCD/xZ7kQ9Lm2"
    await alerts.add_notifier("signed", "webhook", WEBHOOK | {"url": url})
    shown = {n["name"]: n["config"] for n in await alerts.list_notifiers()}
    assert shown["signed"] == {
        **shown["signed"],
        "secret": "***",
        "url": "https://93.184.215.14/services/***/***",
    }
    await add(store, spec("nightly"))
    await alerts.set_rule("failures", ["signed"], job=("default", "nightly"))
    with pytest.raises(NotifierInUse, match="failures"):
        await alerts.remove_notifier("signed")
    await alerts.remove_rule("failures", job=("default", "nightly"))
    await alerts.remove_notifier("signed")
    assert [n["name"] for n in await alerts.list_notifiers()] == ["ops"]


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda a: a.set_rule("flaky", ["ops"], job=("default", "j")), "rule"),
        (lambda a: a.set_rule("lag", ["ops"], job=("default", "j")), "rule"),
        (
            lambda a: a.set_rule("failures", ["ops"], threshold=1.5, job=("default", "j")),
            "threshold",
        ),
        (lambda a: a.set_rule("failures", ["nobody"], job=("default", "j")), "notifiers"),
        (
            lambda a: a.set_rule("silence", ["ops"], threshold=600, job=("default", "j")),
            "threshold",
        ),
        (lambda a: a.add_notifier("x", "webhook", {"url": "http://127.0.0.1:9/h"}), "config.url"),
        (lambda a: a.add_notifier("x", "webhook", {"url": "http://10.1.2.3/h"}), "config.url"),
        (
            lambda a: a.add_notifier(
                "x", "email", {"host": "localhost", "from": "pulse", "to": "a@b.c"}
            ),
            "config.from",
        ),
        (lambda a: a.add_notifier("x", "pager", {}), "kind"),
        (lambda a: a.silence(0), "for"),
    ],
)
async def test_refusals_name_the_field_and_write_nothing(
    store: Store, db: Any, call: Any, field: str
) -> None:
    alerts = await _alerts(store)
    await add(store, spec("j", schedule="0 3 * * *"))  # daily: a 600 s silence window is too short
    before = db.execute(
        "SELECT (SELECT count(*) FROM pgpulse_notifiers) + (SELECT count(*) FROM "
        "pgpulse_alert_rules) + (SELECT count(*) FROM pgpulse_alert_silences) AS n"
    ).fetchone()["n"]
    with pytest.raises((InvalidInput, InvalidNotifierConfig)) as refused:
        await call(alerts)
    assert refused.value.field == field
    after = db.execute(
        "SELECT (SELECT count(*) FROM pgpulse_notifiers) + (SELECT count(*) FROM "
        "pgpulse_alert_rules) + (SELECT count(*) FROM pgpulse_alert_silences) AS n"
    ).fetchone()["n"]
    assert after == before


async def test_a_rule_of_an_unknown_job_is_refused(store: Store) -> None:
    alerts = await _alerts(store)
    with pytest.raises(JobNotFound):
        await alerts.set_rule("failures", ["ops"], job=("default", "nope"))


async def test_checkin_notifiers_go_with_checkin_rules_only(store: Store, db: Any) -> None:
    alerts = await _alerts(store)
    await alerts.add_notifier("hc", "checkin", {"url": "https://93.184.215.14/ping"})
    await add(store, spec("j"))
    job = ("default", "j")
    for rule, notifiers in (("failures", ["hc"]), ("checkin", ["ops"]), ("checkin", ["hc", "ops"])):
        with pytest.raises(InvalidInput) as refused:
            await alerts.set_rule(rule, notifiers, job=job)
        assert refused.value.field == "notifiers"
    assert db.execute("SELECT count(*) AS n FROM pgpulse_alert_rules").fetchone()["n"] == 0
    with pytest.raises(InvalidInput, match="takes no threshold"):
        await alerts.set_rule("checkin", ["hc"], threshold=5, job=job)
    await alerts.set_rule("checkin", ["hc"], job=job)
    [row] = await alerts.checkin_targets()
    assert (row["name"], row["config"]["url"]) == ("hc", "https://93.184.215.14/ping")


def test_a_silence_window_covers_the_longer_gap_of_the_night_the_clocks_go_back() -> None:
    # 01:50 CEST, 02:50 CEST (the first pass), then 03:50 CET: two hours apart on 25 October
    # 2026, once a year; measured in December, a sample of the next 2,000 hours misses it.
    from datetime import UTC

    from pgpulse.alerts.rules import check_silence_window
    from pgpulse.core.schedule import parse_schedule

    schedule = parse_schedule("50 0-23 * * *", "Europe/Berlin")
    december = datetime(2026, 12, 6, tzinfo=UTC)
    with pytest.raises(InvalidInput) as caught:
        check_silence_window(3660, schedule, now=december, anchor=None)
    assert str(caught.value) == (
        "threshold: a silence window of 3,660 s (1 h 1 min) is shorter than the period of "
        "schedule '50 0-23 * * *' (up to 7,200 s (2 h) between occurrences)"
    )
    check_silence_window(7200, schedule, now=december, anchor=None)
