"""Where the report's SVG charts put things: round ticks, scales and pixel positions.

Each chart function turns figures into numbers in pixels; templates/charts.svg.j2 draws them
(with the fixed offsets of labels and ticks) and writes no arithmetic on the data.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

PALETTE = ("#2f6fb0", "#d0702c", "#3a9a5b", "#8e5bb5", "#b8474f", "#6b7b8c")
PAD_LEFT, PAD_RIGHT, PAD_TOP, PAD_BOTTOM = 64, 20, 40, 48


def ticks(low: float, high: float, *, integer: bool = False) -> list[float]:
    """About six round tick values (steps of 1, 2, 2.5 or 5 x 10^k) spanning [low, high]."""
    if high <= low:
        high = low + 1.0
    raw = (high - low) / 5
    magnitude = 10.0 ** math.floor(math.log10(raw))
    factors = (1, 2, 5, 10) if integer and magnitude < 10 else (1, 2, 2.5, 5, 10)
    step = next(f * magnitude for f in factors if f * magnitude >= raw * (1 - 1e-9))
    if integer:
        step = max(1.0, round(step))
    first = math.floor(low / step + 1e-9) * step
    count = math.ceil((high - first) / step - 1e-9) + 1
    return [round(first + i * step, 12) for i in range(count)]


@dataclass(frozen=True)
class Axes:
    """An x-y plot: the SVG's size and labels, and each tick as (value, pixel position)."""

    width: int
    height: int
    title: str
    x_label: str
    y_label: str
    x_ticks: list[tuple[float, float]]
    y_ticks: list[tuple[float, float]]
    left: int = PAD_LEFT
    top: int = PAD_TOP

    @property
    def plot_width(self) -> int:
        return self.width - PAD_LEFT - PAD_RIGHT

    @property
    def plot_height(self) -> int:
        return self.height - PAD_TOP - PAD_BOTTOM


def _axes(width: int, height: int, x_ticks: list[float], y_ticks: list[float],
          x_label: str, y_label: str, title: str):
    """Axes spanning the ticks; return (axes, x-to-px, y-to-px)."""
    (x0, x1), (y0, y1) = (x_ticks[0], x_ticks[-1]), (y_ticks[0], y_ticks[-1])
    plot_w, plot_h = width - PAD_LEFT - PAD_RIGHT, height - PAD_TOP - PAD_BOTTOM

    def px(x: float) -> float:
        return PAD_LEFT + (x - x0) / ((x1 - x0) or 1.0) * plot_w

    def py(y: float) -> float:
        return PAD_TOP + plot_h - (y - y0) / ((y1 - y0) or 1.0) * plot_h

    axes = Axes(width, height, title, x_label, y_label,
                x_ticks=[(tick, px(tick)) for tick in x_ticks],
                y_ticks=[(tick, py(tick)) for tick in y_ticks])
    return axes, px, py


@dataclass(frozen=True)
class LineSeries:
    name: str
    colour: str
    points: list[tuple[float, float]]
    band: list[tuple[float, float]]  # outline of the shaded low-high band; empty without one
    legend_x: int


@dataclass(frozen=True)
class LineChart:
    axes: Axes
    series: list[LineSeries]


def line_chart(title: str, x_label: str, y_label: str, series: list[dict]) -> LineChart:
    """Lines (optionally with a shaded low-high band) against the horizon step."""
    xs = [x for s in series for x in s["x"]]
    ys = [y for s in series for key in ("y", "low", "high") for y in s.get(key, [])]
    axes, px, py = _axes(640, 300, ticks(min(xs), max(xs), integer=True),
                         ticks(min(0.0, min(ys)), max(ys)), x_label, y_label, title)
    lines = []
    legend_x = PAD_LEFT
    for i, s in enumerate(series):
        band = []
        if "low" in s:
            band = ([(px(x), py(y)) for x, y in zip(s["x"], s["high"])]
                    + [(px(x), py(y)) for x, y in zip(reversed(s["x"]), reversed(s["low"]))])
        lines.append(LineSeries(s["name"], PALETTE[i % len(PALETTE)],
                                [(px(x), py(y)) for x, y in zip(s["x"], s["y"])], band, legend_x))
        # Legend in one row between title and plot, so it never covers a line.
        legend_x += 24 + 7 * len(s["name"])
    return LineChart(axes, lines)


@dataclass(frozen=True)
class Bar:
    label: str
    short_label: str
    y: int  # top of the bar's row
    n: int
    value: float | None
    reason: str | None  # why the value is undefined
    length: float
    whisker: tuple[float, float] | None  # the 95% interval's ends in pixels


@dataclass(frozen=True)
class BarChart:
    title: str
    width: int
    height: int
    top: int
    label_width: int
    bar_width: int
    row_height: int
    colour: str
    grid: list[tuple[float, float]]  # (tick, x in pixels)
    bars: list[Bar]


def bar_chart(title: str, rows: list[tuple[str, dict, int]]) -> BarChart:
    """Horizontal bars of a proportion in [0, 1] with 95% whiskers, one per row label."""
    label_w, bar_w, row_h = 200, 380, 22
    bars = []
    for i, (label, stat, n) in enumerate(rows):
        value = stat["value"]
        bars.append(Bar(
            label=label, short_label=label if len(label) <= 30 else label[:29] + "\u2026",
            y=PAD_TOP + i * row_h, n=n, value=value, reason=stat["reason"],
            length=0.0 if value is None else value * bar_w,
            whisker=None if stat["ci95"] is None else tuple(label_w + v * bar_w for v in stat["ci95"])))
    return BarChart(title, width=label_w + bar_w + 130, height=PAD_TOP + row_h * len(rows) + 24,
                    top=PAD_TOP, label_width=label_w, bar_width=bar_w, row_height=row_h,
                    colour=PALETTE[0], grid=[(tick, label_w + tick * bar_w) for tick in ticks(0.0, 1.0)],
                    bars=bars)


@dataclass(frozen=True)
class ScatterPoint:
    label: str
    x: float
    y: float
    real: float
    world_model: float
    n: int


@dataclass(frozen=True)
class Scatter:
    axes: Axes
    diagonal: tuple[float, float, float, float]  # (x0, y0, x1, y1) of perfect agreement
    colour: str
    points: list[ScatterPoint]
    labelled: bool  # names beside the points, while they are few enough to read


def scatter(title: str, policies: list[dict]) -> Scatter:
    """World-model vs real success rate per policy; points on the diagonal rank perfectly."""
    axes, px, py = _axes(420, 420, ticks(0.0, 1.0), ticks(0.0, 1.0), "real success rate",
                         "world-model success rate", title)
    points = []
    for p in policies:
        real, world_model = p["real_success_rate"]["value"], p["world_model_success_rate"]["value"]
        points.append(ScatterPoint(p["policy"], px(real), py(world_model), real, world_model, p["n"]))
    return Scatter(axes, (px(0), py(0), px(1), py(1)), PALETTE[1], points, labelled=len(policies) <= 15)
