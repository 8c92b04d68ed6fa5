"""The whole lab-test graph in separate processes, as `make demo` runs it: the twin as the robot, the
switch in shadow mode, the learned world model, the scripted policy, the comparator; the outcomes
the comparator recorded are checked against the twin's and the model's own reports."""

import subprocess
import sys

import pytest

from gesim_ros.episode_store import EpisodeStore


@pytest.mark.slow
def test_shadow_run_records_both_outcomes_per_episode(tmp_path):
    out = tmp_path / "run"
    run = subprocess.run([str(sys.prefix + "/bin/gesim-ros"), "shadow-run", "--episodes", "3", "--out", str(out)],
                         capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    assert "episode 3/3" in run.stdout and "HTML report:" in run.stdout
    with EpisodeStore(out / "shadow.sqlite", readonly=True) as store:
        episodes = store.episodes()
        assert len(episodes) == 3
        assert {e.task for e in episodes} == {"pick_place", "push", "unplug"}
        for e in episodes:
            assert e.status == "complete", e
            assert e.mode == "shadow" and e.policy == "scripted"
            assert e.real_outcome in ("success", "failure") and e.model_outcome in ("success", "failure")
            assert store.divergence(e.episode_id), e.episode_id
    assert (out / "report" / "agreement_report.html").is_file()
