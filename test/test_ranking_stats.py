"""comparator/ranking.py: prediction-powered estimates (a hand-worked case, coverage by simulation,
edge cases) and the ranking figures recomputed from episode rows. Plain Python, fast."""

import math

import numpy as np
import pytest

from gesim_ros.comparator import metrics as am
from gesim_ros.comparator.ranking import (EpisodeRow, PPIError, ppi_lambda, ppi_mean, ppi_summary,
                                          ranking_from_rows)


def test_ppi_hand_worked_case():
    # n = 10 paired: real y = 6 successes, 4 failures; the model agrees on all but one real success.
    # N = 20 model-only outcomes, 12 successes.
    #   mean_N(f~) = 0.6; rectifier f - y = [0]*5 + [-1] + [0]*4, mean -0.1  =>  theta_PP = 0.6 + 0.1 = 0.7
    #   var(f~) = 20 * 0.6 * 0.4 / 19 = 0.252632;  var(f - y) = ((-0.9)^2 + 9 * 0.1^2) / 9 = 0.1
    #   var(theta) = 0.252632 / 20 + 0.1 / 10 = 0.0226316, se = 0.150438, half width 1.96 se = 0.294859
    #   => [0.405141, 0.994859], width 0.589717
    #   classical: ybar = 0.6, var(y) = 10 * 0.24 / 9 = 0.266667, se = 0.163299, half 0.320067,
    #   [0.279933, 0.920067], width 0.640133
    #   effective n = 0.266667 / 0.0226316 = 11.7829
    #   n' = var(f - y) / (var(y)/n - var(f~)/N) = 0.1 / (0.0266667 - 0.0126316) = 7.125 => saved 2.875
    y = [1] * 6 + [0] * 4
    f = [1] * 5 + [0] * 5
    f_only = [1] * 12 + [0] * 8
    e = ppi_mean(y, f, f_only)
    assert (e.n, e.N, e.lam) == (10, 20, 1.0)
    assert e.value == pytest.approx(0.7)
    assert e.se == pytest.approx(math.sqrt(0.0226316), rel=1e-5)
    assert e.ci95 == pytest.approx([0.405141, 0.994859], abs=1e-6)
    assert e.width == pytest.approx(0.589717, abs=1e-6)
    assert e.classical_ci95 == pytest.approx([0.279933, 0.920067], abs=1e-6)
    assert e.classical_width == pytest.approx(0.640133, abs=1e-6)
    assert e.effective_n == pytest.approx(11.7829, abs=1e-4)
    assert e.real_needed == pytest.approx(7.125)
    assert e.real_saved == pytest.approx(2.875)
    # The same outcomes as strings and bools give the same estimate.
    words = ["success" if v else "failure" for v in y]
    assert ppi_mean(words, [bool(v) for v in f], f_only).value == pytest.approx(0.7)


def test_ppi_lambda_zero_is_classical_and_tuned_lambda_by_hand():
    y = [1] * 6 + [0] * 4
    f = [1] * 5 + [0] * 5
    f_only = [1] * 12 + [0] * 8
    classical = ppi_mean(y, f, f_only, lam=0.0)
    assert classical.value == pytest.approx(0.6) and classical.ci95 == pytest.approx(classical.classical_ci95)
    # PPI++: cov(y, f) = (sum y f - n ybar fbar) / (n - 1) = (5 - 10 * 0.6 * 0.5) / 9 = 2/9;
    # var(f) over all 30 model outcomes (17 successes) = 30 * (17/30) (13/30) / 29 = 0.254023;
    # lambda = (2/9) / ((1 + 10/20) * 0.254023) = 0.583208
    assert ppi_lambda(np.array(y, float), np.array(f, float), np.array(f_only, float)) == pytest.approx(0.583208,
                                                                                                         abs=1e-6)
    tuned = ppi_mean(y, f, f_only, lam="tuned")
    assert tuned.lam == pytest.approx(0.583208, abs=1e-6)
    assert tuned.value == pytest.approx(0.583208 * 0.6 + (0.6 - 0.583208 * 0.5), abs=1e-6)


