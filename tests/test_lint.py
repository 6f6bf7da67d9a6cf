"""``pgpulse lint``'s checks (pure, :mod:`pgpulse.core.lint`): a crafted apply file holds each
hazard, and a clean one none, against facts and a ``now`` given by the test."""

from __future__ import annotations

from datetime import UTC, date, datetime
from typing import Any

import pytest

from pgpulse.cli.applyfile import parse_apply_file
from pgpulse.core.calendars import ExclusionCalendar
from pgpulse.core.jobs import JobSpec
from pgpulse.core.lint import Facts, Finding, Observed, finding_document, lint_jobs

NOW = datetime(2026, 12, 6, 10, 0, tzinfo=UTC)

#: One job per hazard (tenant acme), and the facts that make the observed ones hazards.
CRAFTED = """\
[defaults]
tenant = "acme"
handler = "shell"

[jobs.ny-nightly]
schedule = "30 2 * * *"
timezone = "America/New_York"
payload = { command = "nightly" }

[jobs.ny-early]
schedule = "30 1 * * *"
timezone = "America/New_York"
payload = { command = "early" }

[jobs.berlin-backup]
schedule = "30 2 * * *"
timezone = "Europe/Berlin"
payload = { command = "backup" }

[jobs.berlin-poll]
schedule = "*/15 2 * * *"
timezone = "Europe/Berlin"
payload = { command = "poll" }

[jobs.hourly-a]
schedule = "0 * * * *"
payload = { command = "a" }

[jobs.hourly-b]
schedule = "@hourly"
payload = { command = "b" }

[jobs.hourly-c]
schedule = "0 * * * *"
payload = { command = "c" }

[jobs.invoices]
schedule = "0 9 * * *"
payload = { command = "invoices" }

[jobs.laggard]
schedule = "*/10 * * * *"
misfire_grace = 5
spread = 60
payload = { command = "laggard" }

[jobs.slow]
schedule = "*/10 * * * *"
timeout = 10
spread = 60
payload = { command = "slow" }

[jobs.report]
schedule = "*/10 * * * *"
handler = "report"
spread = 60

[jobs.rollup]
schedule = "*/10 * * * *"
catch_up = "backfill"
spread = 60
payload = { command = "rollup" }
"""

CLEAN = """\
[defaults]
tenant = "acme"
handler = "shell"

[jobs.nightly]
schedule = "15 4 * * *"
timezone = "Europe/Berlin"
calendars = ["holidays"]
payload = { command = "nightly" }

[jobs.rollup]
schedule = "*/10 * * * *"
catch_up = "backfill"
backfill_limit = 6
timeout = 120
spread = 60
calendars = ["holidays"]
payload = { command = "rollup" }
"""

HOLIDAYS = ExclusionCalendar.create("holidays", dates=["2026-12-25", "2027-01-01"])
FACTS = Facts(
    now=NOW,
    live_handlers=frozenset({"shell", "http"}),
    calendars={"acme": (HOLIDAYS,)},
    observed={
        ("acme", "laggard"): Observed(200, lag_p99=30.0, duration_p95=1.0),
        ("acme", "slow"): Observed(120, lag_p99=0.2, duration_p95=60.0),
        ("acme", "nightly"): Observed(40, lag_p99=0.5, duration_p95=30.0),
        ("acme", "rollup"): Observed(40, lag_p99=0.5, duration_p95=30.0),
    },
)


def specs(text: str) -> list[JobSpec]:
    return parse_apply_file(text, path="crafted.toml").specs


@pytest.fixture(scope="module")
def crafted() -> list[Finding]:
    return lint_jobs(specs(CRAFTED), FACTS, herd=2)


def of(findings: list[Finding], code: str, job: str) -> Finding:
    [found] = [f for f in findings if f.code == code and job in f.jobs]
    return found


def utc(
    year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0
) -> datetime:
    return datetime(year, month, day, hour, minute, second, tzinfo=UTC)


def test_a_fixed_time_job_in_a_new_york_gap_runs_just_after_it(crafted: list[Finding]) -> None:
    found = of(crafted, "dst-gap", "ny-nightly")
    # 2027-03-14: 02:00 EST becomes 03:00 EDT at 07:00 UTC; 02:30 does not exist
    assert found.dates == (utc(2027, 3, 14, 7, 0),)
    assert found.count == 1
    assert found.severity == "warning"
    assert "on 2027-03-14 America/New_York skips 02:00-03:00" in found.message
    assert "it runs at 03:00 instead (07:00 UTC)" in found.message
    assert not [f for f in crafted if f.code == "dst-fold" and f.job == "ny-nightly"]


