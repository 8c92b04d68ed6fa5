"""Judges as plugins of their own (entry-point group gesim_ros.judges): loading and its errors, a lab's
judge with any backend, no judge (outcome unknown at once), the learned backend's own judge, the
measured joints at the episode start, and the `gesim_reward_http` judge against a real
`gesim-ros serve-wm --judge ...` over loopback."""

import importlib.metadata
import math
import re
import time
from pathlib import Path

import numpy as np
import pytest

from gesim_ros.cli import main as gesim_ros_main
from gesim_ros.world_model import gesim_wire as wire
from gesim_ros.world_model.api import (JUDGE_GROUP, Judge, JudgeResult, UnknownJudgeError, WorldModelBackendError,
                                       WorldModelInputError, available_judges, load_judge)
from gesim_ros.world_model.backends.kinematic import KinematicWorldModel
from gesim_ros.world_model.backends.learned import LearnedWorldModel
from gesim_ros.world_model.judges.gesim_reward_http import GeSimRewardHttpJudge
from gesim_ros.world_model.judges.reward_client import JudgeRewardClient
from gesim_ros.world_model.server import main as serve_wm_main, make_server
from gesim_ros.world_model.session import EpisodeStart, SessionConfigError, load_episode_judge
from test_world_model_session import (CONTRACT, DT, START_JOINTS, ConstantJudge, FakeWall, GatedKinematic,
                                      make_session, observation, predicted, ramp, submit,
                                      ticks_until_report, until)

THIS = "test_judges"


class BrightnessJudge(Judge):
    """A lab's judge: the head view's mean brightness times ``scale`` is both success and progress."""

    judge_views = ("head",)

    def __init__(self, *, scale: float = 1.0):
        self.scale = scale
        self.seen = []  # shapes of the frames it was handed

    def judge(self, frames, state, task):
        self.seen.append(frames.shape)
        score = np.clip(frames.reshape(len(frames), -1).mean(1) * self.scale, 0.0, 1.0).astype(np.float32)
        return JudgeResult(score, score)


class EveryView(BrightnessJudge):
    judge_views = ("head", "left_wrist")


@pytest.fixture
def wall():
    return FakeWall()


def eps(*pairs):
    return [importlib.metadata.EntryPoint(name, value, JUDGE_GROUP) for name, value in pairs]


# --------------------------------------------------------------------------- loading


def test_the_shipped_judges_are_installed():
    assert {"backend", "none", "gesim_reward_http"} <= set(available_judges())


def test_backend_is_the_backends_own_judge_or_none_and_none_is_none():
    learned, kinematic = ConstantJudge(), KinematicWorldModel()
    assert load_judge("backend", backend=learned) is learned
    assert load_judge("backend", backend=kinematic) is None
    assert load_judge("none", backend=learned) is None


def test_an_unknown_judge_lists_the_available_ones():
    with pytest.raises(UnknownJudgeError, match=r"^unknown judge 'nope'; available in entry-point group "
                                                r"'gesim_ros.judges': backend, gesim_reward_http, none"):
        load_judge("nope")


@pytest.mark.parametrize("name, config, message", [
    ("gesim_reward_http", {}, r"missing required key\(s\) \['url'\] for GeSimRewardHttpJudge"),
    ("gesim_reward_http", {"url": "http://h:1", "timeout": 1},
     r"unknown key\(s\) \['timeout'\] for GeSimRewardHttpJudge; expected keys among \['timeout_s', 'url'\]"),
    ("gesim_reward_http", {"url": "127.0.0.1:9000"}, r"url: '127.0.0.1:9000' is not an http\(s\)://host"),
    ("gesim_reward_http", {"url": "http://h:1", "timeout_s": 0}, "timeout_s: expected a positive number"),
    ("backend", {"url": "http://h:1"}, r"judge 'backend' takes no keys, got \['url'\]; configure the backend"),
    ("none", {"x": 1}, r"judge 'none' takes no keys"),
])
def test_a_bad_judge_config_is_named(name, config, message):
    with pytest.raises(WorldModelInputError, match=message):
        load_judge(name, config, backend=KinematicWorldModel())


def test_the_nodes_judge_config_must_be_a_json_object_naming_the_parameter():
    with pytest.raises(SessionConfigError, match=r"judge 'gesim_reward_http': judge_config: not valid JSON .*"
                                                 r"Fix: pass a JSON object"):
        load_episode_judge("gesim_reward_http", "{url: 1}", KinematicWorldModel())


