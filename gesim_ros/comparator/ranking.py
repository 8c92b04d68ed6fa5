"""Ranking policies by world-model success, and prediction-powered estimates of real success rates.

Plain Python and numpy, no ROS. Two jobs:

* **Ranking** (WorldArena, SIMPLER): per policy a success rate on the real side (the robot or the
  twin) and in the world model; across policies Pearson r (Fisher-z interval), Spearman's rho and
  SIMPLER's mean maximum rank violation. Those figures are metrics.py's (``pearson``, ``spearman``,
  ``mmrv``), not copies: MMRV is SIMPLER's ``mean_maximum_rank_violation`` of
  simpler-env/SimplerEnv ``simpler_env/utils/metrics.py`` (Li et al., "Evaluating Real-World Robot
  Manipulation Policies in Simulation", CoRL 2024), MMRV = (1/N) sum_i max_j
  [(S_i > S_j) != (R_i > R_j)] |R_i - R_j|, S the world-model and R the real rates, strict
  comparisons, gaps weighted on the real side (metrics.mmrv takes them by keyword, because
  SimplerEnv's README example swaps the two).
* **Prediction-powered inference** (PPI; Angelopoulos, Bates, Fannjiang, Jordan, Zrnic, "Prediction-
  powered inference", Science 382, 2023; power tuning: Angelopoulos, Duchi, Zrnic, "PPI++", 2023),
  as SureSim (arXiv 2510.04354) applies it to robot policies: from n *paired* episodes (the same task
  and seed on the real side, outcome y, and in the model, outcome f) and N *model-only* episodes
  (outcome f~), the real success rate is

      theta_PP = lambda * mean_N(f~) + mean_n(y - lambda * f)

  (lambda = 1: mean_N(f~) - mean_n(f - y), the rectified model mean), with the CLT 95% interval
  theta_PP +- 1.96 sqrt(lambda^2 var(f~) / N + var(y - lambda f) / n) (sample variances, ddof 1),
  clipped to [0, 1]. PPI++ tunes lambda = cov(y, f) / ((1 + n / N) var(f)) (var(f) over all n + N
  model outcomes), clipped to [0, 1]: lambda = 0 is the classical estimate, so a model that predicts
  nothing costs (asymptotically) nothing. The classical interval is the CLT one of the n real outcomes
  alone, ybar +- 1.96 sqrt(var(y) / n), so that widths compare like with like (metrics.success_rate's
  Wilson interval is the one shown for a rate).

  *Real episodes saved at equal width*: the classical interval of n real episodes has variance
  var(y) / n; PPI reaches that variance with n' = var(y - lambda f) / (var(y) / n - lambda^2 var(f~) / N)
  paired episodes (the same N model-only ones), so the model saves n - n' real episodes (negative:
  it costs some). ``effective_n`` = var(y) / var(theta_PP) is the classical sample size with PPI's width.
  Both are plug-in estimates from this sample, at its lambda.

Every figure is JSON-ready; none is a silent NaN: what cannot be computed carries its reason.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import asdict, dataclass
from typing import Iterable, Mapping, Sequence

import numpy as np

from gesim_ros.comparator import metrics as am

Z95 = am.Z95
SIDES = ("real", "world_model")
ROLES = ("paired", "model_only")   # a real episode is always paired; model ones are paired or model-only
JUDGED = (am.SUCCESS, am.FAILURE)


class PPIError(ValueError):
    """Inputs PPI cannot use (too few episodes, values that are not 0/1 outcomes, mismatched pairs)."""


@dataclass(frozen=True)
class PPIEstimate:
    """A prediction-powered estimate of a real success rate set against the classical one."""

    n: int                        # paired episodes (real and model outcome each)
    N: int                        # model-only episodes
    lam: float                    # the lambda used (1 = plain PPI)
    value: float                  # theta_PP, clipped to [0, 1]
    se: float
    ci95: list[float] | None      # None where the CLT interval is degenerate (ci_reason says why)
    ci_reason: str | None
    classical_value: float        # mean of the n real outcomes
    classical_se: float
    classical_ci95: list[float] | None
    width: float | None           # ci95's width before clipping (2 * 1.96 * se)
    classical_width: float | None
    effective_n: float | None     # the classical n with PPI's width
    real_needed: float | None     # paired episodes PPI needs for the classical width (n')
    real_saved: float | None      # n - n'
    saved_reason: str | None

    def to_dict(self) -> dict:
        return asdict(self)


def _outcomes(values: Sequence[object], name: str) -> np.ndarray:
    """0/1 floats from success/failure strings, bools or 0/1 numbers; anything else is refused."""
    out = []
    for i, v in enumerate(values):
        if isinstance(v, str) and v in JUDGED:
            out.append(1.0 if v == am.SUCCESS else 0.0)
        elif isinstance(v, (bool, np.bool_, int, float, np.number)) and not isinstance(v, str) and v in (0, 1):
            out.append(float(v))
        else:
            raise PPIError(f"{name}[{i}] = {v!r} is not an outcome: give 'success'/'failure', a bool or 0/1 "
                           "(leave unjudged episodes out)")
    return np.asarray(out, dtype=float)


def _var(x: np.ndarray) -> float:
    return float(np.var(x, ddof=1))


def ppi_lambda(real: np.ndarray, model_paired: np.ndarray, model_only: np.ndarray) -> float:
    """PPI++'s variance-minimising lambda for a mean, clipped to [0, 1]; 0 when the model's outcomes do
    not vary (they carry no information then)."""
    n, big_n = len(real), len(model_only)
    var_f = _var(np.concatenate([model_paired, model_only]))
    if var_f == 0.0:
        return 0.0
    cov = float(np.cov(real, model_paired, ddof=1)[0, 1])
    return min(1.0, max(0.0, cov / ((1.0 + n / big_n) * var_f)))


def ppi_mean(real: Sequence[object], model_paired: Sequence[object], model_only: Sequence[object], *,
             lam: float | str = 1.0) -> PPIEstimate:
    """PPI estimate of the real success rate (module docstring) from ``real[i]`` and ``model_paired[i]``
    (episode i on both sides) and ``model_only`` (model episodes with no real counterpart).

    ``lam``: a number in [0, 1] (1 = plain PPI, 0 = classical) or ``'tuned'`` (PPI++). Raises PPIError
    for fewer than 2 paired or 2 model-only episodes, unequal pair lengths or non-outcomes. Where a
    variance is 0 (e.g. every real and model outcome a success) the CLT interval is degenerate: the
    estimate is given, its interval is None with the reason, and nothing is claimed saved.
    """
    y = _outcomes(real, "real")
    f = _outcomes(model_paired, "model_paired")
    f_only = _outcomes(model_only, "model_only")
    n, big_n = len(y), len(f_only)
    if len(f) != n:
        raise PPIError(f"real has {n} outcomes but model_paired has {len(f)}: pass one model outcome per real "
                       "episode, the same task and seed, in the same order")
    if n < 2:
        raise PPIError(f"PPI needs at least 2 paired (real and model) episodes for a variance, got {n}; "
                       "run more seeds on both sides")
    if big_n < 2:
        raise PPIError(f"PPI needs at least 2 model-only episodes, got {big_n}; run more model-only seeds "
                       "(rank-policies --model-only-seeds)")
    if lam == "tuned":
        lam = ppi_lambda(y, f, f_only)
    elif not (isinstance(lam, (int, float)) and 0.0 <= lam <= 1.0):
        raise PPIError(f"lam = {lam!r}: give a number in [0, 1] or 'tuned'")
    lam = float(lam)
    rectifier = y - lam * f
    theta = lam * float(f_only.mean()) + float(rectifier.mean())
    var_only, var_rect, var_y = _var(f_only), _var(rectifier), _var(y)
    var_pp = lam * lam * var_only / big_n + var_rect / n
    se, classical_se = math.sqrt(var_pp), math.sqrt(var_y / n)
    ybar = float(y.mean())

    def interval(centre: float, s: float) -> list[float]:
        return [max(0.0, centre - Z95 * s), min(1.0, centre + Z95 * s)]

    ci = ci_reason = classical_ci = width = classical_width = None
    effective_n = needed = saved = None
    saved_reason = None
    if var_pp == 0.0:
        ci_reason = (f"every rectified and model-only outcome is the same ({n} paired, {big_n} model-only): "
                     "the CLT variance is 0, no valid interval; run more episodes")
    else:
        ci, width = interval(theta, se), 2 * Z95 * se
    if var_y == 0.0:
        saved_reason = (f"all {n} real outcomes are {'successes' if ybar == 1.0 else 'failures'}: the classical "
                        "CLT interval is degenerate, so there is no width to match")
    else:
        classical_ci, classical_width = interval(ybar, classical_se), 2 * Z95 * classical_se
        if var_pp > 0.0:
            effective_n = var_y / var_pp
        room = var_y / n - lam * lam * var_only / big_n
        if var_pp == 0.0:
            saved_reason = "PPI's interval is degenerate (variance 0): no width to set against the classical one"
        elif room <= 0.0:
            saved_reason = (f"the model-only term alone (N = {big_n}) is as wide as the classical interval: "
                            "no number of paired episodes matches it; run more model-only episodes")
        elif var_rect == 0.0:   # the model matched every pair: PPI needs the least it can take
            needed, saved = 2.0, float(n - 2)
        else:
            needed = var_rect / room
            saved = n - needed
    return PPIEstimate(n=n, N=big_n, lam=lam, value=min(1.0, max(0.0, theta)), se=se, ci95=ci,
                       ci_reason=ci_reason, classical_value=ybar, classical_se=classical_se,
                       classical_ci95=classical_ci, width=width, classical_width=classical_width,
                       effective_n=effective_n, real_needed=needed, real_saved=saved, saved_reason=saved_reason)


# -- ranking from episode rows -------------------------------------------------------------------

@dataclass(frozen=True)
class EpisodeRow:
    """One episode of a rank-policies run: what ranking.json is recomputed from."""

    policy: str
    task: str
    seed: int
    side: str        # real | world_model
    role: str        # paired | model_only
    status: str      # the comparator's: complete | incomplete | aborted
    outcome: str | None
    episode_id: str
    database: str    # the comparator database holding it, relative to the run folder

    def __post_init__(self) -> None:
        if self.side not in SIDES:
            raise ValueError(f"side {self.side!r}: one of {SIDES}")
        if self.role not in ROLES or (self.side == "real" and self.role != "paired"):
            raise ValueError(f"role {self.role!r} for side {self.side}: real episodes are paired, model ones "
                             f"one of {ROLES}")

    @property
    def judged(self) -> bool:
        return self.status == "complete" and self.outcome in JUDGED


def rows_from_dicts(rows: Iterable[Mapping]) -> list[EpisodeRow]:
    return [EpisodeRow(**{k: row[k] for k in EpisodeRow.__dataclass_fields__}) for row in rows]


def _stat(s: am.Statistic) -> dict:
    return s.to_dict()


def policy_figures(name: str, rows: Sequence[EpisodeRow]) -> dict:
    """One policy's entry of ranking.json from its rows."""
    real = {(r.task, r.seed): r for r in rows if r.side == "real"}
    model = {(r.task, r.seed): r for r in rows if r.side == "world_model" and r.role == "paired"}
    model_only = [r for r in rows if r.side == "world_model" and r.role == "model_only"]
    real_judged = [r.outcome for r in real.values() if r.judged]
    model_judged = [r.outcome for r in [*model.values(), *model_only] if r.judged]
    pairs = [(real[k].outcome, model[k].outcome) for k in sorted(real.keys() & model.keys())
             if real[k].judged and model[k].judged]
    only = [r.outcome for r in model_only if r.judged]
    entry = {
        "name": name,
        "real_n": len(real_judged),
        "model_n": len(model_judged),
        "paired_n": len(pairs),
        "model_only_n": len(only),
        "not_judged": {side: sum(not r.judged for r in rows if r.side == side) for side in SIDES},
        "real_success_rate": _stat(am.success_rate(real_judged)),
        "model_success_rate": _stat(am.success_rate(model_judged)),
        "agreement": am.summarize_agreement([p[0] for p in pairs], [p[1] for p in pairs]).to_dict(),
    }
    for key, lam in (("ppi", "tuned"), ("ppi_lambda1", 1.0)):
        try:
            entry[key] = ppi_mean([p[0] for p in pairs], [p[1] for p in pairs], only, lam=lam).to_dict()
        except PPIError as exc:
            entry[key] = {"value": None, "reason": str(exc)}
    return entry