def _draw(rng, n, big_n, p, accuracy):
    """n paired (real, model) and big_n model-only outcomes: real ~ Bernoulli(p); the model reports the
    real outcome with probability ``accuracy``, else the other one."""
    y = rng.random(n) < p
    f = np.where(rng.random(n) < accuracy, y, ~y)
    y_only = rng.random(big_n) < p
    f_only = np.where(rng.random(big_n) < accuracy, y_only, ~y_only)
    return y.astype(int), f.astype(int), f_only.astype(int)


@pytest.mark.parametrize("lam", [1.0, "tuned"])
@pytest.mark.parametrize("p, accuracy", [(0.6, 0.85), (0.3, 0.6)])
def test_ppi_interval_covers_the_true_rate(lam, p, accuracy):
    rng = np.random.default_rng(20231110)
    draws, covered, widths, classical = 1500, 0, [], []
    for _ in range(draws):
        e = ppi_mean(*_draw(rng, 100, 1000, p, accuracy), lam=lam)
        covered += e.ci95[0] <= p <= e.ci95[1]
        widths.append(e.width)
        classical.append(e.classical_width)
    assert covered / draws >= 0.93, f"coverage {covered / draws:.3f} of nominal 0.95"
    if accuracy == 0.85:  # a useful model narrows the interval
        assert np.mean(widths) < 0.9 * np.mean(classical)
    if lam == "tuned":  # PPI++ is never (much) wider than classical, however poor the model
        assert np.mean(widths) < 1.02 * np.mean(classical)


def test_ppi_with_an_uninformative_model_costs_real_episodes_at_lambda_one():
    rng = np.random.default_rng(5)
    e = ppi_mean(*_draw(rng, 200, 2000, 0.5, 0.5), lam=1.0)
    assert e.width > e.classical_width and e.real_saved < 0


def test_ppi_edge_cases_are_refused_or_say_why():
    with pytest.raises(PPIError, match="at least 2 paired"):
        ppi_mean([1], [1], [1, 0, 1])
    with pytest.raises(PPIError, match="at least 2 model-only"):
        ppi_mean([1, 0], [1, 0], [1])
    with pytest.raises(PPIError, match="one model outcome per real"):
        ppi_mean([1, 0, 1], [1, 0], [1, 0])
    with pytest.raises(PPIError, match=r"real\[1\] = 'unknown' is not an outcome"):
        ppi_mean(["success", "unknown"], [1, 0], [1, 0])
    with pytest.raises(PPIError, match=r"model_only\[0\] = 0.5"):
        ppi_mean([1, 0], [1, 0], [0.5, 1])
    with pytest.raises(PPIError, match="lam"):
        ppi_mean([1, 0], [1, 0], [1, 0], lam=2)
    # Every outcome a success on both sides: an estimate of 1, no interval, nothing claimed saved.
    e = ppi_mean([1] * 5, [1] * 5, [1] * 8)
    assert e.value == 1.0 and e.ci95 is None and "variance is 0" in e.ci_reason
    assert e.real_saved is None and "all 5 real outcomes are successes" in e.saved_reason
    # The model matches every pair and its model-only outcomes all agree: no PPI interval, nothing saved.
    e = ppi_mean([1, 0, 1], [1, 0, 1], [1, 1, 1])
    assert e.ci95 is None and e.classical_ci95 is not None and e.real_saved is None
    assert "degenerate" in e.saved_reason
    # Real all successes, the model not: PPI has an interval, the classical one is degenerate.
    e = ppi_mean([1] * 5, [1, 1, 0, 1, 1], [1, 0, 1, 1])
    assert e.ci95 is not None and e.classical_ci95 is None and e.real_saved is None


def _row(policy, task, seed, side, role, outcome, status="complete"):
    return EpisodeRow(policy=policy, task=task, seed=seed, side=side, role=role, status=status, outcome=outcome,
                      episode_id=f"{policy}-{side}-{task}-{seed}", database=f"jobs/{policy}-{side}.sqlite")


