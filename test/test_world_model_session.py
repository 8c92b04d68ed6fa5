"""The world-model node's episode and stepping logic, without ROS: timeline, commands, failures, judge."""

import math
import threading
import time

import numpy as np
import pytest

from gesim_ros.contract.command_validation import CommandRejected
from gesim_ros.contract.contract import load_contract, parse_contract
from gesim_ros.episodes.data import EpisodeRecord
from gesim_ros.world_model.backends.kinematic import KinematicWorldModel
from gesim_ros.world_model.api import (Judge, JudgeResult, StepResult, UnknownWorldModelError, WorldModel,
                                       WorldModelBackendError)
from gesim_ros.world_model.command_mapping import CommandMapper, gesim_layout
from gesim_ros.world_model.initial_observation import find_initial_observation, observation_from_record
from gesim_ros.world_model.session import (
    Observation,
    SessionConfigError,
    SessionSettings,
    WorldModelSession,
    load_backend,
    load_episode_judge,
)

CONTRACT = load_contract()
VIEW_KEYS = ("head_color", "hand_left_color", "hand_right_color")
DT = 0.1
RATES = {"joint_states": 10.0, "head_color": 10.0, "hand_left_color": 10.0, "hand_right_color": 10.0}
OUT_SIZES = {"head_color": (32, 20), "hand_left_color": (40, 33), "hand_right_color": (40, 33)}
ARM = list(CONTRACT.arm_joint_names)  # policy order [L7, R7, Lgrip, Rgrip]
START_JOINTS = {n: 0.0 for n in CONTRACT.joint_names} | {"idx11_head_joint1": 0.3, "idx31_gripper_l_joint1": 0.04}


class FakeWall:
    def __init__(self, t=100.0):
        self.t = t

    def __call__(self):
        return self.t


class GatedKinematic(KinematicWorldModel):
    """Kinematic baseline whose steps wait for ``gate`` and are recorded; ``fault`` corrupts results."""

    def __init__(self, fault=None, **kwargs):
        super().__init__(time_constant_s=0.0, control_dt_s=DT, **kwargs)
        self.gate = threading.Event()
        self.gate.set()
        self.calls = []
        self.fault = fault

    def step(self, actions):
        self.calls.append(np.array(actions))
        self.gate.wait(10)
        result = super().step(actions)
        return self.fault(result) if self.fault else result


class ConstantJudge(GatedKinematic, Judge):
    """The gated baseline with a judge that gives ``prior`` at every step: a stand-in for an informative one."""

    def __init__(self, prior=0.5, **kwargs):
        super().__init__(**kwargs)
        self.prior = prior

    def judge(self, frames, state, task):
        steps = len(frames)
        return JudgeResult(np.full(steps, self.prior, np.float32), np.arange(1, steps + 1, dtype=np.float32) / steps)


class VideoOnly(WorldModel):
    """Predicts frames only (no state) and is no Judge: the kinematic baseline's frames, nothing else."""

    image_size = None

    def __init__(self):
        self.inner = KinematicWorldModel(time_constant_s=0.0)

    def reset(self):
        self.inner.reset()

    def set_camera_params(self, intrinsic, extrinsic=None):
        pass

    def set_episode_data(self, first_frame):
        self.inner.set_episode_data(first_frame)

    def set_episode_traj(self, traj, c2w):
        pass

    def step(self, actions):
        return StepResult(self.inner.step(actions).frames, None)


