"""The alerts' reads and writes, as intent-named methods over a connection source (the node's
pool, or the CLI's). Statements live in ``sql/alerts.sql``.

Every write path (CLI, HTTP API, :class:`~pgpulse.app.App`) comes through here, so the checks
are the same on each: a notifier's config is validated by :mod:`pgpulse.alerts.notifiers` (webhook
and check-in URLs against the ``http`` jobs' address policy unless the operator's allow-list names
them), a rule by :func:`~pgpulse.alerts.rules.parse_rule` and, for ``silence``, against its
job's schedule; a refusal raises before anything is written. Notifier configs are returned
redacted: secrets never leave the database through these methods, except to the sender
(:meth:`AlertStore.claim_deliveries`).
"""

from __future__ import annotations

import asyncio
import shlex
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from psycopg import AsyncCursor
from psycopg.rows import DictRow
from psycopg.types.json import Jsonb

from pgpulse.alerts.notifiers import parse_notifier_config
from pgpulse.alerts.rules import (
    CLUSTER_RULES,
    RULE_KINDS,
    RuleSpec,
    check_notifier_kinds,
    check_silence_window,
    parse_rule,
)
from pgpulse.core.access import OPERATOR, Writer, check_alert_write, check_notifier_use
from pgpulse.core.egress import HttpAllowList
from pgpulse.core.errors import InvalidInput, JobNotFound, NotFound, PulseError
from pgpulse.core.jobs import check_name, unprintable
from pgpulse.core.policy import TargetNotAllowed  # the address rule only: no web framework
from pgpulse.core.schedule import parse_schedule
from pgpulse.core.wording import seconds_text
from pgpulse.db.database import ConnectionSource
from pgpulse.sql import load_queries

ALERT_QUERIES = load_queries("alerts.sql")
#: An evaluation's statements of the rules about jobs (:data:`~pgpulse.alerts.rules.RULE_KINDS`;
#: ``sql/alerts.sql``), in the order any node sends them: ``recovered`` first, so that it
#: closes only events fired before.
JOB_RULE_STATEMENTS = tuple(
    statement
    for kind in sorted(RULE_KINDS.values(), key=lambda kind: not kind.first)
    if kind.scope == "job" and not kind.leader
    for statement in kind.statements
)
#: Its statements sent by the leader only, after those: the cluster rules' and the job rules'
#: that only the leader evaluates (``alert_no_live_node`` follows them, sent by a node that
#: found an outage as it started).
LEADER_RULE_STATEMENTS = tuple(
    statement
    for kind in RULE_KINDS.values()
    if kind.scope == "cluster" or kind.leader
    for statement in kind.statements
)
#: Longest silence, seconds (a year).
MAX_SILENCE = 366 * 86400.0
#: Notifier names: like job handler names, short and printable.
MAX_NOTIFIER_NAME = 100


async def _one(cur: AsyncCursor[DictRow]) -> DictRow:
    """The one row a statement returns."""
    row = await cur.fetchone()
    assert row is not None
    return row


class NotifierInUse(PulseError):
    """A notifier cannot be removed while rules name it; ``value`` lists them."""


class SilenceNotFound(NotFound):
    """No silence with this id is in force (or to come) for this writer: it never existed, it
    ended, or it silences what the writer may not see (another tenant's job, the cluster)."""

    def __init__(self, silence_id: int) -> None:
        super().__init__(
            f"no silence with id {silence_id} in force (see pgpulse alert silences)",
            field="id",
            value=silence_id,
        )


class AlertNotFound(NotFound):
    """No alert event has this id (or the reader may not see it: another tenant's job's alert
    answers as a missing one)."""

    def __init__(self, alert_id: int) -> None:
        super().__init__(
            f"no alert with id {alert_id} (see pgpulse alert list)", field="id", value=alert_id
        )


