"""Policy plugin interface: discovery, observations and LeRobot batches, output checks, plugins."""

import importlib.metadata

import numpy as np
import pytest
import torch

from gesim_ros.contract.contract import PROFILE_DIR, load_contract
from gesim_ros.policy.api import (CHECKER_GROUP, STATE, EpisodeInfo, ObservationError, PolicyError,
                                  UnknownPluginError, act_checked, available_plugins, build_observation,
                                  lerobot_batch, load_policy, load_success_checker, observation_topics,
                                  validate_chunk)

import policy_fixtures

C = load_contract()
H = 4
EPISODE = {"episode_id": "ep-1", "task": "pick_cube", "seed": 3, "time_s": 0.0}


def _observation(state=None, **kwargs):
    state = np.linspace(-0.5, 0.5, 16) if state is None else state
    images = {"head_color": np.full((8, 12, 3), 51, np.uint8)}
    return build_observation(state, images, task="pick up the cube", episode=EPISODE, **kwargs)


def test_shipped_policies_are_discovered_by_name():
    assert {"scripted", "torchscript", "module"} <= set(available_plugins())
    with pytest.raises(UnknownPluginError, match="unknown policy 'nope'; available in entry-point group 'gesim_ros.policies': .*torchscript"):
        load_policy("nope")


def test_observation_follows_lerobot_keys_and_converts_to_a_batch():
    tactile = {"left": np.ones((4, 4, 3))}
    obs = _observation(tactile=tactile, imu=np.arange(10))
    assert obs[STATE].dtype == np.float32 and obs[STATE].shape == (16,)
    assert set(obs) == {STATE, "observation.images.head_color", "observation.tactile.left", "observation.imu",
                        "task", "episode"}
    batch = lerobot_batch(obs, rename={"observation.images.head_color": "observation.images.top_head"})
    image = batch["observation.images.top_head"]
    assert image.shape == (1, 3, 8, 12) and image.dtype == torch.float32
    assert torch.allclose(image, torch.full_like(image, 0.2))
    assert batch[STATE].shape == (1, 16) and batch["observation.tactile.left"].shape == (1, 4, 4, 3)
    assert batch["observation.imu"].shape == (1, 10) and batch["task"] == ["pick up the cube"]
    assert "episode" not in batch


@pytest.mark.parametrize("kwargs, match", [
    ({"state": np.r_[np.zeros(15), np.nan]}, r"observation.state: 1 NaN/inf value\(s\), first at index \(15,\)"),
    ({"imu": np.zeros(9)}, r"observation.imu: expected a \(10,\) array"),
])
def test_malformed_observations_are_refused(kwargs, match):
    with pytest.raises(ObservationError, match=match):
        _observation(**kwargs)
    with pytest.raises(ObservationError, match=r"expected \(H, W, 3\) uint8 RGB"):
        build_observation(np.zeros(16), {"head_color": np.zeros((8, 8, 3), np.float32)})


def test_observation_keys_map_to_contract_topics():
    topics = observation_topics(C, [STATE, "observation.images.hand_left_color", "observation.tactile.right"])
    assert [t.key for t in topics.values()] == ["joint_states", "hand_left_color", "tactile_right"]
    with pytest.raises(PolicyError, match="'head_depth' is not a colour camera"):
        observation_topics(C, ["observation.images.head_depth"])
    with pytest.raises(PolicyError, match="observation key 'observation.lidar' is not one gesim_ros provides"):
        observation_topics(C, ["observation.lidar"])


def test_a_mono_or_rgba_camera_of_a_labs_contract_is_a_policy_image(tmp_path):
    yaml = (PROFILE_DIR / "genie_sim.yaml").read_text()
    (tmp_path / "lab.yaml").write_text(yaml.replace("encoding: rgb8", "encoding: mono8", 1)
                                       .replace("encoding: rgb8", "encoding: rgba8", 1))
    lab = load_contract(str(tmp_path / "lab.yaml"))
    topics = observation_topics(lab, ["observation.images.head_color", "observation.images.hand_left_color"])
    assert [(t.key, t.encoding) for t in topics.values()] == [("head_color", "mono8"), ("hand_left_color", "rgba8")]
    with pytest.raises(PolicyError, match="'head_depth' is not a colour camera"):
        observation_topics(lab, ["observation.images.head_depth"])


def test_chunk_validation_accepts_batched_output_and_names_what_is_wrong():
    chunk = np.arange(H * 16, dtype=np.float32).reshape(H, 16)
    assert validate_chunk(chunk[None], H, 16).shape == (H, 16)
    assert validate_chunk(torch.from_numpy(chunk), H, 16).dtype == np.float64
    with pytest.raises(PolicyError, match=r"shape \(4, 15\); expected \(4, 16\)"):
        validate_chunk(chunk[:, :15], H, 16)
    chunk[2, 5] = np.inf
    with pytest.raises(PolicyError, match="1 NaN/inf value.*step 2, joint 5"):
        validate_chunk(chunk, H, 16)
    with pytest.raises(PolicyError, match="not a numeric array"):
        validate_chunk("left", H, 16)


