"""`gesim-ros replay-shadow`: recorded episodes replayed through the shadow graph (replay node, backend
switch, world model, comparator in separate processes over DDS) give the live shadow run's
per-episode outcomes and agreement; a LeRobot export of the same recordings replays with its
metadata's labels; bad input is refused with one line, exit status 2 and no run folder."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from gesim_ros.comparator.store import EpisodeStore
from gesim_ros.contract.contract import DEFAULT_PROFILE, load_contract
from gesim_ros.episodes.recording import RecordingError, episode_record

CLI = [sys.executable, "-m", "gesim_ros.cli"]


def _gesim(*args, timeout=900):
    return subprocess.run([*CLI, *map(str, args)], capture_output=True, text=True, timeout=timeout)


def _rows(database: Path) -> dict:
    with EpisodeStore(database, readonly=True) as store:
        return {e.episode_id: e for e in store.episodes()}


def _outcomes(rows: dict) -> dict:
    return {i: (e.status, e.real_outcome, e.world_model_outcome, e.agrees) for i, e in rows.items()}


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    """Two live shadow episodes (pick_place, push) on the twin with the learned world model (the defaults)."""
    out = tmp_path_factory.mktemp("live") / "run"
    done = _gesim("shadow-run", "--episodes", 2, "--out", out)
    assert done.returncode == 0, done.stdout + done.stderr
    rows = {i: e for i, e in _rows(out / "shadow.sqlite").items() if e.status == "complete"}
    assert rows, f"no live episode completed:\n{done.stdout}"
    return out, rows


@pytest.fixture(scope="module")
def acted(live, tmp_path_factory):
    """The live episodes whose policy acted (on a loaded machine one may send no command), in a shadow
    run's layout <episode>/{real,world_model}: what the LeRobot export and the operator replay take."""
    run, rows = live
    recordings = tmp_path_factory.mktemp("acted")
    for episode_id in rows:
        try:
            episode_record(run / "shadow_recordings" / episode_id / "real", load_contract(DEFAULT_PROFILE))
        except RecordingError:  # no commands recorded
            continue
        (recordings / episode_id).symlink_to(run / "shadow_recordings" / episode_id)
    rows = {i: e for i, e in rows.items() if (recordings / i).exists()}
    assert rows, "no live episode has commands to replay"
    return recordings, rows


@pytest.mark.slow
def test_replay_of_recordings_reproduces_the_live_run(live, tmp_path):
    run, rows = live
    out = tmp_path / "replay"
    done = _gesim("replay-shadow", run, "--out", out)
    assert done.returncode == 0, done.stdout + done.stderr
    replayed = _rows(out / "replay_shadow.sqlite")
    # A live episode whose policy sent no command (seen on a loaded machine) has nothing to replay: it is
    # left out by name, and every other one replays as it went live.
    left_out = dict(re.findall(r"^replay \d+/\d+ (\S+) .*?: left out \((.*)\) \|", done.stdout, re.M))
    assert all("needs recorded sensor messages and commands" in why for why in left_out.values()), left_out
    expected = {i: o for i, o in _outcomes(rows).items() if i not in left_out}
    assert expected and _outcomes(replayed) == expected, done.stdout
    assert all(e.mode == "shadow" for e in replayed.values())
    for i, e in ((i, e) for i, e in rows.items() if i in replayed):  # the same commands from the same start:
        # the same judged rollout (seen: to 1e-5)
        assert replayed[i].world_model_judge_success_prob == pytest.approx(e.world_model_judge_success_prob,
                                                                           abs=1e-3), i
    assert len(re.findall(r"^replay \d+/\d+ ", done.stdout, re.M)) == len(rows), done.stdout  # a line each
    report = json.loads((out / "report" / "agreement_report.json").read_text())
    assert report, "the report's figures are empty"
    # The switch was never armed: no command was forwarded to the robot's namespace.
    (switch_log,) = (out / "logs").glob("backend_switch-*.log")
    assert "not armed" in switch_log.read_text()


@pytest.mark.slow
def test_replay_of_a_lerobot_export_takes_the_labels_from_its_metadata(acted, tmp_path):
    recordings, rows = acted
    dataset = tmp_path / "lerobot"
    exported = _gesim("export-lerobot", recordings, "--out", dataset, "--image-size", "100x160")
    assert exported.returncode == 0, exported.stderr
    out = tmp_path / "replay"
    done = _gesim("replay-shadow", dataset, "--out", out)
    assert done.returncode == 0, done.stdout + done.stderr
    replayed = _rows(out / "replay_shadow.sqlite")
    assert {i: replayed[i].real_outcome for i in rows} == {i: e.real_outcome for i, e in rows.items()}
    assert all(e.status == "complete" and e.world_model_outcome for e in replayed.values()), done.stdout


@pytest.mark.slow
def test_an_operator_labels_each_replayed_episode_at_the_prompt(acted, tmp_path):
    run, rows = acted
    answers = ["y" if i % 2 == 0 else "n" for i in range(len(rows))]
    out = tmp_path / "replay"
    done = subprocess.run([*CLI, "replay-shadow", str(run), "--out", str(out), "--label-outcomes"],
                          input="".join(f"{a}\n" for a in answers), capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("Success on the robot? [y/n]") == len(rows), done.stdout
    replayed = _rows(out / "replay_shadow.sqlite")
    expected = {i: "success" if a == "y" else "failure" for i, a in zip(sorted(rows), answers)}
    assert {i: e.real_outcome for i, e in replayed.items()} == expected, done.stdout
    assert {i: e.world_model_outcome for i, e in replayed.items()} == {i: e.world_model_outcome
                                                                       for i, e in rows.items()}


def _refused(tmp_path, *args) -> str:
    out = tmp_path / "never"
    done = _gesim("replay-shadow", *args, "--out", out, timeout=120)
    assert done.returncode == 2, done.stdout + done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert not out.exists()
    return done.stderr


def test_a_missing_dataset_is_refused(tmp_path):
    assert "no such dataset" in _refused(tmp_path, tmp_path / "nowhere")


def test_a_folder_without_episodes_is_refused(tmp_path):
    (tmp_path / "empty").mkdir()
    assert "no episodes in it" in _refused(tmp_path, tmp_path / "empty")


def test_a_dataset_without_the_needed_features_is_refused(tmp_path):
    dataset = tmp_path / "lerobot"
    (dataset / "meta").mkdir(parents=True)
    (dataset / "meta" / "info.json").write_text(json.dumps(
        {"codebase_version": "v3.0", "fps": 30, "features": {"observation.state": {"dtype": "float32",
                                                                                 "shape": [3]}}}))
    assert "'observation.state' names no dimensions" in _refused(tmp_path, dataset, "--mapping", "gesim_ros")


def test_a_labels_csv_without_its_header_is_refused(tmp_path):
    (tmp_path / "episodes").mkdir()
    (tmp_path / "labels.csv").write_text("name,outcome\na,success\n")
    assert "episode_id,label" in _refused(tmp_path, tmp_path / "episodes", "--labels", tmp_path / "labels.csv")
