"""The job definition model: one entry per field of a job (issue 32, item 3; pure).

Each field of :class:`~pgpulse.core.jobs.JobSpec` is declared once, with a :class:`Field` in its
dataclass metadata (:func:`define`): its kind, unit and bounds, its default, its ``pgpulse job
create`` flag and help, whether a writer sets it, its column of ``pgpulse_jobs`` and whether the
node reads it. Every edge derives what it needs from :func:`job_fields`:

* :meth:`JobSpec.create <pgpulse.core.jobs.JobSpec.create>` checks each field by its entry
  (:func:`check_field`, or the entry's own ``check``), then the rules between fields;
* the API's job bodies (:mod:`pgpulse.web.schemas`: pydantic models built from the entries);
* the apply file's keys and their types (:mod:`pgpulse.cli.applyfile`);
* ``pgpulse job create``'s options (:func:`pgpulse.cli.main.definition_options`);
* the audit trail's field list (:data:`pgpulse.core.audit.DEFINITION_FIELDS`);
* the parameter of ``upsert_job`` (:mod:`pgpulse.db.writes`: the definition as one JSON
  object, read as a row of ``pgpulse_jobs``), whose column lists in ``queries.sql`` a test
  holds to :func:`stored_columns` (tests/test_definition_model.py);
* what the API and the dashboard show of a job (:func:`pgpulse.web.reads.shown_job`, over
  ``web.sql``'s ``j.*``).

Adding a field to a job is its entry in ``JobSpec``, a migration adding its column, and the
SQL that writes and reads it (``queries.sql``: ``upsert_job``'s three column lists, the
definition reads).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from pgpulse.core.errors import InvalidInput
from pgpulse.core.wording import given

__all__ = [
    "MODEL_KEY",
    "Field",
    "Kind",
    "check_field",
    "define",
    "job_fields",
    "stored_columns",
]

#: What a field holds: ``text`` (a string; ``maximum`` bounds its length), ``json`` (a JSON
#: object), ``choice`` (one of ``choices``), ``int`` (a whole number), ``seconds`` (a duration,
#: a number of seconds), ``instant`` (an aware instant, or ISO 8601 text), ``names`` (a list of
#: names).
Kind = Literal["text", "json", "choice", "int", "seconds", "instant", "names"]

#: The key of a :class:`Field` in a dataclass field's metadata.
MODEL_KEY = "pgpulse"


@dataclass(frozen=True, slots=True, kw_only=True)
class Field:
    """One field of a job's definition.

    Attributes:
        name: the field's name (the dataclass field's; set by :func:`job_fields`).
        kind: what it holds (:data:`Kind`).
        doc: what it is, in a sentence: the CLI option's help and the API field's description.
        default: its value when not given (:data:`dataclasses.MISSING`: required).
        unit: its unit, where it has one (``seconds``, ``runs``).
        minimum, maximum: its bounds (a number's value; a text's length); ``None``: none.
        nullable: whether ``None`` is a value (no limit).
        choices: the values of a ``choice``.
        flag: the ``pgpulse job create`` option (``--auto-pause-after``); ``None``: none.
        settable: whether a writer sets it (the CLI, the API's bodies, an apply file's tables);
            not for the fields the path decides (``source``) or only code declares (``meta``).
        identity: ``tenant`` and ``name``: they name the job, they are not its definition.
        column: its column of ``pgpulse_jobs`` (``None``: not stored).
        interval: stored as an ``interval`` (read back in seconds as ``<name>_s``).
        listed: ``list_jobs`` returns it.
        claimed: the claim returns it: the node reads it (:class:`~pgpulse.core.model.ClaimedJob`).
        check: its own check, instead of :func:`check_field` (``value -> normalised value``,
            raising :class:`InvalidInput`).
        example: an example value for the API's documentation.
    """

    kind: Kind
    doc: str
    name: str = ""
    default: Any = dataclasses.MISSING
    unit: str | None = None
    minimum: float | None = None
    maximum: float | None = None
    nullable: bool = False
    choices: tuple[str, ...] = ()
    flag: str | None = None
    settable: bool = True
    identity: bool = False
    column: str | None = None
    interval: bool = False
    listed: bool = False
    claimed: bool = False
    check: Callable[[Any], Any] | None = None
    example: Any = None

    @property
    def required(self) -> bool:
        """Whether a definition must give it (no default)."""
        return self.default is dataclasses.MISSING


def define(
    default: Any = dataclasses.MISSING,
    *,
    factory: Callable[[], Any] | None = None,
    **entry: Any,
) -> Any:
    """A ``JobSpec`` field with its model entry: ``dataclasses.field`` with the :class:`Field`
    in its metadata. ``default`` (or ``factory``, for a mutable one) is the field's default;
    ``entry`` the :class:`Field`'s attributes (``kind``, ``doc``, ``flag``...). A stored field
    is in the column of its own name unless ``column`` says another (``column=None``: none)."""
    column = entry.pop("column", "")
    made = factory() if factory is not None else default
    spec = Field(default=made, **entry)
    metadata = {MODEL_KEY: (spec, column)}
    if factory is not None:
        return dataclasses.field(default_factory=factory, metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


_MODELS: dict[type, tuple[Field, ...]] = {}


def job_fields(cls: type) -> tuple[Field, ...]:
    """The model of dataclass ``cls`` (``JobSpec``): its :class:`Field` entries in declaration
    order, each named, with its column (its own name unless declared otherwise)."""
    if cls in _MODELS:
        return _MODELS[cls]
    out = []
    for item in dataclasses.fields(cls):
        spec, column = item.metadata[MODEL_KEY]
        out.append(
            dataclasses.replace(spec, name=item.name, column=item.name if column == "" else column)
        )
    _MODELS[cls] = tuple(out)
    return _MODELS[cls]


def stored_columns(cls: type) -> tuple[str, ...]:
    """The ``pgpulse_jobs`` columns that hold ``cls``'s fields, in model order."""
    return tuple(f.column for f in job_fields(cls) if f.column is not None)


