"""Agreement report for an episode store: JSON figures, HTML page, terminal summary.

``build_report`` turns the store into plain, JSON-ready figures; ``write_report``
also renders a single self-contained HTML file (inline CSS, hand-drawn inline SVG,
thumbnails as data URIs) that opens offline and can be mailed or archived as is.
Only 'complete' episodes enter the figures; incomplete and aborted ones are counted
and listed, so nothing disappears silently. Agreement figures need both outcomes, so they
come from shadow-mode episodes; a real or world_model run adds to its side's success rates.
A complete episode with an 'unknown' outcome (a world model without a judge) is unjudged:
counted and listed, in no figure.
"""

from __future__ import annotations

import base64
import html
import json
import math
import os
import tempfile
from collections import defaultdict
from datetime import datetime, timezone
from pathlib import Path
from typing import Sequence

import numpy as np

from gesim_ros.comparator import metrics as am
from gesim_ros.comparator.store import Episode, EpisodeStore, FilmstripFrame

REPORT_FORMAT = "gesim_ros.agreement_report"
REPORT_FORMAT_VERSION = 1
HTML_NAME = "agreement_report.html"
JSON_NAME = "agreement_report.json"

METHODS = {
    "intervals": "95% intervals, z = 1.96.",
    "proportions": "Accuracy, optimism, pessimism and success rates: Wilson score interval.",
    "kappa": ("Cohen's kappa; interval from the large-sample SE of Cohen (1960), "
              "sqrt(p_o (1 - p_o) / (n (1 - p_e)^2)), clipped to [-1, 1]."),
    "optimism": "P(model success | real failure).",
    "pessimism": "P(model failure | real success).",
    "pearson": "Pearson r of per-policy success rates; Fisher-z interval, needs > 3 policies.",
    "spearman": "Spearman rho with average ranks for ties; no interval.",
    "mmrv": ("SIMPLER mean maximum rank violation, (1/N) sum_i max_j "
             "[(S_i > S_j) != (R_i > R_j)] |R_i - R_j|, S = world model, R = real; strict "
             "comparisons, gaps on the real side; lower is better."),
    "episodes": ("Only 'complete' episodes enter the figures: agreement, confusion and disagreements "
                 "those with both outcomes (shadow mode); each side's success rate every complete "
                 "episode with that side's outcome (real or world_model mode too)."),
    "unjudged": ("An episode whose real or world-model outcome is 'unknown' (e.g. a world model without "
                 "a judge) is unjudged: counted, never an agreement or a disagreement, in no figure."),
}


def _policy_figures(episodes: Sequence[Episode]) -> dict:
    """Per-policy success rates on both sides and how well the model ranks the policies."""
    by_policy: dict[str, list[Episode]] = defaultdict(list)
    for episode in episodes:
        by_policy[episode.policy].append(episode)
    policies = []
    for name in sorted(by_policy):
        group = by_policy[name]
        real = [e.real_outcome for e in group if e.real_outcome is not None]
        model = [e.model_outcome for e in group if e.model_outcome is not None]
        policies.append({
            "policy": name,
            "n": len(group),
            "real_n": _judged(real),
            "model_n": _judged(model),
            "real_success_rate": am.success_rate(real),
            "model_success_rate": am.success_rate(model),
        })
    # Only policies with a rate on both sides can be ranked against each other.
    ranked = [p for p in policies if p["real_n"] and p["model_n"]]
    sim = [p["model_success_rate"].value for p in ranked]
    real = [p["real_success_rate"].value for p in ranked]
    ranking = {
        "k": len(ranked),
        "pearson": am.pearson(sim, real),
        "spearman": am.spearman(sim, real),
        "mmrv": am.mmrv(sim=sim, real=real),
    }
    return {"policies": policies, "policy_ranking": ranking}


def _judged(outcomes: Sequence[str]) -> int:
    return sum(o != am.UNKNOWN for o in outcomes)