class AlertStore:
    """Alerts' tables: notifiers, rules, events and their deliveries, silences.

    Args:
        pool: a connection source with dict rows in autocommit mode (a
            :class:`~pgpulse.db.store.Store`'s ``pool``).
    """

    def __init__(self, pool: ConnectionSource) -> None:
        self.pool = pool

    async def _rows(self, name: str, params: dict[str, Any]) -> list[dict[str, Any]]:
        async with self.pool.connection() as conn:
            cur = await conn.execute(ALERT_QUERIES[name], params)
            return await cur.fetchall() if cur.description else []

    # -- notifiers -------------------------------------------------------------------------

    async def add_notifier(
        self,
        name: str,
        kind: str,
        config: object,
        *,
        allow: HttpAllowList | None = None,
        allowed_by: str | None = None,
        tenant: str | None = None,
    ) -> tuple[int, bool]:
        """Create or replace notifier ``name`` (a replacement keeps whom it is shared with).

        Args:
            name: its name (1-100 printable characters), how rules refer to it.
            kind: ``webhook``, ``email`` or ``checkin``.
            config: its JSON object (docs/alerts.md).
            tenant: the tenant it belongs to (its jobs' rules may name it), or ``None``: the
                cluster's, which a tenant's rules may name only once it is shared with the
                tenant (:meth:`share_notifier`).
            allow: the operator's ``--http-allow`` list: webhook and check-in URLs must be
                public or on it (loopback and private addresses are refused otherwise).
            allowed_by: the option that list comes from, named by a refusal (default: the
                HTTP edge's, :data:`pgpulse.core.policy.SERVER_ALLOW`); the refusal adds that
                the delivering nodes need the target on their own list too.

        Returns:
            (id, created).

        Raises:
            InvalidInput: ``field="name"``, ``field="tenant"``; or the config's refusal
                (``field="kind"`` or ``"config.<key>"``, secrets never quoted;
                ``TargetNotAllowed`` for a URL).
        """
        if tenant is not None:
            check_name("tenant", tenant)
        if (
            not isinstance(name, str)
            or not name
            or len(name) > MAX_NOTIFIER_NAME
            or not name.isprintable()
            or name != name.strip()
        ):
            raise InvalidInput(
                f"name must be 1-{MAX_NOTIFIER_NAME} printable characters, got {name!r}",
                field="name",
                value=name,
            )
        # In a worker thread: a config is outside input (a CA bundle of up to 256 KiB, addresses
        # for the e-mail parser), and the node's heartbeats share this event loop.
        parsed = await asyncio.to_thread(parse_notifier_config, kind, config)
        try:
            await parsed.check_targets(allow or HttpAllowList(), allowed_by=allowed_by)
        except TargetNotAllowed as exc:
            raise TargetNotAllowed(
                f"{exc}; the nodes that deliver it need it too (pgpulse node run --http-allow)",
                field=exc.field,
                value=exc.value,
            ) from None
        [row] = await self._rows(
            "add_notifier",
            {"name": name, "kind": kind, "config": Jsonb(parsed.to_json()), "tenant": tenant},
        )
        return int(row["id"]), bool(row["created"])

    async def share_notifier(
        self, name: str, *, add: Sequence[str] = (), remove: Sequence[str] = ()
    ) -> list[str]:
        """Share notifier ``name`` with the tenants ``add`` (their jobs' rules may then name it)
        and withdraw it from the tenants ``remove``. Rules already set keep it.

        Returns:
            The tenants it is shared with now, sorted.

        Raises:
            InvalidInput: ``field="name"``: no such notifier; ``field="tenant"``: a tenant's
                name is not a valid name.
        """
        for tenant in (*add, *remove):
            check_name("tenant", tenant)
        rows = await self._rows(
            "share_notifier", {"name": name, "add": list(add), "remove": list(remove)}
        )
        if not rows:
            raise InvalidInput(f"no notifier named {name!r}", field="name", value=name)
        return list(rows[0]["shared_with"])

    async def list_notifiers(self) -> list[dict[str, Any]]:
        """Every notifier, by name, with its config redacted (secrets shown as ``***``)."""
        rows = await self._rows("list_notifiers", {})
        for row in rows:
            row["config"] = parse_notifier_config(row["kind"], row["config"]).redacted()
        return rows

    async def remove_notifier(self, name: str) -> int:
        """Remove notifier ``name`` (its deliveries' history goes with it).

        Raises:
            InvalidInput: ``field="name"``: no such notifier.
            NotifierInUse: rules name it, each listed as ``pgpulse alert rule remove`` takes
                it (``failures --job nightly``, ``lag``: the cluster's), with the command that
                removes the first; nothing removed.
        """
        [row] = await self._rows("remove_notifier", {"name": name})
        if row["id"] is None:
            raise InvalidInput(f"no notifier named {name!r}", field="name", value=name)
        if row["removed"] is None:
            users = [rule_reference(u["rule"], u["tenant"], u["job"]) for u in row["users"]]
            raise NotifierInUse(
                f"notifier {name!r} is used by rules {', '.join(users)}: remove them first "
                f"(pgpulse alert rule remove {users[0]})",
                field="name",
                value=name,
            )
        return int(row["removed"])

    # -- rules -----------------------------------------------------------------------------

    async def set_rule(
        self,
        rule: object,
        notifiers: object,
        *,
        threshold: object = None,
        job: tuple[str, str] | None = None,
        writer: Writer = OPERATOR,
        now: datetime | None = None,
    ) -> tuple[int, bool]:
        """Create or replace a rule of job ``job`` = (tenant, name), or the cluster's (``None``:
        a cluster rule, or the default of a job rule for every job without its own).

        Raises:
            InvalidInput: the rule's refusal (:func:`~pgpulse.alerts.rules.parse_rule`); a
                ``silence`` window shorter than the job's schedule's period
                (:func:`~pgpulse.alerts.rules.check_silence_window`); ``field="notifiers"`` for
                a notifier that does not exist, or of a kind the rule cannot use
                (:func:`~pgpulse.alerts.rules.check_notifier_kinds`).
            JobNotFound: no such job.
            Forbidden: ``writer`` may not change that job (or, being a tenant's, the cluster).
        """
        spec = parse_rule(rule, threshold, notifiers, cluster=job is None)
        async with self.pool.connection() as conn, conn.transaction():
            job_id, job_tenant = None, None
            if job is not None:
                cur = await conn.execute(
                    "SELECT j.* FROM pgpulse_job_names n JOIN pgpulse_jobs j ON j.id = n.job_id "
                    "WHERE n.tenant = %s AND n.name = %s FOR KEY SHARE OF j",
                    job,
                )
                row = await cur.fetchone()
                if row is None:
                    raise JobNotFound(*job)
                check_alert_write(writer, row["tenant"])
                job_id, job_tenant = row["id"], row["tenant"]
                if RULE_KINDS[spec.rule].window and spec.threshold is not None:
                    clock = now
                    if clock is None:
                        found = await (await conn.execute("SELECT now() AS n")).fetchone()
                        assert found is not None
                        clock = found["n"]
                    check_silence_window(
                        spec.threshold,
                        parse_schedule(row["schedule"], row["timezone"]),
                        now=clock,
                        anchor=row["anchor_at"],
                    )
            else:
                check_alert_write(writer, None)
            ids = await notifier_ids(conn, spec, tenant=job_tenant, writer=writer)
            cur = await conn.execute(
                ALERT_QUERIES["set_rule"],
                {
                    "job_id": job_id,
                    "rule": spec.rule,
                    "threshold": spec.threshold,
                    "notifiers": ids,
                },
            )
            out = await cur.fetchone()
            assert out is not None
            return int(out["id"]), bool(out["created"])

    async def remove_rule(self, rule: str, *, job: tuple[str, str] | None = None) -> None:
        """Remove a rule of job ``job``, or the cluster's.

        Raises:
            InvalidInput: ``field="rule"``: no such rule is set.
            JobNotFound: no such job.
        """
        job_id = await self._job_id(job) if job is not None else None
        if not await self._rows("remove_rule", {"job_id": job_id, "rule": rule}):
            where = f"job {job[1]!r}" if job is not None else "the cluster"
            raise InvalidInput(f"no rule {rule!r} is set for {where}", field="rule", value=rule)

    async def list_rules(self, *, job: tuple[str, str] | None = None) -> list[dict[str, Any]]:
        """The cluster's rules and defaults, and every job's (or only ``job``'s) own rules."""
        job_id = await self._job_id(job) if job is not None else None
        return await self._rows("list_rules", {"job_id": job_id})

    async def _job_id(self, job: tuple[str, str]) -> int:
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                "SELECT job_id FROM pgpulse_job_names WHERE tenant = %s AND name = %s", job
            )
            row = await cur.fetchone()
        if row is None:
            raise JobNotFound(*job)
        return int(row["job_id"])

    # -- events, silences ------------------------------------------------------------------

    async def list_alerts(
        self,
        *,
        job: tuple[str, str] | None = None,
        open_only: bool = False,
        limit: int = 50,
        alert_id: int | None = None,
    ) -> list[dict[str, Any]]:
        """Alert events, newest first, each with its deliveries (notifier, status, attempts,
        last HTTP or SMTP status and error, scrubbed of secrets by the sender); with
        ``alert_id``, that one event (if it exists), however old."""
        job_id = await self._job_id(job) if job is not None else None
        return await self._rows(
            "list_alerts",
            {"job_id": job_id, "alert_id": alert_id, "open": open_only, "limit": limit},
        )

    async def acknowledge(
        self, event_id: int, *, by: str = "", now: datetime | None = None
    ) -> None:
        """Acknowledge alert ``event_id`` (idempotent: the first acknowledgement is kept). A
        notice (``leader_changed``, ``no_live_node``: nothing to wait for) is closed by it
        (docs/alerts.md, "States").

        Args:
            by: who acknowledges it, shown beside the alert: empty, or a name by the rule of
                job and tenant names (:func:`~pgpulse.core.jobs.check_name`: 1-200 printable
                characters, so no terminal control sequence is stored and replayed).

        Raises:
            InvalidInput: ``field="by"``: ``by`` is not a valid name; nothing is written.
            AlertNotFound: no such alert.
        """
        if by:
            check_name("by", by)
        if not await self._rows("acknowledge_alert", {"id": event_id, "by": by, "now": now}):
            raise AlertNotFound(event_id)

    async def silence(
        self,
        seconds: float,
        *,
        job: tuple[str, str] | None = None,
        reason: str = "",
        now: datetime | None = None,
    ) -> dict[str, Any]:
        """Silence alerts of ``job`` (``None``: every job and the cluster) for ``seconds``:
        events that fire meanwhile are recorded, but not delivered.

        Raises:
            InvalidInput: ``field="for"`` for a duration not in [1 s, a year]; ``field="reason"``
                for a reason over 1,000 characters or with a character that cannot be shown
                (:func:`~pgpulse.core.jobs.unprintable`: NUL, controls).
            JobNotFound: no such job.
        """
        if not 1 <= seconds <= MAX_SILENCE:
            raise InvalidInput(
                f"for: a silence lasts at least 1 s and at most {seconds_text(MAX_SILENCE)}, "
                f"got {seconds_text(seconds)}",
                field="for",
                value=seconds,
            )
        if len(reason) > 1000:
            raise InvalidInput("reason: at most 1000 characters", field="reason", value=reason)
        if (problem := unprintable(reason)) is not None:
            raise InvalidInput(
                f"reason {reason!r} is shown wherever the silence is: {problem}",
                field="reason",
                value=reason,
            )
        job_id = await self._job_id(job) if job is not None else None
        [row] = await self._rows(
            "add_silence", {"job_id": job_id, "seconds": seconds, "reason": reason, "now": now}
        )
        return row

    async def end_silence(
        self, silence_id: int, *, writer: Writer = OPERATOR, now: datetime | None = None
    ) -> dict[str, Any]:
        """End silence ``silence_id`` now, before its time: alerts that fire from now on are
        delivered. Its row stays, ending now (``pgpulse alert silences`` no longer shows it).

        Args:
            silence_id: the silence's id (``pgpulse alert silences``).
            writer: who ends it: a tenant's writer ends its own jobs' silences only (as it
                adds them); a silence of everything needs a writer of every tenant.
            now: the instant to end it at (tests); the database's now by default.

        Returns:
            The silence (``id``, ``job_id``, ``tenant``, ``job``, ``starts_at``, ``ends_at``
            now, ``reason``).

        Raises:
            SilenceNotFound: no such silence in force or to come, or one ``writer`` may not
                see (another tenant's, or of everything for a tenant's writer); nothing is
                changed.
        """
        async with self.pool.connection() as conn, conn.transaction():
            cur = await conn.execute(ALERT_QUERIES["end_silence"], {"id": silence_id, "now": now})
            row = await cur.fetchone()
            if row is None or not (writer.tenants is None or row["tenant"] in writer.tenants):
                raise SilenceNotFound(silence_id)  # the transaction rolls the end back
            check_alert_write(writer, row["tenant"])
            return dict(row)

    async def list_silences(self, *, now: datetime | None = None) -> list[dict[str, Any]]:
        """Silences in force now or later, soonest to end first."""
        return await self._rows("list_silences", {"now": now})

    # -- evaluation and delivery (nodes) ---------------------------------------------------

    async def evaluate(
        self,
        *,
        node: str,
        leader: bool,
        lookback: float = 600.0,
        recent: float = 60.0,
        limit: int = 1000,
        outage: tuple[datetime, datetime] | None = None,
        now: datetime | None = None,
    ) -> dict[str, Any]:
        """Evaluate every rule once, in one transaction: each rule kind's statements
        (:data:`LEADER_RULE_STATEMENTS` only when ``leader``, ``no_live_node`` only with an
        ``outage``), then one that queues the new events' deliveries (``sql/alerts.sql``). Safe
        to run on several nodes at once: one event per key.

        Args:
            node: the evaluating node (named by a ``leader_changed`` event).
            leader: whether it leads.
            lookback: seconds of ended runs examined for ``failures`` and ``skipped``.
            recent: seconds of ended runs examined for a ``deadline`` passed while they ran
                (runs that ended between two evaluations; the leader evaluates every
                ``alert_interval``).
            limit: most overdue jobs examined for ``late`` and ``missed``, most occurrences
                fired for ``deadline``.
            outage: (since, until), UTC instants: the cluster had no live node from the last
                heartbeat before this node started until its start (:meth:`cluster_outage`);
                ``no_live_node`` fires when that is longer than its threshold.

        Returns:
            ``fired``, ``queued``, ``closed`` counts, ``next_due`` (the first due instant of
            older pending deliveries, or ``None``) and ``db_now``.
        """
        params = {
            "node": node,
            "lookback": lookback,
            "recent": recent,
            "limit": limit,
            "outage_since": outage[0] if outage else None,
            "outage_until": outage[1] if outage else None,
            "now": now,
        }
        kinds = [*JOB_RULE_STATEMENTS, *(LEADER_RULE_STATEMENTS if leader else ())]
        if outage is not None:
            kinds.append("alert_no_live_node")
        # Round trips: BEGIN; the rule kinds' statements (sent together, the pipeline's first
        # fetch waits for them all); the queueing (the pipeline's end); COMMIT.
        async with self.pool.connection() as conn, conn.transaction(), conn.pipeline():
            sent = [await conn.execute(ALERT_QUERIES[name], params) for name in kinds]
            due = await conn.execute(ALERT_QUERIES["alert_next_due"], {"now": now})
            rows = [await _one(cur) for cur in sent]
            fired = [event for row in rows for event in row["fired"]]
            queue = await conn.execute(
                ALERT_QUERIES["alert_queue_deliveries"], {"events": fired, "now": now}
            )
        queued, clock = await _one(queue), await _one(due)
        return {
            "fired": len(fired),
            "queued": queued["queued"],
            "closed": sum(row["closed"] for row in rows),
            "next_due": clock["next_due"],
            "db_now": clock["db_now"],
        }

    async def raise_cluster(
        self, rule: str, key: str, details: dict[str, Any], *, now: datetime | None = None
    ) -> int | None:
        """Fire cluster event ``key`` of ``rule`` (``split_brain``, ``db_clock``: what a node
        observes and no table shows; ``alert_raise`` in ``sql/alerts.sql``) if the cluster's
        rule of that kind is set, with one delivery per notifier. Once per ``key``, whichever
        nodes raise it and however often.

        Args:
            rule: the rule's kind.
            key: the event's dedupe key (the same on every node that sees the same thing).
            details: what the event carries (JSON object).

        Returns:
            The new event's id; ``None`` when no rule of ``rule`` is set or ``key`` fired
            already.
        """
        params = {"rule": rule, "key": key, "details": Jsonb(details), "now": now}
        async with self.pool.connection() as conn, conn.transaction():
            cur = await conn.execute(ALERT_QUERIES["alert_raise"], params)
            row = await cur.fetchone()
            if row is not None:
                await conn.execute(
                    ALERT_QUERIES["alert_queue_deliveries"], {"events": [row["id"]], "now": now}
                )
        return int(row["id"]) if row is not None else None

    async def resolve_cluster(self, rule: str, *, now: datetime | None = None) -> int:
        """Close the open events of cluster rule ``rule`` (its condition ended); returns how
        many closed."""
        return len(await self._rows("alert_resolve", {"rule": rule, "now": now}))

    async def cluster_outage(
        self, *, now: datetime | None = None
    ) -> tuple[datetime, datetime] | None:
        """For a node about to register: when no node is live and a ``no_live_node`` rule is
        set, (the last heartbeat any node sent, the database's now); else ``None``. The gap
        between them is the time the cluster had no live node (docs/alerts.md, "No live
        node"); :meth:`evaluate` fires on it."""
        rows = await self._rows("cluster_outage", {"now": now})
        return (rows[0]["since"], rows[0]["until"]) if rows else None

    async def checkin_targets(self) -> list[dict[str, Any]]:
        """Every ``checkin`` rule's notifiers: rows of ``job_id`` (``None``: the default),
        ``name`` and ``config`` (secrets included: for the pinger only)."""
        return await self._rows("checkin_targets", {})

    async def claim_deliveries(
        self, *, node: str, limit: int, margin: float = 10.0, now: datetime | None = None
    ) -> list[dict[str, Any]]:
        """Claim due deliveries for ``node`` (a lease of the notifier's timeout + ``margin``
        seconds and a new fencing token each). The events of one job (or of the cluster) reach
        one notifier in the order they fired: a delivery waits while an earlier event's
        delivery to its notifier is pending. The rows carry the notifier's full config,
        secrets included (for the sender only), and the event's ``resolved_at`` as it is now."""
        return await self._rows(
            "claim_deliveries", {"node": node, "limit": limit, "margin": margin, "now": now}
        )

    async def finish_delivery(
        self,
        delivery_id: int,
        token: int,
        *,
        status: str,
        retry_in: float | None = None,
        last_status: int | None = None,
        error: str | None = None,
        now: datetime | None = None,
    ) -> tuple[bool, bool]:
        """Record one attempt's outcome, fenced by ``token``: ``delivered``, ``failed``, or
        ``pending`` again in ``retry_in`` seconds.

        Returns:
            (written, waiting): whether it was written (``False``: the lease was lost and
            another node holds the delivery), and whether a later event of the same job (or
            of the cluster) to the same notifier waits behind it (sent only once this one has
            ended: :meth:`claim_deliveries`).
        """
        rows = await self._rows(
            "finish_delivery",
            {
                "id": delivery_id,
                "token": token,
                "status": status,
                "retry_in": retry_in,
                "last_status": last_status,
                "error": error,
                "now": now,
            },
        )
        return bool(rows), bool(rows and rows[0]["waiting"])