def until(condition, timeout=20.0):
    """Poll ``condition`` until it returns something truthy (returned) or ``timeout`` passes (liveness only)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := condition():
            return value
        time.sleep(0.005)
    return condition()


def ticks_until_report(session, timeout=20.0):
    """Tick until an episode report is due; returns that tick and every sample judged on the way. A step's
    judgement is due in the tick that first shows it, which can come before the tick with the report."""
    judged = []

    def tick():
        due = session.tick()
        judged.extend(due.judged)
        return due if due.reports else None

    due = until(tick, timeout)
    assert due is not None, f"no episode report within {timeout} s; judged so far: {len(judged)}"
    return due, judged


def observation(episode_id="ep1", task="stack"):
    rng = np.random.default_rng(0)
    images = {"head_color": rng.integers(0, 255, (40, 64, 3), np.uint8),
              "hand_left_color": rng.integers(0, 255, (66, 80, 3), np.uint8),
              "hand_right_color": rng.integers(0, 255, (66, 80, 3), np.uint8)}
    return Observation(episode_id, task, f"{task} the blocks", 3, images, START_JOINTS)


def make_session(backend=None, wall=None, encode=lambda key, rgb: rgb, judge="backend", **settings):
    """A started session; ``judge`` a judge plugin's name (resolved as the node does) or a Judge."""
    settings = SessionSettings(**{"stream_rates": RATES, "output_sizes": OUT_SIZES,
                                  "model_image_size": (24, 32), **settings})
    backend = backend or ConstantJudge()
    if isinstance(judge, str):
        judge = load_episode_judge(judge, "{}", backend)
    session = WorldModelSession(backend, CONTRACT, settings, encode, judge=judge,
                                backend_name="test", wall=wall or FakeWall())
    session.start()
    return session


@pytest.fixture
def wall():
    return FakeWall()


@pytest.fixture
def session(wall):
    s = make_session(wall=wall)
    assert s.sync(observation())[0]
    yield s
    s.close()


def ramp(steps, start=0.0, stop=0.15):
    """(steps, 16) policy-order targets; grippers stay within their limits."""
    targets = np.linspace(start, stop, steps)[:, None] * np.ones(len(ARM))
    targets[:, -2:] = 0.03
    return targets


def submit(session, targets, episode_id="ep1", period=DT):
    return session.submit(episode_id, ARM, targets.ravel(), len(targets), period)


def predicted(session, steps):
    assert until(lambda: session.status().predicted_frames >= steps), session.status()


def joint_rows(due):
    return [(t, s) for k, t, s in due.publications if k == "joint_states"]


def arm_values(sample):
    return sample.joints[[CONTRACT.joint_names.index(n) for n in ARM]]


# --------------------------------------------------------------------------- set-up


def test_any_size_backend_is_fed_its_preferred_size_unless_the_setting_says_otherwise():
    """A learned model's internal resolution: larger frames would only carry interpolation."""
    backend = GatedKinematic()
    backend.preferred_image_size = (12, 16)
    cases = [(backend, {"model_image_size": None}, (12, 16)),
             (backend, {}, (24, 32)),  # make_session's explicit size wins
             (GatedKinematic(), {"model_image_size": None}, (384, 512))]  # no preference: GE-Sim's size
    for model, settings, expected in cases:
        session = make_session(model, **settings)
        try:
            assert session.model_size == expected
        finally:
            session.close()


def test_unknown_backend_lists_the_available_names():
    with pytest.raises(UnknownWorldModelError, match="'nope'.*gesim_http, kinematic"):
        load_backend("nope", "{}")


@pytest.mark.parametrize("config, message", [
    ("{bad", "backend_config: not valid JSON"),
    ("[1]", "backend_config: expected a JSON object, got list"),
    ('{"tau": 1}', "backend 'kinematic': config: unknown key"),
])
def test_bad_backend_config_names_the_problem(config, message):
    with pytest.raises(SessionConfigError, match=message):
        load_backend("kinematic", config)


@pytest.mark.parametrize("settings, message", [
    ({"mode": "dream"}, "mode: 'dream' is unknown"),
    ({"mode": "shadow", "own_clock": True}, "publish_clock: only mode world_model"),
    ({"chunk_mode": "zip"}, "chunk_mode: 'zip'"),
    ({"judge_threshold": 2.0}, "judge_threshold"),
    ({"end_grace_s": -0.5}, "end_grace_s: -0.5 is not a duration"),
    ({"end_grace_s": float("nan")}, "end_grace_s: nan is not a duration"),
])
def test_bad_settings_name_the_parameter(settings, message):
    with pytest.raises(SessionConfigError, match=message):
        SessionSettings(**settings)