def test_a_labs_judge_class_is_built_from_its_config():
    judge = load_judge("mine", {"scale": 2.0}, entry_points=eps(("mine", f"{THIS}:BrightnessJudge")))
    assert isinstance(judge, BrightnessJudge) and judge.scale == 2.0


def test_an_entry_point_that_is_no_judge_is_refused():
    with pytest.raises(TypeError, match=r"judge 'wm' \(.*KinematicWorldModel\) is .*not a Judge subclass"):
        load_judge("wm", entry_points=eps(("wm", "gesim_ros.world_model.backends.kinematic:KinematicWorldModel")))
    with pytest.raises(TypeError, match=r"judge 'f' \(.*:observation_factory\) returned Observation, not a Judge or None"):
        load_judge("f", entry_points=eps(("f", f"{THIS}:observation_factory")))


def observation_factory(config, backend):
    return observation()


# --------------------------------------------------------------------------- in a session


def test_a_labs_judge_judges_a_backend_that_has_none_from_its_head_view(wall):
    judge = BrightnessJudge()
    s = make_session(GatedKinematic(), wall, judge=judge, judge_threshold=0.3)
    try:
        assert s.sync(observation())[0]
        submit(s, ramp(3))
        s.end_episode("ep1", aborted=False)
        predicted(s, 3)
        wall.t += 0.3
        due, judged = ticks_until_report(s)
        assert judge.seen == [(3, 3, 1, 24, 32)]  # one step's frames, the head view only, at the model size
        assert len(judged) == 3
        report, = due.reports
        p = judged[-1].judge[0]
        assert 0.3 < p < 1 and report.outcome == "success" and report.success_probability == pytest.approx(p)
    finally:
        s.close()


def test_a_judge_of_views_the_backend_lacks_is_refused(wall):
    backend = GatedKinematic()
    backend.views = ("head",)
    with pytest.raises(SessionConfigError, match=r"judge EveryView reads view\(s\) \['left_wrist'\] that backend "
                                                 r"'test' does not predict"):
        make_session(backend, wall, judge=EveryView())


@pytest.mark.parametrize("commands", [0, 2])
def test_without_a_judge_the_outcome_is_unknown_as_soon_as_the_episode_ends(wall, commands):
    """Judge 'none' with a backend that is a Judge: its judge is not asked, and the outcome is there in
    the first tick that shows the episode's last prediction (nothing waits)."""
    backend = ConstantJudge(0.9)
    s = make_session(backend, wall, judge="none")
    try:
        assert s.sync(observation())[0]
        if commands:
            submit(s, ramp(commands))
            predicted(s, commands)
            wall.t += DT * commands
        s.end_episode("ep1", aborted=False)
        due, judged = ticks_until_report(s, timeout=5.0)
        report, = due.reports
        assert (report.outcome, report.label) == ("unknown", "") and math.isnan(report.success_probability)
        assert f"outcome unknown after {commands} steps: no judge" in report.reason
        assert judged == []
    finally:
        s.close()


def learned_observation():
    obs = observation(task="pick_place")
    return type(obs)(obs.episode_id, obs.task, "pick_place", obs.seed, obs.images, obs.joints)


def test_the_learned_backends_own_judge_gives_the_verdicts_of_the_backend_run_directly(wall):
    """Judge 'backend' with backend learned: per-step probabilities and the outcome are the model's
    own judgement of the same episode started the same way (EpisodeStart) and stepped directly."""
    obs, targets = learned_observation(), ramp(6)
    s = make_session(LearnedWorldModel(chunk_size=3), wall, judge="backend", model_image_size=None)
    try:
        assert s.sync(obs)[0]
        submit(s, targets[:3])
        submit(s, targets[3:])
        s.end_episode("ep1", aborted=False)
        predicted(s, 6)
        wall.t += 0.6
        due, judged = ticks_until_report(s)
    finally:
        s.close()
    direct = LearnedWorldModel(chunk_size=3)
    start = EpisodeStart(direct, CONTRACT)
    start.start(obs, start.first_frame(obs))
    rows = targets[:, [ARM_INDEX[n] for n in start.layout.names]]
    probs = [direct.judge(direct.step(rows[i:i + 3]).frames, None, obs.task_text).success_prob for i in (0, 3)]
    np.testing.assert_allclose([j.judge[0] for j in judged], np.concatenate(probs), rtol=1e-6)
    report, = due.reports
    threshold_outcome = "success" if probs[-1][-1] >= 0.5 else "failure"
    assert report.outcome == threshold_outcome and report.success_probability == pytest.approx(probs[-1][-1])


