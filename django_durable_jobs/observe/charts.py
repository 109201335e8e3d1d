"""Geometry of the dashboard's SVG charts: numbers in, coordinates out. The templates
(``admin/django_durable_jobs/dashboard/*.html``) draw them; no Django here, no HTML.

Coordinates are in the SVG's own units (``viewBox``), so a chart scales to its box.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

#: The plot area inside a line chart's viewBox (room left for the axis labels).
WIDTH, HEIGHT = 600, 150
LEFT, BOTTOM = 40, 20


@dataclass(frozen=True)
class Line:
    key: str
    #: SVG polyline points: "x,y x,y ...".
    points: str
    total: int


@dataclass(frozen=True)
class Tick:
    x: float
    label: str


@dataclass(frozen=True)
class LineChart:
    lines: list[Line]
    ticks: list[Tick]
    #: The value at the top of the plot (a round number), shown on the y axis.
    top: int
    width: int = LEFT + WIDTH
    height: int = HEIGHT + BOTTOM
    left: int = LEFT
    bottom: float = HEIGHT


def nice_ceiling(value: float) -> int:
    """The smallest of 1, 2, 5, 10, 20, 50, ... that is at least ``value``."""
    step = 1
    while True:
        for factor in (1, 2, 5):
            if step * factor >= value:
                return step * factor
        step *= 10


def line_chart(
    counts: Mapping[str, Sequence[int]], labels: Sequence[str], *, tick_every: int
) -> LineChart:
    """One line per key over ``len(labels)`` buckets; a tick label every ``tick_every``."""
    buckets = len(labels)
    top = nice_ceiling(max((max(v, default=0) for v in counts.values()), default=0) or 1)
    span = max(buckets - 1, 1)

    def x(i: int) -> float:
        return round(LEFT + WIDTH * i / span, 1)

    def y(n: int) -> float:
        return round(HEIGHT - HEIGHT * n / top, 1)

    lines = [
        Line(key, " ".join(f"{x(i)},{y(n)}" for i, n in enumerate(values)), sum(values))
        for key, values in counts.items()
    ]
    ticks = [Tick(x(i), labels[i]) for i in range(0, buckets, tick_every)]
    return LineChart(lines=lines, ticks=ticks, top=top)


@dataclass(frozen=True)
class Segment:
    key: str
    #: Left edge and width as percentages of the longest bar.
    x: float
    width: float
    value: int
    #: The value is an estimate, not a count.
    estimated: bool = False


@dataclass(frozen=True)
class Bar:
    label: str
    total: int
    segments: list[Segment]


def stacked_bars(
    rows: Mapping[str, Mapping[str, int]], estimated: Collection[tuple[str, str]] = ()
) -> list[Bar]:
    """One bar per row, its parts side by side, scaled so that the longest bar is 100;
    the parts ``(row, key)`` in ``estimated`` are marked as estimates."""
    longest = max((sum(parts.values()) for parts in rows.values()), default=0) or 1
    bars = []
    for label, parts in rows.items():
        segments, left = [], 0.0
        for key, value in parts.items():
            if value:
                width = 100 * value / longest
                guess = (label, key) in estimated
                segments.append(Segment(key, round(left, 2), round(width, 2), value, guess))
                left += width
        bars.append(Bar(label, sum(parts.values()), segments))
    return bars


def scaled(value: float, most: float) -> float:
    """``value`` as a percentage of ``most`` (0 when ``most`` is 0)."""
    return round(100 * value / most, 2) if most > 0 else 0.0