def _number_text(value: float) -> str:
    """``1,000`` for a whole bound, ``0.001`` for a fraction."""
    return f"{int(value):,}" if float(value).is_integer() else f"{value:g}"


def _check_number(entry: Field, value: object) -> int | float:
    name = entry.name
    whole = entry.kind == "int"
    if isinstance(value, bool) or not isinstance(value, int | float):
        what = "a whole number" if whole else "a number"
        raise InvalidInput(f"{name} must be {what}, got {given(value)}", field=name, value=value)
    low = -math.inf if entry.minimum is None else entry.minimum
    high = math.inf if entry.maximum is None else entry.maximum
    if not math.isfinite(value) or not low <= value <= high:
        bounds = f"from {_number_text(low)} to {_number_text(high)}"
        unit = f" {entry.unit}" if entry.unit else ""
        raise InvalidInput(
            f"{name} must be a number {bounds}{unit}, got {given(value)}", field=name, value=value
        )
    if whole:
        if int(value) != value:
            raise InvalidInput(
                f"{name} must be a whole number, got {given(value)}", field=name, value=value
            )
        return int(value)
    return float(value)


def check_field(entry: Field, value: object) -> Any:
    """``value`` for field ``entry``, checked by its kind and bounds and normalised (a whole
    number as ``int``, seconds as ``float``); its own ``check`` when it has one.

    Raises:
        InvalidInput: ``field`` is the entry's name.
    """
    if value is None and entry.nullable:
        return None
    if entry.check is not None:
        return entry.check(value)
    name = entry.name
    if entry.kind in ("int", "seconds"):
        return _check_number(entry, value)
    if entry.kind == "choice":
        if value not in entry.choices:
            raise InvalidInput(
                f"{name} must be one of {', '.join(entry.choices)}, got {value!r}",
                field=name,
                value=value,
            )
        return value
    if entry.kind == "text" and not isinstance(value, str):
        raise InvalidInput(f"{name} must be text, got {given(value)}", field=name, value=value)
    return value