def _unjudged(episode: Episode) -> bool:
    return am.UNKNOWN in (episode.real_outcome, episode.model_outcome)


def _group_figures(episodes: Sequence[Episode]) -> dict:
    paired = [e for e in episodes if e.real_outcome is not None and e.model_outcome is not None]
    summary = am.summarize_agreement([e.real_outcome for e in paired],
                                     [e.model_outcome for e in paired])
    return {"agreement": summary, **_policy_figures(episodes)}


def _by_step(steps: Sequence[int], values: Sequence[float]) -> list[tuple[int, np.ndarray]]:
    if not len(steps):
        return []
    steps_arr = np.asarray(steps)
    values_arr = np.asarray(values, dtype=float)
    order = np.argsort(steps_arr, kind="mergesort")
    unique, starts = np.unique(steps_arr[order], return_index=True)
    return list(zip(unique.tolist(), np.split(values_arr[order], starts[1:])))


def _divergence_vs_horizon(store: EpisodeStore, complete: set[str]) -> list[dict]:
    rows = [r for r in store.divergence() if r.episode_id in complete]
    return [
        {"horizon_step": step, "n": len(v), "mean": float(v.mean()),
         "p10": float(np.percentile(v, 10)), "median": float(np.median(v)),
         "p90": float(np.percentile(v, 90))}
        for step, v in _by_step([r.horizon_step for r in rows], [r.joint_rmse for r in rows])
    ]


def _similarity_vs_horizon(store: EpisodeStore, complete: set[str]) -> dict[str, list[dict]]:
    by_view: dict[str, list] = defaultdict(list)
    for row in store.image_similarity():
        if row.episode_id in complete:
            by_view[row.view].append(row)
    figures = {}
    for view in sorted(by_view):
        rows = by_view[view]
        steps = [r.horizon_step for r in rows]
        psnr = dict(_by_step(steps, [r.psnr for r in rows]))
        ssim = _by_step(steps, [r.ssim for r in rows])
        figures[view] = [
            {"horizon_step": step, "n": len(v), "psnr_mean": float(psnr[step].mean()),
             "ssim_mean": float(v.mean())}
            for step, v in ssim
        ]
    return figures


def _jsonable(value: object) -> object:
    """Turn the Statistic / AgreementSummary objects inside the figures into dicts."""
    if isinstance(value, (am.Statistic, am.AgreementSummary)):
        return value.to_dict()
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_jsonable(v) for v in value]
    return value


def build_report(db_path: str | os.PathLike) -> dict:
    """All report figures as a JSON-serialisable dict (the store is opened read-only)."""
    with EpisodeStore(db_path, readonly=True) as store:
        episodes = store.episodes()
        frame_counts = store.frame_counts()
        complete = [e for e in episodes if e.status == "complete"]
        complete_ids = {e.episode_id for e in complete}
        by_task: dict[str, list[Episode]] = defaultdict(list)
        for episode in complete:
            by_task[episode.task].append(episode)
        report = {
            "format": REPORT_FORMAT,
            "format_version": REPORT_FORMAT_VERSION,
            "db_path": str(db_path),
            "generated_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "episodes": {
                "total": len(episodes),
                "complete": len(complete),
                "incomplete": sum(e.status == "incomplete" for e in episodes),
                "aborted": sum(e.status == "aborted" for e in episodes),
                "unjudged": sum(map(_unjudged, complete)),
                "by_mode": {mode: {"total": sum(e.mode == mode for e in episodes),
                                   "complete": sum(e.mode == mode for e in complete)}
                            for mode in sorted({e.mode for e in episodes})},
            },
            "incomplete_episode_ids": [e.episode_id for e in episodes
                                       if e.status == "incomplete"],
            "unjudged_episode_ids": [e.episode_id for e in complete if _unjudged(e)],
            "aborted_episodes": [
                {"episode_id": e.episode_id, "task": e.task, "policy": e.policy,
                 "reason": e.abort_reason}
                for e in episodes if e.status == "aborted"],
            "overall": _group_figures(complete),
            "per_task": {task: _group_figures(by_task[task]) for task in sorted(by_task)},
            "divergence_vs_horizon": _divergence_vs_horizon(store, complete_ids),
            "image_similarity_vs_horizon": _similarity_vs_horizon(store, complete_ids),
            "disagreements": [
                {"episode_id": e.episode_id, "task": e.task, "policy": e.policy,
                 "real_outcome": e.real_outcome, "model_outcome": e.model_outcome,
                 "model_judge_success_prob": e.model_judge_success_prob,
                 "frames": frame_counts.get(e.episode_id, 0)}
                for e in complete if e.agrees is False],
            "methods": METHODS,
        }
    return _jsonable(report)


