"""GE-Sim-V2's own clients against `gesim-ros serve-wm --backend learned`: their examples/replay.py on
their demo episode, and their WorldModelEnv closed loop (forward-kinematics bands from the actions),
with the dashboard's /api/status compared field by field with their own server's. Their code (a test
peer, never copied here) comes from ../shared/gesim-v2 through gesim_ros.tools.gesim_v2_peer and runs in
processes of its own, with the project's Python and their pinned extra packages."""

import json
import re
import time
from pathlib import Path

import cv2
import numpy as np
import pytest

from gesim_ros.tools.gesim_v2_peer import GesimV2, GesimV2Unavailable, get_json, prepare
from shared_peers import peer_missing

pytestmark = pytest.mark.slow

EPISODE = "assets/demo_000"  # in their repository: 456 actions, views head/left/right 384x512, G1 robot
VIEWS = ("head", "left", "right")


@pytest.fixture(scope="module")
def peer() -> GesimV2:
    """Their repository, unpacked (idempotent) with its extra packages beside it in deps/."""
    try:
        return prepare()
    except GesimV2Unavailable as exc:
        peer_missing(str(exc))


@pytest.fixture(scope="module")
def gesim_v2(peer) -> Path:
    return peer.repo


def wait_for_port(log, what: str, timeout: float = 180.0) -> int:
    """The port of the 'listening on http://127.0.0.1:PORT' line of a running server's log."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = re.search(r"listening on http://127\.0\.0\.1:(\d+)", log())
        if found:
            return int(found.group(1))
        time.sleep(0.2)
    raise AssertionError(f"{what} did not say where it listens within {timeout:g} s:\n{log()}")


def start_serve_wm(procs) -> str:
    server = procs.start("gesim-ros", "serve-wm", "--backend", "learned", "--port", "0")
    return f"http://127.0.0.1:{wait_for_port(server.log, 'gesim-ros serve-wm')}"


def get_status(url: str) -> dict:
    status = get_json(url, "/api/status", timeout=10)
    assert status is not None, f"{url}/api/status did not answer"
    return status


def recorded_views(repo: Path) -> list[np.ndarray]:
    """The episode's first frame as recorded, one BGR image per view (head, left, right)."""
    return [cv2.imread(str(repo / EPISODE / f"cur_{view}.png")).astype(np.float32) for view in VIEWS]


def test_their_replay_of_the_demo_episode_completes(peer, gesim_v2, procs, tmp_path):
    """examples/replay.py: 90 of the episode's actions (3 chunks of 25 and one of 15; the whole episode
    buffers 456 float frames of 3x384x512 twice over in their save_video, about 13 GB)."""
    url = start_serve_wm(procs)
    out = tmp_path / "replay"
    stdout = peer.run(["examples/replay.py", "--server", url, "--episode", EPISODE, "--output-dir", str(out),
                       "--max-frames", "90"])
    assert "[replay] frames 75-90" in stdout and "[replay] done" in stdout, stdout

    metrics = json.loads((out / "metrics.json").read_text())
    task = (gesim_v2 / EPISODE / "task.txt").read_text().strip()
    assert metrics["frames"] == 90 and metrics["task"] == task, metrics

    state = np.load(out / "state.npy")  # the learned model's joints, GE-Sim's 16-D layout
    assert state.shape == (90, 16) and state.dtype == np.float32 and np.isfinite(state).all()
    arms, grippers = [d for d in range(16) if d not in (7, 15)], [7, 15]
    assert np.abs(state[:, arms]).max() < 2 * np.pi and state.std(axis=0).max() > 0  # joint angles, and they move
    # grippers in GE-Sim's units, an aperture in mm (their demo's state: 0.2..118), not the model's metres
    assert -5 < state[:, grippers].min() and state[:, grippers].max() < 130 and state[:, grippers].max() > 1

    video = cv2.VideoCapture(str(out / "video.mp4"))
    frames = []
    while len(frames) < 200:  # bounded: 90 are expected
        ok, frame = video.read()
        if not ok:
            break
        frames.append(frame.astype(np.float32))
    video.release()
    assert len(frames) == 90 and frames[0].shape == (384, 3 * 512, 3)
    views = recorded_views(gesim_v2)
    for frame in (frames[0], frames[-1]):
        for i in range(3):  # each predicted view shows its own camera's scene, in GE-Sim's view order
            errors = [float(np.abs(frame[:, 512 * i:512 * (i + 1)] - view).mean()) for view in views]
            assert errors[i] < 25 and errors[i] < min(e for j, e in enumerate(errors) if j != i) / 2, (i, errors)


