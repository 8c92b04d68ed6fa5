"""Agreement metrics against values worked out by hand (arithmetic in the comments)."""

import json
import math

import pytest

from gesim_ros.comparator import metrics as am

S, F, U = "success", "failure", "unknown"

# Ten episodes.  Counts (real, model): SS a=3, SF b=1, FS c=2, FF d=4.
REAL = [S, S, S, S, F, F, F, F, F, F]
MODEL = [S, S, S, F, S, S, F, F, F, F]


def test_confusion_matrix_has_explicit_labels_and_counts():
    cm = am.confusion_matrix(REAL, MODEL)
    assert (cm.real_success_world_model_success, cm.real_success_world_model_failure,
            cm.real_failure_world_model_success, cm.real_failure_world_model_failure) == (3, 1, 2, 4)
    assert cm.to_dict() == {
        "rows": "real outcome", "columns": "model outcome",
        "labels": ["success", "failure"], "counts": [[3, 1], [2, 4]],
    }


def test_accuracy_with_wilson_interval():
    # p = (3 + 4) / 10 = 0.7, z^2 = 3.8416
    # centre = (0.7 + 3.8416/20) / (1 + 3.8416/10) = 0.89208 / 1.38416 = 0.644492
    # half = 1.96 * sqrt(0.7*0.3/10 + 3.8416/400) / 1.38416 = 1.96 * sqrt(0.030604) / 1.38416
    #      = 0.342882 / 1.38416 = 0.247718  ->  [0.396774, 0.892210]
    acc = am.agreement_accuracy(REAL, MODEL)
    assert acc.value == pytest.approx(0.7)
    assert acc.ci_low == pytest.approx(0.396774, abs=1e-5)
    assert acc.ci_high == pytest.approx(0.892210, abs=1e-5)


def test_kappa_with_large_sample_interval():
    # p_o = 0.7; p_real = 4/10, p_model = 5/10; p_e = 0.4*0.5 + 0.6*0.5 = 0.5
    # kappa = (0.7 - 0.5) / (1 - 0.5) = 0.4
    # SE = sqrt(0.7*0.3 / (10 * 0.5^2)) = sqrt(0.084) = 0.289828
    # CI = 0.4 -+ 1.96*0.289828 = 0.4 -+ 0.568062 -> [-0.168062, 0.968062]
    kappa = am.cohens_kappa(REAL, MODEL)
    assert kappa.value == pytest.approx(0.4)
    assert kappa.ci_low == pytest.approx(-0.168062, abs=1e-5)
    assert kappa.ci_high == pytest.approx(0.968062, abs=1e-5)


def test_optimism_and_pessimism():
    # optimism = P(model S | real F) = c / (c + d) = 2/6; pessimism = b / (a + b) = 1/4
    assert am.optimism(REAL, MODEL).value == pytest.approx(1 / 3)
    assert am.pessimism(REAL, MODEL).value == pytest.approx(0.25)


def test_all_success_on_both_sides():
    summary = am.summarize_agreement([S, S, S], [S, S, S])
    assert not summary.kappa.defined
    assert "all 3 episodes are 'success'" in summary.kappa.reason
    assert not summary.optimism.defined
    assert "no episode failed on the real robot" in summary.optimism.reason
    assert summary.pessimism.value == 0.0  # 0 of 3 real successes predicted as failures
    # Wilson at k = n = 3: centre = (1 + 3.8416/6) / (1 + 3.8416/3) = 1.640267 / 2.280533
    # = 0.719251; half = 1.96 * sqrt(3.8416/36) / 2.280533 = 0.640267 / 2.280533 = 0.280749
    assert summary.accuracy.value == 1.0
    assert summary.accuracy.ci_low == pytest.approx(0.438502, abs=1e-5)
    assert summary.accuracy.ci_high == 1.0