# ---------------------------------------------------------------- text summary

def _fmt(stat: dict, notes: list[str]) -> str:
    """'0.812 [0.786, 0.835]', or 'n/a[k]' with the reason collected as footnote k."""
    if stat["value"] is None:
        if stat["reason"] not in notes:
            notes.append(stat["reason"])
        return f"n/a[{notes.index(stat['reason']) + 1}]"
    if stat["ci95"] is None:
        return f"{stat['value']:.3f}"
    low, high = stat["ci95"]
    return f"{stat['value']:.3f} [{low:.2f}, {high:.2f}]"


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[:width - 1] + "~"


def _modes_text(by_mode: dict) -> str:
    return ", ".join(f"{mode} {n['total']} ({n['complete']} complete)" for mode, n in by_mode.items()) or "none"


def text_summary(report: dict, *, max_tasks: int = 12) -> str:
    """A one-screen terminal summary of ``build_report``'s figures."""
    notes: list[str] = []
    counts = report["episodes"]
    overall = report["overall"]
    agreement = overall["agreement"]
    ranking = overall["policy_ranking"]
    lines = [
        f"agreement of world model and reality: {report['db_path']}",
        f"episodes: {counts['total']} total, {counts['complete']} complete, "
        f"{counts['incomplete']} incomplete, {counts['aborted']} aborted; "
        f"unjudged (an outcome unknown, in no figure): {counts['unjudged']}",
        f"by mode: {_modes_text(counts['by_mode'])}",
        f"overall (n={agreement['n']}, {agreement['unjudged']} unjudged): accuracy {_fmt(agreement['accuracy'], notes)}  "
        f"kappa {_fmt(agreement['kappa'], notes)}",
        f"  optimism P(model ok|real fail) {_fmt(agreement['optimism'], notes)}  "
        f"pessimism P(model fail|real ok) {_fmt(agreement['pessimism'], notes)}",
        f"policy ranking ({ranking['k']} policies): pearson {_fmt(ranking['pearson'], notes)}  "
        f"spearman {_fmt(ranking['spearman'], notes)}  mmrv {_fmt(ranking['mmrv'], notes)}",
        *(f"success rate of {_clip(p['policy'], 24)}: real {_fmt(p['real_success_rate'], notes)} (n={p['real_n']})  "
          f"world model {_fmt(p['model_success_rate'], notes)} (n={p['model_n']})"
          for p in overall["policies"][:max_tasks]),
        "",
        f"{'task':<24} {'n':>5}  {'accuracy':<22} {'kappa':<22}",
    ]
    tasks = report["per_task"]
    for task in list(tasks)[:max_tasks]:
        figures = tasks[task]["agreement"]
        lines.append(f"{_clip(task, 24):<24} {figures['n']:>5}  "
                     f"{_fmt(figures['accuracy'], notes):<22} {_fmt(figures['kappa'], notes):<22}")
    if len(tasks) > max_tasks:
        lines.append(f"... and {len(tasks) - max_tasks} more tasks (see the JSON report)")
    divergence = report["divergence_vs_horizon"]
    if divergence:
        first, last = divergence[0], divergence[-1]
        lines.append(f"joint RMSE: mean {first['mean']:.4f} at step {first['horizon_step']}, "
                     f"{last['mean']:.4f} at step {last['horizon_step']}")
    lines.append(f"disagreeing episodes: {len(report['disagreements'])}")
    lines.extend(f"[{i}] {note}" for i, note in enumerate(notes, start=1))
    return "\n".join(line.rstrip() for line in lines)