ARM_INDEX = {n: i for i, n in enumerate(CONTRACT.arm_joint_names)}


class StateTaker(GatedKinematic):
    """Records the episode state it is given; its gripper state is in mm."""

    takes_episode_state = True
    gripper_state_units = "mm"

    def __init__(self):
        super().__init__()
        self.states = []

    def set_episode_state(self, state):
        self.states.append(np.array(state))


def test_the_measured_joints_start_the_episode_in_the_backends_layout_and_units(wall):
    backend = StateTaker()
    s = make_session(backend, wall)
    try:
        assert s.sync(observation())[0]
    finally:
        s.close()
    state, = backend.states
    names = EpisodeStart(backend, CONTRACT).layout.names
    expected = np.array([START_JOINTS[n] for n in names], np.float32)
    left_gripper = names.index("idx31_gripper_l_joint1")
    assert left_gripper in (7, 15)  # GE-Sim's gripper columns
    expected[left_gripper] *= 1000.0  # 0.04 m -> 40 mm
    np.testing.assert_allclose(state, expected, rtol=1e-6)


def test_a_backend_that_takes_no_episode_state_is_not_given_one(wall):
    backend = GatedKinematic()
    s = make_session(backend, wall)
    try:
        assert s.sync(observation())[0]  # the default set_episode_state would raise
    finally:
        s.close()
    with pytest.raises(WorldModelInputError, match="takes no episode state"):
        backend.set_episode_state(np.zeros(16))


# --------------------------------------------------------------------------- GE-Sim's reward interface


def head_frames(steps=3):
    """Smooth camera-like images (JPEG keeps them), brighter each step."""
    y, x = np.mgrid[0:24, 0:32]
    base = np.stack([4 * x, 6 * y, 2 * (x + y)], axis=-1)
    return np.stack([base + 20 * t for t in range(steps)]).astype(np.uint8)


def test_any_judge_is_a_gesim_reward_client():
    result = JudgeRewardClient(BrightnessJudge()).evaluate(head_frames(), "stack")
    expected = head_frames().reshape(3, -1).mean(1) / 255.0
    np.testing.assert_allclose(result.success, expected, rtol=1e-5)
    assert result.success.dtype == np.float32 and result.progress.shape == (3,)
    with pytest.raises(WorldModelInputError, match=r"reads views \['head', 'left_wrist'\]; GE-Sim's reward "
                                                   "interface carries only the head view"):
        JudgeRewardClient(EveryView())
    with pytest.raises(WorldModelInputError, match=r"head_frames: float64 array of shape \(3, 24, 32, 3\)"):
        JudgeRewardClient(BrightnessJudge()).evaluate(head_frames() / 255.0, "stack")


def test_the_evaluate_wire_format_round_trips_through_jpeg():
    frames = head_frames()
    task, decoded = wire.decode_evaluate_request(wire.encode_evaluate_request(frames, "stack the blocks"))
    assert task == "stack the blocks" and decoded.dtype == np.uint8 and decoded.shape == frames.shape
    assert np.abs(decoded.astype(int) - frames).mean() < 3  # what JPEG at quality 95 loses
    with pytest.raises(wire.WireFormatError, match=r"expected \(1,\), one value per frame sent"):
        wire.decode_evaluate_response(wire.encode_evaluate_response([0.5, 0.5], [0.1, 0.2]), 1)


@pytest.fixture
def lab_judge_path(tmp_path):
    """A lab's judge installed the way a pip package installs it: an entry point in a dist-info on the path."""
    dist = tmp_path / "lab_judges-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: lab-judges\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(f"[{JUDGE_GROUP}]\nbrightness = {THIS}:BrightnessJudge\n")
    return tmp_path