def test_a_fixed_time_job_in_a_new_york_fold_runs_on_the_first_pass(
    crafted: list[Finding],
) -> None:
    found = of(crafted, "dst-fold", "ny-early")
    # 2027-11-07: 02:00 EDT becomes 01:00 EST; 01:30 happens at 05:30 UTC and 06:30 UTC
    assert found.dates == (utc(2027, 11, 7, 5, 30),)
    assert "on 2027-11-07 America/New_York repeats 01:00-02:00" in found.message
    assert "it runs once, on the first pass (05:30 UTC)" in found.message


def test_berlin_gap_and_fold_of_one_job(crafted: list[Finding]) -> None:
    gap = of(crafted, "dst-gap", "berlin-backup")
    fold = of(crafted, "dst-fold", "berlin-backup")
    assert gap.dates == (utc(2027, 3, 28, 1, 0),)  # 02:00 CET -> 03:00 CEST
    assert fold.dates == (utc(2027, 10, 31, 0, 30),)  # 02:30 CEST, the first pass
    assert "on 2027-10-31 Europe/Berlin repeats 02:00-03:00" in fold.message


def test_an_elapsed_time_job_of_a_fixed_hour_is_skipped_in_a_gap_and_runs_twice_in_a_fold(
    crafted: list[Finding],
) -> None:
    gap = of(crafted, "dst-gap", "berlin-poll")
    fold = of(crafted, "dst-fold", "berlin-poll")
    assert "it does not run then" in gap.message
    assert "it runs in both passes" in fold.message


def test_a_herd_of_jobs_without_spread_gets_a_spread(crafted: list[Finding]) -> None:
    [herd] = [f for f in crafted if f.code == "herd"]
    # the three hourly jobs every hour; at 09:00 UTC the daily one too, at 01:00 UTC (02:00
    # in Berlin) the Berlin poll
    assert herd.jobs == ("berlin-poll", "hourly-a", "hourly-b", "hourly-c", "invoices")
    assert herd.tenant == "acme"
    assert herd.dates[:2] == (utc(2026, 12, 6, 11, 0), utc(2026, 12, 6, 12, 0))
    assert herd.count == 7 * 24  # every hour for a week
    assert "4 jobs without spread fall due in the same second at 2026-12-07 01:00:00 UTC" in (
        herd.message
    )
    assert "more than 2 at 168 instants within 7 days, 5 jobs in all" in herd.message
    # at least a minute, at most the shortest gap of their schedules (15 min)
    assert herd.suggestion == "spread = 60"


def test_a_herd_needs_more_than_the_limit() -> None:
    [herd] = [f for f in lint_jobs(specs(CRAFTED), FACTS, herd=3) if f.code == "herd"]
    assert herd.count == 7 * 2  # 01:00 and 09:00 UTC: four jobs each
    assert herd.dates[:2] == (utc(2026, 12, 7, 1, 0), utc(2026, 12, 7, 9, 0))
    assert not [f for f in lint_jobs(specs(CRAFTED), FACTS, herd=4) if f.code == "herd"]


def test_occurrences_on_a_calendar_the_job_does_not_use(crafted: list[Finding]) -> None:
    found = of(crafted, "calendar", "invoices")
    assert found.dates == (utc(2026, 12, 25, 9, 0), utc(2027, 1, 1, 9, 0))
    assert found.count == 2
    assert "calendar 'holidays' of tenant 'acme'" in found.message
    assert found.suggestion == 'calendars = ["holidays"]'


def test_misfire_grace_below_the_observed_lag(crafted: list[Finding]) -> None:
    found = of(crafted, "misfire-grace", "laggard")
    assert "misfire_grace 5 s is below the p99 lag of its last 200 runs, 30 s" in found.message
    assert found.suggestion == "misfire_grace = 60"


def test_timeout_below_the_observed_duration(crafted: list[Finding]) -> None:
    found = of(crafted, "timeout", "slow")
    assert found.severity == "error"
    assert "timeout 10 s is shorter than the p95 duration of its last 120 runs" in found.message
    assert found.suggestion == "timeout = 90"


