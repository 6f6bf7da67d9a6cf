"""The dashboard's writing pages: create a job, edit one, backfill one.

Each form is generated from the job definition model (:func:`form_fields`: every settable field
of :mod:`pgpulse.core.definition`, with its kind, unit, bounds, default and help), and is sent by
``static/forms.js`` as JSON to the API's own routes under ``/ui/api/v1``
(:data:`pgpulse.web.api.DASHBOARD_API`): the same handlers, bodies, checks and authorisation as
``/api/v1``, signed in by the browser's cookie and a CSRF value in a header. There is no second
write path to keep in step: what the API refuses, the form shows refused, with the same message.

Before a save the form shows what it would do (``POST .../plan``: the fields that change, old
and new, as ``pgpulse apply --dry-run`` prints them); the schedule's next occurrences, in UTC and
in the job's zone, and the schedule in words are previewed as it is typed
(``GET .../schedule/next``). A backfill shows its dry run's occurrences before it runs.

The pages need JavaScript (a JSON body cannot be sent by a plain HTML form); without it they say
so, and the CLI and the API remain.
"""

from __future__ import annotations

import dataclasses
import json
from datetime import datetime
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse

from pgpulse.core.definition import Field, job_fields
from pgpulse.core.jobs import JobSpec
from pgpulse.web.api import CSRF_HEADER
from pgpulse.web.context import WebContext
from pgpulse.web.dashboard import JobId, Session, page

router = APIRouter(prefix="/ui", include_in_schema=False)

#: How each kind of model field is typed in: the input's type and step.
_INPUTS: dict[str, dict[str, str]] = {
    "text": {"type": "text"},
    "int": {"type": "number", "step": "1"},
    "seconds": {"type": "number", "step": "any"},
    "instant": {"type": "text"},
    "names": {"type": "text"},
}
#: How a kind of field is written in its input, for its help line (the model's doc says the
#: rest: an instant's zone without an offset, say).
_HINTS = {
    "instant": "ISO 8601, e.g. 2026-12-24T08:00:00Z",
    "names": "names, separated by commas",
}


def _shown(entry: Field, value: Any) -> str:
    """A field's value as its input holds it: JSON for an object, names joined by commas,
    ISO 8601 for an instant, the number for a number, blank for none."""
    if value is None:
        return ""
    if entry.kind == "json":
        return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True)
    if entry.kind == "names":
        return ", ".join(value)
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _bounds(entry: Field) -> tuple[dict[str, str], list[str]]:
    """A field's input attributes (its type; a number's ``min``/``max``, a text's
    ``maxlength``: the model's bounds) and the bounds in words, for its help."""
    attrs = dict(_INPUTS.get(entry.kind, {}))
    bounds: list[str] = []
    if entry.kind in ("int", "seconds"):
        if entry.minimum is not None:
            attrs["min"] = _plain(entry.minimum)
            bounds.append(f"at least {_words(entry.minimum)}")
        if entry.maximum is not None:
            attrs["max"] = _plain(entry.maximum)
            bounds.append(f"at most {_words(entry.maximum)}")
    elif entry.kind == "text" and entry.maximum is not None:
        attrs["maxlength"] = _plain(entry.maximum)
        bounds.append(f"at most {_words(entry.maximum)} characters")
    return attrs, bounds


def _plain(value: float) -> str:
    """A bound as an input's attribute: ``86400``, ``0.001``."""
    return str(int(value)) if float(value).is_integer() else repr(value)


def _words(value: float) -> str:
    """A bound as people read it (as the model's refusals write it): ``1,000``, ``0.001``."""
    return f"{int(value):,}" if float(value).is_integer() else f"{value:g}"


def _sentence(text: str) -> str:
    """``text`` as a sentence: its first letter a capital (the rest as written), a full stop."""
    text = text.strip().rstrip(".")
    return text[:1].upper() + text[1:] + "."


def form_fields(job: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The job form's inputs, one per settable field of the definition model, in its order:
    name, kind, input attributes (type, step, min/max or lengths), unit, whether it is
    required or nullable, its help (the model's doc, unit and bounds) and its value (``job``'s,
    or the model's default for a new job).

    Args:
        job: the job being edited (as :func:`pgpulse.web.service.present_job` shows it), or
            ``None`` for a new one.
    """
    out: list[dict[str, Any]] = []
    for entry in job_fields(JobSpec):
        if not entry.settable or entry.identity:
            continue
        attrs, bounds = _bounds(entry)
        if job is not None:
            value = job.get(entry.name)
        elif entry.default is dataclasses.MISSING:
            value = None
        else:
            value = entry.default
        help_parts = [_sentence(entry.doc)]
        if entry.unit:
            help_parts.append(f"Unit: {entry.unit}.")
        if bounds:
            help_parts.append(_sentence(", ".join(bounds)))
        if entry.kind in _HINTS:
            help_parts.append(_sentence(_HINTS[entry.kind]))
        if entry.nullable:
            help_parts.append("Blank: no limit.")
        out.append(
            {
                "name": entry.name,
                "label": entry.name.replace("_", " "),
                "kind": entry.kind,
                "attrs": attrs,
                "unit": entry.unit,
                "required": entry.required,
                "nullable": entry.nullable,
                "choices": entry.choices,
                "help": " ".join(help_parts),
                "value": _shown(entry, value),
            }
        )
    return out


@router.get("/jobs/new", response_class=HTMLResponse)
async def new_job(request: Request, session: Session) -> HTMLResponse:
    """The form for a new job (tenant tokens: of their tenant; admin: any tenant)."""
    who, token = session
    return page(
        request,
        "edit",
        who,
        token,
        job=None,
        fields=form_fields(None),
        csrf_header=CSRF_HEADER,
    )


@router.get("/jobs/{job_id}/edit", response_class=HTMLResponse)
async def edit_job(request: Request, job_id: JobId, session: Session) -> HTMLResponse:
    """The form that changes job ``job_id``'s definition (404 as its page when not visible)."""
    who, token = session
    ctx: WebContext = request.app.state.pulse
    job = await ctx.service.job(who, job_id)
    return page(
        request,
        "edit",
        who,
        token,
        job=job,
        fields=form_fields(job),
        csrf_header=CSRF_HEADER,
    )


@router.get("/jobs/{job_id}/backfill", response_class=HTMLResponse)
async def backfill_job(request: Request, job_id: JobId, session: Session) -> HTMLResponse:
    """The backfill form of job ``job_id``: a range, which occurrences, how many at once; a
    dry run lists them before anything runs."""
    who, token = session
    ctx: WebContext = request.app.state.pulse
    job = await ctx.service.job(who, job_id)
    return page(request, "backfill", who, token, job=job, csrf_header=CSRF_HEADER)
