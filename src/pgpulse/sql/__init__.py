"""Pulse's SQL, kept as SQL: ``queries.sql`` holds named blocks, ``migrations/`` the schema.

Loaded once at import; the engine and store look statements up by name
(``QUERIES["finish_jobs"]``) rather than building SQL strings in Python.
"""

from __future__ import annotations

import functools
import re
from importlib import resources
from typing import Final

_NAME = re.compile(r"^-- name: (\w+)\s*$", re.MULTILINE)
_FRAGMENT = re.compile(r"^-- fragment: (\w+)\s*$", re.MULTILINE)
#: A marker in a statement: ``{name}`` of a fragment or of a shard marker.
_MARKER = re.compile(r"\{(\w+)\}")


def split_named_blocks(text: str, heading: re.Pattern[str] = _NAME) -> dict[str, str]:
    """Split SQL text into ``{name: statement}`` at each ``-- name: NAME`` line (or each line
    ``heading`` matches), without the block's comment lines and each line's indentation (no
    literal spans lines).

    Raises:
        ValueError: a name is defined twice.
    """
    parts = heading.split(text)
    queries: dict[str, str] = {}
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        if name in queries:
            raise ValueError(f"queries.sql defines {name!r} twice")
        # Comments and indentation stay in the file, not in what is sent (until a statement is
        # prepared, its text goes out with every execute).
        lines = [
            line.strip() for line in body.strip().splitlines() if not line.lstrip().startswith("--")
        ]
        queries[name] = "\n".join(lines).strip().rstrip(";")
    return queries


def load_queries(filename: str, package: str | None = None) -> dict[str, str]:
    """Load the named blocks of a ``.sql`` file shipped in ``package`` (default: this one,
    ``pgpulse.sql``: ``queries.sql``, ``web.sql``). See :func:`split_named_blocks`."""
    folder = resources.files(package or __package__)
    return split_named_blocks(folder.joinpath(filename).read_text("utf-8"))


def _fragments() -> dict[str, str]:
    """The shared expressions of ``fragments.sql`` by name (``-- fragment: NAME`` blocks), and
    the one written from the job definition model (:func:`definition_columns`)."""
    text = resources.files(__package__).joinpath("fragments.sql").read_text("utf-8")
    return split_named_blocks(text, _FRAGMENT) | _definition_fragments()


def _definition_fragments() -> dict[str, str]:
    """The fragments written from the job definition model
    (:func:`pgpulse.core.definition.job_fields`), so that a field added to the model is read
    and written without editing a statement: ``{definition_columns}``, a job's definition
    (alias ``j``) as a write checks and diffs it and a dry run compares it — every stored
    column, intervals in seconds as ``<name>_s`` (:func:`pgpulse.core.audit.definition_of_row`),
    then the row's id, revision, status and anchor; ``{definition_intervals}``, the intervals
    alone, in seconds; ``{definition_written}``, the columns a write of a definition sets (all
    but the tenant and name that identify the job), in model order (``upsert_job``)."""
    from pgpulse.core.definition import job_fields  # the model, not the driver: no I/O
    from pgpulse.core.jobs import JobSpec

    stored = [f for f in job_fields(JobSpec) if f.column is not None]
    seconds = {
        f.column: f"extract(epoch FROM j.{f.column})::float8 AS {f.column}_s"
        for f in stored
        if f.interval
    }
    read = [seconds.get(f.column, f"j.{f.column}") for f in stored]
    return {
        "definition_columns": ", ".join(["j.id", *read, "j.revision", "j.status", "j.anchor_at"]),
        "definition_intervals": ", ".join(seconds.values()),
        "definition_written": ", ".join(str(f.column) for f in stored if not f.identity),
    }


def fill_fragments(name: str, statement: str, fragments: dict[str, str]) -> str:
    """``statement`` with each fragment marker (``{epoch}``) replaced by its fragment, and the
    markers the fragments name in turn.

    Raises:
        ValueError: the statement names a marker that is neither a fragment nor a shard marker
            (a typo would otherwise reach the server as SQL).
    """
    # a fragment may name another fragment: fill until no fragment marker is left
    while True:
        found = False
        for marker in _MARKER.findall(statement):
            if marker in fragments:
                statement = statement.replace(f"{{{marker}}}", fragments[marker])
                found = True
            elif f"{{{marker}}}" not in SHARD_MARKERS:
                raise ValueError(f"statement {name!r} names an unknown marker {{{marker}}}")
        if not found:
            return statement


