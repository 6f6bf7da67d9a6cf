"""``crontab import --sync``: the database matches the file — an edited line updates its job in
place (same id, history kept), a deleted line deletes its job, a moved or untouched line
changes nothing; ``--dry-run`` writes nothing; the system format is detected; ``SHELL`` runs
the command."""

from __future__ import annotations

import json
from pathlib import Path, PurePath
from typing import Any

from helpers import pgpulse
from pgpulse.core.audit import DEFINITION_FIELDS
from pgpulse.core.crontab import entry_to_spec, is_system_crontab, parse_crontab
from pgpulse.core.crontab_sync import plan_crontab_sync
from pgpulse.core.definition import job_fields
from pgpulse.core.jobs import JobSpec

LINES = [
    "0 3 * * * backup --full",
    "*/5 * * * * poll-queue",
    "30 8 * * mon report weekly",
]


def write(path: Path, lines: list[str]) -> None:
    path.write_text("PATH=/usr/bin:/bin\n" + "\n".join(lines) + "\n")


def state(db: Any) -> dict[str, tuple[int, str, int]]:
    """command -> (job id, schedule, revision) of every job."""
    rows = db.execute(
        "SELECT id, schedule, revision, payload->>'command' AS command FROM pgpulse_jobs"
    ).fetchall()
    return {r["command"]: (r["id"], r["schedule"], r["revision"]) for r in rows}


def sync(path: Path, dsn: str, *extra: str) -> str:
    result = pgpulse("crontab", "import", "--sync", *extra, str(path), dsn=dsn)
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_sync_follows_each_kind_of_edit(dsn: str, db: Any, tmp_path: Path) -> None:
    path = tmp_path / "ops.crontab"
    write(path, LINES)
    assert "3 to create" in sync(path, dsn)
    first = state(db)
    backup_id = first["backup --full"][0]
    db.execute(  # a run in the backup job's history
        "INSERT INTO pgpulse_runs (job_id, scheduled_for, attempts, outcome) "
        "VALUES (%s, now(), 1, 'succeeded')",
        (backup_id,),
    )

    # an edited schedule: the same job, updated in place
    write(path, ["15 4 * * * backup --full", *LINES[1:]])
    plan = pgpulse("crontab", "import", "--sync", "--dry-run", str(path), dsn=dsn)
    assert plan.returncode == 0, plan.stderr
    assert 'schedule: "0 3 * * *" -> "15 4 * * *"' in plan.stdout
    assert state(db) == first  # the dry run wrote nothing
    assert "1 to update, 0 to delete, 2 unchanged" in sync(path, dsn)
    assert state(db)["backup --full"] == (backup_id, "15 4 * * *", 2)
    runs = db.execute("SELECT count(*) AS n FROM pgpulse_runs WHERE job_id = %s", (backup_id,))
    assert runs.fetchone()["n"] == 1  # its history stays

    # an edited command: the same job, updated in place
    write(path, ["15 4 * * * backup --incremental", *LINES[1:]])
    sync(path, dsn)
    after = state(db)
    assert after["backup --incremental"] == (backup_id, "15 4 * * *", 3)
    assert "backup --full" not in after

    # moved lines: nothing changes
    write(path, [LINES[2], LINES[1], "15 4 * * * backup --incremental"])
    assert "0 to create, 0 to update, 0 to delete, 3 unchanged" in sync(path, dsn)
    assert state(db) == after

    # a duplicated line: a second job; the first keeps its id
    write(path, [LINES[2], LINES[1], LINES[1], "15 4 * * * backup --incremental"])
    assert "1 to create, 0 to update, 0 to delete, 3 unchanged" in sync(path, dsn)
    names = [
        r["name"]
        for r in db.execute(
            "SELECT name FROM pgpulse_jobs WHERE payload->>'command' = 'poll-queue' ORDER BY id"
        ).fetchall()
    ]
    assert len(names) == 2 and names[1] == f"{names[0]}-2"

    # a deleted line: its job is deleted, the others untouched
    write(path, [LINES[2], LINES[1], LINES[1]])
    assert "0 to create, 0 to update, 1 to delete, 3 unchanged" in sync(path, dsn)
    final = db.execute(
        "SELECT payload->>'command' AS command, source FROM pgpulse_jobs ORDER BY id"
    ).fetchall()
    assert [r["command"] for r in final] == ["poll-queue", "report weekly", "poll-queue"]
    assert {r["source"] for r in final} == {f"crontab:{path.resolve()}"}
    history = db.execute(
        "SELECT action, changes FROM pgpulse_job_history WHERE job_id = %s ORDER BY id",
        (backup_id,),
    ).fetchall()
    assert [h["action"] for h in history] == ["create", "update", "update", "delete"]
    assert history[2]["changes"]["payload"][1]["command"] == "backup --incremental"
    old_name, new_name = history[2]["changes"]["name"]  # renamed after its new content
    assert old_name != new_name and new_name.startswith("ops.backup-")
    table = pgpulse("job", "history", new_name, dsn=dsn)  # each changed field in full
    assert table.returncode == 0, table.stderr
    lines = [line.strip() for line in table.stdout.splitlines()]
    renamed = next(
        i for i, line in enumerate(lines) if f'name: "{old_name}" → "{new_name}"' in line
    )
    assert lines[renamed].split()[:2] == [lines[renamed].split()[0], "update"]
    env = '"env": {"PATH": "/usr/bin:/bin"}'
    assert (
        f'payload: {{{env}, "command": "backup --full"}} → '
        f'{{{env}, "command": "backup --incremental"}}'
    ) in table.stdout
    meta = next(line for line in lines[renamed:] if line.startswith("meta: "))
    assert len(meta) <= 60 and meta.endswith("…")  # the crontab line, cut last
    # the old name's history holds both renames: to it (its first row under that name) and
    # away from it (recorded under the new name)
    before = pgpulse("job", "history", old_name, "--json", dsn=dsn)
    assert before.returncode == 0, before.stderr
    rows = json.loads(before.stdout)
    assert [(r["action"], r["name"]) for r in rows] == [("update", new_name), ("update", old_name)]
    assert rows[1]["changes"]["name"][1] == old_name
    assert rows[0]["changes"]["name"] == [old_name, new_name]