def ppi_summary(policies: Sequence[Mapping]) -> dict:
    """Across the policies whose PPI++ has a saved figure: real episodes run, saved at equal width, and
    the mean widths of PPI++ and classical intervals."""
    have = [p["ppi"] for p in policies if p["ppi"].get("real_saved") is not None and p["ppi"].get("width")]
    if not have:
        return {"policies": 0, "reason": "no policy has both a PPI interval and a classical one to match"}
    real = sum(q["n"] for q in have)
    saved = sum(q["real_saved"] for q in have)
    return {"policies": len(have), "real_episodes": real, "real_saved": saved, "saved_fraction": saved / real,
            "mean_width": sum(q["width"] for q in have) / len(have),
            "mean_classical_width": sum(q["classical_width"] for q in have) / len(have)}


def ranking_from_rows(rows: Sequence[EpisodeRow], policy_order: Sequence[str] | None = None) -> dict:
    """ranking.json's figures from the episode rows: ``policies`` (one entry each, in ``policy_order``
    or sorted) and, across the policies with a rate on both sides, ``pearson``, ``spearman`` and
    ``mmrv`` of (model, real) success rates."""
    by_policy: dict[str, list[EpisodeRow]] = defaultdict(list)
    for row in rows:
        by_policy[row.policy].append(row)
    order = list(policy_order) if policy_order is not None else sorted(by_policy)
    missing = sorted(set(by_policy) - set(order))
    if missing:
        raise ValueError(f"rows of policies {missing} not in policy_order")
    policies = [policy_figures(name, by_policy.get(name, [])) for name in order]
    ranked = [p for p in policies if p["real_success_rate"]["value"] is not None
              and p["model_success_rate"]["value"] is not None]
    sim = [p["model_success_rate"]["value"] for p in ranked]
    real = [p["real_success_rate"]["value"] for p in ranked]
    return {
        "policies": policies,
        "ppi_summary": ppi_summary(policies),
        "ranked_policies": [p["name"] for p in ranked],
        "pearson": _stat(am.pearson(sim, real)),
        "spearman": _stat(am.spearman(sim, real)),
        "mmrv": _stat(am.mmrv(sim=sim, real=real)),
    }


METHODS = {
    "success_rate": "success / judged episodes (complete, success or failure); Wilson 95% interval",
    "model_success_rate": "over every judged world-model episode of the policy, paired and model-only",
    "pearson": "Pearson r of (model, real) success rates across policies; Fisher-z 95% interval, k > 3",
    "spearman": "Spearman rho with average ranks for ties; no interval",
    "mmrv": ("SIMPLER's mean maximum rank violation, (1/N) sum_i max_j [(S_i > S_j) != (R_i > R_j)] "
             "|R_i - R_j|, S = model, R = real; strict comparisons; lower is better"),
    "ppi": ("PPI++ (tuned lambda): lambda mean_N(f~) + mean_n(y - lambda f) with the CLT 95% interval "
            "from n paired and N model-only episodes; ppi_lambda1 is plain PPI (lambda = 1); classical: "
            "CLT interval of the n paired real outcomes"),
    "real_saved": ("n - n', n' the paired episodes PPI needs (same N) for the classical CLT width; "
                   "plug-in estimate at this sample's variances and lambda"),
}
