"""A concurrency key in the chaos workload, and its check (the jobs are built here; the check is
pure, from the executions the handlers recorded).

The workload adds :data:`KEY_JOBS` jobs of kind ``keyed`` that share concurrency key
:data:`KEY`, limited to :data:`KEY_LIMIT` at once (``pgpulse limit set``), with priorities 0, 5
and 10: together they want about as many slots as the limit gives, so their occurrences queue
for the key during the whole run, and the triggers and backfills the runner requests of them
(extra occurrences) count against the same limit.

* **key beyond limit** — an instant at which more than :data:`KEY_LIMIT` executions of the key's
  jobs ran at once, by the effects' own timestamps (the ``chaos_history`` rows' ``started_at``
  and ``ended_at``, on the database's clock): a sweep over the [start, end] intervals of the
  executions that ended under a current lease (their effect applied, or their planned failure
  recorded; each lay inside its lease, and the limit is on leases held at once, across nodes).
  Must be 0.
* **key at once** (information) — the most such executions seen at once: proof that the limit
  was reached.
"""

from __future__ import annotations

from pgpulse.core.jobs import JobSpec
from pgpulse.db.store import Store
from pgpulse_tools.chaos.history import Execution, History

#: The key the workload's keyed jobs share, its limit and how many jobs share it.
KEY = "chaos-warehouse"
KEY_LIMIT = 2
KEY_JOBS = 10
#: The handler kind of the keyed jobs (``chaos_history.kind``).
KIND = "keyed"


def keyed_jobs() -> list[JobSpec]:
    """The workload's keyed jobs (deterministic): every 2 s, working 0.2-0.6 s, catch-up skip
    or coalesce (a backlog behind the key is skipped, not piled up), priorities 0, 5 and 10.
    They run the ``steady`` kind's handler; their payload's kind is :data:`KIND`."""
    return [
        JobSpec.create(
            name=f"{KIND}-{i:03d}",
            schedule="@every 2s",
            handler="chaos.steady",
            catch_up=("skip", "coalesce")[i % 2],
            payload={"kind": KIND, "min": 0.2, "max": 0.6, "fail": 0.0, "overlap": False},
            misfire_grace=3.0,
            max_attempts=3,
            retry_backoff=0.2,
            concurrency_key=KEY,
            priority=(i % 3) * 5,
            source="chaos",
        )
        for i in range(KEY_JOBS)
    ]


async def set_limit(store: Store) -> None:
    """Limit :data:`KEY` to :data:`KEY_LIMIT` at once (the keyed jobs' tenant, ``default``)."""
    await store.set_limit("default", KEY, KEY_LIMIT)


def _counted(history: History) -> list[Execution]:
    """The keyed executions that ended under a current lease."""
    return [
        e
        for e in history.executions
        if e.kind == KIND
        and e.result in ("applied", "failed")
        and e.lease_ok_at_end
        and e.ended_at is not None
    ]


def _sweep(runs: list[Execution]) -> list[tuple[int, Execution, list[Execution]]]:
    """At each start, how many of ``runs`` ran at once (an end before a start at one instant)."""
    edges = sorted(
        [(run.started_at, 1, run.id, run) for run in runs]
        + [(run.ended_at, -1, run.id, run) for run in runs if run.ended_at is not None],
        key=lambda edge: (edge[0], edge[1], edge[2]),
    )
    now: list[Execution] = []
    out = []
    for _, step, _, run in edges:
        if step < 0:
            now.remove(run)
            continue
        now.append(run)
        out.append((len(now), run, list(now)))
    return out


def beyond_limit(history: History) -> list[str]:
    """The starts at which more than :data:`KEY_LIMIT` keyed executions ran at once."""
    found = []
    for count, run, together in _sweep(_counted(history)):
        if count > KEY_LIMIT:
            at = run.started_at.strftime("%H:%M:%S.%f")[:-3]
            found.append(
                f"{KEY}: {count} executions at once at {at} (limit {KEY_LIMIT}): "
                + ", ".join(f"job {e.job_id} {e.node_id}/t{e.token}" for e in together)
            )
    return found


def most_at_once(history: History) -> str:
    """The most keyed executions seen at once, and how many keyed executions were counted."""
    counted = _counted(history)
    most = max((count for count, _, _ in _sweep(counted)), default=0)
    return f"{most} (limit {KEY_LIMIT}; {len(counted)} executions of {KEY_JOBS} jobs)"
