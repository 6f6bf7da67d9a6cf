"""Each alert rule kind's own statement (``sql/alerts.sql``) on a real PostgreSQL, at instants
the test gives: it does not fire before its condition, fires once on it with the values of its
event (dedupe key, occurrence, run, details, the notifiers of the job's own rule or else the
default), not again on the next evaluation, and resolves where its rule resolves. Then what
the kinds share: the silence of one job, the counts an evaluation returns, racing evaluations
over many keys, and the statements' length."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from importlib import resources
from typing import Any

from helpers import add, spec
from pgpulse.alerts.store import AlertStore
from pgpulse.db.store import Store
from pgpulse.sql import split_named_blocks

#: The instant the tests' evaluations are "now" around (whole seconds: keys are predictable).
BASE = datetime(2027, 1, 4, 12, 0, tzinfo=UTC)


def _at(seconds: float) -> datetime:
    return BASE + timedelta(seconds=seconds)


def _epoch(at: datetime) -> str:
    """An instant as a dedupe key writes it (``extract(epoch FROM ...)::text``)."""
    return f"{int(at.timestamp())}.000000"


async def _alerts(store: Store) -> AlertStore:
    """An alert store with two notifiers: ``ops`` (the defaults') and ``own`` (a job's own)."""
    alerts = AlertStore(store.pool)
    await alerts.add_notifier("ops", "webhook", {"url": "https://93.184.215.14/ops"})
    await alerts.add_notifier("own", "webhook", {"url": "https://93.184.215.14/own"})
    return alerts


async def _evaluate(alerts: AlertStore, seconds: float, **kw: Any) -> dict[str, Any]:
    """One evaluation at ``BASE + seconds`` (by node n1, not leading unless told)."""
    kw.setdefault("node", "n1")
    kw.setdefault("leader", False)
    return await alerts.evaluate(now=_at(seconds), **kw)


def _events(db: Any) -> list[dict[str, Any]]:
    """Every event, oldest first, with the notifiers it has a delivery to."""
    return list(
        db.execute(
            "SELECT e.id, e.dedupe_key, e.rule, e.job_id, e.scheduled_for, e.run_id, e.error, "
            "e.details, e.fired_at, e.silenced, e.resolved_at, "
            "ARRAY(SELECT n.name FROM pgpulse_alert_deliveries d "
            "      JOIN pgpulse_notifiers n ON n.id = d.notifier_id "
            "      WHERE d.event_id = e.id ORDER BY n.name) AS sent_to "
            "FROM pgpulse_alert_events e ORDER BY e.id"
        ).fetchall()
    )


def _run(
    db: Any, job_id: int, at: datetime, outcome: str, error: str | None = None, **extra: Any
) -> int:
    """A run row of occurrence ``at``, ended 10 s after it; returns its id."""
    columns = {"scheduled_for": at, "outcome": outcome, "error": error, **extra}
    names = ", ".join(columns)
    marks = ", ".join(["%s"] * len(columns))
    row = db.execute(
        f"INSERT INTO pgpulse_runs (job_id, attempts, started_at, finished_at, {names}) "
        f"VALUES (%s, 1, %s, %s, {marks}) RETURNING id",
        (job_id, at, at + timedelta(seconds=10), *columns.values()),
    ).fetchone()
    return int(row["id"])


def _succeeded(db: Any, job_id: int, at: datetime) -> None:
    """The job's last run succeeded, ending at ``at`` (as a node records it on the job row)."""
    db.execute(
        "UPDATE pgpulse_jobs SET last_outcome = 'succeeded', last_finished_at = %s WHERE id = %s",
        (at, job_id),
    )


def _due(db: Any, job_id: int, at: datetime, **columns: Any) -> None:
    """Make the job idle with its current occurrence ``at``, due then."""
    sets = "".join(f", {name} = %s" for name in columns)
    db.execute(
        f"UPDATE pgpulse_jobs SET status = 'idle', scheduled_for = %s, next_run_at = %s{sets} "
        "WHERE id = %s",
        (at, at, *columns.values(), job_id),
    )