def _record(path, task, seed, shade):
    frames = {v: np.full((3, 12, 16, 3), shade, np.uint8) for v in ("head", "left_wrist", "right_wrist")}
    EpisodeRecord(episode_id=f"{task}-{seed}", task=task, task_text=f"do {task}", seed=seed, success=True,
                  label="success", control_period_s=DT, joint_names=ARM,
                  actions=np.zeros((2, 16), np.float32), joint_positions=np.full((3, 16), shade / 1000, np.float32),
                  frames=frames).save_npz(path)


def test_initial_observation_picks_task_and_seed_else_the_tasks_first(tmp_path):
    _record(tmp_path / "a.npz", "stack", 1, 10)
    _record(tmp_path / "b.npz", "stack", 2, 20)
    _record(tmp_path / "c.npz", "pour", 1, 30)
    assert find_initial_observation(tmp_path, "stack", 2).seed == 2
    assert find_initial_observation(tmp_path, "stack", 9).episode_id == "stack-1"
    assert find_initial_observation(tmp_path / "c.npz", "pour", 5).task == "pour"
    with pytest.raises(SessionConfigError, match="no recorded episode of task 'wipe'.*tasks there: pour, stack"):
        find_initial_observation(tmp_path, "wipe", 1)
    with pytest.raises(SessionConfigError, match="does not exist"):
        find_initial_observation(tmp_path / "nope", "stack", 1)
    with pytest.raises(SessionConfigError, match="initial_observation: not set"):
        find_initial_observation("", "stack", 1)


def test_observation_from_record_maps_views_onto_contract_cameras(tmp_path):
    _record(tmp_path / "a.npz", "stack", 1, 10)
    obs = observation_from_record(EpisodeRecord.load_npz(tmp_path / "a.npz"), CONTRACT, "ep9", 4)
    assert set(obs.images) == set(VIEW_KEYS) and obs.images["head_color"].shape == (12, 16, 3)
    assert (obs.episode_id, obs.seed, obs.task_text) == ("ep9", 4, "do stack")
    assert obs.joints[ARM[0]] == pytest.approx(0.01)


# --------------------------------------------------------------------------- commands


def test_mapper_converts_policy_order_to_the_backend_layout_and_holds_unnamed_joints():
    layout = gesim_layout(CONTRACT)
    mapper = CommandMapper(CONTRACT, layout)
    mapper.reset({n: 0.01 * i for i, n in enumerate(layout.names)})
    targets, period = mapper.map(ARM, np.arange(16) * 0.001, 1, 0.05)
    assert period == 0.05
    np.testing.assert_allclose(targets[0], layout.gather(ARM, np.arange(16) * 0.001), atol=1e-7)
    left = list(CONTRACT.joint_groups["left_arm"])
    targets, _ = mapper.map(left + ["idx11_head_joint1"], [0.1] * 8, 1, 0.05)  # head: ignored
    assert np.allclose(targets[0, :7], 0.1) and np.allclose(targets[0, 7:], layout.gather(ARM, np.arange(16) * 0.001)[7:])


@pytest.mark.parametrize("names, values, horizon, message", [
    (ARM, [0.1] * 15 + [math.nan], 1, "must be finite"),
    (ARM, [0.1] * 15, 1, "15 target values for 16 joints"),
    (ARM[:-1] + ["nope"], [0.01] * 16, 1, "unknown joint name"),
    (["idx11_head_joint1"], [0.1], 1, "moves none of the world model's action joints"),
])
def test_mapper_rejects_malformed_commands(names, values, horizon, message):
    mapper = CommandMapper(CONTRACT, gesim_layout(CONTRACT))
    with pytest.raises(CommandRejected, match=message):
        mapper.map(names, values, horizon, 0.05)


