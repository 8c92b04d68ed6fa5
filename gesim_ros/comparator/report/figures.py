"""The report's figures: ``build_report`` turns an episode store into plain, JSON-ready numbers.

Only 'complete' episodes enter the figures; incomplete and aborted ones are counted
and listed, so nothing disappears silently. Agreement figures need both outcomes, so they
come from shadow-mode episodes; a real or world_model run adds to its side's success rates.
A complete episode with an 'unknown' outcome (a world model without a judge) is unjudged:
counted and listed, in no figure.
"""

from __future__ import annotations

import os
from collections import defaultdict
from datetime import datetime, timezone
from typing import Sequence

import numpy as np

from gesim_ros.comparator import metrics as am
from gesim_ros.comparator.store import Episode, EpisodeStore

REPORT_FORMAT = "gesim_ros.agreement_report"
REPORT_FORMAT_VERSION = 1

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
        world_model = [e.world_model_outcome for e in group if e.world_model_outcome is not None]
        policies.append({
            "policy": name,
            "n": len(group),
            "real_n": _judged(real),
            "world_model_n": _judged(world_model),
            "real_success_rate": am.success_rate(real),
            "world_model_success_rate": am.success_rate(world_model),
        })
    # Only policies with a rate on both sides can be ranked against each other.
    ranked = [p for p in policies if p["real_n"] and p["world_model_n"]]
    sim = [p["world_model_success_rate"].value for p in ranked]
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
    return am.UNKNOWN in (episode.real_outcome, episode.world_model_outcome)


def _group_figures(episodes: Sequence[Episode]) -> dict:
    paired = [e for e in episodes if e.real_outcome is not None and e.world_model_outcome is not None]
    summary = am.summarize_agreement([e.real_outcome for e in paired],
                                     [e.world_model_outcome for e in paired])
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
                 "real_outcome": e.real_outcome, "world_model_outcome": e.world_model_outcome,
                 "world_model_judge_success_prob": e.world_model_judge_success_prob,
                 "frames": frame_counts.get(e.episode_id, 0)}
                for e in complete if e.agrees is False],
            "methods": METHODS,
        }
    return _jsonable(report)
