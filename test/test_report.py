"""Report figures agree with the metrics; the HTML is self-contained and escaped."""

import base64
import json

import cv2
import numpy as np
import pytest

from gesim_ros.comparator import metrics as am
from gesim_ros.comparator.store import EpisodeStore, EpisodeStoreError
from gesim_ros.comparator.report import build_report, text_summary, write_report

S, F, U = "success", "failure", "unknown"
EVIL = "<script>alert(1)</script>"

# (episode, task, policy, real, model); all complete.
EPISODES = [
    ("e1", "pick", "p1", S, S),
    ("e2", "pick", "p1", S, F),
    ("e3", "pick", "p2", F, F),
    ("e4", "pick", "p2", F, S),
    ("e5", EVIL, "p1", S, S),
    ("e6", EVIL, "p2", F, F),
    ("e7", EVIL, "p3", S, S),
    ("e8", EVIL, "p3", F, S),
]


def _jpeg(value: int) -> bytes:
    return cv2.imencode(".jpg", np.full((8, 8, 3), value, np.uint8))[1].tobytes()


@pytest.fixture
def db(tmp_path):
    path = tmp_path / "episodes.db"
    with EpisodeStore(path) as store:
        for episode_id, task, policy, real, model in EPISODES:
            store.start_episode(episode_id, task=task, policy=policy)
            store.record_outcome(episode_id, "real", real)
            store.record_outcome(episode_id, "world_model", model, judge_success_prob=0.5)
        store.record_divergence("e1", [0, 1], [0.1, 0.3])
        store.record_divergence("e2", [0, 1], [0.3, 0.5])
        store.record_image_similarity("e1", "wrist", [0, 1], [30.0, 20.0], [0.9, 0.7])
        store.record_image_similarity("e2", "wrist", [0, 1], [28.0, 22.0], [0.8, 0.5])
        store.add_filmstrip_frame("e2", view="wrist", horizon_step=1, side="real",
                                  jpeg=_jpeg(30))
        store.add_filmstrip_frame("e2", view="wrist", horizon_step=1, side="world_model",
                                  jpeg=_jpeg(220))
        store.add_filmstrip_frame("e1", view="wrist", horizon_step=1, side="real",
                                  jpeg=_jpeg(120))
        for episode_id, *_ in EPISODES:
            store.complete_episode(episode_id)
        # Neither of these may enter the figures.
        store.start_episode("running", task="pick", policy="p1")
        store.record_outcome("running", "real", "failure")
        store.start_episode("stopped", task="pick", policy="p1")
        store.record_divergence("stopped", [0, 1], [9.0, 9.0])
        store.abort_episode("stopped", "e-stop <pressed>")
    return path


def test_report_figures_match_the_metrics(db):
    report = build_report(db)
    real = [e[3] for e in EPISODES]
    model = [e[4] for e in EPISODES]
    assert report["overall"]["agreement"] == am.summarize_agreement(real, model).to_dict()
    by_task = am.summarize_agreement_by([e[1] for e in EPISODES], real, model)
    assert list(report["per_task"]) == list(by_task) == [EVIL, "pick"]
    for task, summary in by_task.items():
        assert report["per_task"][task]["agreement"] == summary.to_dict()
    # Hand count: SS = e1,e5,e7; SF = e2; FS = e4,e8; FF = e3,e6 -> accuracy 5/8
    assert report["overall"]["agreement"]["confusion"]["counts"] == [[3, 1], [2, 2]]
    assert report["overall"]["agreement"]["accuracy"]["value"] == pytest.approx(5 / 8)
    assert report["episodes"] == {"total": 10, "complete": 8, "incomplete": 1, "aborted": 1, "unjudged": 0,
                                  "by_mode": {"shadow": {"total": 10, "complete": 8}}}
    assert report["incomplete_episode_ids"] == ["running"]
    assert report["aborted_episodes"][0]["reason"] == "e-stop <pressed>"


def test_policy_rates_and_ranking(db):
    overall = build_report(db)["overall"]
    # p1: real S,S,S = 1, model S,F,S = 2/3; p2: real 0, model 1/3; p3: real 1/2, model 1
    rates = {p["policy"]: (p["real_success_rate"]["value"], p["world_model_success_rate"]["value"])
             for p in overall["policies"]}
    assert rates == {"p1": (1.0, pytest.approx(2 / 3)), "p2": (0.0, pytest.approx(1 / 3)),
                     "p3": (0.5, 1.0)}
    ranking = overall["policy_ranking"]
    sim, real = [2 / 3, 1 / 3, 1.0], [1.0, 0.0, 0.5]
    assert ranking["pearson"] == am.pearson(sim, real).to_dict()
    assert ranking["spearman"] == am.spearman(sim, real).to_dict()
    # MMRV by hand: p1 vs p3 sim 2/3 < 1 but real 1 > .5 -> gap .5 for p1 and for p3;
    # p2 agrees with both -> (0.5 + 0 + 0.5) / 3
    assert ranking["mmrv"]["value"] == pytest.approx(1 / 3)
    assert ranking["pearson"]["ci95"] is None and "k = 3" in ranking["pearson"]["ci_reason"]


