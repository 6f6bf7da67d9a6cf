"""The store's part for limits of concurrency keys: set, list and delete a tenant's limits
(``pgpulse_limits``; :mod:`pgpulse.core.keys`, docs/policies.md "Concurrency keys and
priority"). The claims enforce them (``claim_jobs``, ``claim_occurrences``); these methods only
write and read them.

Validation is :func:`~pgpulse.core.keys.check_concurrency_key` and
:func:`~pgpulse.core.keys.check_limit`, before anything is sent; authorisation is
:func:`pgpulse.core.access.check_limit_write`, on every path (CLI, Python API, HTTP).
"""

from __future__ import annotations

from typing import Any

from pgpulse.core.access import OPERATOR, Writer, check_limit_write
from pgpulse.core.errors import NotFound
from pgpulse.core.jobs import check_name
from pgpulse.core.keys import check_concurrency_key, check_limit
from pgpulse.db.claims import ClaimStore


class LimitStore(ClaimStore):
    """Intent-named access to ``pgpulse_limits`` (see the module docstring)."""

    async def set_limit(
        self, tenant: str, key: str, max_running: int, *, writer: Writer = OPERATOR
    ) -> bool:
        """Set the limit of key ``key`` of ``tenant`` to ``max_running`` occurrences at once,
        as ``writer``. Claims after it see the new limit; occurrences running beyond a lowered
        limit run on.

        Returns:
            ``True`` if it was created, ``False`` if it changed an existing limit.

        Raises:
            InvalidInput: ``field`` is ``tenant``, ``key`` or ``max_running``; nothing written.
            Forbidden: ``writer`` may not manage limits of ``tenant``; nothing written.
        """
        check_name("tenant", tenant)
        check_concurrency_key(key, "key")
        check_limit(max_running)
        check_limit_write(writer, tenant)
        params = {"tenant": tenant, "key": key, "max_running": max_running}
        rows = await self._rows("put_limit", params)
        return bool(rows[0]["created"])

    async def list_limits(self, tenant: str | None = None) -> list[dict[str, Any]]:
        """Every limit (of ``tenant``, or all tenants) by tenant and key: ``tenant``, ``key``,
        ``max_running``, ``running`` (leases its jobs hold now), ``jobs`` (jobs naming the key)
        and ``waiting`` (of those, idle and due).

        Raises:
            InvalidInput: ``field="tenant"``: no tenant can have that name.
        """
        if tenant is not None:
            check_name("tenant", tenant)
        return await self._rows("list_limits", {"tenant": tenant})

    async def delete_limit(self, tenant: str, key: str, *, writer: Writer = OPERATOR) -> None:
        """Delete the limit of key ``key`` of ``tenant``, as ``writer``: its jobs are no longer
        limited (they keep the key).

        Raises:
            InvalidInput: ``field`` is ``tenant`` or ``key``.
            Forbidden: ``writer`` may not manage limits of ``tenant``.
            LimitNotFound: no such limit.
        """
        check_name("tenant", tenant)
        check_concurrency_key(key, "key")
        check_limit_write(writer, tenant)
        if not await self._rows("delete_limit", {"tenant": tenant, "key": key}):
            raise LimitNotFound(tenant, key)


class LimitNotFound(NotFound):
    """No limit on that key in that tenant."""

    def __init__(self, tenant: str, key: str) -> None:
        super().__init__(f"no limit on key {key!r} in tenant {tenant!r}", field="key", value=key)
        self.tenant = tenant
        self.key = key