# ---------------------------------------------------------------- HTML

def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def _fmt_html(stat: dict) -> str:
    if stat["value"] is None:
        return f'<span class="undef">undefined: {_e(stat["reason"])}</span>'
    text = f"{stat['value']:.3f}"
    if stat["ci95"] is not None:
        text += f" [{stat['ci95'][0]:.3f}, {stat['ci95'][1]:.3f}]"
    elif stat["ci_reason"]:
        text += f' <span class="note">({_e(stat["ci_reason"])})</span>'
    return text


_PALETTE = ("#2f6fb0", "#d0702c", "#3a9a5b", "#8e5bb5", "#b8474f", "#6b7b8c")
_PAD_L, _PAD_R, _PAD_T, _PAD_B = 64, 20, 40, 48


def _ticks(low: float, high: float, *, integer: bool = False) -> list[float]:
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


def _axes(width: int, height: int, x_ticks: list[float], y_ticks: list[float],
          x_label: str, y_label: str, title: str):
    """Open an SVG with axes and grid spanning the ticks; return (parts, x-to-px, y-to-px)."""
    (x0, x1), (y0, y1) = (x_ticks[0], x_ticks[-1]), (y_ticks[0], y_ticks[-1])
    plot_w, plot_h = width - _PAD_L - _PAD_R, height - _PAD_T - _PAD_B

    def px(x: float) -> float:
        return _PAD_L + (x - x0) / ((x1 - x0) or 1.0) * plot_w

    def py(y: float) -> float:
        return _PAD_T + plot_h - (y - y0) / ((y1 - y0) or 1.0) * plot_h

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" width="{width}" '
             f'height="{height}" viewBox="0 0 {width} {height}" role="img" '
             f'aria-label="{_e(title)}">',
             f'<text x="{width / 2:.1f}" y="16" class="title">{_e(title)}</text>']
    for tick in y_ticks:
        parts.append(f'<line x1="{_PAD_L}" x2="{width - _PAD_R}" y1="{py(tick):.1f}" '
                     f'y2="{py(tick):.1f}" class="grid"/>'
                     f'<text x="{_PAD_L - 6}" y="{py(tick) + 4:.1f}" class="ytick">'
                     f'{tick:.3g}</text>')
    for tick in x_ticks:
        parts.append(f'<text x="{px(tick):.1f}" y="{_PAD_T + plot_h + 16}" class="xtick">'
                     f'{tick:.3g}</text>')
    parts.append(f'<rect x="{_PAD_L}" y="{_PAD_T}" width="{plot_w}" height="{plot_h}" '
                 'class="frame"/>')
    parts.append(f'<text x="{_PAD_L + plot_w / 2:.1f}" y="{height - 8}" class="xlabel">'
                 f'{_e(x_label)}</text>')
    parts.append(f'<text transform="translate(14 {_PAD_T + plot_h / 2:.1f}) rotate(-90)" '
                 f'class="ylabel">{_e(y_label)}</text>')
    return parts, px, py


