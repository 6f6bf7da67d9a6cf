"""The alert model: one entry per rule kind (:data:`pgpulse.alerts.rules.RULE_KINDS`) and one per
notifier kind (:data:`pgpulse.alerts.notifiers.NOTIFIER_KINDS`), from which the checks, the CLI's
choices and help, the API's tagged union of notifier bodies and the evaluation's statements
derive. Each test holds an edge to the table, so a new kind reaches every edge by its entry."""

from __future__ import annotations

import re
from typing import Any

import click
import pytest

from pgpulse.alerts.delivery import WINDOW_RULES
from pgpulse.alerts.notifiers import NOTIFIER_KINDS, parse_notifier_config
from pgpulse.alerts.notifiers.events import RULE_TITLES
from pgpulse.alerts.rules import RULE_KINDS, check_notifier_kinds, parse_rule
from pgpulse.alerts.store import ALERT_QUERIES, JOB_RULE_STATEMENTS, LEADER_RULE_STATEMENTS
from pgpulse.cli.alerts import notifier_add, rule_set
from pgpulse.core.errors import InvalidInput, InvalidNotifierConfig
from pgpulse.db.store import Store
from web_helpers import api_client, make_token


@pytest.mark.parametrize("name", list(RULE_KINDS))
def test_each_rule_kind_is_checked_by_its_entry(name: str) -> None:
    kind = RULE_KINDS[name]
    cluster = kind.scope == "cluster"
    if cluster:
        with pytest.raises(InvalidInput, match=f"rule '{name}' is about the cluster, not a job"):
            parse_rule(name, None, ["ops"], cluster=False)
    if kind.threshold is None:
        assert parse_rule(name, None, ["ops"], cluster=cluster).threshold is None
        with pytest.raises(InvalidInput, match=f"rule '{name}' takes no threshold, got 5"):
            parse_rule(name, 5, ["ops"], cluster=cluster)
        return
    if kind.default is None:
        with pytest.raises(InvalidInput, match=rf"rule '{name}' needs a threshold \("):
            parse_rule(name, None, ["ops"], cluster=cluster)
    else:
        assert parse_rule(name, None, ["ops"], cluster=cluster).threshold == kind.default
    if kind.unit == "runs":
        with pytest.raises(InvalidInput, match=f"threshold of '{name}' is a whole number"):
            parse_rule(name, 2.5, ["ops"], cluster=cluster)
    else:
        assert parse_rule(name, 2.5, ["ops"], cluster=cluster).threshold == 2.5


def test_the_evaluation_sends_each_kind_statement_once_recovered_first() -> None:
    sent = (*JOB_RULE_STATEMENTS, *LEADER_RULE_STATEMENTS)
    declared = [name for k in RULE_KINDS.values() for name in k.statements]
    assert sorted(sent) == sorted(declared)
    assert JOB_RULE_STATEMENTS[0] == "alert_recovered"
    assert all(name in ALERT_QUERIES for name in sent)


def test_titles_and_occurrences_come_from_the_table() -> None:
    assert set(RULE_TITLES) == set(RULE_KINDS)
    assert {k.name for k in RULE_KINDS.values() if not k.occurrence} == WINDOW_RULES
    assert "failures" not in WINDOW_RULES and "silence" in WINDOW_RULES


def test_a_rule_takes_the_notifiers_that_take_what_it_sends() -> None:
    for rule in RULE_KINDS.values():
        spec = parse_rule(
            rule.name,
            None if rule.default or not rule.threshold else 60,
            ["n"],
            cluster=rule.scope == "cluster",
        )
        for kind in NOTIFIER_KINDS.values():
            if kind.takes == rule.takes:
                check_notifier_kinds(spec, {"n": kind.name})
            else:
                with pytest.raises(InvalidInput, match="notifiers: "):
                    check_notifier_kinds(spec, {"n": kind.name})


@pytest.mark.parametrize("name", list(NOTIFIER_KINDS))
def test_a_notifier_config_holds_its_kinds_keys_and_no_other(name: str) -> None:
    keys = sorted(key.name for key in NOTIFIER_KINDS[name].keys)
    with pytest.raises(InvalidNotifierConfig) as refused:
        parse_notifier_config(name, {"pasword": "x"})
    assert str(refused.value) == (
        f"config.pasword is not a field of a {name} notifier (fields: {', '.join(keys)})"
    )
    required = [key.name for key in NOTIFIER_KINDS[name].keys if key.required]
    if required:
        with pytest.raises(InvalidNotifierConfig, match=f"config.{required[0]} is required"):
            parse_notifier_config(name, {})


def test_the_cli_derives_its_choices_and_help_from_the_tables() -> None:
    kind = next(p for p in notifier_add.params if p.name == "kind")
    assert isinstance(kind.type, click.Choice)
    assert list(kind.type.choices) == list(NOTIFIER_KINDS)
    assert all(name in (rule_set.help or "") for name in RULE_KINDS)
    threshold = next(p for p in rule_set.params if p.name == "threshold")
    assert isinstance(threshold, click.Option)
    assert all(k.name in (threshold.help or "") for k in RULE_KINDS.values() if k.unit is not None)


async def test_the_api_takes_a_notifier_as_a_union_tagged_by_kind(store: Store) -> None:
    admin = await make_token(store, admin=True)
    async with api_client(store, admin) as client:
        spec = (await client.get("/api/v1/openapi.json")).json()
        put = spec["paths"]["/api/v1/notifiers/{name}"]["put"]
        body = put["requestBody"]["content"]["application/json"]["schema"]
        mapping = body["discriminator"]["mapping"]
        assert list(mapping) == list(NOTIFIER_KINDS)
        for name, ref in mapping.items():
            member = spec["components"]["schemas"][ref.rsplit("/", 1)[1]]
            config: dict[str, Any] = member["properties"]["config"]
            assert set(config["properties"]) == {k.name for k in NOTIFIER_KINDS[name].keys}
        pager = await client.put("/api/v1/notifiers/p", json={"kind": "pager", "config": {}})
        assert pager.status_code == 422
        assert pager.json()["error"] == {
            "code": "invalid_input",
            "message": "kind must be one of webhook, email, checkin, got 'pager'",
            "field": "kind",
            "value": "pager",
        }
        missing = await client.put("/api/v1/notifiers/p", json={"config": {}})
        assert (missing.status_code, missing.json()["error"]["message"]) == (
            422,
            "kind is required",
        )
        shared = await client.put(
            "/api/v1/notifiers/p",
            json={"kind": "webhook", "config": {"url": "https://e.com/h"}, "shared_with": "x"},
        )
        assert (shared.status_code, shared.json()["error"]["field"]) == (422, "shared_with")
        typo = await client.put(
            "/api/v1/notifiers/p", json={"kind": "email", "config": {"hots": 1}}
        )
        assert typo.json()["error"]["field"] == "config.hots"


def test_the_database_knows_every_kind(db: Any) -> None:
    """The tables' CHECKs name the kinds of the tables above: a kind's entry comes with the
    migration that widens them."""
    rows = db.execute(
        "SELECT conname, pg_get_constraintdef(oid) AS def FROM pg_constraint "
        "WHERE conname IN ('pgpulse_alert_rules_rule_check', 'pgpulse_notifiers_kind_check')"
    ).fetchall()
    found = {row["conname"]: re.findall(r"'([a-z_]+)'::text", row["def"]) for row in rows}
    assert found["pgpulse_alert_rules_rule_check"] == list(RULE_KINDS)
    assert found["pgpulse_notifiers_kind_check"] == list(NOTIFIER_KINDS)
