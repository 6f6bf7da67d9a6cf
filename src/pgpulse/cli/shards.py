"""``pgpulse shards show|set``: the database's shard count and its online change
(:mod:`pgpulse.db.resharding`; docs/scaling.md, "The shard count").

Loaded only when invoked (:data:`pgpulse.cli.conventions.LAZY_COMMANDS`). Thin, as every
command: parse, call the library, print; a refusal is one line and exit 2.
"""

from __future__ import annotations

import json

import click

from pgpulse.cli.main import json_option, with_store
from pgpulse.cli.types import Seconds
from pgpulse.core.wording import seconds_text
from pgpulse.db.resharding import set_shard_count, shard_state
from pgpulse.db.store import Store

ttl_option = click.option(
    "--node-ttl",
    "ttl",
    type=Seconds(0, min_open=True),
    default=10,
    help="A node silent this long is not counted (the nodes' --node-ttl).",
)


@click.group()
def shards() -> None:
    """Show or change the shard count: how many buckets the jobs are spread over (id % count),
    which the live nodes share."""


@shards.command("show")
@ttl_option
@json_option
@with_store()
async def shards_show(store: Store, ttl: float, as_json: bool) -> None:
    """Show the shard count, the count each live node claims by, and the shard indexes."""
    state = await shard_state(store.pool, ttl=ttl)
    if as_json:
        record = {
            "shard_count": state.shard_count,
            "changed_at": state.changed_at.isoformat(),
            "switched": state.switched,
            "nodes": state.nodes,
            "indexes": state.indexes,
        }
        click.echo(json.dumps(record, indent=2))
        return
    click.echo(f"shard count {state.shard_count} (since {state.changed_at:%Y-%m-%d %H:%M:%S} UTC)")
    behind = {node: count for node, count in state.nodes.items() if count != state.shard_count}
    click.echo(f"{len(state.nodes)} live nodes, {len(behind)} not switched yet")
    for node, count in sorted(behind.items()):
        click.echo(f"  {node}: {count if count is not None else 'not reported'}")
    for name, valid in sorted(state.indexes.items()):
        click.echo(f"index {name}{'' if valid else ' (INVALID: rebuilt by the next set)'}")


@shards.command("set")
@click.argument("shard_count", metavar="COUNT", type=int)
@click.option(
    "--wait",
    type=Seconds(0),
    default=60,
    help="How long to wait for every live node to claim by the new count before the old "
    "count's indexes are dropped.",
)
@click.option(
    "--keep-old", is_flag=True, help="Keep the other counts' indexes (drop them by a later set)."
)
@ttl_option
@with_store()
async def shards_set(
    store: Store, shard_count: int, wait: float, keep_old: bool, ttl: float
) -> None:
    """Change the shard count to COUNT (1 to 32768), online: build its indexes CONCURRENTLY,
    publish it, wait for every live node to switch, drop the old count's indexes. Exit 1 if
    not every live node switched within --wait (the old indexes are kept); run it again to
    resume after that or after a failure."""
    done = await set_shard_count(store.pool, shard_count, wait=wait, ttl=ttl, drop_old=not keep_old)
    built = ", ".join(done.built) or "none needed"
    click.echo(f"indexes built: {built} ({done.build_seconds:.1f} s)")
    if done.old == done.new:  # run again: the count stands; the rest resumes what was left
        click.echo(f"shard count already {done.new}")
    else:
        click.echo(f"shard count {done.new} published (was {done.old})")
    if done.switched:
        click.echo(f"every live node switched in {done.switch_seconds:.1f} s")
        if done.dropped:
            click.echo(f"dropped: {', '.join(done.dropped)}")
    else:
        click.echo(
            f"not every live node switched within {seconds_text(wait)}: old indexes kept; "
            "run `pgpulse shards set` again to finish",
            err=True,
        )
        raise SystemExit(1)