async def test_failures_fire_once_per_streak_of_the_jobs_own_threshold(
    store: Store, db: Any
) -> None:
    alerts = await _alerts(store)
    [job_id] = await add(store, spec("nightly"))
    await alerts.set_rule("failures", ["ops"], threshold=1)  # the default: replaced for nightly
    await alerts.set_rule("failures", ["own"], threshold=2, job=("default", "nightly"))
    db.execute("UPDATE pgpulse_alert_rules SET created_at = %s", (_at(-3600),))
    _run(db, job_id, _at(0), "failed", "exit 1")
    assert (await _evaluate(alerts, 60))["fired"] == 0  # one failure: the default would fire
    second = _run(db, job_id, _at(60), "failed", "exit 2")
    racing = await asyncio.gather(*(_evaluate(alerts, 120, node=f"n{i}") for i in range(3)))
    assert sorted((r["fired"], r["queued"]) for r in racing) == [(0, 0), (0, 0), (1, 1)]
    [event] = _events(db)
    assert event | {"id": 0} == {
        "id": 0,
        "dedupe_key": f"job/{job_id}/failures/{_epoch(_at(60))}",
        "rule": "failures",
        "job_id": job_id,
        "scheduled_for": _at(60),
        "run_id": second,
        "error": "exit 2",
        "details": {"consecutive_failures": 2},
        "fired_at": _at(120),
        "silenced": False,
        "resolved_at": None,
        "sent_to": ["own"],
    }
    _run(db, job_id, _at(120), "failed", "exit 3")  # the streak goes on: no second event
    assert (await _evaluate(alerts, 180))["fired"] == 0
    _succeeded(db, job_id, _at(200))  # no recovered rule: the event closes, nothing fires
    assert await _evaluate(alerts, 240) | {"db_now": None} == {
        "fired": 0,
        "queued": 0,
        "closed": 1,
        "next_due": _at(120),  # the failures delivery, still pending (no node sends here)
        "db_now": None,
    }
    assert [e["resolved_at"] for e in _events(db)] == [_at(240)]


async def test_skipped_fires_once_per_summary_row_within_the_lookback(
    store: Store, db: Any
) -> None:
    alerts = await _alerts(store)
    [job_id] = await add(store, spec("report"))
    await alerts.set_rule("skipped", ["ops"])
    assert (await _evaluate(alerts, 0))["fired"] == 0
    _run(db, job_id, _at(-1800), "skipped", occurrences=2, last_scheduled_for=_at(-1740))
    assert (await _evaluate(alerts, 0))["fired"] == 0  # ended 30 min ago: past the lookback
    run_id = _run(db, job_id, _at(60), "skipped", occurrences=3, last_scheduled_for=_at(180))
    assert (await _evaluate(alerts, 200))["fired"] == 1
    assert (await _evaluate(alerts, 260))["fired"] == 0
    [event] = _events(db)
    assert event["dedupe_key"] == f"job/{job_id}/skipped/{_epoch(_at(60))}"
    assert (event["scheduled_for"], event["run_id"], event["sent_to"]) == (_at(60), run_id, ["ops"])
    details = event["details"]
    assert details["occurrences"] == 3
    assert datetime.fromisoformat(details["last_scheduled_for"]) == _at(180)
    assert (await _evaluate(alerts, 300))["closed"] == 0
    _succeeded(db, job_id, _at(320))  # the job ran again
    assert (await _evaluate(alerts, 330))["closed"] == 1


async def test_late_fires_once_per_occurrence_past_the_jobs_threshold(
    store: Store, db: Any
) -> None:
    alerts = await _alerts(store)
    report, slow = await add(store, spec("report"), spec("slow"))
    await alerts.set_rule("late", ["ops"], threshold=30)
    await alerts.set_rule("late", ["own"], threshold=120, job=("default", "slow"))
    for job_id in (report, slow):
        _due(db, job_id, _at(0))
    assert (await _evaluate(alerts, 29))["fired"] == 0
    assert (await _evaluate(alerts, 31))["fired"] == 1  # report; slow waits for its own 120 s
    assert (await _evaluate(alerts, 60))["fired"] == 0
    assert (await _evaluate(alerts, 121))["fired"] == 1  # slow
    got = [(e["dedupe_key"], e["scheduled_for"], e["details"], e["sent_to"]) for e in _events(db)]
    assert got == [
        (
            f"job/{report}/late/{_epoch(_at(0))}",
            _at(0),
            {"threshold_seconds": 30, "late_by_seconds": 31.0},
            ["ops"],
        ),
        (
            f"job/{slow}/late/{_epoch(_at(0))}",
            _at(0),
            {"threshold_seconds": 120, "late_by_seconds": 121.0},
            ["own"],
        ),
    ]
    db.execute("UPDATE pgpulse_jobs SET status = 'paused' WHERE id = %s", (report,))
    _due(db, slow, _at(400))  # its next occurrence, due in the future
    assert (await _evaluate(alerts, 300))["fired"] == 0  # paused, or not due: not late
    _succeeded(db, report, _at(410))
    assert (await _evaluate(alerts, 420))["closed"] == 1


