"""The whole lab-test graph in separate processes, as `make demo` runs it, in each backend mode: shadow
(the twin as the robot, the switch in shadow mode, the learned world model, the scripted policy, the
comparator), real (the twin alone) and world_model (the world model alone); the outcomes the comparator
recorded are checked against the twin's and the model's own reports."""

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from gesim_ros.comparator.store import EpisodeStore
from gesim_ros.twin.controllers import make_controller


def _lab_run(tmp_path, command, *options):
    out = tmp_path / "run"
    run = subprocess.run([str(sys.prefix + "/bin/gesim-ros"), command, *options, "--out", str(out)],
                         capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    assert "HTML report:" in run.stdout
    assert (out / "report" / "agreement_report.html").is_file()
    reported = {r["episode_id"]: r for r in json.loads((out / "episodes.json").read_text())}
    return out, run.stdout, reported


def test_a_run_folder_is_never_reused(tmp_path):
    (tmp_path / "shadow.sqlite").write_bytes(b"")  # an earlier run's database
    run = subprocess.run([str(sys.prefix + "/bin/gesim-ros"), "shadow-run", "--out", str(tmp_path)],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 2 and "already holds a shadow run (shadow.sqlite)" in run.stderr, run.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["shadow.sqlite"]  # nothing started or written


def designed_outcome(task: str, seed: int, failure_rate: float) -> str:
    """The outcome the scripted plan of (task, seed) was designed to have at this failure knob."""
    return "success" if make_controller(task, seed, failure_rate).plan.expected_label == "success" else "failure"


@pytest.mark.slow
def test_shadow_run_records_both_outcomes_per_episode(tmp_path):
    out, stdout, reported = _lab_run(tmp_path, "shadow-run", "--episodes", "3", "--failure-rate", "0.3")
    assert "episode 3/3" in stdout
    with EpisodeStore(out / "shadow.sqlite", readonly=True) as store:
        episodes = store.episodes()
        assert len(episodes) == 3
        assert {e.task for e in episodes} == {"pick_place", "push", "unplug"}
        for e in episodes:
            assert e.status == "complete", e
            assert e.mode == "shadow" and e.policy == "scripted"
            # The twin acted out what the scripted plan was designed to do (here pick_place seed 0
            # collides, push and unplug seed 0 succeed) ...
            assert e.real_outcome == designed_outcome(e.task, e.seed, 0.3), e
            assert e.world_model_outcome in ("success", "failure"), e
            assert store.divergence(e.episode_id), e.episode_id
    # ... and the comparator recorded what the runner saw: the twin's ground truth ended each episode.
    assert {(r["task"], r["seed"], r["mode"], r["status"], r["side"], r["outcome"]) for r in reported.values()} == {
        (e.task, e.seed, "shadow", "ended", "real", e.real_outcome) for e in episodes}
    assert set(reported) == {e.episode_id for e in episodes}


@pytest.mark.slow
def test_real_mode_records_the_twins_outcome_alone(tmp_path):
    out, stdout, reported = _lab_run(tmp_path, "lab-run", "--mode", "real", "--episodes", "3")
    assert "episode 3/3" in stdout and "by mode: real 3 (3 complete)" in stdout
    with EpisodeStore(out / "real.sqlite", readonly=True) as store:
        episodes = store.episodes()
    assert {e.task for e in episodes} == {"pick_place", "push", "unplug"} and len(episodes) == 3
    for e in episodes:
        assert (e.status, e.mode, e.policy) == ("complete", "real", "scripted"), e
        assert e.real_outcome in ("success", "failure") and e.world_model_outcome is None, e
        # The runner's outcome is the twin's ground truth (side real): the comparator recorded the same.
        assert (reported[e.episode_id]["side"], reported[e.episode_id]["outcome"]) == ("real", e.real_outcome)


@pytest.mark.slow
def test_world_model_mode_records_the_models_outcome_alone(tmp_path):
    out, stdout, reported = _lab_run(tmp_path, "lab-run", "--mode", "world_model", "--episodes", "2",
                                     "--failure-rate", "0.5")
    assert "episode 2/2" in stdout and "by mode: world_model 2 (2 complete)" in stdout
    assert sorted(p.name for p in (out / "initial_observations").glob("*.npz")) == [
        "pick_place-00000.npz", "push-00000.npz"]
    with EpisodeStore(out / "world_model.sqlite", readonly=True) as store:
        episodes = store.episodes()
    assert [e.task for e in episodes] == ["pick_place", "push"]
    for e in episodes:
        assert (e.status, e.mode, e.policy) == ("complete", "world_model", "scripted"), e
        assert e.world_model_outcome in ("success", "failure") and e.real_outcome is None, e
        assert e.world_model_judge_success_prob is not None, e
        # The episode ended by itself: the model judged it after max_steps, before the runner's timeout.
        result = reported[e.episode_id]
        assert (result["side"], result["outcome"]) == ("world_model", e.world_model_outcome)
        assert "max_steps=240 reached" in result["reason"], result
        # The shipped model imagines what the scripted plan was designed to do (here: pick_place seed 0
        # collides, push seed 0 succeeds), from the start and the actions alone.
        assert e.world_model_outcome == designed_outcome(e.task, e.seed, 0.5), e


def _child_pid(parent: int, executable: str) -> int | None:
    """The pid of ``parent``'s child process running the console script ``executable``."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
            argv = (stat.parent / "cmdline").read_bytes().split(b"\0")
        except (OSError, IndexError, ValueError):
            continue  # the process ended meanwhile
        if ppid == parent and any(Path(a.decode(errors="replace")).name == executable for a in argv[:2]):
            return int(stat.parent.name)
    return None


def _started_episodes(database: Path) -> int:
    with EpisodeStore(database, readonly=True) as store:
        return len(store.episodes())


def _kill_during_episode(tmp_path, episodes: int, episode: int, executable: str) -> tuple[Path, int, str]:
    """Run `shadow-run --episodes N`, SIGKILL its ``executable`` process about 1 s into episode
    ``episode`` and let the run end on its own; returns the run folder, exit status and output."""
    out = tmp_path / "run"
    run = subprocess.Popen([str(sys.prefix + "/bin/gesim-ros"), "shadow-run", "--episodes", str(episodes),
                            "--out", str(out)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: queue.Queue = queue.Queue()
    reader = threading.Thread(target=lambda: [lines.put(line) for line in run.stdout], daemon=True)
    reader.start()
    seen = []
    try:
        deadline = time.monotonic() + 600
        while not any(line.startswith(f"episode {episode - 1}/{episodes}") for line in seen):
            assert time.monotonic() < deadline and run.poll() is None, "".join(seen)[-4000:]
            try:
                seen.append(lines.get(timeout=1.0))
            except queue.Empty:
                pass
        while not _started_episodes(out / "shadow.sqlite") >= episode:  # the episode is under way ...
            assert time.monotonic() < deadline and run.poll() is None, "".join(seen)[-4000:]
            time.sleep(0.2)
        time.sleep(1.0)  # ... and its commands reach the world model (episodes run 6-8 s)
        victim = _child_pid(run.pid, executable)
        assert victim is not None, f"no {executable} process under the run"
        os.kill(victim, signal.SIGKILL)
        killed = time.monotonic()
        run.wait(timeout=300)  # nothing hangs: the run ends on its own
        print(f"{executable} SIGKILL in episode {episode}/{episodes} -> shadow-run exited: "
              f"{time.monotonic() - killed:.1f} s")
    finally:
        if run.poll() is None:
            run.send_signal(signal.SIGINT)  # lab-run stops the processes it started
            run.wait(timeout=60)
    reader.join(timeout=60)  # it ends at the pipe's end: every line is in the queue
    while not lines.empty():
        seen.append(lines.get())
    return out, run.returncode, "".join(seen)


@pytest.mark.slow
def test_killing_the_world_model_mid_run_aborts_that_episode_and_the_run_ends_cleanly(tmp_path):
    """SIGKILL the world model during episode 2 of 3: the switch holds the robot and aborts episode 2,
    and the run stops before episode 3 with its report and exit status 1."""
    out, returncode, stdout = _kill_during_episode(tmp_path, 3, 2, "world_model")
    assert returncode == 1, stdout[-4000:]
    assert "world_model (exit code -9) exited; 1 of 3 episode(s) not run" in stdout, stdout[-4000:]
    assert "HTML report:" in stdout and (out / "report" / "agreement_report.html").is_file()
    with EpisodeStore(out / "shadow.sqlite", readonly=True) as store:
        first, second = sorted(store.episodes(), key=lambda e: e.episode_id)
    assert first.status == "complete", first
    assert second.status == "aborted", second
    assert "world model is gone" in second.abort_reason and "the robot was sent a hold" in second.abort_reason, second
    assert [r["status"] for r in json.loads((out / "episodes.json").read_text())] == ["ended", "aborted"]


@pytest.mark.slow
def test_killing_the_comparator_in_the_last_episode_ends_the_run_at_once_with_status_1(tmp_path):
    """SIGKILL the comparator during episode 2 of 2: lab-run notices it at once (no wait for the dead
    comparator), aborts that episode, keeps episode 1 complete and exits 1 with its report."""
    out, returncode, stdout = _kill_during_episode(tmp_path, 2, 2, "comparator")
    assert returncode == 1, stdout[-4000:]
    assert "comparator (exit code -9) exited; 0 of 2 episode(s) not run" in stdout, stdout[-4000:]
    assert "had not finished" not in stdout, stdout[-4000:]  # the 120 s wait for the comparator was not sat out
    assert "HTML report:" in stdout and (out / "report" / "agreement_report.html").is_file()
    with EpisodeStore(out / "shadow.sqlite", readonly=True) as store:
        first, second = sorted(store.episodes(), key=lambda e: e.episode_id)
    assert first.status == "complete" and first.real_outcome and first.world_model_outcome, first
    assert second.status == "incomplete", second  # nobody recorded its end: left as it was at the kill
    last = json.loads((out / "episodes.json").read_text())[-1]
    assert (last["status"], last["side"]) == ("aborted", "runner") and "comparator (exit code -9)" in last["reason"]