def rule_reference(rule: str, tenant: str | None, job: str | None) -> str:
    """A rule as ``pgpulse alert rule remove`` takes it: ``failures --job nightly`` (with
    ``--tenant`` when not ``default``), or ``lag`` for a cluster rule or default (pure)."""
    if job is None:
        return rule
    where = f" --job {shlex.quote(job)}"
    if tenant != "default":
        where += f" --tenant {shlex.quote(tenant or '')}"
    return rule + where


async def notifier_ids(
    conn: Any, spec: RuleSpec, *, tenant: str | None = None, writer: Writer = OPERATOR
) -> list[int]:
    """The ids of ``spec``'s notifiers, locked against removal until the transaction ends.

    Args:
        conn: a connection in the writing transaction.
        spec: the rule.
        tenant: the tenant of the rule's job (``None``: a cluster rule or default).
        writer: who writes the rule. A writer of some tenants only (a tenant's API token, an
            app's code) may route a job's alerts to the job's tenant's own notifiers and to
            those shared with it (:func:`~pgpulse.core.access.check_notifier_use`).

    Raises:
        InvalidInput: ``field="notifiers"``: one does not exist, or is of a kind the rule
            cannot use (:func:`~pgpulse.alerts.rules.check_notifier_kinds`).
        Forbidden: ``field="notifiers"``: ``writer`` may not use one for ``tenant``'s job.
    """
    cur = await conn.execute(ALERT_QUERIES["notifiers_by_name"], {"names": list(spec.notifiers)})
    rows = await cur.fetchall()
    found = {row["name"]: row for row in rows}
    missing = [n for n in spec.notifiers if n not in found]
    if missing:
        raise InvalidInput(
            f"notifiers: no notifier named {missing[0]!r} (see pgpulse notifier list)",
            field="notifiers",
            value=missing[0],
        )
    check_notifier_kinds(spec, {row["name"]: row["kind"] for row in rows})
    for name in spec.notifiers:
        row = found[name]
        check_notifier_use(writer, tenant, name, row["tenant"], row["shared_with"])
    return [int(found[n]["id"]) for n in spec.notifiers]


__all__ = [
    "ALERT_QUERIES",
    "CLUSTER_RULES",
    "AlertStore",
    "NotifierInUse",
    "SilenceNotFound",
    "notifier_ids",
    "rule_reference",
]
