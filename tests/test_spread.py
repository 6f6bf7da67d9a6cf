"""Spread offsets: stable per job, in [0, S) to the microsecond, evenly spread, the documented
hash (also computed by PostgreSQL), and the boundary's refusals."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import psycopg
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pgpulse.core.errors import InvalidInput
from pgpulse.core.schedule import parse_schedule
from pgpulse.core.spread import MAX_SPREAD, check_spread, spread_offset
from pgpulse.core.wording import seconds_text
from pgpulse.core.zones import offset_changes

MICROSECOND = timedelta(microseconds=1)


def test_documented_hash_gives_these_offsets() -> None:
    """Pinned values: a change here moves every spread job of every deployment at once."""
    assert spread_offset(1, 60) == timedelta(microseconds=_expected(1, 60_000_000))
    got = [spread_offset(job_id, 60).total_seconds() for job_id in (1, 2, 3, 42)]
    assert got == [_expected(i, 60_000_000) / 1e6 for i in (1, 2, 3, 42)]
    assert len(set(got)) == 4


def _expected(job_id: int, span_us: int) -> int:
    """The module docstring's formula, written out again."""
    digest = hashlib.sha256(f"pgpulse-spread:{job_id}".encode()).hexdigest()
    return int(digest[:16], 16) * span_us // 2**64


def test_the_offset_is_the_same_in_another_process() -> None:
    """No per-process salt (Python's hash() has one): a fresh interpreter agrees."""
    code = "from pgpulse.core.spread import spread_offset; print(spread_offset(123456789, 3600.5))"
    other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert other.stdout.strip() == str(spread_offset(123456789, 3600.5))


@given(st.integers(1, 2**63 - 1), st.floats(0, MAX_SPREAD))
def test_offsets_lie_in_the_window_and_are_stable(job_id: int, spread: float) -> None:
    offset = spread_offset(job_id, spread)
    assert timedelta(0) <= offset
    assert offset < timedelta(seconds=spread) or spread * 1e6 < 1  # below 1 us: no spread
    assert offset == spread_offset(job_id, spread)


def test_no_spread_is_no_offset_and_tiny_spreads_keep_microseconds() -> None:
    assert {spread_offset(i, 0) for i in range(100)} == {timedelta(0)}
    assert {spread_offset(i, 0.000002) for i in range(200)} == {timedelta(0), MICROSECOND}


def test_fifty_thousand_jobs_fill_a_minute_evenly() -> None:
    """A herd of 50,000 jobs due at one instant, spread over 60 s: about 833 a second, none much
    above."""
    per_second = [0] * 60
    for job_id in range(1, 50_001):
        per_second[int(spread_offset(job_id, 60).total_seconds())] += 1
    assert sum(per_second) == 50_000
    assert max(per_second) < 833 * 1.15 and min(per_second) > 833 * 0.85, per_second


def test_postgresql_computes_the_same_offset(server_dsn: str) -> None:
    """The formula in SQL (sha256 is built into PostgreSQL 11+), for the integration phase."""
    query = """
        SELECT div((h + CASE WHEN h < 0 THEN 18446744073709551616 ELSE 0 END) * %(span)s,
                   18446744073709551616) AS offset_us
        FROM (SELECT ('x' || left(encode(sha256(convert_to('pgpulse-spread:' || %(id)s::bigint,
                     'UTF8')), 'hex'), 16))::bit(64)::bigint::numeric AS h) AS hashed
    """
    with psycopg.connect(server_dsn) as conn:
        for job_id, spread in [(1, 60), (2, 60), (987654321, 3600.25), (2**62 + 7, 0.5)]:
            row = conn.execute(query, {"id": job_id, "span": round(spread * 1e6)}).fetchone()
            assert row is not None
            assert timedelta(microseconds=int(row[0])) == spread_offset(job_id, spread)


@pytest.mark.parametrize("spread", [-1, float("nan"), float("inf"), MAX_SPREAD + 1])
def test_bad_spreads_raise(spread: float) -> None:
    with pytest.raises(ValueError, match="spread must be 0 to 86400 seconds"):
        spread_offset(1, spread)


