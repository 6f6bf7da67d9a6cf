"""pg_cron beside the peers (``pgpulse bench`` scenario 7): its private server starts with the
extension loaded, jobs are scheduled, and one minute's measurement reads every run back.

It waits for a whole minute's start (pg_cron 1.4's finest schedule): up to about a minute."""

from __future__ import annotations

import psutil
import psycopg
import pytest

from pgpulse_tools.bench import pgcron

REASON = pgcron.unavailable_reason()

pytestmark = [
    pytest.mark.skipif(REASON is not None, reason=f"pg_cron cannot run here: {REASON}"),
    pytest.mark.slow,
]


@pytest.mark.timeout(240)
def test_pg_cron_runs_every_job_each_minute_and_is_measured() -> None:
    server = pgcron.cluster(max_running=4)
    server.start()
    pid = server.pid
    try:
        pgcron.install(server, 3)
        assert pgcron.version(server).startswith("1.")
        with psycopg.connect(server.dsn(pgcron.CRON_DB)) as conn:
            jobs = conn.execute("SELECT schedule, command FROM cron.job ORDER BY jobid").fetchall()
        assert jobs == [("* * * * *", pgcron.NOOP_SQL)] * 3
        figures = pgcron.measure(server, 3, 1)
        assert (figures["fired"], figures["missed"], figures["failed"]) == (3, 0, 0)
        assert figures["lag"]["n"] == 3 and 0 <= figures["lag"]["p50"] < 60_000
        assert figures["db_cpu_ms"] > 0 and figures["rate"] > 0
        with psycopg.connect(server.dsn(pgcron.CRON_DB)) as conn:
            left = conn.execute("SELECT count(*) FROM cron.job").fetchone()
        assert left == (0,)  # unscheduled once measured
    finally:
        server.stop()
    assert pid is not None and not psutil.pid_exists(pid)
    assert not server.folder.exists()
