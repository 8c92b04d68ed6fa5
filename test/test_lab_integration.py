"""The whole lab-test graph in separate processes, as `make demo` runs it, in each backend mode: shadow
(the twin as the robot, the switch in shadow mode, the learned world model, the scripted policy, the
comparator), real (the twin alone) and world_model (the world model alone); the outcomes the comparator
recorded are checked against the twin's and the model's own reports."""

import json
import subprocess
import sys

import pytest

from gesim_ros.episode_store import EpisodeStore


def _lab_run(tmp_path, command, *options):
    out = tmp_path / "run"
    run = subprocess.run([str(sys.prefix + "/bin/gesim-ros"), command, *options, "--out", str(out)],
                         capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    assert "HTML report:" in run.stdout
    assert (out / "report" / "agreement_report.html").is_file()
    reported = {r["episode_id"]: r for r in json.loads((out / "episodes.json").read_text())}
    return out, run.stdout, reported


@pytest.mark.slow
def test_shadow_run_records_both_outcomes_per_episode(tmp_path):
    out, stdout, _ = _lab_run(tmp_path, "shadow-run", "--episodes", "3")
    assert "episode 3/3" in stdout
    with EpisodeStore(out / "shadow.sqlite", readonly=True) as store:
        episodes = store.episodes()
        assert len(episodes) == 3
        assert {e.task for e in episodes} == {"pick_place", "push", "unplug"}
        for e in episodes:
            assert e.status == "complete", e
            assert e.mode == "shadow" and e.policy == "scripted"
            assert e.real_outcome in ("success", "failure") and e.model_outcome in ("success", "failure")
            assert store.divergence(e.episode_id), e.episode_id


@pytest.mark.slow
def test_real_mode_records_the_twins_outcome_alone(tmp_path):
    out, stdout, reported = _lab_run(tmp_path, "lab-run", "--mode", "real", "--episodes", "3")
    assert "episode 3/3" in stdout and "by mode: real 3 (3 complete)" in stdout
    with EpisodeStore(out / "real.sqlite", readonly=True) as store:
        episodes = store.episodes()
    assert {e.task for e in episodes} == {"pick_place", "push", "unplug"} and len(episodes) == 3
    for e in episodes:
        assert (e.status, e.mode, e.policy) == ("complete", "real", "scripted"), e
        assert e.real_outcome in ("success", "failure") and e.model_outcome is None, e
        # The runner's outcome is the twin's ground truth (side real): the comparator recorded the same.
        assert (reported[e.episode_id]["side"], reported[e.episode_id]["outcome"]) == ("real", e.real_outcome)


@pytest.mark.slow
def test_world_model_mode_records_the_models_outcome_alone(tmp_path):
    out, stdout, reported = _lab_run(tmp_path, "lab-run", "--mode", "world_model", "--episodes", "2")
    assert "episode 2/2" in stdout and "by mode: world_model 2 (2 complete)" in stdout
    assert sorted(p.name for p in (out / "initial_observations").glob("*.npz")) == [
        "pick_place-00000.npz", "push-00000.npz"]
    with EpisodeStore(out / "world_model.sqlite", readonly=True) as store:
        episodes = store.episodes()
    assert [e.task for e in episodes] == ["pick_place", "push"]
    for e in episodes:
        assert (e.status, e.mode, e.policy) == ("complete", "world_model", "scripted"), e
        assert e.model_outcome in ("success", "failure") and e.real_outcome is None, e
        assert e.model_judge_success_prob is not None, e
        # The episode ended by itself: the model judged it after max_steps, before the runner's timeout.
        result = reported[e.episode_id]
        assert (result["side"], result["outcome"]) == ("world_model", e.model_outcome)
        assert "max_steps=240 reached" in result["reason"], result
