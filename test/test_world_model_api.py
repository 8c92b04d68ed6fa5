"""World-model plugin API: layouts, chunk adaptation, validation, discovery, kinematic baseline."""

import importlib.metadata
import math
from types import SimpleNamespace

import numpy as np
import pytest

from gesim_ros.world_model.backends.kinematic import KinematicWorldModel
from gesim_ros.world_model.api import ENTRY_POINT_GROUP, GESIM_VIEWS, Judge, UnknownWorldModelError, WorldModelInputError, available_world_models, load_world_model, validate_actions, validate_first_frame
from gesim_ros.world_model.layouts import ActionLayout, ViewLayout, compress_chunk, split_chunk

LEFT_ARM = [f"idx2{i}_arm_l_joint{i}" for i in range(1, 8)]
RIGHT_ARM = [f"idx6{i}_arm_r_joint{i}" for i in range(1, 8)]
LEFT_GRIP, RIGHT_GRIP = "idx31_gripper_l_joint1", "idx71_gripper_r_joint1"
GESIM = ActionLayout.gesim(LEFT_ARM, LEFT_GRIP, RIGHT_ARM, RIGHT_GRIP)
POLICY = ActionLayout.policy(LEFT_ARM, LEFT_GRIP, RIGHT_ARM, RIGHT_GRIP)

# Attribute-only stand-in for a GE-Sim-sized backend (validators read nothing else).
GESIM_SPEC = SimpleNamespace(chunk_size=25, views=GESIM_VIEWS, action_dim=16, state_dim=16, image_size=(384, 512))


# --------------------------------------------------------------------------- layouts


def test_layouts_place_joints_as_documented():
    assert GESIM.names[:7] == tuple(LEFT_ARM) and GESIM.names[8:15] == tuple(RIGHT_ARM)
    assert (GESIM.names[7], GESIM.names[15]) == (LEFT_GRIP, RIGHT_GRIP)
    assert GESIM.gripper_dims == (7, 15)
    assert POLICY.names[7:14] == tuple(RIGHT_ARM)
    assert (POLICY.names[14], POLICY.names[15]) == (LEFT_GRIP, RIGHT_GRIP)
    assert POLICY.gripper_dims == (14, 15)


def test_gesim_policy_conversion_round_trips():
    wm = np.random.default_rng(0).standard_normal((5, 16)).astype(np.float32)
    pol = GESIM.convert(wm, POLICY)
    assert np.array_equal(pol[:, :7], wm[:, :7])
    assert np.array_equal(pol[:, 7:14], wm[:, 8:15])
    assert np.array_equal(pol[:, 14], wm[:, 7]) and np.array_equal(pol[:, 15], wm[:, 15])
    assert np.array_equal(POLICY.convert(pol, GESIM), wm)


def test_gather_from_joint_state_with_extra_joints_in_any_order():
    names = ["idx01_head_joint1", *reversed(GESIM.names), "idx11_waist_joint1"]
    positions = np.arange(len(names), dtype=np.float32) * 0.1
    vec = GESIM.gather(names, positions)
    assert vec.shape == (16,)
    for i, name in enumerate(GESIM.names):
        assert vec[i] == positions[names.index(name)]
    with pytest.raises(WorldModelInputError, match=RIGHT_GRIP):
        GESIM.gather(names[:-2], positions[:-2])  # drops the right gripper
    with pytest.raises(WorldModelInputError, match="values: wrong shape"):
        GESIM.gather(names, positions[:-1])


def test_layout_rejects_duplicates_and_unknown_grippers():
    with pytest.raises(WorldModelInputError, match="duplicate"):
        ActionLayout([*LEFT_ARM, LEFT_ARM[0]])
    with pytest.raises(WorldModelInputError, match="gripper_names"):
        ActionLayout(LEFT_ARM, [LEFT_GRIP])


def test_view_layout_maps_camera_keys_to_backend_order():
    layout = ViewLayout({"right_wrist": "hand_right", "head": "head_color", "left_wrist": "hand_left"})
    rng = np.random.default_rng(1)
    images = {k: rng.integers(0, 256, (6, 8, 3), dtype=np.uint8) for k in ("head_color", "hand_left", "hand_right")}
    frame = layout.stack(images)
    assert frame.shape == (3, 3, 6, 8) and frame.dtype == np.float32
    assert np.array_equal(frame[:, 1].transpose(1, 2, 0), images["hand_left"] / np.float32(255))
    back = layout.unstack(frame[None])  # with a leading T axis
    for key, image in images.items():
        assert np.array_equal(back[key][0], image)
    with pytest.raises(WorldModelInputError, match="hand_right"):
        layout.stack({k: v for k, v in images.items() if k != "hand_right"})