def test_rejected_commands_are_counted_and_kept_as_last_error(session):
    with pytest.raises(CommandRejected, match="finite"):
        submit(session, np.full((2, 16), math.nan))
    with pytest.raises(CommandRejected, match="stale"):
        submit(session, ramp(2), episode_id="old")
    status = session.status()
    assert (status.rejected, status.commands) == (2, 0) and "stale" in status.last_error


# --------------------------------------------------------------------------- timeline


def test_sync_holds_the_synced_observation_until_commands_arrive(session, wall):
    due = session.tick()
    (t, sample), = joint_rows(due)
    assert t == wall.t and sample.step == 0
    assert sample.joints[CONTRACT.joint_names.index("idx11_head_joint1")] == pytest.approx(0.3)
    cams = {k: s.images[k].shape for k, _, s in due.publications if k != "joint_states"}
    assert cams == {k: (h, w, 3) for k, (w, h) in OUT_SIZES.items()}
    wall.t += 0.35
    assert [round(t - 100, 6) for t, _ in joint_rows(session.tick())] == [0.1, 0.2, 0.3]


def test_predictions_follow_commands_on_the_timeline_the_actions_imply(session, wall):
    targets = ramp(5)
    assert submit(session, targets) == wall.t
    predicted(session, 5)
    wall.t += 0.5
    due = session.tick()
    rows = joint_rows(due)
    assert [round(t - 100, 6) for t, _ in rows] == [0.0, 0.1, 0.2, 0.3, 0.4, 0.5]
    for k, (_, sample) in enumerate(rows[1:]):  # kinematic with tau=0 tracks exactly
        np.testing.assert_allclose(arm_values(sample), targets[k], atol=1e-6)
        assert sample.step == k + 1
    head = CONTRACT.joint_names.index("idx11_head_joint1")
    assert all(s.joints[head] == pytest.approx(0.3) for _, s in rows)  # not an action joint: held
    assert [s.step for s in due.judged] == [1, 2, 3, 4, 5]
    assert [s.judge for s in due.judged][-1] == (0.5, 1.0)


def test_from_a_sync_request_on_nothing_of_the_previous_episode_is_published(session, wall):
    submit(session, ramp(3))
    predicted(session, 3)
    wall.t += 0.5
    assert joint_rows(session.tick())[-1][1].step == 3
    session.begin_sync()  # the node, at the request; the shadow sync then waits for fresh robot frames
    wall.t += 0.3
    assert session.tick().publications == []
    assert session.sync(observation("ep2"))[0]
    (t, sample), = joint_rows(session.tick())
    assert (t, sample.episode.episode_id, sample.step) == (wall.t, "ep2", 0)
    np.testing.assert_allclose(arm_values(sample), [START_JOINTS[n] for n in ARM])


def test_queued_commands_run_back_to_back(session, wall):
    first = submit(session, ramp(3))
    second = submit(session, ramp(2, 0.15, 0.2))
    assert second == pytest.approx(first + 3 * DT)


def test_shadow_predictions_wait_for_inference_and_keep_their_real_stamps(wall):
    backend = GatedKinematic()
    s = make_session(backend, wall)
    try:
        assert s.sync(observation())[0]
        backend.gate.clear()
        submit(s, ramp(4))
        wall.t += 1.0  # the model is slower than real time
        assert [round(t - 100, 6) for t, _ in joint_rows(s.tick())] == [0.0]  # only what is known
        backend.gate.set()
        predicted(s, 4)
        rows = joint_rows(s.tick())
        assert [round(t - 100, 6) for t, _ in rows] == [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0]
        assert [r[1].step for r in rows] == [1, 2, 3, 4, 4, 4, 4, 4, 4, 4]
    finally:
        s.close()


def test_own_clock_stops_where_predictions_end(wall):
    backend = GatedKinematic()
    s = make_session(backend, wall, mode="world_model", own_clock=True)
    try:
        s.tick()  # the clock starts
        wall.t += 2.0
        assert s.tick().clock == pytest.approx(2.0)  # idle: it runs with the wall clock
        assert s.sync(observation())[0]
        backend.gate.clear()
        submit(s, ramp(5))
        wall.t += 3.0
        assert s.tick().clock == pytest.approx(2.0)  # nothing predicted yet: time stands still
        backend.gate.set()
        predicted(s, 5)
        wall.t += 3.0
        due = s.tick()
        assert due.clock == pytest.approx(5.0)  # never faster than the wall clock
        assert [round(t, 6) for t, _ in joint_rows(due)][:6] == [2.1, 2.2, 2.3, 2.4, 2.5, 2.6]
    finally:
        s.close()