def test_divergence_and_similarity_use_complete_episodes_only(db):
    report = build_report(db)
    # step 0: (0.1 + 0.3) / 2; step 1: (0.3 + 0.5) / 2; the aborted episode's 9.0 is ignored
    divergence = report["divergence_vs_horizon"]
    assert [(d["horizon_step"], d["n"]) for d in divergence] == [(0, 2), (1, 2)]
    assert [d["mean"] for d in divergence] == [pytest.approx(0.2), pytest.approx(0.4)]
    wrist = report["image_similarity_vs_horizon"]["wrist"]
    assert [(r["psnr_mean"], r["ssim_mean"]) for r in wrist] == [
        (pytest.approx(29.0), pytest.approx(0.85)), (pytest.approx(21.0), pytest.approx(0.6))]
    assert [d["episode_id"] for d in report["disagreements"]] == ["e2", "e4", "e8"]
    assert [d["frames"] for d in report["disagreements"]] == [2, 0, 0]


def test_write_report_json_and_self_contained_escaped_html(db, tmp_path):
    html_path, json_path = write_report(db, tmp_path / "out")
    on_disk = json.loads(json_path.read_text())
    fresh = build_report(db)
    del on_disk["generated_at"]
    del fresh["generated_at"]
    assert on_disk == fresh

    page = html_path.read_text()
    assert page.count("<svg") == 4  # task bars, divergence, SSIM, policy scatter
    assert "<script" not in page and EVIL not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "e-stop &lt;pressed&gt;" in page
    assert "src=\"http" not in page and "href=" not in page
    # Filmstrip of the disagreeing e2 only, real and predicted; not agreeing e1's frame.
    assert base64.b64encode(_jpeg(30)).decode() in page
    assert base64.b64encode(_jpeg(220)).decode() in page
    assert base64.b64encode(_jpeg(120)).decode() not in page


def test_single_side_episodes_count_for_their_side_only(db, tmp_path):
    with EpisodeStore(db) as store:
        for episode_id, mode, side, policy, result in [("r1", "real", "real", "p1", F), ("r2", "real", "real", "p4", S),
                                                       ("w1", "world_model", "world_model", "p4", F)]:
            store.start_episode(episode_id, task="pick", policy=policy, mode=mode)
            store.record_outcome(episode_id, side, result)
            store.complete_episode(episode_id)
    report = build_report(db)
    assert report["episodes"]["by_mode"] == {"real": {"total": 2, "complete": 2}, "shadow": {"total": 10, "complete": 8},
                                             "world_model": {"total": 1, "complete": 1}}
    # Agreement still from the 8 shadow episodes alone; no single-side episode is a disagreement.
    real, model = [e[3] for e in EPISODES], [e[4] for e in EPISODES]
    assert report["overall"]["agreement"] == am.summarize_agreement(real, model).to_dict()
    assert [d["episode_id"] for d in report["disagreements"]] == ["e2", "e4", "e8"]
    policies = {p["policy"]: p for p in report["overall"]["policies"]}
    # p1: real S,S,S (shadow) + F (real mode) = 3/4, model 2/3 from shadow only.
    assert (policies["p1"]["n"], policies["p1"]["real_n"], policies["p1"]["world_model_n"]) == (4, 4, 3)
    assert policies["p1"]["real_success_rate"]["value"] == pytest.approx(3 / 4)
    assert policies["p1"]["world_model_success_rate"]["value"] == pytest.approx(2 / 3)
    # p4 ran in real and world_model mode only: a rate on each side, no paired episode needed.
    assert (policies["p4"]["real_success_rate"]["value"], policies["p4"]["world_model_success_rate"]["value"]) == (1.0, 0.0)
    assert report["overall"]["policy_ranking"]["k"] == 4
    summary = text_summary(report)
    assert "by mode: real 2 (2 complete), shadow 10 (8 complete), world_model 1 (1 complete)" in summary
    assert "success rate of p4: real 1.000 [0.21, 1.00] (n=1)  world model 0.000 [0.00, 0.79] (n=1)" in summary
    page = write_report(db, tmp_path / "out")[0].read_text()
    assert "by mode: real 2 (2 complete)" in page and "complete episodes with both outcomes" in page


