"""`gesim-ros record-training`, the recipe of the shipped model's data: it records labelled twin episodes,
continues an interrupted collection, and refuses bad options before recording anything."""

import subprocess

import pytest

from gesim_ros.episodes.data import SCENE_STATE_NAMES, EpisodeRecord
from gesim_ros.ros.process_harness import executable_path


def record_training(*options: str) -> subprocess.CompletedProcess:
    return subprocess.run([executable_path("gesim-ros"), "record-training", *options], capture_output=True,
                          text=True, timeout=300)


def test_records_labelled_episodes_and_continues_where_it_stopped(tmp_path):
    options = ["--tasks", "push", "--episodes-per-task", "2", "--failure-rate", "0", "--workers", "1",
               "--out", str(tmp_path)]
    first = record_training(*options)
    assert first.returncode == 0, first.stderr
    files = sorted(tmp_path.glob("*.npz"))
    assert [f.name for f in files] == ["push-00000.npz", "push-00001.npz"]
    records = [EpisodeRecord.load_npz(f) for f in files]
    assert [(r.task, r.label) for r in records] == [("push", "success")] * 2  # failure-free plans succeed
    assert all(f.shape[1:] == (100, 160, 3) for r in records for f in r.frames.values())  # the default size
    assert all(r.scene_state.shape == (r.steps + 1, len(SCENE_STATE_NAMES)) and r.extra["interaction"]["recipe"] == "scripted"
               for r in records)

    again = record_training(*options)
    assert again.returncode == 0, again.stderr
    assert "2 of 2 episodes already in" in again.stdout and "recording 0" in again.stdout


@pytest.mark.parametrize("options, expected", [
    (["--failure-rate", "1.5"], "--failure-rate 1.5"),
    (["--episodes-per-task", "0"], "--episodes-per-task 0"),
    (["--workers", "0"], "--workers 0"),
])
def test_bad_options_are_refused_before_anything_is_recorded(options, expected, tmp_path):
    out = tmp_path / "records"
    run = record_training(*options, "--out", str(out))
    assert run.returncode == 2 and "Traceback" not in run.stderr, run.stderr
    assert run.stderr.startswith(f"gesim-ros record-training: {expected}"), run.stderr
    assert not out.exists()