def load_statements(*filenames: str) -> dict[str, str]:
    """The named blocks of Pulse's own SQL ``filenames`` (of this package) as one dict, their
    fragment markers filled from ``fragments.sql`` (:func:`fill_fragments`).

    Raises:
        ValueError: two files define one name, or a statement names an unknown marker.
    """
    merged: dict[str, str] = {}
    for filename in filenames:
        blocks = load_queries(filename)
        if twice := merged.keys() & blocks.keys():
            raise ValueError(f"{filename} defines {sorted(twice)} again")
        merged |= blocks
    fragments = _fragments()
    return {name: fill_fragments(name, text, fragments) for name, text in merged.items()}


#: The markers by which a claim statement names a row's shard (``{shard_of_job}``: a job row
#: ``j``; ``{shard_of_occurrence}``: an extra occurrence ``o``), and what each reads at the
#: default of 64 shards and at any other count (:func:`at_shard_count`).
SHARD_MARKERS: Final[dict[str, tuple[str, str]]] = {
    "{shard_of_job}": ("j.shard_id", "(j.id %% {count})::smallint"),
    "{shard_of_occurrence}": ("o.shard_id", "(o.job_id %% {count})::smallint"),
}


#: Every statement of ``queries.sql`` and ``occurrences.sql`` by name, as written (a claim's
#: shard markers unfilled: :func:`at_shard_count`).
RAW_QUERIES: Final[dict[str, str]] = load_statements(
    "queries.sql", "occurrences.sql", "chains.sql", "limits.sql"
)


def migration_files() -> list[tuple[int, str, str]]:
    """Return every migration as ``(version, name, sql)``, ordered by version.

    Files are named ``NNNN_description.sql``; the numbers must run 1, 2, 3... without a gap.

    Raises:
        ValueError: a file is misnamed, or the numbering has a gap or a duplicate.
    """
    folder = resources.files(__package__).joinpath("migrations")
    found: list[tuple[int, str, str]] = []
    for entry in folder.iterdir():
        if not entry.name.endswith(".sql"):
            continue
        match = re.fullmatch(r"(\d{4})_(\w+)\.sql", entry.name)
        if match is None:
            raise ValueError(f"migration file {entry.name!r} is not named NNNN_name.sql")
        found.append((int(match.group(1)), match.group(2), entry.read_text(encoding="utf-8")))
    found.sort()
    versions = [version for version, _, _ in found]
    if versions != list(range(1, len(found) + 1)):
        raise ValueError(f"migration numbers must run 1..N without gaps, found {versions}")
    return found


@functools.lru_cache(maxsize=64)
def at_shard_count(name: str, count: int) -> str:
    """Statement ``name`` as it reads the shards of ``count``, its shard markers filled.

    At 64 a marker reads the stored ``shard_id`` column (``id % 64``, migration 0001) through
    ``pgpulse_jobs_due``; at any other count it is ``(j.id % count)::smallint`` (or
    ``(o.job_id % count)::smallint``), the key of the expression indexes
    ``pgpulse_jobs_due_<count>`` and ``pgpulse_occurrences_due_<count>`` (``shards.sql``, built
    by :mod:`pgpulse.db.resharding`). The count is written as a literal, not a parameter: the claim
    session plans generically (``claims.CLAIM_SESSION_SETTINGS``), and a generic plan matches an
    index expression only to the same constant.

    Args:
        name: a statement of :data:`RAW_QUERIES`.
        count: the shard count, an ``int`` (never text from outside: it becomes SQL).
    """
    statement = RAW_QUERIES[name]
    for marker, (at_64, other) in SHARD_MARKERS.items():
        statement = statement.replace(
            marker, at_64 if count == 64 else other.format(count=int(count))
        )
    return statement


#: Every statement by name, at the default 64 shards (:func:`at_shard_count`).
QUERIES: Final[dict[str, str]] = {name: at_shard_count(name, 64) for name in RAW_QUERIES}