# --------------------------------------------------------------------------- chunk adaptation


def test_compress_chunk_hand_checked_50_to_25():
    # Column c holds 100*c + t, so each output is readable as "which rows were used".
    actions = np.arange(50, dtype=np.float32)[:, None] + 100 * np.arange(16, dtype=np.float32)[None, :]
    out = compress_chunk(actions, 25)
    # Arm: rows 0 and 49 kept; rows 1..48 pooled into 23 bins of 3 or 4 rows
    # (bin 11 spans rows 23..26 -> 24.5).
    arm_t = [0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24.5, 27, 29, 31, 33, 35, 37, 39, 41, 43, 45, 47, 49]
    # Gripper: rows round(i * 49 / 24); i = 12 gives 24.5, which rounds half-to-even to 24.
    grip_t = [0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 27, 29, 31, 33, 35, 37, 39, 41, 43, 45, 47, 49]
    assert out.shape == (25, 16) and out.dtype == np.float32
    for col in range(16):
        expected = grip_t if col in (7, 15) else arm_t
        assert out[:, col].tolist() == [100 * col + t for t in expected], col


def test_compress_chunk_matches_adaptive_avg_pool():
    torch = pytest.importorskip("torch")
    actions = np.random.default_rng(2).uniform(-2, 2, (37, 16)).astype(np.float32)
    out = compress_chunk(actions, 25)
    arm = [c for c in range(16) if c not in (7, 15)]
    pooled = torch.nn.functional.adaptive_avg_pool1d(torch.from_numpy(actions[1:-1, arm].T.copy())[None], 23)
    np.testing.assert_allclose(out[1:-1, arm], pooled[0].T.numpy(), rtol=0, atol=1e-6)


def test_compress_chunk_edge_cases():
    actions = np.random.default_rng(3).uniform(size=(30, 16)).astype(np.float32)
    assert np.array_equal(compress_chunk(actions[:25], 25), actions[:25])
    assert np.array_equal(compress_chunk(actions, 1), actions[:1])
    two = compress_chunk(actions, 2)
    assert np.array_equal(two, actions[[0, -1]])
    with pytest.raises(WorldModelInputError, match="cannot compress 30 steps to target=50"):
        compress_chunk(actions, 50)
    with pytest.raises(WorldModelInputError, match="gripper_dims"):
        compress_chunk(actions, 25, gripper_dims=(16,))


def test_split_chunk():
    actions = np.arange(60 * 16, dtype=np.float32).reshape(60, 16)
    pieces = split_chunk(actions, 25)
    assert [len(p) for p in pieces] == [25, 25, 10]
    assert np.array_equal(np.concatenate(pieces), actions)


# --------------------------------------------------------------------------- validation


@pytest.mark.parametrize(
    ("actions", "message"),
    [
        (np.zeros((10, 15)), r"actions: wrong shape \(10, 15\); expected \(L, D=16\)"),
        (np.zeros(16), r"actions: wrong shape \(16,\)"),
        (np.zeros((30, 16)), r"actions: 30 steps exceed chunk_size 25; expected \(L<=25, D=16\)"),
        (np.where(np.eye(4, 16) > 0, np.nan, 0.0), r"actions: 4 NaN/inf value\(s\), first at index \(0, 0\)"),
        (np.full((3, 16), np.inf), r"actions: 48 NaN/inf"),
        ([["a"] * 16], r"actions: not a numeric array"),
    ],
)
def test_validate_actions_errors(actions, message):
    with pytest.raises(WorldModelInputError, match=message) as info:
        validate_actions(actions, GESIM_SPEC)
    assert isinstance(info.value, ValueError)


