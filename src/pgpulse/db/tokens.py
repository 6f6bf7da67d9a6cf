"""API tokens: creation (shown once), storage as SHA-256 hashes, per-request check, revocation.

A token is ``pgp_`` followed by 43 URL-safe characters (256 random bits). Only its SHA-256 is
stored (``pgpulse_api_tokens``, migration 0002): with that much entropy a fast hash is enough,
and a database dump gives no usable token. Every request is checked against the table (one
indexed read), so a revoked token is refused from the next request on.

A **tenant token** sees and changes the jobs and runs of its tenant only; an **admin token**
sees every tenant and is the only kind that may create or change ``shell`` jobs (when the
server also allows them, see :mod:`pgpulse.core.policy`).
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import re
import secrets
from dataclasses import dataclass
from typing import Any

from pgpulse.core.audit import Actor
from pgpulse.core.errors import InvalidInput, PulseError
from pgpulse.core.jobs import check_name, unprintable
from pgpulse.db.database import ConnectionSource
from pgpulse.sql import load_statements

QUERIES = load_statements("web.sql")
log = logging.getLogger(__name__)

#: Every token starts with this, so secret scanners and people can recognise one.
TOKEN_PREFIX = "pgp_"
#: Characters of a token kept in clear (``pgp_`` + 8) to tell tokens apart in listings.
SHOWN_PREFIX_CHARS = 12
_TOKEN_RE = re.compile(r"^pgp_[A-Za-z0-9_-]{43}$")


class TokenNotFound(PulseError):
    """No live token has the given id (it does not exist or was already revoked)."""


@dataclass(frozen=True, slots=True)
class Principal:
    """Who a request acts for.

    Attributes:
        token_id: the token's row id.
        tenant: the token's tenant (``None`` for an admin token created without one).
        admin: admin tokens see every tenant and may manage ``shell`` jobs.
        label: the token's label (``token create --label``), named in the audit trail.
    """

    token_id: int
    tenant: str | None
    admin: bool
    label: str = ""

    @property
    def actor(self) -> Actor:
        """Who this principal is in the audit trail: ``token:<id>`` and its label."""
        return Actor("api", f"token:{self.token_id}" + (f" ({self.label})" if self.label else ""))

    @property
    def scope(self) -> str | None:
        """The tenant every read is restricted to, or ``None`` (admin: all tenants)."""
        return None if self.admin else self.tenant

    def sees(self, tenant: str) -> bool:
        """Whether this principal may see and change jobs of ``tenant``."""
        return self.admin or tenant == self.tenant


def new_token() -> str:
    """Return a fresh random token (256 bits of ``secrets``)."""
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def hash_token(token: str) -> bytes:
    """SHA-256 of ``token`` (32 bytes), as stored."""
    return hashlib.sha256(token.encode("utf-8", "replace")).digest()


def csrf_token(token: str) -> str:
    """The dashboard's anti-forgery value for a signed-in ``token`` (HMAC, 32 hex chars).

    Forms carry it; a cross-site page cannot compute it without the token itself.
    """
    return hmac.new(token.encode("utf-8", "replace"), b"pgpulse-csrf", "sha256").hexdigest()[:32]


def notice_signature(token: str, notice: str) -> str:
    """The signature of a dashboard notice for a signed-in ``token`` (HMAC, 16 hex chars): a
    page shows a ``?notice=`` only with it, so a link from elsewhere cannot put words of its
    own on a signed-in user's page."""
    message = b"pgpulse-notice\0" + notice.encode("utf-8", "replace")
    return hmac.new(token.encode("utf-8", "replace"), message, "sha256").hexdigest()[:16]


def with_notice(path: str, token: str, notice: str) -> str:
    """``path`` with ``notice`` signed for ``token`` (:func:`notice_signature`): where a
    dashboard button redirects to."""
    from urllib.parse import quote

    return f"{path}?notice={quote(notice)}&sig={notice_signature(token, notice)}"