def test_a_handler_no_live_node_has(crafted: list[Finding]) -> None:
    found = of(crafted, "handler", "report")
    assert found.severity == "error"
    assert "no live node has handler 'report'" in found.message
    assert [f.job for f in crafted if f.code == "handler"] == ["report"]


def test_shell_jobs_need_a_node_that_allows_them() -> None:
    facts = Facts(now=NOW, live_handlers=frozenset({"http"}))
    found = [f for f in lint_jobs(specs(CLEAN), facts) if f.code == "handler"]
    assert {f.job for f in found} == {"nightly", "rollup"}
    assert "no live node allows shell jobs" in found[0].message


def test_an_upstream_the_tenant_does_not_have() -> None:
    """``after`` names jobs by name: one deleted or renamed since leaves its follower waiting.
    A job exists when it is stored (the facts) or among the definitions linted."""
    http: dict[str, Any] = {"handler": "http", "payload": {"url": "https://93.184.215.14/x"}}
    load = JobSpec.create(name="load", schedule="@after", after=["extract", "gone"], **http)
    both = JobSpec.create(name="both", schedule="@after", after=["x", "y"], **http)
    extract = JobSpec.create(name="extract", schedule="0 3 * * *", **http)
    facts = Facts(now=NOW, live_handlers=frozenset({"http"}), stored=frozenset({("default", "x")}))
    found = [f for f in lint_jobs([load, both], facts) if f.code == "upstream"]
    assert [(f.job, f.severity, f.message) for f in found] == [
        (
            "load",
            "error",
            "after names 'extract', 'gone', jobs tenant 'default' does not have (deleted or "
            "renamed since?): it waits for them and never runs",
        ),
        (
            "both",
            "error",
            "after names 'y', a job tenant 'default' does not have (deleted or renamed since?): "
            "it waits for it and never runs",
        ),
    ]
    found = [f for f in lint_jobs([load, extract], facts) if f.code == "upstream"]
    assert [f.message.split(",")[0] for f in found] == ["after names 'gone'"]
    stored = Facts(now=NOW, stored=frozenset({("default", "gone"), ("default", "extract")}))
    assert [f for f in lint_jobs([load], stored) if f.code == "upstream"] == []


def test_backfill_without_a_limit(crafted: list[Finding]) -> None:
    found = of(crafted, "backfill-limit", "rollup")
    assert "144 runs after a day down" in found.message
    assert found.suggestion == "backfill_limit = 24"


def test_every_hazard_is_found_in_the_crafted_file(crafted: list[Finding]) -> None:
    codes = {f.code for f in crafted}
    assert codes == {
        "handler",
        "timeout",
        "misfire-grace",
        "dst-gap",
        "dst-fold",
        "herd",
        "calendar",
        "backfill-limit",
    }


def test_the_clean_file_has_no_finding() -> None:
    assert lint_jobs(specs(CLEAN), FACTS, herd=2) == []


def test_a_window_that_ends_before_the_change_is_no_hazard() -> None:
    text = CRAFTED.split("[jobs.ny-early]")[0].replace(
        'timezone = "America/New_York"',
        'timezone = "America/New_York"\nnot_after = 2027-03-01T00:00:00',
    )
    assert not [f for f in lint_jobs(specs(text), FACTS) if f.code.startswith("dst")]


def test_a_public_holiday_calendar() -> None:
    pytest.importorskip("holidays")
    us = ExclusionCalendar.create("us", country="US")
    facts = Facts(now=NOW, live_handlers=frozenset({"shell"}), calendars={"acme": (us,)})
    found = of(lint_jobs(specs(CRAFTED), facts), "calendar", "invoices")
    assert found.dates[0] == utc(2026, 12, 25, 9, 0)
    assert date(2027, 7, 5) in {d.date() for d in found.dates} or found.count >= 10


def test_a_finding_as_json(crafted: list[Finding]) -> None:
    document = finding_document(of(crafted, "dst-gap", "ny-nightly"))
    assert document == {
        "code": "dst-gap",
        "severity": "warning",
        "tenant": "acme",
        "job": "ny-nightly",
        "jobs": ["ny-nightly"],
        "message": document["message"],
        "dates": ["2027-03-14T07:00:00+00:00"],
        "count": 1,
        "suggestion": 'timezone = "UTC", or a time outside the changed hour',
    }


def test_a_herd_limit_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="herd must be at least 1"):
        lint_jobs([], FACTS, herd=0)
