"""Each top-level command once as a real process, as a user types it: the suite types most
commands through click's runner in its own process (helpers.pgpulse), so here each one starts
the interpreter, imports what it imports and runs on the CLI's own event loop. ``node``,
``serve``, ``db``, ``demo``, ``chaos`` and ``bench`` always run as processes in their tests."""

from __future__ import annotations

from pathlib import Path

from helpers import pgpulse


def test_every_command_runs_as_a_real_process(dsn: str, tmp_path: Path) -> None:
    def run(*args: str) -> str:
        done = pgpulse(*args, dsn=dsn, process=True)
        assert done.returncode == 0, (args, done.stderr)
        assert "Traceback" not in done.stderr, done.stderr
        return done.stdout

    assert "schema is up to date" in run("migrate")
    shell = ("--handler", "shell", "--payload", '{"command": "true"}')
    assert "created job hello" in run("job", "create", "hello", "--schedule", "*/5 * * * *", *shell)
    assert "hello" in run("job", "list")
    assert run("runs", "hello") == "(none)\n"
    assert "hello (default)" in run("why", "hello")
    assert "NO LIVE NODE" in run("status")
    assert run("shards", "show").startswith("shard count 64")
    assert run("limit", "list") == "(none)\n"
    assert "tenant 'default': 1 job" in run("lint")
    for listed in (("calendar", "list"), ("notifier", "list"), ("alert", "rule", "list")):
        assert run(*listed) == "(none)\n"
    assert run("token", "list") == "(none)\n"
    assert run("schedule", "next", "0 3 * * *", "--count", "1").startswith("at 03:00 (UTC)\n")
    applied = tmp_path / "jobs.toml"
    applied.write_text(
        '[jobs.nightly]\nschedule = "0 3 * * *"\nhandler = "shell"\n'
        'payload = { command = "true" }\n'
    )
    assert "+ nightly: create\n" in run("apply", "--dry-run", str(applied))
    crontab = tmp_path / "crontab"
    crontab.write_text("0 4 * * * /usr/bin/true\n")
    assert "1 to create" in run("crontab", "import", "--dry-run", str(crontab))
    assert run("celery", "--help").startswith("Usage: pgpulse celery")
    follows = ("--schedule", "@after", "--after", "hello", *shell)
    assert "created job load" in run("job", "create", "load", *follows)
    assert run("job", "delete", "hello").splitlines() == [
        "deleted hello",
        "note: load follows hello (after) and waits for its runs from now on (pgpulse lint "
        "reports it as an upstream error)",
    ]
