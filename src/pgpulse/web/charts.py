"""A small server-rendered SVG line chart (no JavaScript, no front-end build): duration and lag
of a job's runs over time. Pure: numbers in, escaped SVG text out."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from html import escape

from markupsafe import Markup

WIDTH, HEIGHT = 720, 200
_LEFT, _RIGHT, _TOP, _BOTTOM = 56, 12, 12, 28
#: Series drawn, as (attribute of :class:`Point`, CSS class, legend label).
SERIES = (("duration", "series-duration", "duration"), ("lag", "series-lag", "lag"))


@dataclass(frozen=True, slots=True)
class Point:
    """One run: its occurrence, and its duration and lag in seconds (``None`` if unknown)."""

    at: datetime
    duration: float | None
    lag: float | None


def _seconds(value: float) -> str:
    if value >= 120:
        return f"{value / 60:.1f} min"
    return f"{value:.3g} s" if value >= 1 else f"{value * 1000:.3g} ms"


def run_chart(points: Sequence[Point], *, width: int = WIDTH, height: int = HEIGHT) -> Markup:
    """Return an ``<svg>`` plotting each series of ``points`` against ``at``.

    The x axis spans the first to the last occurrence (points ordered by ``at``); the y axis
    starts at 0 and ends at the largest value. Each point has a ``<title>`` tooltip.
    Returns a short "no runs yet" SVG when no point has a value.
    """
    values = [v for p in points for v in (p.duration, p.lag) if v is not None]
    if not values:
        return Markup(
            f'<svg class="chart" viewBox="0 0 {width} 40" role="img" '
            'aria-label="no runs yet"><text x="8" y="24">no runs yet</text></svg>'
        )
    top = max(max(values), 0.001)
    first, last = points[0].at, points[-1].at
    span = max((last - first).total_seconds(), 1.0)
    plot_w, plot_h = width - _LEFT - _RIGHT, height - _TOP - _BOTTOM

    def xy(point: Point, value: float) -> tuple[float, float]:
        x = _LEFT + plot_w * (point.at - first).total_seconds() / span
        if len(points) == 1:
            x = _LEFT + plot_w / 2
        return round(x, 1), round(_TOP + plot_h * (1 - max(value, 0.0) / top), 1)

    parts = [
        f'<svg class="chart" viewBox="0 0 {width} {height}" role="img" '
        'aria-label="duration and lag of recent runs">',
        f'<line class="axis" x1="{_LEFT}" y1="{_TOP + plot_h}" x2="{width - _RIGHT}" '
        f'y2="{_TOP + plot_h}"/>',
        f'<line class="axis" x1="{_LEFT}" y1="{_TOP}" x2="{_LEFT}" y2="{_TOP + plot_h}"/>',
        f'<text class="tick" x="{_LEFT - 4}" y="{_TOP + 4}" text-anchor="end">'
        f"{escape(_seconds(top))}</text>",
        f'<text class="tick" x="{_LEFT - 4}" y="{_TOP + plot_h}" text-anchor="end">0</text>',
        f'<text class="tick" x="{_LEFT}" y="{height - 8}">'
        f"{escape(first.strftime('%Y-%m-%d %H:%M:%S'))}</text>",
        f'<text class="tick" x="{width - _RIGHT}" y="{height - 8}" text-anchor="end">'
        f"{escape(last.strftime('%Y-%m-%d %H:%M:%S'))}</text>",
    ]
    for index, (attr, css, label) in enumerate(SERIES):
        coords = [(p, xy(p, v)) for p in points if (v := getattr(p, attr)) is not None]
        if coords:
            line = " ".join(f"{x},{y}" for _, (x, y) in coords)
            parts.append(f'<polyline class="{css}" points="{line}"/>')
        for point, (x, y) in coords:
            value = getattr(point, attr)
            parts.append(
                f'<circle class="{css}" cx="{x}" cy="{y}" r="2.5"><title>'
                f"{escape(label)} {escape(_seconds(value))} at "
                f"{escape(point.at.isoformat())}</title></circle>"
            )
        legend_x = _LEFT + 8 + index * 90
        parts.append(
            f'<rect class="{css}" x="{legend_x}" y="{_TOP}" width="10" height="10"/>'
            f'<text class="legend" x="{legend_x + 14}" y="{_TOP + 9}">'
            f"{escape(label)}</text>"
        )
    parts.append("</svg>")
    return Markup("".join(parts))
