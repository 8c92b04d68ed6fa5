"""The report as one self-contained HTML page, rendered from the Jinja2 templates in templates/.

The page has inline CSS, inline SVG charts (laid out by charts.py) and thumbnails as data URIs,
so it opens offline and can be mailed or archived as is. Autoescaping is on: every task name,
policy, reason and id from the store reaches the page escaped.
"""

from __future__ import annotations

import base64
from collections import defaultdict

import jinja2

from gesim_ros.comparator.report import charts
from gesim_ros.comparator.report.text import modes_text
from gesim_ros.comparator.store import FilmstripFrame

_TEMPLATES = jinja2.Environment(
    loader=jinja2.PackageLoader("gesim_ros.comparator.report", "templates"),
    autoescape=True, trim_blocks=True, lstrip_blocks=True, undefined=jinja2.StrictUndefined)
_TEMPLATES.filters["number"] = format  # {{ x|number('.1f') }} is f"{x:.1f}"
_TEMPLATES.filters["svg_points"] = lambda points: " ".join(f"{x:.1f},{y:.1f}" for x, y in points)
_SIDE_LABELS = (("real", "real"), ("world_model", "predicted"))


def _filmstrip_views(frames: list[FilmstripFrame]) -> list[dict]:
    """Per view: its horizon steps, and per side the thumbnail at each step (a data URI, or None)."""
    by_view: dict[str, dict[tuple[int, str], bytes]] = defaultdict(dict)
    for frame in frames:
        by_view[frame.view][(frame.horizon_step, frame.side)] = frame.jpeg
    views = []
    for view in sorted(by_view):
        cells = by_view[view]
        steps = sorted({step for step, _ in cells})
        sides = [{"label": label, "cells": [(step, _data_uri(cells.get((step, side)))) for step in steps]}
                 for side, label in _SIDE_LABELS]
        views.append({"name": view, "steps": steps, "sides": sides})
    return views


def _data_uri(jpeg: bytes | None) -> str | None:
    return None if jpeg is None else "data:image/jpeg;base64," + base64.b64encode(jpeg).decode("ascii")


def _charts(report: dict) -> dict:
    """The page's charts, each None where there is nothing to draw."""
    task_rows = [(task, f["agreement"]["accuracy"], f["agreement"]["n"])
                 for task, f in report["per_task"].items()]
    both_sides = [p for p in report["overall"]["policies"] if p["real_n"] and p["world_model_n"]]
    divergence = report["divergence_vs_horizon"]
    similarity = report["image_similarity_vs_horizon"]
    charts_by_name = dict.fromkeys(("task_bars", "policy_scatter", "divergence_chart", "similarity_chart"))
    if task_rows:
        charts_by_name["task_bars"] = charts.bar_chart(
            "agreement accuracy per task (95% Wilson interval)", task_rows)
    if both_sides:
        charts_by_name["policy_scatter"] = charts.scatter(
            "success rate per policy (dashed: perfect agreement)", both_sides)
    if divergence:
        steps = [d["horizon_step"] for d in divergence]
        charts_by_name["divergence_chart"] = charts.line_chart(
            "joint RMSE of the prediction (band: 10th-90th percentile)", "horizon step", "joint RMSE (rad)",
            [{"name": "mean", "x": steps, "y": [d["mean"] for d in divergence],
              "low": [d["p10"] for d in divergence], "high": [d["p90"] for d in divergence]},
             {"name": "median", "x": steps, "y": [d["median"] for d in divergence]}])
    if similarity:
        charts_by_name["similarity_chart"] = charts.line_chart(
            "mean SSIM of predicted vs real frames", "horizon step", "SSIM",
            [{"name": view, "x": [r["horizon_step"] for r in rows], "y": [r["ssim_mean"] for r in rows]}
             for view, rows in similarity.items()])
    return charts_by_name


def render_html(report: dict, filmstrips: dict[str, list[FilmstripFrame]]) -> str:
    """The report page; ``filmstrips`` maps disagreeing episode ids to their frames."""
    return _TEMPLATES.get_template("report.html.j2").render(
        report=report,
        modes=modes_text(report["episodes"]["by_mode"]),
        filmstrips=[(d, _filmstrip_views(filmstrips[d["episode_id"]]))
                    for d in report["disagreements"] if d["episode_id"] in filmstrips],
        **_charts(report))
