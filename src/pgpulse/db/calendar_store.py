"""The store's part for exclusion calendars: create or replace, list and delete a tenant's named
calendars (:class:`~pgpulse.core.calendars.ExclusionCalendar`), which jobs name in ``calendars``.

Validation is the calendar's own (:meth:`ExclusionCalendar.create`); authorisation is
:func:`pgpulse.core.access.check_calendar_write`, on every path. A calendar a job names is not
deleted: the jobs lock it ``FOR SHARE`` while they are written, its deletion ``FOR UPDATE``
before it reads who names it.
"""

from __future__ import annotations

from typing import Any

from pgpulse.core.access import OPERATOR, Writer, check_calendar_write
from pgpulse.core.calendars import ExclusionCalendar, is_calendar_name
from pgpulse.core.errors import InvalidInput, NotFound
from pgpulse.core.jobs import check_name
from pgpulse.db.claims import ClaimStore
from pgpulse.sql import QUERIES


class CalendarStore(ClaimStore):
    """Intent-named access to ``pgpulse_calendars`` (see the module docstring)."""

    async def put_calendar(
        self, tenant: str, calendar: ExclusionCalendar, *, writer: Writer = OPERATOR
    ) -> bool:
        """Create or replace ``calendar`` in ``tenant``, as ``writer``. Jobs that name it see
        its new dates from their next claim.

        Returns:
            ``True`` if it was created, ``False`` if it replaced one of the same name.

        Raises:
            Forbidden: ``writer`` may not write calendars of ``tenant``; nothing is written.
            InvalidInput: ``field="tenant"``: no tenant can have that name.
        """
        check_name("tenant", tenant)
        check_calendar_write(writer, tenant)
        rows = await self._rows(
            "put_calendar",
            {
                "tenant": tenant,
                "name": calendar.name,
                "dates": sorted(calendar.dates),
                "country": calendar.country,
                "subdivision": calendar.subdivision,
            },
        )
        return bool(rows[0]["created"])

    async def list_calendars(self, tenant: str | None = None) -> list[dict[str, Any]]:
        """Every calendar (of ``tenant``, or all tenants) by tenant and name, each with the
        names of the jobs that use it (``jobs``).

        Raises:
            InvalidInput: ``field="tenant"``: no tenant can have that name
                (:func:`~pgpulse.core.jobs.check_name`).
        """
        if tenant is not None:
            check_name("tenant", tenant)
        return await self._rows("list_calendars", {"tenant": tenant})

    async def delete_calendar(self, tenant: str, name: str, *, writer: Writer = OPERATOR) -> None:
        """Delete calendar ``name`` of ``tenant``, as ``writer``, unless a job names it.

        Raises:
            Forbidden: ``writer`` may not write calendars of ``tenant``.
            InvalidInput: ``field="tenant"``: no tenant can have that name.
            CalendarNotFound: no such calendar.
            InvalidInput: ``field="calendar"``: jobs name it (the first few are listed);
                nothing is deleted.
        """
        check_name("tenant", tenant)
        check_calendar_write(writer, tenant)
        if not is_calendar_name(name):
            raise CalendarNotFound(tenant, name)  # no calendar has such a name
        params = {"tenant": tenant, "name": name}
        async with self.pool.connection() as conn, conn.transaction():
            await conn.execute(QUERIES["lock_calendar"], params)
            row = await (await conn.execute(QUERIES["delete_calendar"], params)).fetchone()
        assert row is not None
        if not row["found"]:
            raise CalendarNotFound(tenant, name)
        if not row["deleted"]:
            raise InvalidInput(
                f"calendar {name!r} is in use by {'job' if len(row['jobs']) == 1 else 'jobs'} "
                f"{', '.join(row['jobs'])}: remove it from "
                f"{'it' if len(row['jobs']) == 1 else 'them'} first",
                field="calendar",
                value=name,
            )


class CalendarNotFound(NotFound):
    """No calendar of that name in that tenant."""

    def __init__(self, tenant: str, name: str) -> None:
        super().__init__(f"no calendar {name!r} in tenant {tenant!r}", field="name", value=name)
        self.tenant = tenant
        self.name = name