def looks_like_token(value: str) -> bool:
    """Whether ``value`` has a token's shape (checked before any database read)."""
    return bool(_TOKEN_RE.match(value))


class TokenStore:
    """Create, check, list and revoke API tokens.

    Args:
        pool: the store's pool (autocommit connections, dict rows).
    """

    def __init__(self, pool: ConnectionSource) -> None:
        self.pool = pool

    async def _rows(self, name: str, params: dict[str, Any] | None = None) -> list[dict[str, Any]]:
        async with self.pool.connection() as conn:
            cur = await conn.execute(QUERIES[name], params or {})
            return list(await cur.fetchall())

    async def create(
        self, *, tenant: str | None, admin: bool, label: str = ""
    ) -> tuple[str, dict[str, Any]]:
        """Create a token; return ``(token, row)``. The token is not stored and cannot be shown
        again.

        Args:
            tenant: the tenant a tenant token is bound to (required unless ``admin``).
            admin: an admin token sees every tenant.
            label: free text shown by ``pgpulse token list``.

        Raises:
            InvalidInput: no tenant for a tenant token, a tenant for an admin token (an admin
                token sees every tenant: a tenant would read as a limit it does not have), or
                a malformed tenant or label (``field`` names it).
        """
        if tenant is not None and admin:
            raise InvalidInput(
                f"an --admin token sees every tenant; drop --tenant {tenant!r} (or --admin)",
                field="tenant",
                value=tenant,
            )
        if tenant is None and not admin:
            raise InvalidInput(
                "a tenant token needs --tenant (or create an --admin token)",
                field="tenant",
                value=None,
            )
        if tenant is not None:
            check_name("tenant", tenant)  # the rule of every write, with its reason
        if len(label) > 200:
            raise InvalidInput(
                f"label has {len(label)} characters; at most 200", field="label", value=label
            )
        if (problem := unprintable(label)) is not None:  # DEL, bidi overrides: shown as they are
            raise InvalidInput(
                f"label {label!r} is shown by token list and the audit trail: {problem}",
                field="label",
                value=label,
            )
        token = new_token()
        [row] = await self._rows(
            "token_insert",
            {
                "hash": hash_token(token),
                "prefix": token[:SHOWN_PREFIX_CHARS],
                "tenant": tenant,
                "admin": admin,
                "label": label,
            },
        )
        log.info(
            "created %s token %d (%s)",
            "admin" if admin else f"tenant {tenant}",
            row["id"],
            row["prefix"],
            extra={
                "action": "token_created",
                "token_id": row["id"],
                "tenant": tenant,
                "admin": admin,
            },
        )
        return token, row

    async def authenticate(self, token: str) -> Principal | None:
        """Return who ``token`` acts for, or ``None`` if it is unknown, malformed or revoked.

        One indexed read per call, no cache: a revocation applies to the next request.
        """
        if not looks_like_token(token):
            return None
        rows = await self._rows("token_authenticate", {"hash": hash_token(token)})
        if not rows:
            return None
        row = rows[0]
        return Principal(row["id"], row["tenant"], row["admin"], row["label"])

    async def revoke(self, token_id: int) -> dict[str, Any]:
        """Revoke token ``token_id`` at once; return its row.

        Raises:
            TokenNotFound: no live token has this id.
        """
        rows = await self._rows("token_revoke", {"id": token_id})
        if not rows:
            found = await self._rows("token_revoked_at", {"id": token_id})
            revoked = found[0]["revoked_at"] if found else None
            raise TokenNotFound(
                f"token {token_id} was revoked already (at {revoked.isoformat()})"
                if revoked is not None
                else f"no live token with id {token_id}",
                field="id",
                value=token_id,
            )
        log.info(
            "revoked token %d", token_id, extra={"action": "token_revoked", "token_id": token_id}
        )
        return rows[0]

    async def list(self) -> list[dict[str, Any]]:
        """Every token (revoked ones too), without secrets, by id."""
        return await self._rows("token_list")