def test_all_failure_on_both_sides():
    summary = am.summarize_agreement([F, F], [F, F])
    assert summary.kappa.value is None
    assert "'failure'" in summary.kappa.reason
    assert summary.pessimism.value is None
    assert "no episode succeeded on the real robot" in summary.pessimism.reason
    assert summary.optimism.value == 0.0


def test_kappa_is_zero_not_undefined_when_only_one_side_is_constant():
    # a=2, b=2, c=0, d=0: p_o = 0.5, p_e = 1*0.5 + 0*0.5 = 0.5, kappa = 0
    # SE = sqrt(0.5*0.5 / (4 * 0.25)) = 0.5 -> CI 0 -+ 0.98
    kappa = am.cohens_kappa([S, S, S, S], [S, S, F, F])
    assert kappa.value == 0.0
    assert (kappa.ci_low, kappa.ci_high) == (pytest.approx(-0.98), pytest.approx(0.98))


def test_perfect_agreement_has_kappa_one_but_no_interval():
    # p_o = 1, so the large-sample SE is 0: say so rather than print [1, 1]
    kappa = am.cohens_kappa([S, F], [S, F])
    assert kappa.value == 1.0
    assert kappa.ci_low is None and "SE is 0" in kappa.ci_reason


def test_no_episodes_is_undefined_everywhere():
    summary = am.summarize_agreement([], [])
    for stat in (summary.accuracy, summary.kappa, summary.optimism, summary.pessimism):
        assert stat.value is None and stat.reason
    assert summary.to_dict()["accuracy"] == {
        "value": None, "reason": "no episodes", "ci95": None, "ci_reason": None}


def test_bool_and_string_outcomes_are_equivalent():
    assert am.confusion_matrix([True, False], [True, True]) == am.confusion_matrix([S, F], [S, S])


def test_bad_outcome_names_the_position():
    with pytest.raises(ValueError, match=r"world_model\[1\]: outcome 'Success' is neither 'success'/'failure'/'unknown'"):
        am.confusion_matrix([S, S], [S, "Success"])
    with pytest.raises(ValueError, match="real has 2 outcomes but world_model has 1"):
        am.confusion_matrix([S, S], [S])


def test_unknown_outcomes_are_unjudged_and_in_no_figure():
    # REAL/MODEL plus three unjudged episodes: model unknown (twice, once per real outcome), real unknown.
    summary = am.summarize_agreement(REAL + [S, F, U], MODEL + [U, U, S])
    judged = am.summarize_agreement(REAL, MODEL)
    assert (summary.n, summary.unjudged, judged.unjudged) == (10, 3, 0)
    assert summary.confusion.to_dict() == judged.confusion.to_dict() and summary.confusion.unjudged == 3
    for name in ("accuracy", "kappa", "optimism", "pessimism"):
        assert getattr(summary, name) == getattr(judged, name), name
    assert summary.to_dict()["unjudged"] == 3
    assert am.optimism([F, F], [S, U]).value == 1.0  # 1 of 1 judged real failures, not 1 of 2


def test_all_unjudged_is_undefined_and_says_why():
    summary = am.summarize_agreement([S, F], [U, U])
    assert (summary.n, summary.unjudged) == (0, 2)
    assert summary.accuracy.reason == "no judged episodes (2 unjudged: an outcome is unknown)"
    assert summary.kappa.reason == summary.optimism.reason == summary.pessimism.reason == summary.accuracy.reason


def test_summarize_by_task_groups_and_sorts():
    by_task = am.summarize_agreement_by(["b", "a", "b"], [S, F, S], [S, F, F])
    assert list(by_task) == ["a", "b"]
    assert by_task["a"].n == 1 and by_task["b"].n == 2
    assert by_task["b"].accuracy.value == 0.5  # (S,S) agrees, (S,F) does not


def test_success_rate():
    rate = am.success_rate([True, False, S, F])
    assert rate.value == 0.5
    assert not am.success_rate([]).defined


