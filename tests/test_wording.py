"""How counts and durations are said (:mod:`pgpulse.core.wording`): one way everywhere."""

from __future__ import annotations

import pytest

from pgpulse.core.wording import plural, seconds_text


@pytest.mark.parametrize(
    ("value", "said"),
    [
        pytest.param(0.25, "0.25 s", id="fraction"),
        pytest.param(34.8075, "34.807 s", id="at_most_3_decimals"),
        pytest.param(30.0, "30 s", id="whole"),
        pytest.param(90, "90 s (1 min 30 s)", id="minutes_in_words"),
        pytest.param(3600.0, "3,600 s (1 h)", id="an_hour"),
        pytest.param(31_622_400, "31,622,400 s (366 d)", id="never_an_exponent"),
        pytest.param(0.0001, "0 s", id="below_a_millisecond"),
    ],
)
def test_a_duration_is_seconds_with_at_most_3_decimals(value: float, said: str) -> None:
    assert seconds_text(value) == said


def test_a_count_of_one_is_singular() -> None:
    assert [plural(n, "attempt") for n in (0, 1, 2, 1000)] == [
        "0 attempts",
        "1 attempt",
        "2 attempts",
        "1,000 attempts",
    ]


def test_a_cluster_alert_says_one_attempt_running() -> None:
    from pgpulse.alerts.notifiers.events import cluster_subject

    said = cluster_subject("node_died", {"node": "a", "running": 1, "last_heartbeat": "t"})
    assert said == "node a (1 attempt running, last heartbeat t)"
    older = cluster_subject("node_died", {"node": "a", "last_heartbeat": "t"})
    assert older == "node a (? attempts running, last heartbeat t)"
