"""Extra occurrences in the audit trail and in apply files: a
job's overlap and max_concurrency are definition fields (applied from a file, diffed, audited);
a trigger with a payload is a 'trigger' with its payload and run id, a backfill request a
'backfill' with its range, selection and batch; a dry run records nothing."""

from __future__ import annotations

from typing import Any

import pytest

from helpers import spec
from pgpulse.cli.applyfile import ApplyFileError, parse_apply_file
from pgpulse.core.audit import Actor
from pgpulse.db.run_control import RunControl
from pgpulse.db.store import Store
from test_engine import TRIGGERED_ONLY
from test_occurrences import NOW, H, hourly_with_history

ME = Actor("cli", "os:tester")

FILE = """\
[jobs.fanout]
schedule = "@every 1m"
handler = "noop"
overlap = "allow"
max_concurrency = 3
"""


async def test_overlap_is_a_definition_field_applied_from_a_file_and_audited(store: Store) -> None:
    [created] = parse_apply_file(FILE, path="fanout.toml").specs
    assert (created.overlap, created.max_concurrency) == ("allow", 3)
    await store.upsert_jobs([created], extra_handlers={"noop"}, actor=ME)
    replaced = parse_apply_file(
        FILE.replace('"allow"', '"replace"').replace("max_concurrency = 3\n", ""),
        path="fanout.toml",
    ).specs
    await store.upsert_jobs(replaced, extra_handlers={"noop"}, actor=ME)
    row = await store.get_job("default", "fanout")
    assert (row["overlap"], row["max_concurrency"], row["revision"]) == ("replace", None, 2)
    update, create = await store.job_history("default", "fanout")
    assert (create["action"], create["changes"]["overlap"]) == ("create", [None, "allow"])
    assert create["changes"]["max_concurrency"] == [None, 3]
    assert update["action"] == "update"
    assert update["changes"] == {"overlap": ["allow", "replace"], "max_concurrency": [3, None]}


@pytest.mark.parametrize(
    ("line", "field"),
    [('overlap = "sometimes"', "overlap"), ("overlap = 3", "overlap")],
)
def test_a_file_with_a_bad_overlap_is_refused_naming_the_field(line: str, field: str) -> None:
    with pytest.raises(ApplyFileError) as refused:
        parse_apply_file(FILE.replace('overlap = "allow"', line), path="fanout.toml")
    assert refused.value.field == field
    assert str(refused.value).startswith("fanout.toml:4: job 'fanout': ")


async def test_a_trigger_with_a_payload_and_a_backfill_request_are_audited(
    store: Store, db: Any
) -> None:
    await store.upsert_jobs(
        [spec("report", schedule=TRIGGERED_ONLY, handler="work")],
        extra_handlers={"work"},
        actor=ME,
    )
    done = await RunControl(store.pool).trigger("default", "report", {"n": 1}, actor=ME)
    [trigger, _] = await store.job_history("default", "report")
    assert (trigger["action"], trigger["source"], trigger["actor"]) == ("trigger", "cli", ME.name)
    assert trigger["changes"] == {"payload": [None, {"n": 1}], "run_id": [None, done.occurrence]}

    await hourly_with_history(store, db)
    control = RunControl(store.pool)
    await control.backfill("default", "hourly", start=H[1], end=H[6], dry_run=True, now=NOW)
    assert [h["action"] for h in await store.job_history("default", "hourly")] == ["create"]
    plan = await control.backfill(
        "default", "hourly", start=H[1], end=H[6], max_concurrency=2, actor=ME, now=NOW
    )
    backfill, _ = await store.job_history("default", "hourly")
    assert (backfill["action"], backfill["actor"], backfill["revision"]) == ("backfill", ME.name, 1)
    assert backfill["changes"] == {
        "from": [None, H[1].isoformat()],
        "to": [None, H[6].isoformat()],
        "only": [None, ["failed", "missing"]],
        "max_concurrency": [None, 2],
        "newest_first": [None, False],
        "occurrences": [None, len(plan.selected)],
        "batch_id": [None, plan.batch_id],
    }