async def test_missed_fires_for_a_backfill_job_only(store: Store, db: Any) -> None:
    alerts = await _alerts(store)
    owed, skipper = await add(store, spec("owed"), spec("skipper"))
    await alerts.set_rule("missed", ["ops"], threshold=60)
    await alerts.set_rule("late", ["ops"], threshold=300)
    _due(db, owed, _at(0), catch_up="backfill")
    _due(db, skipper, _at(0))  # catch_up skip: never missed, only late
    assert (await _evaluate(alerts, 59))["fired"] == 0
    assert (await _evaluate(alerts, 61))["fired"] == 1
    assert (await _evaluate(alerts, 120))["fired"] == 0
    [event] = _events(db)
    assert (event["rule"], event["dedupe_key"], event["details"]) == (
        "missed",
        f"job/{owed}/missed/{_epoch(_at(0))}",
        {"threshold_seconds": 60, "late_by_seconds": 61.0},
    )
    assert (await _evaluate(alerts, 301))["fired"] == 2  # both late now
    assert sorted(e["rule"] for e in _events(db)) == ["late", "late", "missed"]
    _succeeded(db, owed, _at(310))
    assert (await _evaluate(alerts, 320))["closed"] == 2  # owed's missed and late


async def test_silence_fires_once_per_silent_stretch(store: Store, db: Any) -> None:
    alerts = await _alerts(store)
    watched, other = await add(store, spec("watched"), spec("other"))
    await alerts.set_rule("silence", ["ops"], threshold=3600)  # the default
    await alerts.set_rule("silence", ["own"], threshold=600, job=("default", "watched"))
    db.execute("UPDATE pgpulse_jobs SET created_at = %s", (_at(0),))
    _succeeded(db, watched, _at(0))
    assert (await _evaluate(alerts, 599))["fired"] == 0
    assert (await _evaluate(alerts, 601))["fired"] == 1  # watched; other has an hour
    assert (await _evaluate(alerts, 900))["fired"] == 0
    [event] = _events(db)
    assert (event["job_id"], event["dedupe_key"], event["scheduled_for"], event["sent_to"]) == (
        watched,
        f"job/{watched}/silence/{_epoch(_at(0))}",
        _at(0),
        ["own"],
    )
    details = event["details"]
    assert (details["window_seconds"], details["status"]) == (600, "idle")
    assert datetime.fromisoformat(details["since"]) == _at(0)
    _succeeded(db, watched, _at(1000))  # the stretch ends: closed; the next one is another
    assert (await _evaluate(alerts, 1010))["closed"] == 1
    assert (await _evaluate(alerts, 1601))["fired"] == 1
    assert (await _evaluate(alerts, 3601))["fired"] == 1  # other, since its creation
    got = [(e["job_id"], e["scheduled_for"], e["sent_to"]) for e in _events(db)[1:]]
    assert got == [(watched, _at(1000), ["own"]), (other, _at(0), ["ops"])]