CLOSED_LOOP = """
import json, sys, numpy as np, requests
from gesim import EpisodeBundle, WorldModelEnv
url = sys.argv[1]
bundle = EpisodeBundle.load("assets/demo_000")
report = {"steps": []}
with WorldModelEnv(url) as env:  # compress_actions: a 50-action chunk is one model chunk of 25
    obs = env.reset(bundle, conditioning="action")  # bands rendered from the actions by their FK
    report["first_obs"] = {k: list(v.shape) for k, v in obs.images.items()}
    for chunk in (bundle.actions[0:50], bundle.actions[50:100], bundle.actions[100:150], bundle.actions[150:160]):
        obs, reward, state, info = env.step(chunk)
        report["steps"].append({
            "frames": list(info.frames.shape), "frames_range": [float(info.frames.min()), float(info.frames.max())],
            "state": None if state is None else list(state.shape),
            "state_finite": bool(state is None or np.isfinite(state).all()),
            "obs_images": {k: [list(v.shape), str(v.dtype)] for k, v in obs.images.items()},
            "obs_state": [float(x) for x in obs.state], "reward": reward})
    report["status"] = requests.get(url + "/api/status", timeout=10).json()
    report["all_frames"] = list(env.frames.shape)
print("REPORT " + json.dumps(report))
"""


def closed_loop(peer: GesimV2, url: str) -> dict:
    stdout = peer.run(["-c", CLOSED_LOOP, url])
    return json.loads(stdout.split("REPORT ", 1)[1])


def test_their_closed_loop_env_steps_and_the_dashboard_matches_theirs(peer, gesim_v2, procs, tmp_path):
    url = start_serve_wm(procs)
    ours = closed_loop(peer, url)
    assert ours["first_obs"] == {view: [384, 512, 3] for view in ("head", "left_wrist", "right_wrist")}
    assert [s["frames"] for s in ours["steps"]] == [[25, 3, 3, 384, 512]] * 3 + [[10, 3, 3, 384, 512]]
    for step in ours["steps"]:
        assert step["state"] == [step["frames"][0], 16] and step["state_finite"], step
        assert 0 <= step["frames_range"][0] < step["frames_range"][1] <= 1, step
        assert step["obs_images"] == {v: [[384, 512, 3], "uint8"] for v in ("head", "left_wrist", "right_wrist")}
        assert len(step["obs_state"]) == 16 and np.isfinite(step["obs_state"]).all()
    assert ours["all_frames"] == [85, 3, 3, 384, 512]
    # while their client's session is open, the dashboard saw it; after it closed, idle
    status = ours["status"]
    assert (status["phase"], status["step_count"], status["frames_generated"]) == ("ready", 4, 85), status
    assert status["model"] == "learned" and status["has_preview"] and len(status["state"]) == 16
    assert status["task"] == (gesim_v2 / EPISODE / "task.txt").read_text().strip()
    assert get_status(url)["phase"] == "idle"

    # the same loop against GE-Sim-V2's own server: the same /api/status fields, of the same kinds
    with peer.server(tmp_path / "gesim-v2") as their_server:
        theirs = closed_loop(peer, their_server.url)["status"]
    assert set(status) == set(theirs), (sorted(status), sorted(theirs))
    for key in theirs:
        assert type(status[key]) is type(theirs[key]) or {type(status[key]), type(theirs[key])} == {int, float}, key
    for key in ("phase", "task", "step_count", "frames_generated", "has_preview"):  # chunk_size: the model's
        assert status[key] == theirs[key], key
