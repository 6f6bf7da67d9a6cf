"""The embedded PostgreSQL: shared by the processes of one data folder, pruned of dead users,
stopped on demand."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from helpers import pgpulse
from pgpulse.core.errors import InvalidInput
from pgpulse.db.embedded import start_embedded, stop_embedded


@pytest.fixture
def data_dir() -> Iterator[Path]:
    """A data folder outside pytest's own temporary root, which pytest keeps at mode 0700 (and
    resets to it when another session starts): the server runs as another user when we are
    root, and needs to traverse every parent folder."""
    folder = Path(tempfile.mkdtemp(prefix="pgpulse-embedded-test-"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def test_dead_users_are_pruned_and_db_stop_stops_the_server(data_dir: Path) -> None:
    tmp_path = data_dir
    # A process that used the server and was killed -9 left its pid in the handle list.
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    dead_pid = int(dead.stdout)
    uri = start_embedded(tmp_path)
    handles = tmp_path / "pgdata" / ".handle_pids.json"
    handles.write_text(json.dumps([dead_pid, *json.loads(handles.read_text())]))
    assert start_embedded(tmp_path) == uri  # a second user joins the same server
    assert dead_pid not in json.loads(handles.read_text())
    with psycopg.connect(uri) as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)
    assert stop_embedded(tmp_path) is True
    assert stop_embedded(tmp_path) is False  # already stopped
    assert not (tmp_path / "pgdata" / "postmaster.pid").exists()


def test_a_server_kept_by_db_url_outlives_the_next_command_until_db_stop(data_dir: Path) -> None:
    """README: ``pgpulse db url`` leaves the server running until ``pgpulse db stop``; the next
    command on the same data folder joined the server and stopped it when it exited."""
    base = [sys.executable, "-m", "pgpulse", "--data-dir", str(data_dir)]
    url = subprocess.run([*base, "db", "url"], capture_output=True, text=True, check=True)
    uri = url.stdout.strip()
    status = subprocess.run([*base, "status"], capture_output=True, text=True, check=False)
    assert status.returncode in (0, 1), status.stderr  # 1: no live node, said so
    with psycopg.connect(uri) as conn:  # still running after the second command exited
        assert conn.execute("SELECT 1").fetchone() == (1,)
    stop = subprocess.run([*base, "db", "stop"], capture_output=True, text=True, check=True)
    assert stop.returncode == 0
    assert not (data_dir / "pgdata" / "postmaster.pid").exists()
    assert not (data_dir / "pgdata" / ".pgpulse_keep_running").exists()


def test_a_data_folder_that_cannot_be_created_is_one_line_naming_the_option(
    tmp_path: Path,
) -> None:
    """A ``--data-dir`` (or ``PGPULSE_DATA_DIR``) that cannot be made (a file on the way, a
    folder of /proc) is refused in one line naming the option, the value and the reason, exit
    2, on every path that starts the server; the Python API raises InvalidInput."""
    afile = tmp_path / "afile"
    afile.write_text("not a folder")
    under_file = afile / "sub"
    no_db = {"PGPULSE_DATABASE_URL": ""}
    cases = [
        (["--data-dir", str(under_file), "status"], {}, "Not a directory", ""),
        (["--data-dir", str(under_file), "db", "url"], {}, "Not a directory", ""),
        (["job", "list"], {"PGPULSE_DATA_DIR": str(under_file)}, "Not a directory", "env"),
    ]
    if Path("/proc/self").is_dir():  # Linux: nothing can be made in /proc, not even by root
        cases.append((["--data-dir", "/proc/nope", "node", "run"], {}, "No such file", ""))
    for args, env, reason, source in cases:
        result = pgpulse(*args, env={**no_db, **env})
        value = "/proc/nope" if "/proc/nope" in args else str(under_file)
        line = (
            f"error: invalid value for --data-dir: the data folder '{value}' cannot be "
            f"created: {reason}"
        )
        assert result.returncode == 2, (args, result.stderr)
        assert result.stderr.startswith(line), result.stderr
        assert result.stderr.count("\n") == 1, result.stderr  # one line, no traceback
        assert result.stderr.endswith(" (from the environment variable PGPULSE_DATA_DIR)\n") is (
            source == "env"
        )
    assert afile.read_text() == "not a folder"
    with pytest.raises(InvalidInput, match="cannot be created: Not a directory") as refused:
        start_embedded(under_file)
    assert (refused.value.field, refused.value.value) == ("data_dir", str(under_file))
