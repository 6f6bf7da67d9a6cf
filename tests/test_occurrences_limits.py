"""Extra occurrences beside run control (docs/states.md, "Extra occurrences and run control"):
a fork keeps the job row's window, calendars and spread; limits counted on the job row's own
runs are refused with replace/allow; a completed job takes no trigger and no backfill."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from helpers import ALL_SHARDS, add, spec, utc
from pgpulse.core.calendars import ExclusionCalendar
from pgpulse.core.errors import InvalidInput
from pgpulse.core.spread import spread_offset
from pgpulse.db.run_control import RunControl
from pgpulse.db.store import Store
from pgpulse.node.attempts import decide_claim
from pgpulse.node.handlers import NodeHandlers
from run_control_helpers import job_row


@pytest.mark.parametrize(
    ("overlap", "field", "kw"),
    [
        ("allow", "max_runs", {"max_runs": 3}),
        ("replace", "max_runs", {"max_runs": 3}),
        ("allow", "not_after", {"not_after": "2027-01-01T00:00:00"}),
        ("replace", "auto_pause_after", {"auto_pause_after": 2}),
        ("allow", "overlap", {"schedule": "@at 2027-01-01T00:00:00"}),
    ],
)
def test_limits_of_the_job_rows_own_runs_are_refused_with_forked_occurrences(
    overlap: str, field: str, kw: dict[str, Any]
) -> None:
    given: dict[str, Any] = {"overlap": overlap, **kw}
    if overlap == "allow":
        given["max_concurrency"] = 2
    with pytest.raises(InvalidInput) as refused:
        spec("forked", **given)
    assert refused.value.field == field
    assert "overlap forbid only" in str(refused.value)
    assert "\n" not in str(refused.value)
    # the same limit under forbid is a job like any other
    assert spec("kept", **kw).overlap == "forbid"


async def test_a_fork_keeps_the_job_rows_calendar_and_spread(store: Store, db: Any) -> None:
    await store.put_calendar("default", ExclusionCalendar.create("off", dates=["2026-03-02"]))
    [job_id] = await add(
        store,
        spec(
            "fanout",
            schedule="0 9 * * *",
            overlap="allow",
            max_concurrency=2,
            spread=600,
            calendars=["off"],
        ),
        now=utc(2026, 3, 1, 12),
    )
    offset = spread_offset(job_id, 600)
    assert job_row(db, "fanout")["next_run_at"] == utc(2026, 3, 2, 9) + offset
    handlers = NodeHandlers({"noop": lambda ctx: None}, "node-a", {})
    # 2 March is excluded: the job row skips it there, nothing is forked
    now = utc(2026, 3, 2, 9) + offset + timedelta(seconds=1)
    [claimed] = await store.claim_due("node-a", ALL_SHARDS, 10, lease=30, now=now)
    skipped = (await decide_claim(claimed, handlers)).outcome
    assert skipped is not None
    assert (skipped.outcome, skipped.error) == ("skipped", "calendar off")
    await store.finish_runs([skipped], now=now, node="node-a")
    assert job_row(db, "fanout")["next_run_at"] == utc(2026, 3, 3, 9) + offset
    # 3 March: claimed at its spread instant, forked; the job row holds 4 March's spread instant
    now = utc(2026, 3, 3, 9) + offset + timedelta(seconds=1)
    [claimed] = await store.claim_due("node-a", ALL_SHARDS, 10, lease=30, now=now)
    forked = (await decide_claim(claimed, handlers)).outcome
    assert forked is not None and forked.outcome == "forked"
    assert await store.fork(forked, now=now)
    job = job_row(db, "fanout")
    assert (job["status"], job["scheduled_for"], job["next_run_at"]) == (
        "idle",
        utc(2026, 3, 4, 9),
        utc(2026, 3, 4, 9) + offset,
    )
    [occurrence] = db.execute(
        "SELECT kind, scheduled_for FROM pgpulse_occurrences WHERE job_id = %s", (job_id,)
    ).fetchall()
    assert (occurrence["kind"], occurrence["scheduled_for"]) == ("scheduled", utc(2026, 3, 3, 9))


async def test_a_completed_job_takes_no_trigger_and_no_backfill(store: Store, db: Any) -> None:
    await add(
        store,
        spec(
            "done",
            schedule="0 9 * * *",
            not_before="2026-01-01T10:00:00",
            not_after="2026-01-01T11:00:00",
        ),
        now=utc(2026, 2, 1),
    )
    assert job_row(db, "done")["status"] == "completed"
    control = RunControl(store.pool)
    with pytest.raises(InvalidInput, match="is completed") as refused:
        await control.trigger("default", "done", {"x": 1}, now=utc(2026, 2, 1, 1))
    assert refused.value.field == "status"
    with pytest.raises(InvalidInput, match="is completed") as refused:
        await control.backfill(
            "default", "done", start=utc(2026, 1, 1), end=utc(2026, 1, 31), now=utc(2026, 2, 1, 1)
        )
    assert (refused.value.field, refused.value.value) == ("status", "completed")
    counts = db.execute(
        "SELECT (SELECT count(*) FROM pgpulse_occurrences) AS o,"
        " (SELECT count(*) FROM pgpulse_batches) AS b,"
        " (SELECT count(*) FROM pgpulse_runs) AS r"
    ).fetchone()
    assert (counts["o"], counts["b"], counts["r"]) == (0, 0, 0)