def test_success_rate_leaves_unknown_outcomes_out():
    assert am.success_rate([S, F, U, U]) == am.success_rate([S, F])
    assert am.success_rate([U, U]).reason == "no judged episodes (2 unjudged: an outcome is unknown)"


# Five policies.  S: sim (world model), R: real.
SIM5 = [0.1, 0.4, 0.5, 0.8, 0.7]
REAL5 = [0.2, 0.3, 0.6, 0.9, 0.5]


def test_pearson_with_fisher_interval():
    # mean S = 0.5, dS = [-.4, -.1, 0, .3, .2]; mean R = 0.5, dR = [-.3, -.2, .1, .4, 0]
    # Sxy = .12 + .02 + 0 + .12 + 0 = 0.26; Sxx = .16+.01+0+.09+.04 = 0.30
    # Syy = .09+.04+.01+.16+0 = 0.30; r = 0.26 / 0.30 = 0.866667
    # atanh(r) = 0.5 ln(1.866667 / 0.133333) = 0.5 ln 14 = 1.319529; half = 1.96/sqrt(2) = 1.385929
    # CI = [tanh(-0.066401), tanh(2.705458)] = [-0.066303, 0.991105]
    r = am.pearson(SIM5, REAL5)
    assert r.value == pytest.approx(0.866667, abs=1e-6)
    assert r.ci_low == pytest.approx(-0.066303, abs=1e-5)
    assert r.ci_high == pytest.approx(0.991105, abs=1e-5)


def test_pearson_interval_undefined_for_three_policies():
    # dS = [-.1, 0, .1], dR = [-.1, .1, 0]: Sxy = 0.01, Sxx = Syy = 0.02 -> r = 0.5
    r = am.pearson([0.1, 0.2, 0.3], [0.1, 0.3, 0.2])
    assert r.value == pytest.approx(0.5)
    assert r.ci_low is None and "k > 3" in r.ci_reason and "k = 3" in r.ci_reason


def test_pearson_perfect_correlation_has_degenerate_interval():
    r = am.pearson([0.1, 0.2, 0.3, 0.4, 0.5], [0.2, 0.4, 0.6, 0.8, 1.0])
    assert r.value == pytest.approx(1.0)
    assert r.ci_low is None and "degenerate" in r.ci_reason


def test_spearman_without_ties():
    # ranks S = [1, 2, 3, 5, 4], ranks R = [1, 2, 4, 5, 3]; d = [0, 0, -1, 0, 1], sum d^2 = 2
    # rho = 1 - 6*2 / (5 * 24) = 0.9
    rho = am.spearman(SIM5, REAL5)
    assert rho.value == pytest.approx(0.9)
    assert rho.ci_low is None and rho.ci_reason


def test_spearman_ties_get_average_ranks():
    # S = [.5, .5, .2, .9] -> ranks [2.5, 2.5, 1, 4]; R = [.6, .4, .1, .8] -> [3, 2, 1, 4]
    # means 2.5; dS = [0, 0, -1.5, 1.5], dR = [.5, -.5, -1.5, 1.5]
    # Sxy = 4.5, Sxx = 4.5, Syy = 5 -> rho = 4.5 / sqrt(22.5) = 0.948683
    rho = am.spearman([0.5, 0.5, 0.2, 0.9], [0.6, 0.4, 0.1, 0.8])
    assert rho.value == pytest.approx(0.948683, abs=1e-6)


def test_mmrv_without_ties():
    # S = [.2, .6, .4], R = [.5, .3, .9]
    # i=0: j=1 (F vs T) gap .2; j=2 (F vs F) ok          -> .2
    # i=1: j=0 (T vs F) gap .2; j=2 (T vs F) gap .6       -> .6
    # i=2: j=0 (T vs T) ok; j=1 (F vs T) gap .6           -> .6
    # MMRV = (.2 + .6 + .6) / 3 = 0.466667
    assert am.mmrv(sim=[0.2, 0.6, 0.4], real=[0.5, 0.3, 0.9]).value == pytest.approx(1.4 / 3)