@pytest.mark.parametrize("mode, frames, calls", [("compress", 5, [5]), ("split", 12, [5, 5, 2])])
def test_chunks_longer_than_chunk_size_are_compressed_or_split(wall, mode, frames, calls):
    backend = GatedKinematic(chunk_size=5)
    s = make_session(backend, wall, chunk_mode=mode)
    try:
        assert s.sync(observation())[0]
        targets = ramp(12)
        submit(s, targets)
        predicted(s, frames)
        wall.t += 1.2
        rows = joint_rows(s.tick())
        assert [len(c) for c in backend.calls] == calls
        assert rows[-1][0] == pytest.approx(100 + 12 * DT)  # the chunk ends where its actions end
        np.testing.assert_allclose(arm_values(rows[-1][1]), targets[-1], atol=1e-6)
        assert rows[-1][1].step == 12
    finally:
        s.close()


class GeSimUnits(GatedKinematic):
    """The gated baseline as GE-Sim-V2 would see it: band-conditioned, normalised gripper commands, gripper
    state as an aperture in mm (0..1 -> 0..80 mm for the contract's 0..0.08 m), and every band and camera
    set-up recorded."""

    needs_trajectory_band = True
    gripper_command_units, gripper_state_units = "normalised", "mm"

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.bands, self.camera_params, self.order = [], [], []

    def set_camera_params(self, intrinsic, extrinsic=None):
        self.order.append("set_camera_params")
        self.camera_params.append((intrinsic, extrinsic))

    def set_episode_data(self, first_frame):
        self.order.append("set_episode_data")
        super().set_episode_data(first_frame)

    def set_episode_traj(self, traj, c2w):
        self.order.append("set_episode_traj")
        self.bands.append((traj, c2w))

    def step(self, actions):
        self.order.append("step")
        result = super().step(actions)
        state = result.state.copy()
        state[:, [7, 15]] *= 80.0
        return StepResult(result.frames, state)


@pytest.mark.parametrize("mode, calls", [("compress", [5]), ("split", [5, 5, 2])])
def test_a_band_conditioned_backend_gets_camera_params_once_and_a_band_before_every_step(wall, mode, calls):
    backend = GeSimUnits(chunk_size=5)
    s = make_session(backend, wall, chunk_mode=mode)
    try:
        assert s.sync(observation())[0]
        submit(s, ramp(12))
        assert until(lambda: backend.order.count("step") == len(calls))
    finally:
        s.close()
    assert backend.order == ["set_camera_params", "set_episode_data"] + ["set_episode_traj", "step"] * len(calls)
    (intrinsic, extrinsic), = backend.camera_params
    assert intrinsic.shape == (3, 3, 3) and extrinsic.shape == (3, 4, 4)
    assert intrinsic[0, 0, 2] == pytest.approx(320 * 32 / 640)  # the head's cx scaled to the model's 32 px width
    h, w = s.model_size
    assert [b[0].shape for b in backend.bands] == [(3, 3, n, h, w) for n in calls]
    assert [b[1].shape for b in backend.bands] == [(3, n, 4, 4) for n in calls]
    # The head camera holds still while the arms move; the wrist cameras move with them.
    c2w = np.concatenate([b[1] for b in backend.bands], axis=1)
    np.testing.assert_allclose(c2w[0], np.broadcast_to(extrinsic[0], c2w[0].shape), atol=1e-6)
    assert np.abs(c2w[1, -1] - c2w[1, 0]).max() > 0.1 and np.abs(c2w[2, -1] - c2w[2, 0]).max() > 0.1