def test_validate_first_frame_errors():
    good = np.full((3, 3, 384, 512), 0.5, dtype=np.float32)
    assert validate_first_frame(good, GESIM_SPEC).shape == good.shape
    expected = r"first_frame: wrong shape \(3, 3, 384, 500\); expected \(3, V=3, H=384, W=512\)"
    with pytest.raises(WorldModelInputError, match=expected):
        validate_first_frame(good[..., :500], GESIM_SPEC)
    with pytest.raises(WorldModelInputError, match=r"first_frame: values outside \[0, 1\] \(min 0.5, max 255\)"):
        validate_first_frame(np.where(np.arange(512) == 7, 255.0, good), GESIM_SPEC)


# --------------------------------------------------------------------------- plugin discovery

ENTRY_POINTS = [
    importlib.metadata.EntryPoint(
        "kinematic", "gesim_ros.world_model.backends.kinematic:KinematicWorldModel", ENTRY_POINT_GROUP
    ),
    importlib.metadata.EntryPoint("not_a_model", "collections:OrderedDict", ENTRY_POINT_GROUP),
]


def test_load_world_model_by_name():
    model = load_world_model("kinematic", {"time_constant_s": 0.0}, entry_points=ENTRY_POINTS)
    assert isinstance(model, KinematicWorldModel) and model.gain == 1.0


def test_unknown_name_lists_available():
    with pytest.raises(UnknownWorldModelError, match="'gesim_v9'.*kinematic, not_a_model"):
        load_world_model("gesim_v9", entry_points=ENTRY_POINTS)


def test_non_world_model_entry_point_is_rejected():
    with pytest.raises(TypeError, match="not a WorldModel subclass"):
        load_world_model("not_a_model", entry_points=ENTRY_POINTS)


def test_discovery_reads_the_entry_point_group(monkeypatch):
    def fake_entry_points(*, group):
        return ENTRY_POINTS[:1] if group == ENTRY_POINT_GROUP else []

    monkeypatch.setattr(importlib.metadata, "entry_points", fake_entry_points)
    assert list(available_world_models()) == ["kinematic"]
    assert isinstance(load_world_model("kinematic"), KinematicWorldModel)


def test_from_config_names_unknown_keys():
    with pytest.raises(WorldModelInputError, match=r"unknown key\(s\) \['time_constant'\].*time_constant_s"):
        KinematicWorldModel.from_config({"time_constant": 0.1})


# --------------------------------------------------------------------------- kinematic baseline


def _ramp_frame(height=16, width=32):
    ramp = np.linspace(0.1, 0.9, width, dtype=np.float32)
    return np.broadcast_to(ramp, (3, 3, height, width)).copy()


def test_kinematic_state_follows_targets_with_first_order_lag():
    model = KinematicWorldModel(time_constant_s=0.1, control_dt_s=0.05)
    model.set_episode_data(_ramp_frame())
    actions = np.ones((10, 16), dtype=np.float32)
    actions[0] = 0.0
    state = model.step(actions).state
    gain = 1 - math.exp(-0.5)
    expected = [0.0] + [1 - (1 - gain) ** t for t in range(1, 10)]
    np.testing.assert_allclose(state[:, 3], expected, rtol=1e-6, atol=1e-7)
    # the lag carries over into the next chunk
    np.testing.assert_allclose(model.step(np.ones((1, 16))).state[0, 3], 1 - (1 - gain) ** 10, rtol=1e-6)


def test_kinematic_frames_shift_only_the_moving_arms_wrist_view():
    model = KinematicWorldModel(time_constant_s=0.0, pixels_per_rad=20.0)
    first = _ramp_frame()
    model.set_episode_data(first)
    actions = np.zeros((2, 16), dtype=np.float32)
    actions[1, 0] = 0.1  # left arm joint 1 -> 2 px horizontal shift of the left wrist view
    frames = model.step(actions).frames
    assert frames.shape == (2, 3, 3, 16, 32)
    assert np.array_equal(frames[0], first)
    assert np.array_equal(frames[1][:, [0, 2]], first[:, [0, 2]])  # head and right wrist untouched
    np.testing.assert_allclose(frames[1][:, 1, :, 4:-4], first[:, 1, :, 2:-6], atol=1e-5)


def test_kinematic_requires_episode_data_and_is_no_judge():
    model = KinematicWorldModel()
    with pytest.raises(WorldModelInputError, match="set_episode_data"):
        model.step(np.zeros((1, 16)))
    assert not isinstance(model, Judge)  # its episodes' outcome is unknown, not a prior against a threshold