def _line_chart(title: str, x_label: str, y_label: str, series: list[dict]) -> str:
    """Lines (optionally with a shaded low-high band) against the horizon step."""
    xs = [x for s in series for x in s["x"]]
    ys = [y for s in series for key in ("y", "low", "high") for y in s.get(key, [])]
    parts, px, py = _axes(640, 300, _ticks(min(xs), max(xs), integer=True),
                          _ticks(min(0.0, min(ys)), max(ys)), x_label, y_label, title)
    legend_x = _PAD_L
    for i, s in enumerate(series):
        colour = _PALETTE[i % len(_PALETTE)]
        if "low" in s:
            outline = ([f"{px(x):.1f},{py(y):.1f}" for x, y in zip(s["x"], s["high"])]
                       + [f"{px(x):.1f},{py(y):.1f}"
                          for x, y in zip(reversed(s["x"]), reversed(s["low"]))])
            parts.append(f'<polygon points="{" ".join(outline)}" fill="{colour}" '
                         'fill-opacity="0.18" stroke="none"/>')
        points = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in zip(s["x"], s["y"]))
        parts.append(f'<polyline points="{points}" fill="none" stroke="{colour}" '
                     'stroke-width="2"/>')
        # Legend in one row between title and plot, so it never covers a line.
        parts.append(f'<text x="{legend_x}" y="{_PAD_T - 8}" style="fill:{colour}" '
                     f'class="legend">\u25a0 {_e(s["name"])}</text>')
        legend_x += 24 + 7 * len(s["name"])
    parts.append("</svg>")
    return "".join(parts)


def _bar_chart(title: str, rows: list[tuple[str, dict, int]]) -> str:
    """Horizontal bars of a proportion in [0, 1] with 95% whiskers, one per row label."""
    label_w, bar_w, row_h = 200, 380, 22
    width, height = label_w + bar_w + 130, _PAD_T + row_h * len(rows) + 24
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" width="{width}" '
             f'height="{height}" viewBox="0 0 {width} {height}" role="img" '
             f'aria-label="{_e(title)}">',
             f'<text x="{width / 2:.1f}" y="16" class="title">{_e(title)}</text>']
    for tick in _ticks(0.0, 1.0):
        x = label_w + tick * bar_w
        parts.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{_PAD_T}" '
                     f'y2="{height - 20}" class="grid"/>'
                     f'<text x="{x:.1f}" y="{height - 6}" class="xtick">{tick:.2g}</text>')
    for i, (label, stat, n) in enumerate(rows):
        y = _PAD_T + i * row_h
        short = label if len(label) <= 30 else label[:29] + "\u2026"
        parts.append(f'<text x="{label_w - 8}" y="{y + 15}" class="ytick">'
                     f'<title>{_e(label)}</title>{_e(short)}</text>')
        if stat["value"] is None:
            parts.append(f'<text x="{label_w + 4}" y="{y + 15}" class="undef">'
                         f'undefined: {_e(stat["reason"])}</text>')
            continue
        parts.append(f'<rect x="{label_w}" y="{y + 4}" width="{stat["value"] * bar_w:.1f}" '
                     f'height="{row_h - 8}" fill="{_PALETTE[0]}"><title>{_e(label)}: '
                     f'{stat["value"]:.3f} (n={n})</title></rect>')
        if stat["ci95"] is not None:
            low, high = (label_w + v * bar_w for v in stat["ci95"])
            mid = y + row_h / 2
            parts.append(f'<line x1="{low:.1f}" x2="{high:.1f}" y1="{mid:.1f}" y2="{mid:.1f}" '
                         'class="whisker"/>')
        parts.append(f'<text x="{label_w + bar_w + 8}" y="{y + 15}" class="value">'
                     f'{stat["value"]:.3f} (n={n})</text>')
    parts.append("</svg>")
    return "".join(parts)


def _scatter(title: str, policies: list[dict]) -> str:
    """World-model vs real success rate per policy; points on the diagonal rank perfectly."""
    parts, px, py = _axes(420, 420, _ticks(0.0, 1.0), _ticks(0.0, 1.0), "real success rate",
                          "world-model success rate", title)
    parts.append(f'<line x1="{px(0):.1f}" y1="{py(0):.1f}" x2="{px(1):.1f}" y2="{py(1):.1f}" '
                 'class="diagonal"/>')
    label_points = len(policies) <= 15
    for p in policies:
        x, y = px(p["real_success_rate"]["value"]), py(p["model_success_rate"]["value"])
        parts.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="5" fill="{_PALETTE[1]}">'
                     f'<title>{_e(p["policy"])}: real {p["real_success_rate"]["value"]:.3f}, '
                     f'model {p["model_success_rate"]["value"]:.3f}, n={p["n"]}</title>'
                     '</circle>')
        if label_points:
            parts.append(f'<text x="{x + 7:.1f}" y="{y - 5:.1f}" class="point">'
                         f'{_e(p["policy"])}</text>')
    parts.append("</svg>")
    return "".join(parts)


