"""Does the world model agree with reality? Statistics for shadow-mode comparison.

Two families of figures:

* Per episode: the same policy ran on the real robot and inside the world model;
  each side ended in success or failure.  We report the agreement accuracy, the
  2x2 confusion matrix, Cohen's kappa, and the two directional error rates
  (optimism: the model says success where reality failed; pessimism: the reverse).
  A side may also report ``'unknown'`` (a world model without a judge): such an
  episode is *unjudged*, counted as such and left out of every figure, never an
  agreement or a disagreement.
* Across policies/checkpoints: each policy has a success rate in the world model
  ("sim", S) and on the robot ("real", R).  A world model is useful for policy
  selection when it ranks policies like reality does: Pearson r, Spearman rho and
  SIMPLER's mean maximum rank violation (MMRV).

Every figure is a :class:`Statistic`.  Where a figure is mathematically undefined
(no episodes, no variance, too few policies) it carries ``value=None`` and the
reason, never a silent 0 or NaN, so a report can say why a number is missing.

Intervals are 95% and use z = 1.96:

* proportions (accuracy, optimism, pessimism, success rates): Wilson score interval;
* Cohen's kappa: the large-sample approximation of Cohen (1960),
  SE = sqrt(p_o (1 - p_o) / (n (1 - p_e)^2)), interval kappa +- 1.96 SE clipped to [-1, 1];
* Pearson r: Fisher z, tanh(atanh(r) +- 1.96 / sqrt(k - 3)), defined only for k > 3.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar, Sequence

import numpy as np

Z95 = 1.96
SUCCESS = "success"
FAILURE = "failure"
UNKNOWN = "unknown"  # reported, but decides nothing: the episode is unjudged
OUTCOMES = (SUCCESS, FAILURE)


@dataclass(frozen=True)
class Statistic:
    """A figure that is either defined (value + 95% interval or why none) or undefined (reason).

    Invariants, checked on construction so no caller can build an ambiguous figure:
    exactly one of ``value``/``reason`` is set; a defined value has either both
    interval bounds or a ``ci_reason``; an undefined value has neither.
    """

    value: float | None
    reason: str | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    ci_reason: str | None = None

    def __post_init__(self) -> None:
        if (self.value is None) == (self.reason is None):
            raise ValueError(
                f"Statistic needs exactly one of value or reason, got value={self.value!r}, "
                f"reason={self.reason!r}")
        if (self.ci_low is None) != (self.ci_high is None):
            raise ValueError("Statistic interval needs both ci_low and ci_high, or neither")
        has_ci = self.ci_low is not None
        if self.value is None:
            if has_ci or self.ci_reason is not None:
                raise ValueError("an undefined Statistic cannot carry an interval")
            return
        if has_ci == (self.ci_reason is not None):
            raise ValueError(
                "a defined Statistic needs either an interval or ci_reason saying why none")
        for name in ("value", "ci_low", "ci_high"):
            number = getattr(self, name)
            if number is not None:
                if not math.isfinite(number):
                    raise ValueError(f"Statistic {name} must be finite, got {number!r}")
                # Plain float, so json.dumps never meets a numpy scalar.
                object.__setattr__(self, name, float(number))

    @classmethod
    def undefined(cls, reason: str) -> Statistic:
        return cls(value=None, reason=reason)

    @property
    def defined(self) -> bool:
        return self.value is not None

    def to_dict(self) -> dict:
        """JSON-ready form: ``ci95`` is ``[low, high]`` or null with ``ci_reason``."""
        return {
            "value": self.value,
            "reason": self.reason,
            "ci95": None if self.ci_low is None else [self.ci_low, self.ci_high],
            "ci_reason": self.ci_reason,
        }


@dataclass(frozen=True)
class ConfusionMatrix:
    """Episode counts by (real outcome, world-model outcome).

    Rows are the real outcome, columns the world-model outcome, both in the order
    ``LABELS = ('success', 'failure')``. ``unjudged`` counts the episodes left out
    because either outcome is 'unknown'; they are in no cell and not in ``n``.
    """

    real_success_world_model_success: int
    real_success_world_model_failure: int
    real_failure_world_model_success: int
    real_failure_world_model_failure: int
    unjudged: int = 0

    LABELS: ClassVar[tuple[str, str]] = OUTCOMES

    @property
    def n(self) -> int:
        return (self.real_success_world_model_success + self.real_success_world_model_failure
                + self.real_failure_world_model_success + self.real_failure_world_model_failure)

    def to_dict(self) -> dict:
        return {
            "rows": "real outcome",
            "columns": "model outcome",
            "labels": list(self.LABELS),
            "counts": [
                [self.real_success_world_model_success, self.real_success_world_model_failure],
                [self.real_failure_world_model_success, self.real_failure_world_model_failure],
            ],
        }


@dataclass(frozen=True)
class AgreementSummary:
    """All per-episode agreement figures for one group of episodes (``n`` judged, ``unjudged`` left out)."""

    n: int
    unjudged: int
    confusion: ConfusionMatrix
    accuracy: Statistic
    kappa: Statistic
    optimism: Statistic
    pessimism: Statistic

    def to_dict(self) -> dict:
        return {
            "n": self.n,
            "unjudged": self.unjudged,
            "confusion": self.confusion.to_dict(),
            "accuracy": self.accuracy.to_dict(),
            "kappa": self.kappa.to_dict(),
            "optimism": self.optimism.to_dict(),
            "pessimism": self.pessimism.to_dict(),
        }


def _is_success(outcome: object, where: str) -> bool | None:
    """True for success, False for failure, None for 'unknown' (unjudged)."""
    if isinstance(outcome, (bool, np.bool_)):
        return bool(outcome)
    if outcome == SUCCESS:
        return True
    if outcome == FAILURE:
        return False
    if outcome == UNKNOWN:
        return None
    raise ValueError(
        f"{where}: outcome {outcome!r} is neither 'success'/'failure'/'unknown' nor a bool; "
        "pass True/'success' for success, False/'failure' for failure and 'unknown' where "
        "nothing decided it")


def _as_successes(outcomes: Sequence[object], side: str) -> list[bool | None]:
    return [_is_success(o, f"{side}[{i}]") for i, o in enumerate(outcomes)]


def _no_judged_episodes(unjudged: int) -> str:
    return f"no judged episodes ({unjudged} unjudged: an outcome is unknown)" if unjudged else "no episodes"


def confusion_matrix(real: Sequence[object], world_model: Sequence[object]) -> ConfusionMatrix:
    """Count episodes by (real, world-model) outcome; ``real[i]`` and ``world_model[i]`` are one episode.

    An episode with an 'unknown' outcome on either side is counted as ``unjudged`` only.
    """
    if len(real) != len(world_model):
        raise ValueError(
            f"real has {len(real)} outcomes but world_model has {len(world_model)}; "
            "pass exactly one outcome per episode on each side")
    real_ok = _as_successes(real, "real")
    world_model_ok = _as_successes(world_model, "world_model")
    pairs = [(r, m) for r, m in zip(real_ok, world_model_ok) if r is not None and m is not None]
    return ConfusionMatrix(
        real_success_world_model_success=pairs.count((True, True)),
        real_success_world_model_failure=pairs.count((True, False)),
        real_failure_world_model_success=pairs.count((False, True)),
        real_failure_world_model_failure=pairs.count((False, False)),
        unjudged=len(real) - len(pairs),
    )


def _proportion(k: int, n: int, undefined_reason: str) -> Statistic:
    """k/n with a Wilson score interval, which stays inside [0, 1] and is sane at k=0 or k=n."""
    if n == 0:
        return Statistic.undefined(undefined_reason)
    p = k / n
    z2 = Z95 * Z95
    denom = 1.0 + z2 / n
    centre = (p + z2 / (2 * n)) / denom
    half = Z95 * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / denom
    return Statistic(p, ci_low=max(0.0, centre - half), ci_high=min(1.0, centre + half))


def success_rate(outcomes: Sequence[object]) -> Statistic:
    """Fraction of successes among the judged outcomes ('unknown' left out), with a Wilson 95%
    interval; undefined for no judged episodes."""
    ok = [o for o in _as_successes(outcomes, "outcomes") if o is not None]
    return _proportion(sum(ok), len(ok), _no_judged_episodes(len(outcomes) - len(ok)))


def _accuracy(cm: ConfusionMatrix) -> Statistic:
    agree = cm.real_success_world_model_success + cm.real_failure_world_model_failure
    return _proportion(agree, cm.n, _no_judged_episodes(cm.unjudged))


def _optimism(cm: ConfusionMatrix) -> Statistic:
    real_failures = cm.real_failure_world_model_success + cm.real_failure_world_model_failure
    return _proportion(cm.real_failure_world_model_success, real_failures,
                       "no episode failed on the real robot, so P(model success | real "
                       "failure) has no denominator" if cm.n else _no_judged_episodes(cm.unjudged))


def _pessimism(cm: ConfusionMatrix) -> Statistic:
    real_successes = cm.real_success_world_model_success + cm.real_success_world_model_failure
    return _proportion(cm.real_success_world_model_failure, real_successes,
                       "no episode succeeded on the real robot, so P(model failure | real "
                       "success) has no denominator" if cm.n else _no_judged_episodes(cm.unjudged))


def _kappa(cm: ConfusionMatrix) -> Statistic:
    n = cm.n
    if n == 0:
        return Statistic.undefined(_no_judged_episodes(cm.unjudged))
    for label, count in ((SUCCESS, cm.real_success_world_model_success),
                         (FAILURE, cm.real_failure_world_model_failure)):
        if count == n:
            return Statistic.undefined(
                f"all {n} episodes are '{label}' on both the real robot and the model: "
                "chance agreement is 1, so kappa = 0/0; add episodes with the other outcome")
    a, b = cm.real_success_world_model_success, cm.real_success_world_model_failure
    c, d = cm.real_failure_world_model_success, cm.real_failure_world_model_failure
    # (p_o - p_e) / (1 - p_e) rewritten for 2x2 in integer counts, so that e.g. chance-level
    # agreement gives exactly 0 instead of a rounding residue like -1e-17.
    kappa = 2 * (a * d - b * c) / ((a + b) * (b + d) + (a + c) * (c + d))
    p_o = (a + d) / n
    p_real, p_model = (a + b) / n, (a + c) / n
    p_e = p_real * p_model + (1 - p_real) * (1 - p_model)
    se = math.sqrt(p_o * (1 - p_o) / (n * (1 - p_e) ** 2))
    if se == 0.0:
        return Statistic(kappa, ci_reason=(
            f"observed agreement is {p_o:g}, where the large-sample SE is 0; "
            "no meaningful interval (add episodes)"))
    return Statistic(kappa, ci_low=max(-1.0, kappa - Z95 * se),
                     ci_high=min(1.0, kappa + Z95 * se))


def agreement_accuracy(real: Sequence[object], world_model: Sequence[object]) -> Statistic:
    """Fraction of episodes whose model outcome equals the real outcome (Wilson 95% CI)."""
    return _accuracy(confusion_matrix(real, world_model))


def cohens_kappa(real: Sequence[object], world_model: Sequence[object]) -> Statistic:
    """Cohen's kappa: agreement beyond what the two sides' base rates give by chance.

    kappa = (p_o - p_e) / (1 - p_e).  95% CI from the large-sample SE of Cohen (1960),
    sqrt(p_o (1 - p_o) / (n (1 - p_e)^2)); it is optimistic for small n.  Undefined when
    both sides report the same single outcome for every episode (p_e = 1).
    """
    return _kappa(confusion_matrix(real, world_model))


def optimism(real: Sequence[object], world_model: Sequence[object]) -> Statistic:
    """P(model success | real failure): how often the world model flatters the policy."""
    return _optimism(confusion_matrix(real, world_model))


def pessimism(real: Sequence[object], world_model: Sequence[object]) -> Statistic:
    """P(model failure | real success): how often the world model sells the policy short."""
    return _pessimism(confusion_matrix(real, world_model))


def summarize_agreement(real: Sequence[object], world_model: Sequence[object]) -> AgreementSummary:
    """All per-episode agreement figures for one group of episodes."""
    cm = confusion_matrix(real, world_model)
    return AgreementSummary(n=cm.n, unjudged=cm.unjudged, confusion=cm, accuracy=_accuracy(cm),
                            kappa=_kappa(cm), optimism=_optimism(cm), pessimism=_pessimism(cm))


def summarize_agreement_by(keys: Sequence[str], real: Sequence[object],
                           world_model: Sequence[object]) -> dict[str, AgreementSummary]:
    """Agreement figures per key (e.g. per task), keys sorted; ``keys[i]`` labels episode i."""
    if not len(keys) == len(real) == len(world_model):
        raise ValueError(
            f"keys, real and world_model must have one entry per episode, got lengths "
            f"{len(keys)}, {len(real)}, {len(world_model)}")
    groups: dict[str, tuple[list, list]] = {}
    for key, r, m in zip(keys, real, world_model):
        if not isinstance(key, str):
            raise ValueError(f"group key {key!r} must be a str (e.g. the task name)")
        group = groups.setdefault(key, ([], []))
        group[0].append(r)
        group[1].append(m)
    return {key: summarize_agreement(*groups[key]) for key in sorted(groups)}


def _success_rates(values: Sequence[float], side: str) -> np.ndarray:
    array = np.asarray(values, dtype=float)
    if array.ndim != 1:
        raise ValueError(f"{side} must be a flat sequence of success rates, got shape "
                         f"{array.shape}")
    bad = [i for i, v in enumerate(array) if not 0.0 <= v <= 1.0]
    if bad:
        raise ValueError(
            f"{side}[{bad[0]}] = {float(array[bad[0]])!r} is not a success rate in [0, 1] "
            "(NaN and percentages are rejected; divide percentages by 100)")
    return array


def _paired_rates(sim: Sequence[float], real: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    s = _success_rates(sim, "sim")
    r = _success_rates(real, "real")
    if len(s) != len(r):
        raise ValueError(
            f"sim has {len(s)} success rates but real has {len(r)}; "
            "pass one rate per policy on each side, in the same policy order")
    return s, r


def _correlation_undefined(sim: np.ndarray, real: np.ndarray, what: str) -> str | None:
    """Why a correlation of these success rates is undefined, or None if it is defined."""
    k = len(sim)
    if k < 2:
        return f"{what} needs at least 2 policies, got {k}"
    for side, values in (("sim", sim), ("real", real)):
        if np.all(values == values[0]):
            return (f"all {k} {side} success rates equal {values[0]:g}: zero variance, "
                    f"so {what} is 0/0")
    return None


def _pearson_r(x: np.ndarray, y: np.ndarray) -> float:
    dx = x - x.mean()
    dy = y - y.mean()
    r = float(np.dot(dx, dy) / math.sqrt(np.dot(dx, dx) * np.dot(dy, dy)))
    return min(1.0, max(-1.0, r))


def pearson(sim: Sequence[float], real: Sequence[float]) -> Statistic:
    """Pearson r between per-policy sim and real success rates, with a Fisher-z 95% CI.

    CI = tanh(atanh(r) +- 1.96 / sqrt(k - 3)); only defined for k > 3 policies and |r| < 1.
    """
    s, r = _paired_rates(sim, real)
    reason = _correlation_undefined(s, r, "Pearson r")
    if reason is not None:
        return Statistic.undefined(reason)
    value = _pearson_r(s, r)
    k = len(s)
    if k <= 3:
        return Statistic(value, ci_reason=(
            f"Fisher-z interval needs k > 3 policies (SE = 1/sqrt(k - 3)), got k = {k}"))
    if abs(value) == 1.0:
        return Statistic(value, ci_reason="|r| = 1: the Fisher-z interval is degenerate")
    z = math.atanh(value)
    half = Z95 / math.sqrt(k - 3)
    return Statistic(value, ci_low=math.tanh(z - half), ci_high=math.tanh(z + half))


def _average_ranks(values: np.ndarray) -> np.ndarray:
    """1-based ranks; tied values share the mean of the ranks they span."""
    order = np.argsort(values, kind="mergesort")
    ordered = values[order]
    ranks = np.empty(len(values))
    start = 0
    while start < len(values):
        end = start
        while end + 1 < len(values) and ordered[end + 1] == ordered[start]:
            end += 1
        ranks[order[start:end + 1]] = (start + end) / 2 + 1
        start = end + 1
    return ranks


def spearman(sim: Sequence[float], real: Sequence[float]) -> Statistic:
    """Spearman rho: Pearson r of the average ranks (ties share their mean rank).

    No interval is given: with the handful of policies typical here, neither the
    Fisher-z nor the t approximation for rho is trustworthy.
    """
    s, r = _paired_rates(sim, real)
    reason = _correlation_undefined(s, r, "Spearman rho")
    if reason is not None:
        return Statistic.undefined(reason)
    return Statistic(_pearson_r(_average_ranks(s), _average_ranks(r)),
                     ci_reason="no interval is computed for Spearman rho")


def mmrv(*, sim: Sequence[float], real: Sequence[float]) -> Statistic:
    """SIMPLER's mean maximum rank violation (lower is better, 0 = same ranking).

    MMRV = (1/N) sum_i max_j [(S_i > S_j) != (R_i > R_j)] * |R_i - R_j|

    with S the sim (world-model) and R the real success rate of each of N policies.
    Comparisons are strict, so a tie on one side against an order on the other is a
    violation; the gap is measured on the REAL side, so a tie in R costs nothing and a
    tie in S costs the real gap (charged to the policy with the higher real rate).
    Arguments are keyword-only because SimplerEnv's README calls its
    ``mean_maximum_rank_violation(perf_sim, perf_real)`` with the two swapped, which
    silently weights gaps by the sim side.  Undefined for fewer than 2 policies.
    """
    s, r = _paired_rates(sim, real)
    if len(s) < 2:
        return Statistic.undefined(f"MMRV needs at least 2 policies, got {len(s)}")
    violated = (s[:, None] > s[None, :]) != (r[:, None] > r[None, :])
    gaps = np.abs(r[:, None] - r[None, :])
    worst = np.where(violated, gaps, 0.0).max(axis=1)
    return Statistic(float(worst.mean()),
                     ci_reason="MMRV is a descriptive rank figure; no interval")