def test_the_session_converts_grippers_to_the_backends_units_and_back(wall):
    backend = GeSimUnits()
    s = make_session(backend, wall)
    try:
        assert s.sync(observation())[0]
        targets = ramp(3)
        targets[:, -2:] = [[0.0, 0.08], [0.02, 0.06], [0.04, 0.04]]  # policy order: [.., L grip, R grip]
        submit(s, targets)
        predicted(s, 3)
        wall.t += 0.3
        rows = joint_rows(s.tick())
    finally:
        s.close()
    sent = backend.calls[0]
    np.testing.assert_allclose(sent[:, [7, 15]], [[0.0, 1.0], [0.25, 0.75], [0.5, 0.5]], atol=1e-6)
    np.testing.assert_allclose(sent[:, 0], targets[:, 0], atol=1e-7)  # arm joints stay radians
    for k, (_, sample) in enumerate(rows[1:]):
        np.testing.assert_allclose(arm_values(sample), targets[k], atol=1e-6)  # mm back to metres


def test_a_backend_with_unknown_gripper_units_or_uncalibrated_cameras_is_refused(wall):
    class Metres(GatedKinematic):
        gripper_state_units = "metres"

    with pytest.raises(SessionConfigError, match=r"backend 'test': gripper_state_units: 'metres' is not one of"):
        make_session(Metres(), wall)
    raw = {**CONTRACT.raw, "topics": {k: {kk: vv for kk, vv in t.items() if kk != "calibration"}
                                      for k, t in CONTRACT.raw["topics"].items()}}
    with pytest.raises(SessionConfigError, match="backend 'x' needs trajectory bands: .* have no 'calibration'"):
        WorldModelSession(GeSimUnits(), parse_contract(raw, "bare.yaml"), SessionSettings(), lambda k, rgb: rgb,
                          backend_name="x")


def test_a_backend_without_bands_gets_neither_camera_params_nor_bands(wall):
    class Plain(GeSimUnits):
        needs_trajectory_band = False

    backend = Plain()
    s = make_session(backend, wall)
    try:
        assert s.sync(observation())[0]
        submit(s, ramp(3))
        predicted(s, 3)
    finally:
        s.close()
    assert backend.order == ["set_episode_data", "step"] and s.kinematics is None


def test_single_step_commands_that_queue_up_share_one_backend_call(wall):
    backend = GatedKinematic()
    s = make_session(backend, wall)
    try:
        assert s.sync(observation())[0]
        backend.gate.clear()
        submit(s, ramp(1))
        assert until(lambda: len(backend.calls) == 1)
        for value in (0.05, 0.1, 0.15):
            submit(s, ramp(1, value, value))
        backend.gate.set()
        predicted(s, 4)
        assert [len(c) for c in backend.calls] == [1, 3]
    finally:
        s.close()


# --------------------------------------------------------------------------- failures


def _bad_frames(result):
    return StepResult(result.frames[..., :10], result.state)


def _bad_state(result):
    return StepResult(result.frames, result.state[:, :8])


def _missing_frame(result):
    return StepResult(result.frames[1:], result.state[1:])


def _http_500(result):
    raise WorldModelBackendError("/step: HTTP 500 from http://gpu:9000: CUDA out of memory", status=500)


@pytest.mark.parametrize("fault, reason", [
    (_http_500, "WorldModelBackendError: /step: HTTP 500 from http://gpu:9000: CUDA out of memory"),
    (_bad_frames, "frames of (24, 10) (H, W); the episode was started at (24, 32)"),
    (_bad_state, "state: wrong shape (3, 8); expected (T=3, D=16)"),
    (_missing_frame, "returned 2 frames for 3 action steps"),
])
def test_backend_failure_aborts_the_episode_and_the_next_sync_recovers(wall, fault, reason):
    backend = GatedKinematic(fault=fault)
    s = make_session(backend, wall)
    try:
        assert s.sync(observation())[0]
        submit(s, ramp(3))
        assert until(lambda: "call world_model_sync" in s.status().last_error)
        due = s.tick()
        report, = due.reports
        assert report.event == "aborted" and report.episode.episode_id == "ep1"
        assert "backend 'test' failed at step 0 of episode 'ep1'" in report.reason and reason in report.reason
        assert due.publications == []  # a broken world publishes nothing
        assert not s.status().episode_active
        with pytest.raises(CommandRejected, match="no episode is synced"):
            submit(s, ramp(2))
        backend.fault = None
        assert s.sync(observation("ep2"))[0] and s.status().last_error == ""
        submit(s, ramp(2), episode_id="ep2")
        predicted(s, 2)
    finally:
        s.close()


