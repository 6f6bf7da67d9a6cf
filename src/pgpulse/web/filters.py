"""The dashboard's list filters: query parameters checked at the edge, and page links.

A bad filter is refused with one line naming the parameter and its value (:class:`BadFilter`:
422 and the error page), never silently dropped.
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime
from typing import get_args
from urllib.parse import urlencode

from fastapi import Request

from pgpulse.core.errors import InvalidInput
from pgpulse.core.zones import utc_if_naive
from pgpulse.web.schemas import Outcome, Status


class BadFilter(InvalidInput):
    """A list page's query parameter that is not a value the filter takes (422, whatever the
    parameter's name: a ``status`` filter is not a conflict with a job's state)."""


#: Values the filters accept: the API's own lists (:mod:`pgpulse.web.schemas`), so the dashboard
#: and the API take the same statuses and outcomes.
STATUSES: tuple[str, ...] = get_args(Status)
OUTCOMES: tuple[str, ...] = get_args(Outcome)
#: Rows per page of the dashboard's lists.
PAGE_SIZE = 50


def text(request: Request, name: str) -> str | None:
    """Query parameter ``name`` as text, ``None`` when absent or empty.

    Raises:
        BadFilter: longer than 200 characters or with control characters (``field=name``).
    """
    value = request.query_params.get(name, "").strip()
    if not value:
        return None
    if len(value) > 200 or any(ord(c) < 32 or 0xD800 <= ord(c) <= 0xDFFF for c in value):
        raise BadFilter(
            f"{name} {value[:40]!r} must be up to 200 printable characters",
            field=name,
            value=value[:40],
        )
    return value


def choice(request: Request, name: str, allowed: Collection[str]) -> str | None:
    """Query parameter ``name``, one of ``allowed`` (or ``None`` when absent or empty).

    Raises:
        BadFilter: another value (``field=name``).
    """
    value = text(request, name)
    if value is not None and value not in allowed:
        raise BadFilter(
            f"{name} {value!r} is not one of {', '.join(allowed)}", field=name, value=value
        )
    return value


def instant(request: Request, name: str) -> datetime | None:
    """Query parameter ``name`` as an instant: ISO 8601, read as UTC when it has no offset
    (what a browser's ``datetime-local`` input sends; the form says UTC).

    Raises:
        BadFilter: not an ISO 8601 date and time (``field=name``).
    """
    value = text(request, name)
    if value is None:
        return None
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise BadFilter(
            f"{name} {value!r} is not an ISO 8601 date and time", field=name, value=value
        ) from None
    return utc_if_naive(moment)


def run_cursor(request: Request) -> int | None:
    """The ``cursor`` parameter of a runs page: the id of the last run of the previous page.

    Raises:
        BadFilter: not a positive integer (``field="cursor"``).
    """
    value = text(request, "cursor")
    if value is None:
        return None
    if not value.isdigit() or not 0 < int(value) < 2**63:
        raise BadFilter(
            f"cursor {value!r} is not a cursor of this page", field="cursor", value=value
        )
    return int(value)


def job_filter(request: Request) -> int | None:
    """The ``job`` parameter of the runs page: the id of the one job whose runs it lists (a
    job page's link to its older runs).

    Raises:
        BadFilter: not a job id, a positive integer (``field="job"``).
    """
    value = text(request, "job")
    if value is None:
        return None
    if not value.isdigit() or not 0 < int(value) < 2**63:
        raise BadFilter(f"job {value!r} is not a job id", field="job", value=value)
    return int(value)


def next_link(request: Request, cursor: str) -> str:
    """The URL of the next page: this page's filters with ``cursor``."""
    query = {k: v for k, v in request.query_params.items() if k not in ("cursor", "fragment")}
    query["cursor"] = cursor
    return f"{request.url.path}?{urlencode(query)}"