@pytest.mark.parametrize(
    ("spread", "kind", "interval", "message"),
    [
        pytest.param("60", "cron", None, "spread must be a number of seconds, got '60'", id="text"),
        pytest.param(True, "cron", None, "spread must be a number of seconds", id="bool"),
        pytest.param(-5, "cron", None, "spread must be 0 to 86400 seconds, got -5", id="negative"),
        pytest.param(float("nan"), "cron", None, "spread must be 0 to 86400", id="nan"),
        pytest.param(90000, "cron", None, "spread must be 0 to 86400 seconds", id="above_a_day"),
        pytest.param(30, "once", None, "spread does not apply to a one-off @at", id="at"),
        pytest.param(
            61,
            "interval",
            timedelta(seconds=60),
            "spread 61 s (1 min 1 s) is longer than the @every period, 60 s (1 min)",
            id="longer_than_the_interval",
        ),
    ],
)
def test_check_spread_refuses(
    spread: object, kind: str, interval: timedelta | None, message: str
) -> None:
    with pytest.raises(InvalidInput) as caught:
        check_spread(spread, kind, interval)
    assert (caught.value.field, caught.value.value) == ("spread", spread) or spread != spread
    assert message in str(caught.value)


@pytest.mark.parametrize(
    ("expr", "spread", "shortest"),
    [
        pytest.param("* * * * *", 120, "60 s (1 min)", id="every_minute"),
        pytest.param("*/20 * * * *", 1500, "1,200 s (20 min)", id="every_20_minutes"),
        pytest.param("0 9,10 * * *", 7200, "3,600 s (1 h)", id="uneven_gaps_the_shortest"),
    ],
)
def test_a_cron_spread_is_at_most_the_shortest_gap(expr: str, spread: float, shortest: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        check_spread(spread, "cron", schedule=parse_schedule(expr))
    assert (caught.value.field, caught.value.value) == ("spread", spread)
    assert str(caught.value) == (
        f"spread {seconds_text(spread)} is longer than the time between occurrences of "
        f"schedule {expr!r}, as little as {shortest}"
    )


def test_a_cron_spread_under_every_gap_is_accepted() -> None:
    assert check_spread(60, "cron", schedule=parse_schedule("* * * * *")) == 60.0  # all of it
    # Monday then Tuesday: a day apart at the least, however long the week's other gap
    assert check_spread(MAX_SPREAD - 1, "cron", schedule=parse_schedule("0 9 * * 1,2")) > 0
    # in Europe/Berlin a day is 23 or 25 hours twice a year: still above a 22-hour spread
    daily = parse_schedule("30 2 * * *", "Europe/Berlin")
    assert check_spread(22 * 3600, "cron", schedule=daily) == 22 * 3600


def test_check_spread_accepts() -> None:
    assert check_spread(60, "cron") == 60.0
    assert check_spread(0, "once") == 0.0
    assert check_spread(59.5, "interval", timedelta(seconds=60)) == 59.5
    assert check_spread(60, "interval", timedelta(seconds=60)) == 60.0  # the whole period


def test_a_code_job_with_a_spread_longer_than_its_period_is_refused_at_declaration() -> None:
    from pgpulse import App

    app = App()
    with pytest.raises(InvalidInput) as caught:
        app.job("t16.tick", schedule="* * * * *", spread=120)
    assert caught.value.field == "spread"
    assert "is longer than the time between occurrences of schedule '* * * * *'" in str(
        caught.value
    )


# --- the shortest gap over daylight-saving changes (a reference that walks every minute) -------


@pytest.mark.parametrize(
    ("expr", "zone", "spread", "shortest"),
    [
        # 01:50 CET, then 02:50 (skipped) fires at 03:00 CEST on 2026-03-29: ten minutes
        pytest.param("50 0-23 * * *", "Europe/Berlin", 3600, "600 s (10 min)", id="berlin"),
        # 2031-03-09 01:00 EST, 03:00 EDT: one hour apart, two on every other 9 March
        pytest.param("0 1,3 9 3 *", "America/New_York", 7200, "3,600 s (1 h)", id="new_york"),
        # the half-hour change of October (01:50, then 02:50), and 1981's whole hour
        pytest.param("50 0-23 * * *", "Australia/Lord_Howe", 3600, "600 s (10 min)", id="howe"),
    ],
)
def test_a_spread_past_a_daylight_saving_gap_is_refused(
    expr: str, zone: str, spread: float, shortest: str
) -> None:
    with pytest.raises(InvalidInput) as caught:
        check_spread(spread, "cron", schedule=parse_schedule(expr, zone))
    assert str(caught.value) == (
        f"spread {seconds_text(spread)} is longer than the time between occurrences of "
        f"schedule {expr!r}, as little as {shortest}"
    )


def test_the_daylight_saving_gaps_are_the_ones_walked() -> None:
    # The two occurrences of the reports above, found by walking the schedule itself.
    berlin = parse_schedule("50 0-23 * * *", "Europe/Berlin")
    before = datetime(2026, 3, 29, 0, 50, tzinfo=UTC)  # 01:50 CET
    assert berlin.next_after(before) - before == timedelta(minutes=10)
    new_york = parse_schedule("0 1,3 9 3 *", "America/New_York")
    first = new_york.next_after(datetime(2031, 1, 1, tzinfo=UTC))
    assert new_york.next_after(first) - first == timedelta(hours=1)
    howe = parse_schedule("50 0-23 * * *", "Australia/Lord_Howe")
    october = datetime(2026, 10, 3, 15, 20, tzinfo=UTC)  # 01:50 +10:30 on 4 October
    assert howe.next_after(october) - october == timedelta(minutes=30)


_ZONES = ["Europe/Berlin", "America/New_York", "Australia/Lord_Howe", "America/Sao_Paulo"]


def _walked_gaps(expr: str, zone_name: str, around: list[datetime], hours: int) -> list[timedelta]:
    """The gaps between consecutive occurrences within ``hours`` of each instant of ``around``,
    found minute by minute from the rules as docs/design.md states them (no Pulse arithmetic)."""
    minute_field, hour_field = expr.split()[:2]
    zone = ZoneInfo(zone_name)

    def matches(field: str, value: int) -> bool:
        if field.startswith("*/"):
            return value % int(field[2:]) == 0
        return field == "*" or value in {int(v) for v in field.split(",")}

    def wall_matches(wall: datetime) -> bool:
        return matches(minute_field, wall.minute) and matches(hour_field, wall.hour)

    elapsed = minute_field.startswith("*") or hour_field.startswith("*")
    gaps: list[timedelta] = []
    step = timedelta(minutes=1)
    for centre in around:
        t = centre.replace(second=0, microsecond=0) - timedelta(hours=hours)
        previous = None
        while t < centre + timedelta(hours=hours):
            local = t.astimezone(zone)
            fires = wall_matches(local.replace(tzinfo=None)) and (elapsed or local.fold == 0)
            before = (t - step).astimezone(zone)
            if not elapsed and not fires and local.utcoffset() != before.utcoffset():
                # a skipped stretch ends at t: its matching wall times fire now
                skipped = before.replace(tzinfo=None) + step
                while skipped < local.replace(tzinfo=None):
                    fires = fires or wall_matches(skipped)
                    skipped += step
            if fires:
                if previous is not None:
                    gaps.append(t - previous)
                previous = t
            t += step
    return gaps


@st.composite
def _dst_schedules(draw: st.DrawFn) -> str:
    minutes = draw(
        st.one_of(
            st.integers(7, 59).map(lambda k: f"*/{k}"),
            st.lists(st.integers(0, 59), min_size=1, max_size=3, unique=True).map(
                lambda values: ",".join(map(str, sorted(values)))
            ),
        )
    )
    hours = draw(
        st.one_of(
            st.just("*"),
            st.lists(st.integers(0, 5), min_size=1, max_size=4, unique=True).map(
                lambda values: ",".join(map(str, sorted(values)))
            ),
        )
    )
    return f"{minutes} {hours} * * *"


@settings(max_examples=25, deadline=None)
@given(_dst_schedules(), st.sampled_from(_ZONES))
def test_the_shortest_gap_is_the_shortest_walked(expr: str, zone: str) -> None:
    # Every change of the zone from 1970 to 2060 (all fourteen kinds of year of its rule), and
    # two ordinary stretches of three days: the shortest gap walked is the one computed. The
    # schedules drawn match every day, so a change's gaps depend only on its wall time and its
    # two offsets: one change of each such shape is walked, a day either side.
    shapes = {
        ((c.at + c.before).time(), c.before, c.after): c.at
        for c in offset_changes(
            ZoneInfo(zone), datetime(1970, 1, 1, tzinfo=UTC), datetime(2060, 1, 1, tzinfo=UTC)
        )
    }
    steady = [datetime(2026, 1, 20, tzinfo=UTC), datetime(2026, 7, 20, tzinfo=UTC)]
    walked = min(
        _walked_gaps(expr, zone, list(shapes.values()), 26) + _walked_gaps(expr, zone, steady, 36)
    )
    expected = walked if walked <= timedelta(days=1) else None
    assert parse_schedule(expr, zone).shortest_gap() == expected