def _confusion_table(caption: str, confusion: dict) -> str:
    counts = confusion["counts"]
    total = sum(map(sum, counts)) or 1
    labels = confusion["labels"]
    rows = []
    for i, real_label in enumerate(labels):
        cells = []
        for j, count in enumerate(counts[i]):
            kind = "agree" if i == j else "disagree"
            alpha = 0.1 + 0.6 * count / total
            cells.append(f'<td class="{kind}" style="--a:{alpha:.2f}">{count}</td>')
        rows.append(f"<tr><th>{_e(real_label)}</th>{''.join(cells)}</tr>")
    header = "".join(f"<th>{_e(label)}</th>" for label in labels)
    return (f'<table class="cm"><caption>{_e(caption)}</caption>'
            f'<tr><th>real \u2193 / model \u2192</th>{header}</tr>{"".join(rows)}</table>')


def _disagreement_row(d: dict) -> str:
    prob = d["model_judge_success_prob"]
    return (f"<tr><td>{_e(d['episode_id'])}</td><td>{_e(d['task'])}</td>"
            f"<td>{_e(d['policy'])}</td><td>{_e(d['real_outcome'])}</td>"
            f"<td>{_e(d['model_outcome'])}</td>"
            f"<td>{'' if prob is None else f'{prob:.2f}'}</td><td>{d['frames']}</td></tr>")


def _filmstrip(disagreement: dict, frames: list[FilmstripFrame]) -> str:
    head = (f'<h3>{_e(disagreement["episode_id"])}</h3><p>task {_e(disagreement["task"])}, '
            f'policy {_e(disagreement["policy"])}: real <b>{_e(disagreement["real_outcome"])}'
            f'</b>, world model <b>{_e(disagreement["model_outcome"])}</b></p>')
    by_view: dict[str, dict[tuple[int, str], bytes]] = defaultdict(dict)
    for frame in frames:
        by_view[frame.view][(frame.horizon_step, frame.side)] = frame.jpeg
    tables = []
    for view in sorted(by_view):
        cells = by_view[view]
        steps = sorted({step for step, _ in cells})
        rows = [f"<tr><th>{_e(view)}</th>"
                + "".join(f"<th>step {step}</th>" for step in steps) + "</tr>"]
        for side, label in (("real", "real"), ("model", "predicted")):
            row = [f"<th>{label}</th>"]
            for step in steps:
                jpeg = cells.get((step, side))
                if jpeg is None:
                    row.append("<td>\u2014</td>")
                else:
                    data = base64.b64encode(jpeg).decode("ascii")
                    row.append(f'<td><img alt="{label} {_e(view)} step {step}" '
                               f'src="data:image/jpeg;base64,{data}"></td>')
            rows.append("<tr>" + "".join(row) + "</tr>")
        tables.append(f'<table class="film">{"".join(rows)}</table>')
    return head + "".join(tables)


