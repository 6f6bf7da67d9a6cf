"""The job definition model (issue 32, item 3): the SQL, the node's claim and the edges name
exactly the model's fields (pgpulse.core.definition; JobSpec's entries)."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest

from pgpulse.cli.applyfile import JOB_FIELDS
from pgpulse.cli.main import job_create
from pgpulse.core.audit import DEFINITION_FIELDS, SETTABLE_FIELDS
from pgpulse.core.definition import job_fields, stored_columns
from pgpulse.core.errors import InvalidInput
from pgpulse.core.jobs import JobSpec
from pgpulse.core.model import ClaimedJob
from pgpulse.sql import RAW_QUERIES, load_statements
from pgpulse.web.reads import shown_job

MODEL = job_fields(JobSpec)
STORED = set(stored_columns(JobSpec))
INTERVALS = {entry.name for entry in MODEL if entry.interval and entry.column}
#: Columns of pgpulse_jobs that are the job's state, not its definition: what upsert_job sets
#: beside the model's columns.
STATE = {
    "id",
    "schedule_kind",
    "revision",
    "status",
    "anchor_at",
    "scheduled_for",
    "next_run_at",
    "attempt",
    "interruptions",
    "run_id",
    "pause_requested",
    "updated_at",
}


def _between(sql: str, start: str, end: str) -> str:
    at = sql.index(start) + len(start)
    return sql[at : sql.index(end, at)]


def _read_columns(sql: str) -> set[str]:
    """The columns a statement reads from its job row ``j``, and its aliases."""
    return set(re.findall(r"\bj\.(\w+)", sql)) | set(re.findall(r"\bAS (\w+)", sql))


def _columns(text: str) -> list[str]:
    return [column.strip() for column in text.split(",")]


def test_upsert_job_sets_every_stored_column() -> None:
    """upsert_job reads the definition as one row (``d``: the model's columns but the
    identity, in the model's order, from the JSON parameter ``definition``), sets them all in
    that order on an update and inserts them first, before the identity and the state."""
    sql = " ".join(RAW_QUERIES["upsert_job"].split())
    definition = [c for c in stored_columns(JobSpec) if c not in ("tenant", "name")]
    read = _between(sql, "WITH d AS ( SELECT", " FROM jsonb_populate_record(NULL::pgpulse_jobs,")
    assert _columns(read) == definition
    assert "%(definition)s)" in sql
    assert _columns(_between(sql, "UPDATE pgpulse_jobs j SET (", ") = (SELECT * FROM d)")) == (
        definition
    )
    update = _between(sql, "= (SELECT * FROM d),", "FROM found, d")
    assigned = set(re.findall(r"(?:^|,) ?(\w+) = ", update.strip()))
    assert assigned <= STATE
    inserted = _columns(_between(sql, "INSERT INTO pgpulse_jobs (", ")"))
    assert inserted[: len(definition)] == definition
    assert set(inserted[len(definition) :]) - STATE == {"tenant", "name"}
    assert "SELECT d.*, new_id.id, %(tenant)s::text, %(name)s::text," in sql
    assert set(re.findall(r"%\((\w+)\)s", sql)) == {
        "definition",
        "tenant",
        "name",
        "schedule_kind",
        "status",
        "anchor_at",
        "scheduled_for",
    }


DEFINITION_READS = {**RAW_QUERIES, **load_statements("lint.sql")}


@pytest.mark.parametrize(
    "name", ["lock_definitions", "lock_definitions_and_sources", "lint_definitions", "dry_run_jobs"]
)
def test_definition_reads_name_every_stored_column(name: str) -> None:
    """What the audit diff and the dry runs read (definition_of_row, the ``definition_columns``
    fragment): intervals in seconds as ``<name>_s``."""
    read = _read_columns(DEFINITION_READS[name])
    assert read >= STORED - INTERVALS
    assert {f"{column}_s" for column in INTERVALS} <= read


def test_get_job_reads_the_row_and_the_intervals_in_seconds() -> None:
    read = _read_columns(RAW_QUERIES["get_job"])
    assert "*" in RAW_QUERIES["get_job"].split("FROM")[0]  # j.*: every column
    assert {f"{column}_s" for column in INTERVALS} <= read


def test_list_jobs_names_the_listed_fields() -> None:
    read = _read_columns(RAW_QUERIES["list_jobs"])
    assert read & STORED == {entry.column for entry in MODEL if entry.listed}


def test_claim_returns_what_the_node_reads() -> None:
    """The claim returns each field the model says the node reads, under its name, and the
    node's ClaimedJob holds it."""
    claimed = {entry.name for entry in MODEL if entry.claimed}
    returning = RAW_QUERIES["claim_jobs"].split("RETURNING", 1)[1]
    assert claimed <= _read_columns(returning)
    assert claimed <= set(ClaimedJob._fields)


def test_api_job_read_shows_the_model_columns() -> None:
    """The API's job (web.sql ``jobs``) reads the job's row (``j.*``) and shows every stored
    field but ``meta``, durations in seconds (shown_job): a new definition column needs no edit
    of the statement."""
    assert load_statements("web.sql")["jobs"].startswith("SELECT j.*,")
    row: dict[str, object] = {column: f"<{column}>" for column in STORED}
    row |= {column: timedelta(minutes=1.5) for column in INTERVALS}
    row |= {"timeout": None, "shard_id": 1, "fencing_token": 2, "interruptions": 0}
    shown = shown_job(row)
    assert set(shown) == STORED - {"meta"}
    assert {column: shown[column] for column in INTERVALS} == {
        column: None if column == "timeout" else 90.0 for column in INTERVALS
    }


def test_edges_take_the_settable_fields() -> None:
    """The audit's list, the apply file's keys and ``job create``'s options: the model's."""
    assert tuple(e.name for e in MODEL if not e.identity) == DEFINITION_FIELDS
    assert set(JOB_FIELDS) == {*SETTABLE_FIELDS, "tenant", "allow_private_target"}
    options = {p.name for p in job_create.params}
    assert set(SETTABLE_FIELDS) <= options
    assert options - set(SETTABLE_FIELDS) == {"name", "tenant", "allow_private_target", "as_json"}


def test_entries_check_kind_and_bounds() -> None:
    """A number out of its entry's bounds is refused naming the field, with its bounds."""
    with pytest.raises(InvalidInput, match=r"auto_pause_after must be a number from 1 to "):
        JobSpec.create(name="a", schedule="@hourly", handler="x", auto_pause_after=0)
    with pytest.raises(InvalidInput, match=r"max_attempts must be a whole number, got 2.5"):
        JobSpec.create(name="a", schedule="@hourly", handler="x", max_attempts=2.5)
    with pytest.raises(TypeError, match="unexpected keyword argument 'nope'"):
        JobSpec.create(name="a", schedule="@hourly", handler="x", nope=1)