async def test_recovered_closes_the_open_events_and_fires_once(store: Store, db: Any) -> None:
    alerts = await _alerts(store)
    [job_id] = await add(store, spec("flaky"))
    await alerts.set_rule("late", ["ops"], threshold=30)
    await alerts.set_rule("recovered", ["ops"])  # the default: replaced for flaky
    await alerts.set_rule("recovered", ["own"], job=("default", "flaky"))
    _due(db, job_id, _at(0))
    assert (await _evaluate(alerts, 40))["fired"] == 1  # late
    _succeeded(db, job_id, _at(30))  # a success older than the event recovers nothing
    assert (await _evaluate(alerts, 50)) | {"next_due": None, "db_now": None} == {
        "fired": 0,
        "queued": 0,
        "closed": 0,
        "next_due": None,
        "db_now": None,
    }
    _succeeded(db, job_id, _at(60))
    result = await _evaluate(alerts, 70)
    assert (result["fired"], result["queued"], result["closed"]) == (1, 1, 1)
    assert (await _evaluate(alerts, 80))["fired"] == 0
    late, recovered = _events(db)
    assert late["resolved_at"] == _at(70)
    assert recovered | {"id": 0} == {
        "id": 0,
        "dedupe_key": f"job/{job_id}/recovered/{_epoch(_at(60))}",
        "rule": "recovered",
        "job_id": job_id,
        "scheduled_for": _at(60),
        "run_id": None,
        "error": None,
        "details": {"resolves": [late["id"]]},
        "fired_at": _at(70),
        "silenced": False,
        "resolved_at": _at(70),  # over as it fires
        "sent_to": ["own"],
    }


def _node(db: Any, node: str, heartbeat: datetime, running: int = 2) -> None:
    db.execute(
        "INSERT INTO pgpulse_nodes (node_id, hostname, pid, started_at, last_heartbeat, running, "
        "ttl) VALUES (%s, 'h', 1, %s, %s, %s, 3)",
        (node, _at(-3600), heartbeat, running),
    )


async def test_node_died_fires_on_the_leader_once_per_node_life(store: Store, db: Any) -> None:
    alerts = await _alerts(store)
    await alerts.set_rule("node_died", ["ops"])
    _node(db, "x", _at(0))
    _node(db, "idle", _at(0), running=0)  # ran nothing: its death is no alert
    assert (await _evaluate(alerts, 2, leader=True))["fired"] == 0  # within its ttl
    assert (await _evaluate(alerts, 4))["fired"] == 0  # past it, but not the leader
    assert (await _evaluate(alerts, 4, leader=True))["fired"] == 1
    assert (await _evaluate(alerts, 8, leader=True))["fired"] == 0
    [event] = _events(db)
    assert (event["dedupe_key"], event["job_id"], event["scheduled_for"]) == (
        f"node/x/{_epoch(_at(-3600))}",
        None,
        _at(0),
    )
    assert (event["details"]["node"], event["details"]["running"]) == ("x", 2)
    assert (await _evaluate(alerts, 9))["closed"] == 0  # the leader's work
    db.execute("UPDATE pgpulse_nodes SET last_heartbeat = %s WHERE node_id = 'x'", (_at(9),))
    assert (await _evaluate(alerts, 10, leader=True))["closed"] == 1  # back
    assert _events(db)[0]["resolved_at"] == _at(10)


async def test_leader_changed_fires_once_per_change_and_stays_open(store: Store, db: Any) -> None:
    alerts = await _alerts(store)
    await alerts.set_rule("leader_changed", ["ops"])

    def recorded() -> tuple[str, datetime]:
        row = db.execute("SELECT value, updated_at FROM pgpulse_alert_state").fetchone()
        return (row["value"], row["updated_at"])

    assert (await _evaluate(alerts, 0, node="a", leader=True))["fired"] == 0  # the first
    assert recorded() == ("a", _at(0))
    assert (await _evaluate(alerts, 1, node="b"))["fired"] == 0  # b does not lead
    assert recorded() == ("a", _at(0))
    racing = await asyncio.gather(*(_evaluate(alerts, 2, node="b", leader=True) for _ in "12"))
    assert sorted(r["fired"] for r in racing) == [0, 1]
    assert recorded()[0] == "b"
    assert (await _evaluate(alerts, 3, node="b", leader=True))["fired"] == 0
    [event] = _events(db)
    assert (event["dedupe_key"], event["details"], event["sent_to"]) == (
        f"leader/{_epoch(_at(0))}/b",
        {"leader": "b", "previous": "a"},
        ["ops"],
    )
    assert (await _evaluate(alerts, 60, node="b", leader=True))["closed"] == 0
    assert _events(db)[0]["resolved_at"] is None  # a notice: open until acknowledged