def test_a_refused_line_refuses_the_whole_sync(dsn: str, db: Any, tmp_path: Path) -> None:
    path = tmp_path / "ops.crontab"
    write(path, LINES)
    sync(path, dsn)
    before = state(db)
    write(path, ["0 3 * * * backup --full", "61 * * * * broken"])
    result = pgpulse("crontab", "import", "--sync", str(path), dsn=dsn)
    assert result.returncode == 2
    assert f"refused {path}:3: " in result.stderr
    assert state(db) == before


def test_system_format_is_read_for_etc_crontab_and_cron_d() -> None:
    assert is_system_crontab(PurePath("/etc/crontab"))
    assert is_system_crontab(PurePath("/etc/cron.d/backup"))
    assert not is_system_crontab(PurePath("/etc/cron.daily/backup"))
    assert not is_system_crontab(PurePath("/home/me/crontab"))


def test_user_format_and_system_flags(dsn: str, db: Any, tmp_path: Path) -> None:
    path = tmp_path / "system.crontab"
    path.write_text("SHELL=/bin/bash\n0 3 * * * root [[ 1 == 1 ]] && echo ok\n")
    result = pgpulse("crontab", "import", "--system", str(path), dsn=dsn)
    assert result.returncode == 0, result.stderr
    row = db.execute("SELECT payload FROM pgpulse_jobs").fetchone()
    assert row["payload"]["command"] == "[[ 1 == 1 ]] && echo ok"
    assert row["payload"]["user"] == "root"
    assert row["payload"]["env"]["SHELL"] == "/bin/bash"


def _row(job: JobSpec, job_id: int) -> dict[str, Any]:
    """A stored row of ``job`` as lock_definitions reads it."""
    row: dict[str, Any] = {key: getattr(job, key) for key in DEFINITION_FIELDS}
    for entry in job_fields(JobSpec):  # the durations, read back in seconds as <name>_s
        if entry.interval:
            row[f"{entry.name}_s"] = row.pop(entry.name)
    return {**row, "id": job_id, "tenant": job.tenant, "name": job.name}


def _specs(text: str) -> list[JobSpec]:
    parsed = parse_crontab(text, path="/x/ops.crontab")
    return [entry_to_spec(e, source=SOURCE) for e in parsed.entries]


SOURCE = "crontab:/x/ops.crontab"


def test_a_line_with_a_new_schedule_and_a_new_command_is_a_new_job() -> None:
    [old] = _specs("0 3 * * * backup --full\n")
    stored = {(old.tenant, old.name): _row(old, 7)}
    plan = plan_crontab_sync(SOURCE, _specs("15 4 * * * archive\n"), stored)
    assert [(s.action, s.job_id) for s in plan.steps] == [("create", None), ("delete", 7)]
    same = plan_crontab_sync(SOURCE, [old], stored)
    assert [(s.action, s.job_id) for s in same.steps] == [("unchanged", 7)]


def test_a_dry_run_without_sync_previews_the_plain_import(
    dsn: str, db: Any, tmp_path: Path
) -> None:
    """Found by the fifth new-user trial: `crontab import FILE --dry-run` showed the sync's plan
    (a delete) while `crontab import FILE` keeps the old job and creates the edited line beside
    it. The dry run previews the command it is given."""
    path = tmp_path / "ops.crontab"
    write(path, LINES)
    assert pgpulse("crontab", "import", str(path), dsn=dsn).returncode == 0
    write(path, ["0 3 * * * backup --incremental", *LINES[1:]])  # an edited command
    before = state(db)
    preview = pgpulse("crontab", "import", "--dry-run", str(path), dsn=dsn)
    assert preview.returncode == 0, preview.stderr
    assert "1 to create" in preview.stdout and "0 to delete" in preview.stdout, preview.stdout
    assert state(db) == before  # the dry run wrote nothing
    done = pgpulse("crontab", "import", str(path), dsn=dsn)
    assert done.returncode == 0, done.stderr
    after = state(db)
    assert set(after) == {*before, "backup --incremental"}  # created beside; nothing deleted
    synced = pgpulse("crontab", "import", "--sync", "--dry-run", str(path), dsn=dsn)
    assert "1 to delete" in synced.stdout, synced.stdout  # the sync's plan deletes the old one
