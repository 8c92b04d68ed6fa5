"""Agreement report for an episode store: JSON figures, HTML page, terminal summary.

figures.py computes the figures (``build_report``), text.py says them on one screen
(``text_summary``), charts.py lays out the SVG charts and html.py renders the page from
templates/ (``render_html``); ``write_report`` here writes the JSON and the HTML files.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from gesim_ros.comparator.report.figures import build_report
from gesim_ros.comparator.report.html import render_html
from gesim_ros.comparator.report.text import text_summary
from gesim_ros.comparator.store import EpisodeStore

__all__ = ["build_report", "render_html", "text_summary", "write_report", "HTML_NAME", "JSON_NAME"]

HTML_NAME = "agreement_report.html"
JSON_NAME = "agreement_report.json"


def _write_atomically(path: Path, text: str) -> None:
    """Readers (a browser, a dashboard) never see a half-written report."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def write_report(db_path: str | os.PathLike, out_dir: str | os.PathLike, *,
                 max_filmstrips: int = 50) -> tuple[Path, Path]:
    """Write the HTML page and the JSON figures into out_dir; return (html_path, json_path).

    The first ``max_filmstrips`` disagreeing episodes that have frames get a filmstrip,
    which keeps the page small.
    """
    report = build_report(db_path)
    shown = [d["episode_id"] for d in report["disagreements"] if d["frames"]][:max_filmstrips]
    with EpisodeStore(db_path, readonly=True) as store:
        filmstrips = {episode_id: store.filmstrip_frames(episode_id) for episode_id in shown}
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    html_path, json_path = out / HTML_NAME, out / JSON_NAME
    _write_atomically(json_path, json.dumps(report, indent=2, allow_nan=False) + "\n")
    _write_atomically(html_path, render_html(report, filmstrips))
    return html_path, json_path
