"""The report as a one-screen terminal summary of ``build_report``'s figures."""

from __future__ import annotations


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


def modes_text(by_mode: dict) -> str:
    """'real 2 (2 complete), shadow 10 (8 complete)'; the HTML page says it the same way."""
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
        f"by mode: {modes_text(counts['by_mode'])}",
        f"overall (n={agreement['n']}, {agreement['unjudged']} unjudged): accuracy {_fmt(agreement['accuracy'], notes)}  "
        f"kappa {_fmt(agreement['kappa'], notes)}",
        f"  optimism P(model ok|real fail) {_fmt(agreement['optimism'], notes)}  "
        f"pessimism P(model fail|real ok) {_fmt(agreement['pessimism'], notes)}",
        f"policy ranking ({ranking['k']} policies): pearson {_fmt(ranking['pearson'], notes)}  "
        f"spearman {_fmt(ranking['spearman'], notes)}  mmrv {_fmt(ranking['mmrv'], notes)}",
        *(f"success rate of {_clip(p['policy'], 24)}: real {_fmt(p['real_success_rate'], notes)} (n={p['real_n']})  "
          f"world model {_fmt(p['world_model_success_rate'], notes)} (n={p['world_model_n']})"
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