def test_an_encoder_failure_aborts_the_episode(wall):
    broken = threading.Event()

    def encode(key, rgb):
        if broken.is_set():
            raise ValueError("JPEG encoder gave up")
        return rgb

    s = make_session(wall=wall, encode=encode)
    try:
        assert s.sync(observation())[0]
        broken.set()
        submit(s, ramp(2))
        report, = until(lambda: s.tick().reports)
        assert report.event == "aborted"
        assert "publishing the predictions of episode 'ep1' failed at step 0: ValueError: JPEG encoder gave up" \
            in report.reason
    finally:
        s.close()


def test_a_failed_sync_is_answered_and_reported(wall):
    class Unreachable(GatedKinematic):
        def reset(self):
            if hasattr(self, "calls"):  # constructed: every reset now fails
                raise WorldModelBackendError("/init: cannot connect to http://127.0.0.1:1 after 1 attempt(s)")
            super().reset()

    s = make_session(Unreachable(), wall)
    try:
        assert until(lambda: "not reachable" in s.status().last_error)  # the startup probe
        ok, message = s.sync(observation())
        assert not ok and "world_model_sync of episode 'ep1' failed: backend 'test'" in message
        assert "cannot connect" in message and s.tick().publications == []
    finally:
        s.close()


# --------------------------------------------------------------------------- episode end and judge


@pytest.mark.parametrize("prior, threshold, outcome", [(0.9, 0.5, "success"), (0.9, 0.95, "failure")])
def test_runner_end_is_judged_after_the_queued_steps(wall, prior, threshold, outcome):
    s = make_session(ConstantJudge(prior), wall, judge_threshold=threshold)
    try:
        assert s.sync(observation())[0]
        submit(s, ramp(3))
        s.end_episode("ep1", aborted=False)
        with pytest.raises(CommandRejected, match="has ended"):
            submit(s, ramp(1))
        assert until(lambda: s.status().predicted_frames == 3)
        assert s.tick().reports == []  # the outcome comes when the timeline shows the last step
        wall.t += 0.3
        report, = until(lambda: s.tick().reports)
        assert (report.event, report.outcome, report.label) == ("outcome", outcome, outcome)
        assert report.success_probability == pytest.approx(prior)
        assert "ended the episode; judged" in report.reason and "after 3 steps" in report.reason
    finally:
        s.close()


def test_commands_stamped_before_the_runners_end_are_judged_when_they_arrive_within_the_grace(wall):
    """The policy's last chunks reach the model through the switch, one hop more than the runner's ENDED:
    seen in a replay-shadow run, two chunks forwarded before ENDED arrived 0.1 s after it and the
    episode was judged two chunks short (P(success) 0.650 against the live run's 0.616)."""
    s = make_session(ConstantJudge(0.9), wall, end_grace_s=1.0)
    try:
        assert s.sync(observation())[0]
        s.submit("ep1", ARM, ramp(3).ravel(), 3, DT, stamp_s=10.0)
        s.end_episode("ep1", aborted=False, stamp_s=10.5)
        assert not s.status().episode_active
        s.submit("ep1", ARM, ramp(3, 0.15, 0.2).ravel(), 3, DT, stamp_s=10.4)  # sent before ENDED: predicted
        for stamp, why in ((10.6, "sent after ENDED"), (None, "no stamp to tell")):
            with pytest.raises(CommandRejected, match="has ended"):
                s.submit("ep1", ARM, ramp(1).ravel(), 1, DT, stamp_s=stamp)
        predicted(s, 6)
        wall.t += 0.6  # the timeline has shown all 6 steps, but the grace has not passed
        assert s.tick().reports == []
        wall.t += 0.5
        report, = until(lambda: s.tick().reports)
        assert report.outcome == "success" and "ended the episode; judged success after 6 steps" in report.reason
        with pytest.raises(CommandRejected, match="has ended"):  # judged: the episode takes nothing more
            s.submit("ep1", ARM, ramp(1).ravel(), 1, DT, stamp_s=10.1)
        assert s.status().commands == 2 and s.status().rejected == 3
    finally:
        s.close()