_CSS = """
body{font-family:system-ui,sans-serif;margin:24px;color:#222;max-width:1100px}
h1{font-size:22px}h2{font-size:18px;margin-top:32px;border-bottom:1px solid #ccc}
h3{font-size:15px;margin-bottom:4px}
table{border-collapse:collapse;margin:8px 0}td,th{padding:3px 8px;border:1px solid #ddd;
font-size:13px;text-align:right}th{background:#f4f4f4}caption{font-weight:600;text-align:left}
.cm{display:inline-table;margin-right:16px;vertical-align:top}
.cm td.agree{background:rgba(58,154,91,var(--a))}
.cm td.disagree{background:rgba(184,71,79,var(--a))}
.undef{color:#a33}.note{color:#777;font-size:12px}
.chart{display:block;margin:12px 0}.chart text{font-size:11px;fill:#333}
.chart .title{font-size:13px;font-weight:600;text-anchor:middle}
.chart .ytick{text-anchor:end}.chart .xtick,.chart .xlabel{text-anchor:middle}
.chart .ylabel{text-anchor:middle}.chart .grid{stroke:#eee}
.chart .frame{fill:none;stroke:#999}.chart .whisker{stroke:#111;stroke-width:1.5}
.chart .diagonal{stroke:#999;stroke-dasharray:4 3}.chart .undef{fill:#a33}
.film img{width:128px;display:block}.film td{padding:2px}
"""


def _figure_table(rows: list[tuple[str, str]]) -> str:
    """Two-column table of (figure name, already-rendered HTML value)."""
    body = "".join(f"<tr><th>{_e(name)}</th><td>{value}</td></tr>" for name, value in rows)
    return f"<table>{body}</table>"