@pytest.mark.parametrize("task, match", [
    ("wrong_shape", r"shape \(5, 15\)"), ("nan", r"NaN/inf value.*step 1, joint 3"),
    ("raise", "Faulty.act raised RuntimeError: boom in Faulty.act"),
])
def test_a_misbehaving_policy_becomes_a_policy_error(task, match):
    policy = policy_fixtures.Faulty()
    observation = _observation()
    observation["episode"] = {**EPISODE, "task": task}
    with pytest.raises(PolicyError, match=match):
        act_checked(policy, observation, 16)


def test_torchscript_policy_round_trip(tmp_path):
    net = policy_fixtures.save_tiny_net(tmp_path / "tiny.pt", H)
    policy = load_policy("torchscript", {"path": str(tmp_path / "tiny.pt"), "chunk_horizon": H,
                                         "control_period_s": 0.05, "cameras": ["head_color"]})
    assert policy.observation_keys == (STATE, "observation.images.head_color")
    obs = _observation()
    chunk = act_checked(policy, obs, 16)
    with torch.no_grad():
        expected = net(torch.from_numpy(obs[STATE])[None], torch.full((1, 3, 8, 12), 0.2))[0].numpy()
    np.testing.assert_allclose(chunk, expected, rtol=1e-5, atol=1e-6)


def test_torchscript_policy_reports_bad_files_and_config(tmp_path):
    with pytest.raises(PolicyError, match="'/nowhere.pt' is not a file"):
        load_policy("torchscript", {"path": "/nowhere.pt"})
    (tmp_path / "junk.pt").write_bytes(b"not a model")
    with pytest.raises(PolicyError, match=r"torch.jit.load\('.*junk.pt'\) failed"):
        load_policy("torchscript", {"path": str(tmp_path / "junk.pt")})
    with pytest.raises(PolicyError, match="config for TorchScriptPolicy: .*unexpected keyword argument 'horizon'"):
        load_policy("torchscript", {"path": str(tmp_path / "junk.pt"), "horizon": 3})


def test_module_factory_policy():
    policy = load_policy("module", {"factory": "policy_fixtures:make_follow", "offset": 0.5, "chunk_horizon": H})
    assert isinstance(policy, policy_fixtures.FollowState)
    chunk = act_checked(policy, _observation(state=np.zeros(16)), 16)
    np.testing.assert_array_equal(chunk, np.full((H, 16), 0.5))


@pytest.mark.parametrize("config, match", [
    ({"factory": "policy_fixtures.make_follow"}, "set it to 'package.module:callable'"),
    ({"factory": "no_such_module:make"}, "cannot load 'no_such_module:make' .*PYTHONPATH"),
    ({"factory": "policy_fixtures:make_follow", "speed": 1}, r"make_follow\(\*\*\{'speed': 1\}\) raised TypeError"),
    ({"factory": "policy_fixtures:make_not_a_policy"}, "returned object, not a Policy"),
])
def test_module_factory_errors_say_what_to_fix(config, match):
    with pytest.raises(PolicyError, match=match):
        load_policy("module", config)


def test_policy_timing_is_checked_at_load():
    with pytest.raises(PolicyError, match="FollowState.chunk_horizon is 0; set a positive integer"):
        load_policy("module", {"factory": "policy_fixtures:make_follow", "chunk_horizon": 0})


def test_success_checker_plugin_loads_from_its_group():
    eps = [importlib.metadata.EntryPoint("gripper", "policy_fixtures:GripperClosed.from_config", CHECKER_GROUP)]
    checker = load_success_checker("gripper", {"threshold": 0.02}, entry_points=eps)
    state = np.zeros(16)
    assert checker.check(build_observation(state)).label == "grasped"
    state[14] = 0.08
    assert checker.check(build_observation(state)) is None
    with pytest.raises(UnknownPluginError, match="gesim_ros.success_checkers"):
        load_success_checker("other", entry_points=eps)


def test_scripted_policy_replays_the_twin_controller_chunk_after_chunk():
    from gesim_ros.twin.controllers import make_controller

    policy = load_policy("scripted", {"chunk_horizon": H, "failure_rate": 1.0})
    policy.reset(EpisodeInfo("ep-1", "push", "", 7))
    assert policy.controller.failure_mode is not None  # failure_rate reaches the planner
    targets = make_controller("push", 7, 1.0).plan.targets
    assert policy.control_period_s == pytest.approx(1 / 30)
    obs = _observation()
    obs["episode"] = {**EPISODE, "time_s": 10.0}  # wall time does not matter: no step is skipped
    np.testing.assert_allclose(act_checked(policy, obs, 16), targets[:H])
    np.testing.assert_allclose(act_checked(policy, obs, 16), targets[H:2 * H])
    policy.next_step = len(targets) + 5  # past the end: hold the last targets
    np.testing.assert_allclose(act_checked(policy, obs, 16), np.tile(targets[-1], (H, 1)))
    policy.reset(EpisodeInfo("ep-1b", "push", "", 7))  # a new episode starts from its first step
    np.testing.assert_allclose(act_checked(policy, obs, 16), targets[:H])
    with pytest.raises(ValueError, match="no scripted controller for task 'juggle'"):
        policy.reset(EpisodeInfo("ep-2", "juggle", "", 7))