def test_the_http_judge_gets_a_served_judges_verdicts_over_loopback(procs, lab_judge_path):
    """`gesim-ros serve-wm --judge brightness` (a lab's judge from its entry point) serves /evaluate; the
    gesim_reward_http judge sends the head view of (T, 3, V, H, W) frames there and gets the lab's
    verdicts of what arrived (the JPEG of each head frame)."""
    test_dir = Path(__file__).parent
    server = procs.start("gesim-ros", "serve-wm", "--backend", "kinematic", "--port", "0", "--judge", "brightness",
                         "--judge-config", '{"scale": 2.0}', env={"PYTHONPATH": f"{lab_judge_path}:{test_dir}"})
    found = None
    deadline = time.monotonic() + 60
    while found is None and server.running and time.monotonic() < deadline:
        found = re.search(r"listening on http://127\.0\.0\.1:(\d+) ", server.log())
        time.sleep(0.1)
    assert found, server.log()
    until(lambda: "judge brightness at /evaluate" in server.log(), timeout=10)
    assert "judge brightness at /evaluate" in server.log()
    url = f"http://127.0.0.1:{found.group(1)}"
    judge = load_judge("gesim_reward_http", {"url": url, "timeout_s": 30})
    heads = head_frames()
    frames = np.zeros((3, 3, 3, 24, 32), np.float32)  # the wrist views are black: only the head may count
    frames[:, :, 0] = heads.transpose(0, 3, 1, 2) / 255.0
    verdict = judge.judge(frames, None, "stack the blocks")
    _, arrived = wire.decode_evaluate_request(wire.encode_evaluate_request(heads, "stack the blocks"))
    expected = BrightnessJudge(scale=2.0).judge(arrived.transpose(0, 3, 1, 2)[:, :, None] / np.float32(255.0),
                                                None, "").success_prob
    np.testing.assert_allclose(verdict.success_prob, expected, rtol=1e-6)
    np.testing.assert_allclose(verdict.progress, expected, rtol=1e-6)
    assert verdict.success_prob.dtype == np.float32 and len(np.unique(verdict.success_prob)) == 3


def test_the_http_judge_names_the_url_and_the_fix():
    server = make_server(KinematicWorldModel(), "127.0.0.1", 0).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        with pytest.raises(WorldModelBackendError, match=rf"POST {url}/evaluate answered HTTP 404: this serve-wm "
                                                         r"has no judge; start it with --judge NAME"):
            GeSimRewardHttpJudge(url=url).judge(np.zeros((1, 3, 3, 8, 8), np.float32), None, "stack")
    finally:
        server.stop()
    with pytest.raises(WorldModelBackendError, match=rf"no reply from {url}/evaluate within timeout_s=5 .*Fix: "
                                                     "start the reward server there"):
        GeSimRewardHttpJudge(url=url, timeout_s=5).judge(np.zeros((1, 3, 3, 8, 8), np.float32), None, "stack")


@pytest.mark.parametrize("args, message", [
    (["--judge", "nope"], "--judge nope: unknown judge 'nope'; available in entry-point group 'gesim_ros.judges'"),
    (["--judge", "gesim_reward_http", "--judge-config", "{url: 1}"], "--judge-config: not valid JSON"),
    (["--judge", "gesim_reward_http"], "missing required key(s) ['url']"),
])
def test_serve_wm_refuses_a_bad_judge(capsys, args, message):
    assert serve_wm_main(["--backend", "kinematic", "--port", "0", *args]) == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("args, message", [
    (["--judge", "nope"], "--judge nope: no judge of that name is installed (entry-point group gesim_ros.judges); "
                          "use one of backend, gesim_reward_http, none"),
    (["--judge", "gesim_reward_http", "--judge-config", "{url: 1}"], "--judge-config: not valid JSON"),
    (["--judge", "gesim_reward_http"], "--judge-config: judge gesim_reward_http needs key(s) ['url']"),
    (["--judge", "gesim_reward_http", "--judge-config", '{"url": "http://h:1", "timeout": 1}'],
     "--judge-config: unknown key(s) ['timeout'] for judge gesim_reward_http; it takes ['timeout_s', 'url']"),
])
def test_lab_run_refuses_a_bad_judge_before_anything_starts(tmp_path, capsys, args, message):
    out = tmp_path / "run"
    assert gesim_ros_main(["lab-run", "--mode", "world_model", "--world-model", "kinematic", *args,
                           "--out", str(out)]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.startswith("gesim-ros lab-run: ") and message in captured.err
    assert not out.exists()