def test_ranking_from_rows_by_hand():
    rows = []
    real = {"a": [1, 1, 1, 0], "b": [1, 0, 0, 0], "c": [1, 1, 0, 0]}
    model = {"a": [1, 1, 0, 0], "b": [1, 0, 0, 1], "c": [1, 1, 1, 0]}
    only = {"a": [1, 0, 1], "b": [0, 0, 0], "c": [1, 1, 0]}
    word = {1: "success", 0: "failure"}
    for p in real:
        for seed in range(4):
            rows.append(_row(p, "push", seed, "real", "paired", word[real[p][seed]]))
            rows.append(_row(p, "push", seed, "world_model", "paired", word[model[p][seed]]))
        for i, v in enumerate(only[p]):
            rows.append(_row(p, "push", 4 + i, "world_model", "model_only", word[v]))
    # Not judged: left out of every figure, counted.
    rows.append(_row("a", "push", 9, "world_model", "model_only", "unknown"))
    rows.append(_row("b", "push", 9, "real", "paired", None, status="aborted"))
    out = ranking_from_rows(rows, ["a", "b", "c"])
    by = {p["name"]: p for p in out["policies"]}
    # real rates 3/4, 1/4, 2/4; model rates over paired + model-only: a 4/7, b 2/7, c 5/7
    assert [by[p]["real_success_rate"]["value"] for p in "abc"] == [0.75, 0.25, 0.5]
    assert [by[p]["model_success_rate"]["value"] for p in "abc"] == pytest.approx([4 / 7, 2 / 7, 5 / 7])
    assert by["a"]["not_judged"] == {"real": 0, "world_model": 1}
    assert by["b"]["not_judged"] == {"real": 1, "world_model": 0} and by["b"]["paired_n"] == 4
    # MMRV by hand (S = model, R = real): a vs c ordered a < c in S, a > c in R: violation |0.75 - 0.5| = 0.25
    # for both a and c; b is below both on both sides. MMRV = (0.25 + 0 + 0.25) / 3.
    assert out["mmrv"]["value"] == pytest.approx(0.5 / 3)
    assert out["pearson"]["value"] == pytest.approx(am.pearson([4 / 7, 2 / 7, 5 / 7], [0.75, 0.25, 0.5]).value)
    assert out["pearson"]["ci95"] is None  # k = 3: no Fisher-z interval
    # a's PPI from its 4 pairs and 3 model-only outcomes, as ppi_mean computes it from the numbers.
    expected = ppi_mean(real["a"], model["a"], only["a"], lam="tuned")
    assert by["a"]["ppi"]["value"] == pytest.approx(expected.value) and by["a"]["ppi"]["N"] == 3


def test_ppi_summary_adds_up_the_saved_episodes():
    hand = ppi_mean([1] * 6 + [0] * 4, [1] * 5 + [0] * 5, [1] * 12 + [0] * 8).to_dict()   # saves 2.875 of 10
    none = {"value": None, "reason": "PPI needs at least 2 model-only episodes, got 0"}
    summary = ppi_summary([{"ppi": hand}, {"ppi": hand}, {"ppi": none}])
    assert summary["policies"] == 2 and summary["real_episodes"] == 20
    assert summary["real_saved"] == pytest.approx(5.75) and summary["saved_fraction"] == pytest.approx(0.2875)
    assert summary["mean_width"] == pytest.approx(0.589717, abs=1e-6)
    assert ppi_summary([{"ppi": none}])["policies"] == 0


def test_ranking_policy_without_model_only_episodes_says_why():
    rows = [_row(p, "push", s, side, "paired", "success" if (s + len(p)) % 2 else "failure")
            for p in ("x", "yy") for s in range(3) for side in ("real", "world_model")]
    out = ranking_from_rows(rows)
    assert out["policies"][0]["ppi"]["value"] is None
    assert "at least 2 model-only" in out["policies"][0]["ppi"]["reason"]


def test_row_refuses_a_real_model_only_episode():
    with pytest.raises(ValueError, match="real episodes are paired"):
        _row("a", "push", 0, "real", "model_only", "success")