def test_unjudged_episodes_are_counted_and_in_no_figure(db, tmp_path):
    with EpisodeStore(db) as store:
        for episode_id, mode, policy, real, model in [("u1", "shadow", "p1", S, U), ("u2", "shadow", "p2", F, U),
                                                      ("u3", "world_model", "p1", None, U)]:
            store.start_episode(episode_id, task="pick", policy=policy, mode=mode)
            for side, result in (("real", real), ("world_model", model)):
                if result is not None:
                    store.record_outcome(episode_id, side, result)
            store.complete_episode(episode_id)
    report = build_report(db)
    real, model = [e[3] for e in EPISODES] + [S, F], [e[4] for e in EPISODES] + [U, U]
    assert report["overall"]["agreement"] == am.summarize_agreement(real, model).to_dict()
    assert (report["overall"]["agreement"]["n"], report["overall"]["agreement"]["unjudged"]) == (8, 2)
    assert report["per_task"]["pick"]["agreement"]["unjudged"] == 2
    assert report["episodes"]["unjudged"] == 3 and report["unjudged_episode_ids"] == ["u1", "u2", "u3"]
    assert [d["episode_id"] for d in report["disagreements"]] == ["e2", "e4", "e8"]
    policies = {p["policy"]: p for p in report["overall"]["policies"]}
    # p1's real side gains u1's success (4/4 judged); its model side judged only e1, e2, e5 (2/3).
    assert (policies["p1"]["n"], policies["p1"]["real_n"], policies["p1"]["world_model_n"]) == (5, 4, 3)
    assert policies["p1"]["world_model_success_rate"]["value"] == pytest.approx(2 / 3)
    summary = text_summary(report)
    assert "episodes: 13 total, 11 complete, 1 incomplete, 1 aborted; unjudged (an outcome unknown, in no " \
           "figure): 3" in summary
    assert "overall (n=8, 2 unjudged): accuracy 0.625" in summary
    page = write_report(db, tmp_path / "out")[0].read_text()
    assert "<tr><th>unjudged (complete, an outcome unknown)</th><td>2</td></tr>" in page
    assert "unjudged (an outcome is unknown: no judge decided it): u1, u2, u3" in page


def test_a_model_without_a_judge_claims_no_agreement(tmp_path):
    path = tmp_path / "kinematic.db"
    with EpisodeStore(path) as store:
        for i, real in enumerate([S, F, F]):
            store.start_episode(f"e{i}", task="push", policy="scripted")
            store.record_outcome(f"e{i}", "real", real)
            store.record_outcome(f"e{i}", "world_model", U)
            store.complete_episode(f"e{i}")
    report = build_report(path)
    agreement = report["overall"]["agreement"]
    assert (agreement["n"], agreement["unjudged"], report["disagreements"]) == (0, 3, [])
    for name in ("accuracy", "kappa", "optimism", "pessimism"):
        assert agreement[name]["reason"] == "no judged episodes (3 unjudged: an outcome is unknown)", name
    assert report["overall"]["policies"][0]["world_model_n"] == 0
    summary = text_summary(report)
    assert "overall (n=0, 3 unjudged): accuracy n/a[1]  kappa n/a[1]" in summary
    assert "optimism P(model ok|real fail) n/a[1]" in summary


def test_one_sided_policies_are_not_ranked(tmp_path):
    path = tmp_path / "real_only.db"
    with EpisodeStore(path) as store:
        for i, policy in enumerate(["a", "a", "b"]):
            store.start_episode(f"e{i}", task="pick", policy=policy, mode="real")
            store.record_outcome(f"e{i}", "real", S if i else F)
            store.complete_episode(f"e{i}")
    report = build_report(path)
    assert report["overall"]["agreement"]["n"] == 0 and report["disagreements"] == []
    assert [p["real_success_rate"]["value"] for p in report["overall"]["policies"]] == [0.5, 1.0]
    assert report["overall"]["policies"][0]["world_model_success_rate"]["reason"] == "no episodes"
    assert report["overall"]["policy_ranking"]["k"] == 0
    page = write_report(path, tmp_path)[0].read_text()
    assert "success rate per policy" not in page  # no scatter without a model side


def test_undefined_figures_are_explained(tmp_path):
    path = tmp_path / "one.db"
    with EpisodeStore(path) as store:
        for i in range(2):
            store.start_episode(f"e{i}", task="pick", policy="only")
            store.record_outcome(f"e{i}", "real", "success")
            store.record_outcome(f"e{i}", "world_model", "success")
            store.complete_episode(f"e{i}")
    report = build_report(path)
    assert report["overall"]["agreement"]["kappa"]["value"] is None
    assert "at least 2 policies, got 1" in report["overall"]["policy_ranking"]["mmrv"]["reason"]
    summary = text_summary(report)
    assert "episodes: 2 total, 2 complete, 0 incomplete, 0 aborted" in summary
    assert "kappa n/a[" in summary and "all 2 episodes are 'success'" in summary
    page = write_report(path, tmp_path)[0].read_text()
    assert "undefined: MMRV needs at least 2 policies, got 1" in page


def test_empty_store_reports_undefined_figures(tmp_path):
    EpisodeStore(tmp_path / "empty.db").close()
    report = build_report(tmp_path / "empty.db")
    assert report["episodes"]["total"] == 0 and report["per_task"] == {}
    assert report["overall"]["agreement"]["accuracy"]["reason"] == "no episodes"
    assert "got 0" in report["overall"]["policy_ranking"]["pearson"]["reason"]
    page = write_report(tmp_path / "empty.db", tmp_path)[0].read_text()
    assert "no divergence recorded" in page and "<svg" not in page


def test_report_on_missing_store_fails_without_creating_it(tmp_path):
    with pytest.raises(EpisodeStoreError, match="no such episode store"):
        build_report(tmp_path / "nope.db")
    assert not (tmp_path / "nope.db").exists()
