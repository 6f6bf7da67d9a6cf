"""Pulse's SQL, kept as SQL: ``queries.sql`` holds named blocks, ``migrations/`` the schema.

Loaded once at import; the engine and store look statements up by name
(``QUERIES["finish_and_claim"]``) rather than building SQL strings in Python.
"""

from __future__ import annotations

import functools
import re
from importlib import resources
from typing import Final

_NAME = re.compile(r"^-- name: (\w+)\s*$", re.MULTILINE)


def split_named_blocks(text: str) -> dict[str, str]:
    """Split SQL text into ``{name: statement}`` at each ``-- name: NAME`` line, without the
    block's comment lines and each line's indentation (no literal spans lines).

    Raises:
        ValueError: a name is defined twice.
    """
    parts = _NAME.split(text)
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


#: The parts of ``finish_and_claim`` only a rare outcome needs (queries.sql): ``skipped`` writes
#: the summary row of the occurrences an outcome skipped, ``auto_paused`` the audit row of an
#: outcome that pauses its job. ``finish_and_claim_common`` is the statement without them, sent
#: for a batch with neither (:meth:`pgpulse.claims.ClaimStore.finish_and_claim`).
RARE_PARTS: Final[tuple[str, ...]] = ("skipped", "auto_paused")


def _closing(text: str, opening: int) -> int:
    """The index of the parenthesis that closes the one at ``opening`` in SQL ``text``, counting
    outside string literals (the end of ``text`` when none does)."""
    depth, quoted = 0, False
    for at in range(opening, len(text)):
        if text[at] == "'":
            quoted = not quoted
        elif not quoted and text[at] in "()":
            depth += 1 if text[at] == "(" else -1
            if depth == 0:
                return at
    return len(text)


def without_ctes(statement: str, names: tuple[str, ...]) -> str:
    """``statement`` (a ``WITH`` statement as :func:`split_named_blocks` leaves it: each CTE's
    name after ``WITH`` or at the start of a line) without the CTEs ``names``, which must be
    data-modifying CTEs nothing else in it reads: PostgreSQL runs such a CTE even when nothing
    reads it, so the statement without it differs only in not writing what it wrote.

    A CTE's end is its opening parenthesis' match, counted outside string literals.

    Raises:
        ValueError: a CTE of ``names`` is not in ``statement``, is its last, has no closing
            parenthesis, or another part reads it.
    """
    for name in names:
        found = re.search(rf"(?:^WITH |\n){name} AS \(\n", statement)
        if found is None:
            raise ValueError(f"the statement has no CTE {name!r}")
        start = statement.index(name, found.start())
        at = _closing(statement, found.end() - 2)
        if at == len(statement):
            raise ValueError(f"the CTE {name!r} has no closing parenthesis")
        if not statement.startswith(",\n", at + 1):
            raise ValueError(f"the CTE {name!r} is the statement's last")
        statement = statement[:start] + statement[at + 3 :]
        if re.search(rf"\b{name}\b", re.sub(r"'[^']*'", "''", statement)):
            raise ValueError(f"the statement reads its CTE {name!r}: it cannot go")
    return statement


def _all_queries() -> dict[str, str]:
    """``queries.sql`` and ``occurrences.sql`` (the extra occurrences' statements) as one dict,
    with ``finish_and_claim_common`` (``finish_and_claim`` without :data:`RARE_PARTS`).

    Raises:
        ValueError: the two files define one name twice.
    """
    queries = load_queries("queries.sql")
    extra = load_queries("occurrences.sql")
    if twice := queries.keys() & extra.keys():
        raise ValueError(f"queries.sql and occurrences.sql both define {sorted(twice)}")
    common = without_ctes(queries["finish_and_claim"], RARE_PARTS)
    return {**queries, **extra, "finish_and_claim_common": common}


QUERIES: Final[dict[str, str]] = _all_queries()

_PLACEHOLDER = re.compile(r"%\((\w+)\)s")


def positional(statement: str) -> tuple[str, tuple[str, ...]]:
    """Rewrite the ``%(name)s`` placeholders of ``statement`` as PostgreSQL's own ``$1, $2...``
    (one number per distinct name, in first-use order; ``%%`` becomes ``%``).

    A raw cursor (:class:`psycopg.AsyncRawCursor`) sends such a text as it is, with the values
    in ``$n`` order: the driver never parses it, so no execute pays for its length (psycopg
    parses ``%(name)s`` placeholders again at every execute of a statement longer than its
    conversion cache takes).

    Returns:
        The rewritten text, and the placeholder names in ``$n`` order.
    """
    names: dict[str, int] = {}

    def number(match: re.Match[str]) -> str:
        return f"${names.setdefault(match.group(1), len(names) + 1)}"

    return _PLACEHOLDER.sub(number, statement).replace("%%", "%"), tuple(names)


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


#: How a claim statement names a row's shard (``j``: a job row, ``o``: an extra occurrence), and
#: the expression that replaces it at a shard count other than 64 (:func:`for_shard_count`).
_SHARD_COLUMNS = {
    "j.shard_id": "(j.id %% {count})::smallint",
    "o.shard_id": "(o.job_id %% {count})::smallint",
}


def for_shard_count(statement: str, count: int) -> str:
    """``statement`` (a claim, in ``%(name)s`` form) as it reads the shards of ``count``.

    At 64 the statement is unchanged: it reads the stored ``shard_id`` column (``id % 64``,
    migration 0001) through ``pgpulse_jobs_due``. At any other count each ``j.shard_id`` becomes
    ``(j.id % count)::smallint`` and each ``o.shard_id`` ``(o.job_id % count)::smallint``, the
    key of the expression indexes ``pgpulse_jobs_due_<count>`` and
    ``pgpulse_occurrences_due_<count>`` (``shards.sql``, built by :mod:`pgpulse.resharding`).
    The count is written as a literal, not a parameter: the claim session plans generically
    (``claims.CLAIM_SESSION_SETTINGS``), and a generic plan matches an index expression only to
    the same constant.

    Args:
        statement: the statement's text.
        count: the shard count, an ``int`` (never text from outside: it becomes SQL).
    """
    if count == 64:
        return statement
    for column, expression in _SHARD_COLUMNS.items():
        statement = statement.replace(column, expression.format(count=int(count)))
    return statement


@functools.lru_cache(maxsize=16)
def claim_statement(name: str, count: int) -> tuple[str, tuple[str, ...]]:
    """The claim statement ``name`` of :data:`QUERIES` at ``count`` shards
    (:func:`for_shard_count`), with PostgreSQL's own placeholders (:func:`positional`)."""
    return positional(for_shard_count(QUERIES[name], count))
