"""``status`` tells the truth about a node whose heartbeat succeeds but whose claims fail (a
history table that cannot grow, as on a full disk): the node is 'unhealthy' with the error,
not alive, and alive again once its claims succeed."""

from __future__ import annotations

import json
from typing import Any

import pytest

from helpers import pgpulse
from test_node_healing import node, wait_until

FULL = """
CREATE FUNCTION pgpulse_test_disk_full() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'could not extend file "base/1/2": No space left on device'
        USING ERRCODE = 'disk_full';
END $$;
CREATE TRIGGER pgpulse_test_disk_full BEFORE INSERT OR UPDATE ON pgpulse_runs
    FOR EACH ROW EXECUTE FUNCTION pgpulse_test_disk_full();
"""


def node_status(dsn: str, node_id: str) -> tuple[dict[str, Any], dict[str, Any]]:
    shown = pgpulse("status", "--json", dsn=dsn)
    assert shown.returncode == 0, shown.stderr
    document = json.loads(shown.stdout)
    found = {n["node_id"]: n for n in document["nodes"]}
    return document, found.get(node_id, {})


@pytest.mark.slow
def test_a_node_whose_claims_fail_is_unhealthy_not_alive(dsn: str, db: Any) -> None:
    with node(dsn, "sickly") as proc:
        wait_until(lambda: node_status(dsn, "sickly")[1].get("alive"), "the node alive")
        start = db.execute("SELECT now() AS t").fetchone()["t"]
        wait_until(
            lambda: db.execute(
                "SELECT 1 FROM pgpulse_runs WHERE finished_at > %s", (start,)
            ).fetchone(),
            "a run recorded",
        )
        db.execute(FULL)
        document, sick = wait_until(
            lambda: (found := node_status(dsn, "sickly"))[1].get("state") == "unhealthy" and found,
            "the node shown unhealthy",
        )
        assert sick["alive"] is False
        assert "No space left on device" in sick["claim_error"]
        assert sick["last_claim_at"] is not None
        assert document["headline"].startswith("NO LIVE NODE")
        assert "1 node unhealthy, claims failing (sickly)" in document["headline"]
        text = pgpulse("status", dsn=dsn).stdout
        assert "unhealthy: node sickly's claims fail" in text and "No space left" in text
        assert pgpulse("status", "--check", dsn=dsn).returncode == 1

        db.execute("DROP TRIGGER pgpulse_test_disk_full ON pgpulse_runs")
        healed = wait_until(
            lambda: (found := node_status(dsn, "sickly")[1]).get("alive") and found,
            "the node alive again",
        )
        assert (healed["state"], healed["claim_error"]) == ("alive", None)
        assert proc.poll() is None