async def test_lag_fires_once_while_a_job_waits_and_closes_when_none_does(
    store: Store, db: Any
) -> None:
    alerts = await _alerts(store)
    [job_id] = await add(store, spec("behind"))
    await alerts.set_rule("lag", ["ops"], threshold=60)
    _due(db, job_id, _at(0))
    assert (await _evaluate(alerts, 59, leader=True))["fired"] == 0
    assert (await _evaluate(alerts, 61))["fired"] == 0  # not the leader
    assert (await _evaluate(alerts, 61, leader=True))["fired"] == 1
    assert (await _evaluate(alerts, 90, leader=True))["fired"] == 0  # one open at a time
    [event] = _events(db)
    assert (event["dedupe_key"], event["details"]) == (
        f"cluster/lag/{_epoch(_at(61))}",
        {"lag_seconds": 61.0, "threshold_seconds": 60},
    )
    _due(db, job_id, _at(150))  # caught up: due in the future
    assert (await _evaluate(alerts, 100))["closed"] == 0  # the leader's work
    assert (await _evaluate(alerts, 100, leader=True))["closed"] == 1
    assert (await _evaluate(alerts, 211, leader=True))["fired"] == 1  # behind again
    assert [e["dedupe_key"] for e in _events(db)][1] == f"cluster/lag/{_epoch(_at(211))}"


async def test_no_live_node_fires_once_per_gap_longer_than_its_threshold(
    store: Store, db: Any
) -> None:
    alerts = await _alerts(store)
    await alerts.set_rule("no_live_node", ["ops"], threshold=120)
    short = (_at(0), _at(120))
    assert (await _evaluate(alerts, 120, outage=short))["fired"] == 0
    gap = (_at(0), _at(121))
    racing = await asyncio.gather(*(_evaluate(alerts, 121, node=n, outage=gap) for n in ("c", "d")))
    assert sorted(r["fired"] for r in racing) == [0, 1]
    assert (await _evaluate(alerts, 130, node="c", outage=gap))["fired"] == 0
    [event] = _events(db)
    assert event["dedupe_key"] == f"cluster/no_live_node/{_epoch(_at(0))}"
    assert event["details"]["gap_seconds"] == 121.0
    assert event["resolved_at"] is None  # a notice: open until acknowledged


async def test_a_silence_of_one_job_records_its_events_with_no_delivery(
    store: Store, db: Any
) -> None:
    alerts = await _alerts(store)
    quiet, loud = await add(store, spec("quiet"), spec("loud"))
    await alerts.set_rule("late", ["ops", "own"], threshold=30)
    await alerts.silence(3600, job=("default", "quiet"), now=_at(0))
    for job_id in (quiet, loud):
        _due(db, job_id, _at(0))
    result = await _evaluate(alerts, 31)
    assert (result["fired"], result["queued"]) == (2, 2)  # loud's two notifiers
    got = {e["job_id"]: (e["silenced"], e["sent_to"]) for e in _events(db)}
    assert got == {quiet: (True, []), loud: (False, ["ops", "own"])}


async def test_racing_evaluations_of_many_keys_fire_each_once(store: Store, db: Any) -> None:
    """Eight evaluations at once over 60 keys of three kinds: each key fires once, and none
    deadlocks (each inserts in the same order: kind, then key)."""
    alerts = await _alerts(store)
    ids = await add(store, *(spec(f"job{i}") for i in range(20)))
    for rule in ("failures", "skipped"):
        await alerts.set_rule(rule, ["ops"])
    await alerts.set_rule("late", ["ops"], threshold=30)
    db.execute("UPDATE pgpulse_alert_rules SET created_at = %s", (_at(-3600),))
    for job_id in ids:
        _run(db, job_id, _at(0), "failed", "exit 1")
        _run(db, job_id, _at(-60), "skipped", occurrences=2, last_scheduled_for=_at(-30))
        _due(db, job_id, _at(0))
    racing = await asyncio.gather(*(_evaluate(alerts, 60, node=f"n{i}") for i in range(8)))
    assert sum(r["fired"] for r in racing) == 60
    assert sum(r["queued"] for r in racing) == 60
    assert len({e["dedupe_key"] for e in _events(db)}) == 60


def test_every_alert_statement_is_at_most_80_lines() -> None:
    text = resources.files("pgpulse.sql").joinpath("alerts.sql").read_text("utf-8")
    lengths = {name: len(sql.splitlines()) for name, sql in split_named_blocks(text).items()}
    assert max(lengths.values()) <= 80, lengths
    kinds = [name for name in lengths if name.startswith("alert_")]
    assert len(kinds) >= 10  # one per rule kind, and the shared steps