def test_runner_abort_drops_queued_steps_and_judges_what_exists(wall):
    backend = ConstantJudge()
    s = make_session(backend, wall)
    try:
        assert s.sync(observation())[0]
        backend.gate.clear()
        submit(s, ramp(3))
        submit(s, ramp(3, 0.15, 0.2))
        assert until(lambda: len(backend.calls) == 1)
        s.end_episode("ep1", aborted=True)
        backend.gate.set()
        report, = until(lambda: s.tick().reports)
        assert (report.outcome, report.label) == ("unknown", "")
        assert "aborted the episode; judged unknown after 0 steps" in report.reason
        assert len(backend.calls) == 1 and s.status().predicted_frames == 0  # the in-flight step is discarded
    finally:
        s.close()


def test_max_steps_ends_and_judges_the_episode(wall):
    s = make_session(ConstantJudge(), wall, max_steps=4)
    try:
        assert s.sync(observation())[0]
        assert submit(s, ramp(3)) == wall.t
        submit(s, ramp(10))  # only its first step runs
        with pytest.raises(CommandRejected, match="has ended"):
            submit(s, ramp(1))
        predicted(s, 4)
        wall.t += 1.0
        report, = until(lambda: s.tick().reports)
        assert report.outcome == "success" and "max_steps=4 reached" in report.reason
        assert s.status().predicted_frames == 4
    finally:
        s.close()


def test_a_video_only_backend_reports_commanded_joints_and_an_unknown_outcome(wall):
    s = make_session(VideoOnly(), wall)
    try:
        assert s.sync(observation())[0]
        submit(s, ramp(2))
        predicted(s, 2)
        wall.t += 0.2
        np.testing.assert_allclose(arm_values(joint_rows(s.tick())[-1][1]), ramp(2)[-1], atol=1e-6)
        s.end_episode("ep1", aborted=False)
        report, = until(lambda: s.tick().reports)
        assert (report.event, report.episode.episode_id, report.outcome, report.label) == ("outcome", "ep1", "unknown", "")
        assert math.isnan(report.success_probability)
        assert ("ended the episode; outcome unknown after 2 steps: no judge (judge 'none', or 'backend' with "
                "backend 'test', which is no Judge)") in report.reason
        assert s.sync(observation("ep2"))[0]
        wall.t += 1.0
        due = s.tick()
        assert due.reports == [] and due.judged == [] and len(joint_rows(due)) == 11  # ep2: 100.2 .. 101.2
    finally:
        s.close()


@pytest.mark.parametrize("end", ["runner", "max_steps"])
def test_the_kinematic_baseline_has_no_judge_and_its_outcome_is_unknown(wall, end):
    s = make_session(GatedKinematic(), wall, max_steps=3 if end == "max_steps" else 0)
    try:
        assert s.sync(observation())[0]
        submit(s, ramp(3))
        if end == "runner":
            s.end_episode("ep1", aborted=False)
        predicted(s, 3)
        wall.t += 0.3
        due, judged = ticks_until_report(s)
        assert judged == []  # no JudgeStatus: there is no probability to publish
        report, = due.reports
        assert (report.event, report.outcome, report.label) == ("outcome", "unknown", "")
        assert math.isnan(report.success_probability) and "no judge" in report.reason
    finally:
        s.close()
