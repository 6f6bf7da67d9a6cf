"""The job definition model (issue 32, item 3): the SQL, the node's claim and the edges name
exactly the model's fields (pgpulse.core.definition; JobSpec's entries)."""

from __future__ import annotations

import re

import pytest

from pgpulse.cli.applyfile import JOB_FIELDS
from pgpulse.cli.main import job_create
from pgpulse.core.audit import DEFINITION_FIELDS, SETTABLE_FIELDS
from pgpulse.core.definition import job_fields, stored_columns
from pgpulse.core.errors import InvalidInput
from pgpulse.core.jobs import JobSpec
from pgpulse.core.model import ClaimedJob
from pgpulse.sql import RAW_QUERIES, load_statements

MODEL = job_fields(JobSpec)
STORED = set(stored_columns(JobSpec))
INTERVALS = {entry.column for entry in MODEL if entry.interval}
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


def test_upsert_job_sets_every_stored_column() -> None:
    sql = RAW_QUERIES["upsert_job"]
    update = _between(" ".join(sql.split()), "UPDATE pgpulse_jobs j SET", "FROM found")
    assigned = set(re.findall(r"(?:^|,) ?(\w+) = ", update.strip()))
    assert assigned - STATE == STORED - {"tenant", "name"}
    insert = _between(sql, "INSERT INTO pgpulse_jobs (", ")")
    inserted = {column.strip() for column in insert.split(",")}
    assert inserted - STATE == STORED
    params = set(re.findall(r"%\((\w+)\)s", sql))
    assert params >= STORED


@pytest.mark.parametrize("name", ["lock_definitions", "lock_definitions_and_sources"])
def test_definition_reads_name_every_stored_column(name: str) -> None:
    """What the audit diff reads (definition_of_row): intervals in seconds as ``<name>_s``."""
    read = _read_columns(RAW_QUERIES[name])
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


def test_api_job_read_names_the_shown_fields() -> None:
    """The API's job (web.sql ``jobs``) shows every stored field but ``meta``."""
    read = _read_columns(load_statements("web.sql")["jobs"])
    assert STORED - {"meta"} <= read


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
