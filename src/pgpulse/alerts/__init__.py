"""Alerts: rules per job and for the cluster, events with a unique key, deliveries claimed and
retried like jobs, silences (docs/alerts.md).

* :mod:`~pgpulse.alerts.rules`: the rules' kinds and thresholds, and their checks (pure);
* :mod:`~pgpulse.alerts.store`: notifiers, rules, events, deliveries and silences in the
  database (``sql/alerts.sql``);
* :mod:`~pgpulse.alerts.delivery`: a node's loop that evaluates the rules and sends the
  deliveries due, off every attempt's path;
* :mod:`~pgpulse.alerts.checkins`: a node's check-in pings at each attempt's start and end,
  off the attempt's path;
* :mod:`~pgpulse.alerts.declared`: rules declared with a job in an apply file, planned and
  written with it;
* :mod:`~pgpulse.cli.alerts`: ``pgpulse notifier`` and ``pgpulse alert``.

The notifiers themselves (what is sent, how, when it is retried) are
:mod:`pgpulse.alerts.notifiers`.
"""

from __future__ import annotations

from pgpulse.alerts.rules import ALL_RULES, CLUSTER_RULES, JOB_RULES, RuleSpec, parse_rule
from pgpulse.alerts.store import AlertStore, NotifierInUse

__all__ = [
    "ALL_RULES",
    "CLUSTER_RULES",
    "JOB_RULES",
    "AlertStore",
    "NotifierInUse",
    "RuleSpec",
    "parse_rule",
]