def render_html(report: dict, filmstrips: dict[str, list[FilmstripFrame]]) -> str:
    """The report page; ``filmstrips`` maps disagreeing episode ids to their frames."""
    counts = report["episodes"]
    overall = report["overall"]
    agreement = overall["agreement"]
    ranking = overall["policy_ranking"]
    out = [f"<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">"
           f"<title>Shadow-mode agreement report</title><style>{_CSS}</style></head><body>",
           "<h1>Shadow-mode agreement: world model vs real robot</h1>",
           f"<p>store <code>{_e(report['db_path'])}</code>, generated "
           f"{_e(report['generated_at'])}. Episodes: {counts['total']} total, "
           f"{counts['complete']} complete ({counts['unjudged']} unjudged), {counts['incomplete']} incomplete, "
           f"{counts['aborted']} aborted; by mode: {_e(_modes_text(counts['by_mode']))}.</p>",
           "<h2>Overall agreement</h2>",
           _figure_table([
               ("n (complete episodes with both outcomes)", str(agreement["n"])),
               ("unjudged (complete, an outcome unknown)", str(agreement["unjudged"])),
               ("accuracy", _fmt_html(agreement["accuracy"])),
               ("Cohen's kappa", _fmt_html(agreement["kappa"])),
               ("optimism P(model success | real failure)", _fmt_html(agreement["optimism"])),
               ("pessimism P(model failure | real success)",
                _fmt_html(agreement["pessimism"]))]),
           "<h2>Confusion matrices</h2>",
           _confusion_table(f"all tasks (n={agreement['n']})", agreement["confusion"])]
    for task, figures in report["per_task"].items():
        out.append(_confusion_table(f"{task} (n={figures['agreement']['n']})",
                                    figures["agreement"]["confusion"]))
    task_rows = [(task, f["agreement"]["accuracy"], f["agreement"]["n"])
                 for task, f in report["per_task"].items()]
    out.append("<h2>Agreement per task</h2>")
    if task_rows:
        out.append(_bar_chart("agreement accuracy per task (95% Wilson interval)", task_rows))
    header = ("<tr><th>task</th><th>n</th><th>kappa</th><th>optimism</th><th>pessimism</th>"
              "<th>policies</th><th>policy MMRV</th></tr>")
    out.append("<table>" + header + "".join(
        f"<tr><th>{_e(task)}</th><td>{f['agreement']['n']}</td>"
        f"<td>{_fmt_html(f['agreement']['kappa'])}</td>"
        f"<td>{_fmt_html(f['agreement']['optimism'])}</td>"
        f"<td>{_fmt_html(f['agreement']['pessimism'])}</td>"
        f"<td>{f['policy_ranking']['k']}</td>"
        f"<td>{_fmt_html(f['policy_ranking']['mmrv'])}</td></tr>"
        for task, f in report["per_task"].items()) + "</table>")

    out.append("<h2>Policy success rates: world model vs real</h2>")
    both_sides = [p for p in overall["policies"] if p["real_n"] and p["model_n"]]
    if both_sides:
        out.append(_scatter("success rate per policy (dashed: perfect agreement)", both_sides))
    out.append(_figure_table([("Pearson r", _fmt_html(ranking["pearson"])),
                              ("Spearman rho", _fmt_html(ranking["spearman"])),
                              ("MMRV (lower is better)", _fmt_html(ranking["mmrv"]))]))
    out.append("<table><tr><th>policy</th><th>n</th><th>real n</th><th>real success rate</th>"
               "<th>world-model n</th><th>world-model success rate</th></tr>" + "".join(
                   f"<tr><th>{_e(p['policy'])}</th><td>{p['n']}</td><td>{p['real_n']}</td>"
                   f"<td>{_fmt_html(p['real_success_rate'])}</td><td>{p['model_n']}</td>"
                   f"<td>{_fmt_html(p['model_success_rate'])}</td></tr>"
                   for p in overall["policies"]) + "</table>")

    out.append("<h2>Divergence against horizon</h2>")
    divergence = report["divergence_vs_horizon"]
    if divergence:
        steps = [d["horizon_step"] for d in divergence]
        out.append(_line_chart(
            "joint RMSE of the prediction (band: 10th-90th percentile)", "horizon step",
            "joint RMSE (rad)",
            [{"name": "mean", "x": steps, "y": [d["mean"] for d in divergence],
              "low": [d["p10"] for d in divergence], "high": [d["p90"] for d in divergence]},
             {"name": "median", "x": steps, "y": [d["median"] for d in divergence]}]))
    else:
        out.append('<p class="note">no divergence recorded</p>')
    similarity = report["image_similarity_vs_horizon"]
    if similarity:
        out.append(_line_chart(
            "mean SSIM of predicted vs real frames", "horizon step", "SSIM",
            [{"name": view, "x": [r["horizon_step"] for r in rows],
              "y": [r["ssim_mean"] for r in rows]} for view, rows in similarity.items()]))

    disagreements = report["disagreements"]
    out.append(f"<h2>Disagreeing episodes ({len(disagreements)})</h2>")
    if disagreements:
        out.append("<table><tr><th>episode</th><th>task</th><th>policy</th><th>real</th>"
                   "<th>world model</th><th>judge P(success)</th><th>frames</th></tr>"
                   + "".join(_disagreement_row(d) for d in disagreements) + "</table>")
    shown = [d for d in disagreements if d["episode_id"] in filmstrips]
    out.append(f'<p class="note">filmstrips for {len(shown)} of {len(disagreements)} '
               "disagreeing episodes (episodes without frames and those past the page limit "
               "are left out)</p>")
    out.extend(_filmstrip(d, filmstrips[d["episode_id"]]) for d in shown)

    incomplete, aborted = report["incomplete_episode_ids"], report["aborted_episodes"]
    unjudged = report["unjudged_episode_ids"]
    if incomplete or aborted or unjudged:
        out.append("<h2>Not counted in the figures</h2>")
    if unjudged:
        out.append("<p>unjudged (an outcome is unknown: no judge decided it): " + _e(", ".join(unjudged)) + "</p>")
    if incomplete:
        out.append("<p>incomplete (still running, or interrupted by a crash): "
                   + _e(", ".join(incomplete)) + "</p>")
    if aborted:
        out.append("<table><tr><th>aborted episode</th><th>task</th><th>policy</th>"
                   "<th>reason</th></tr>" + "".join(
                       f"<tr><td>{_e(a['episode_id'])}</td><td>{_e(a['task'])}</td>"
                       f"<td>{_e(a['policy'])}</td><td>{_e(a['reason'])}</td></tr>"
                       for a in aborted) + "</table>")
    out.append("<h2>Methods</h2><ul>"
               + "".join(f"<li>{_e(text)}</li>" for text in report["methods"].values())
               + "</ul></body></html>")
    return "\n".join(out)


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