def test_mmrv_tie_in_sim_against_order_in_real_is_a_violation():
    # S = [.5, .5, .2, .9], R = [.6, .4, .1, .8]
    # i=0, j=1: (S0 > S1) = F but (R0 > R1) = T -> violation, gap |.6 - .4| = .2
    # every other pair is ordered the same way on both sides -> MMRV = .2 / 4 = 0.05
    assert am.mmrv(sim=[0.5, 0.5, 0.2, 0.9], real=[0.6, 0.4, 0.1, 0.8]).value == \
        pytest.approx(0.05)


def test_mmrv_strict_comparison_charges_the_tie_to_the_higher_real_policy():
    # S = [.5, .5, .9], R = [.6, .4, .5], strict >
    # i=0: j=1 (F vs T) gap .2; j=2 (F vs T) gap .1   -> .2
    # i=1: j=0 (F vs F) ok;     j=2 (F vs F) ok       -> 0
    # i=2: j=0 (T vs F) gap .1; j=1 (T vs T) ok       -> .1
    # MMRV = .3 / 3 = 0.1  (with >= instead, i=0 -> .1 and i=1 -> .2: 0.4 / 3)
    assert am.mmrv(sim=[0.5, 0.5, 0.9], real=[0.6, 0.4, 0.5]).value == pytest.approx(0.1)


def test_mmrv_weights_gaps_on_the_real_side():
    # Swapped arguments (the SimplerEnv README mistake): now the tie is on the real side,
    # i=0, j=1: S .6 > .4 = T, R .5 > .5 = F -> violation, but real gap |.5 - .5| = 0
    assert am.mmrv(sim=[0.6, 0.4, 0.1, 0.8], real=[0.5, 0.5, 0.2, 0.9]).value == 0.0
    # Ties on both sides are no violation: F == F
    assert am.mmrv(sim=[0.3, 0.3], real=[0.5, 0.5]).value == 0.0


def test_mmrv_arguments_are_keyword_only():
    with pytest.raises(TypeError):
        am.mmrv([0.1, 0.2], [0.1, 0.2])


def test_single_policy_is_undefined_with_reason():
    for stat in (am.pearson([0.5], [0.4]), am.spearman([0.5], [0.4]),
                 am.mmrv(sim=[0.5], real=[0.4])):
        assert stat.value is None
        assert "at least 2 policies, got 1" in stat.reason


def test_zero_variance_correlation_is_undefined():
    r = am.pearson([0.5, 0.5, 0.5], [0.1, 0.2, 0.3])
    assert r.value is None and "all 3 sim success rates equal 0.5" in r.reason
    rho = am.spearman([0.1, 0.2, 0.3], [1.0, 1.0, 1.0])
    assert rho.value is None and "real" in rho.reason and "zero variance" in rho.reason


def test_success_rates_are_validated():
    with pytest.raises(ValueError, match=r"sim\[1\] = 80.0 is not a success rate in \[0, 1\]"):
        am.pearson([0.5, 80], [0.1, 0.2])
    with pytest.raises(ValueError, match="not a success rate"):
        am.mmrv(sim=[0.5, float("nan")], real=[0.1, 0.2])
    with pytest.raises(ValueError, match="sim has 2 success rates but real has 3"):
        am.spearman([0.5, 0.6], [0.1, 0.2, 0.3])


def test_statistic_refuses_ambiguous_states():
    with pytest.raises(ValueError, match="exactly one of value or reason"):
        am.Statistic(value=None)
    with pytest.raises(ValueError, match="interval or ci_reason"):
        am.Statistic(value=0.5)
    with pytest.raises(ValueError, match="finite"):
        am.Statistic(value=math.nan, ci_reason="x")


def test_summary_is_json_serialisable():
    text = json.dumps(am.summarize_agreement(REAL, MODEL).to_dict(), allow_nan=False)
    assert json.loads(text)["kappa"]["value"] == pytest.approx(0.4)
