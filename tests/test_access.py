"""Who may write job definitions (docs/design.md, invariant 10): one rule, in
pgpulse.core.access, that the store applies to every write path — the API's create and PATCH
(test_web_security), the Python API's Store.upsert_jobs, and the jobs an App declares in code —
against the job as it stands in the writing transaction."""

from __future__ import annotations

import asyncio

import pytest

from helpers import add, spec
from pgpulse.app import App
from pgpulse.core.access import OPERATOR, Writer, check_write, code_writer, token_writer
from pgpulse.core.errors import Forbidden
from pgpulse.core.jobs import JobSpec
from pgpulse.db.store import Store
from pgpulse.node.engine import NodeConfig
from pgpulse.node.handlers import RunContext

BACKUP = JobSpec.create(
    name="nightly-backup",
    tenant="acme",
    schedule="0 3 * * *",
    handler="shell",
    payload={"command": "backup.sh"},
)
TENANT = token_writer(7, "acme", admin=False, shell_allowed=True)


@pytest.mark.parametrize(
    ("writer", "spec", "current", "refused"),
    [
        pytest.param(TENANT, spec("x", tenant="acme"), None, None, id="own_tenant_new_job"),
        pytest.param(TENANT, spec("x", tenant="other"), None, "tenant", id="other_tenant"),
        pytest.param(TENANT, BACKUP, None, "handler", id="create_shell"),
        pytest.param(TENANT, spec("nightly-backup", tenant="acme"), "shell", "handler",
                     id="replace_a_shell_job"),
        pytest.param(TENANT, spec("x", tenant="acme"), "noop", None, id="change_own_job"),
        pytest.param(token_writer(1, None, admin=True, shell_allowed=False), BACKUP, None,
                     "handler", id="admin_without_opt_in"),
        pytest.param(token_writer(1, None, admin=True, shell_allowed=True), BACKUP, "shell", None,
                     id="admin_with_opt_in"),
        pytest.param(OPERATOR, BACKUP, "http", None, id="operator"),
        pytest.param(code_writer("acme", "app"), spec("nightly-backup", tenant="acme"), "shell",
                     "handler", id="code_over_a_shell_job"),
    ],
)  # fmt: skip
def test_the_rule(writer: Writer, spec: JobSpec, current: str | None, refused: str | None) -> None:
    if refused is None:
        check_write(writer, spec, current)
        return
    with pytest.raises(Forbidden) as caught:
        check_write(writer, spec, current)
    assert caught.value.field == refused


async def test_store_upsert_applies_the_rule_against_the_stored_job(store: Store) -> None:
    await store.upsert_jobs([BACKUP])  # the operator (database credentials) may
    before = await store.get_job("acme", "nightly-backup")
    over = spec("nightly-backup", tenant="acme")
    for writer in (TENANT, token_writer(1, None, admin=True, shell_allowed=False)):
        with pytest.raises(Forbidden, match=r"nightly-backup.*shell job"):
            await store.upsert_jobs([over], writer=writer, extra_handlers={"noop"})
    # a batch with one refused spec writes none of them
    with pytest.raises(Forbidden):
        await store.upsert_jobs(
            [spec("fine", tenant="acme"), over], writer=TENANT, extra_handlers={"noop"}
        )
    assert await store.get_job("acme", "nightly-backup") == before
    assert [j["name"] for j in await store.list_jobs("acme")] == ["nightly-backup"]
    await add(store, spec("fine", tenant="acme"))  # what the rule allows still goes through


async def test_a_code_declaration_never_replaces_a_shell_job(store: Store, dsn: str) -> None:
    await store.upsert_jobs([BACKUP])
    before = await store.get_job("acme", "nightly-backup")
    app = App(tenant="acme")

    @app.job("nightly-backup", schedule="* * * * *")
    async def backup(ctx: RunContext) -> None:  # pragma: no cover - never runs
        raise AssertionError("the shell job was replaced")

    config = NodeConfig(node_id="code-node", heartbeat_interval=0.2, poll_interval=0.2)
    with pytest.raises(Forbidden, match="code of node code-node"):
        async with asyncio.timeout(20):  # on main the node started (and ran it)
            await app.run_node(dsn, config=config, install_signal_handlers=False)
    assert await store.get_job("acme", "nightly-backup") == before
