"""The learned world model's geometry, without training: the hands' forward kinematics against MuJoCo,
the scene reader's plane maps against the cameras' projection, the yaw reader's top-down patches, the
servo prior's least squares, the quarter-turn canonical quaternions, and the dynamics' rollout state."""

import math

import mujoco
import numpy as np
import pytest
import torch

from gesim_ros.contract.contract import load_contract
from gesim_ros.episodes.data import SCENE_STATE_NAMES, VIEWS
from gesim_ros.twin import scene as ts
from gesim_ros.twin.kinematics import G2Kinematics
from gesim_ros.world_model.backends.learned_dynamics import (
    SERVO_LAGS,
    ObjectDynamics,
    fit_servo_prior,
    quat_from_rotvec,
    quat_multiply,
    rotvec_from_quat,
)
from gesim_ros.world_model.backends.learned_kinematics import FINGERTIPS, KEYPOINT_NAMES, HandKinematics
from gesim_ros.world_model.backends.learned_network import OBJECT_HALF, OBJECT_QUAT
from gesim_ros.world_model.backends.learned_reader import PLANE_SCALE_M, camera_geometry, object_patches, plane_maps
from gesim_ros.world_model.training import _quarter_turn_canonical

CONTRACT = load_contract()
KIN = G2Kinematics(CONTRACT, VIEWS)
HANDS = HandKinematics.from_g2(CONTRACT)
ARM = list(CONTRACT.arm_joint_names)


def _mujoco_points(q: np.ndarray) -> np.ndarray:
    """Grasp sites and pad centres of both hands from MuJoCo for arm joints ``q`` (checkpoint order)."""
    m = KIN.model
    d = mujoco.MjData(m)
    for name, value in KIN.home.items():
        joint = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_JOINT, name)
        if joint >= 0 and m.jnt_type[joint] == mujoco.mjtJoint.mjJNT_HINGE:
            d.qpos[m.jnt_qposadr[joint]] = value
    for name, value in zip(ARM, q):
        if "gripper" in name:
            side = "left" if name in CONTRACT.joint_groups["left_gripper"] else "right"
            for finger in ts.finger_joints(side):
                d.qpos[m.joint(finger).qposadr[0]] = value / 2
        else:
            d.qpos[m.joint(name).qposadr[0]] = value
    mujoco.mj_kinematics(m, d)
    return np.stack([[d.site_xpos[m.site(ts.grasp_site(side)).id],
                      *(d.geom_xpos[m.geom(pad).id] for pad in ts.pad_geoms(side))] for side in ts.ARMS])


def test_hand_keypoints_are_mujocos_for_any_pose_and_opening():
    rng = np.random.default_rng(0)
    home = np.array([KIN.home[n] for n in ARM])
    pads = [KEYPOINT_NAMES.index("pad_a"), KEYPOINT_NAMES.index("pad_b")]
    for _ in range(10):
        q = home + np.concatenate([rng.uniform(-0.6, 0.6, 14), [0.0, 0.0]])
        q[14:] = rng.uniform(0.0, 0.08, 2)
        _, _, points = HANDS(torch.tensor(q, dtype=torch.float32))
        ours = points.numpy()[:, [0, *pads]]
        np.testing.assert_allclose(ours, _mujoco_points(q), atol=1e-5)


def test_fingertips_sit_below_the_grasp_point_and_open_with_the_gripper():
    home = torch.tensor([KIN.home[n] for n in ARM], dtype=torch.float32)
    closed, opened = home.clone(), home.clone()
    closed[14:], opened[14:] = 0.0, 0.08
    _, _, shut = HANDS(closed)
    _, _, wide = HANDS(opened)
    below = shut[:, 0, 2:3] - shut[:, FINGERTIPS, 2]
    np.testing.assert_allclose(below.numpy(), ts.FINGER_TIP_BELOW_GRASP, atol=5e-4)   # hands point (nearly) down at home
    pad_a, pad_b = KEYPOINT_NAMES.index("pad_a"), KEYPOINT_NAMES.index("pad_b")
    gap = (wide[:, pad_a] - wide[:, pad_b]).norm(dim=-1) - (shut[:, pad_a] - shut[:, pad_b]).norm(dim=-1)
    np.testing.assert_allclose(gap.numpy(), 0.08, atol=1e-5)


def test_the_edge_reads_fingertip_clearance_and_squeeze_in_millimetres():
    """A target 3 mm lower moves the target fingertips' clearance features by 3 mm / 4 mm; the squeeze is
    the object's width across the fingers (its half extents seen along the pad-to-pad axis) minus the
    opening, in 5 mm units. Read at the features' documented place after the 9 + 2 values per keypoint."""
    keypoints = len(KEYPOINT_NAMES)
    home = torch.tensor([KIN.home[n] for n in ARM], dtype=torch.float32)
    home[14:] = torch.tensor([0.03, 0.07])
    _, _, hands = HANDS(home[None])
    surface = float(hands[0, :, FINGERTIPS, 2].mean()) - 0.005   # a surface just below the fingertips
    dyn = ObjectDynamics(16, 2, 4, 8, 8, HANDS)
    dyn.set_statistics(torch.zeros(16, SERVO_LAGS), torch.zeros(16), torch.ones(16), [14, 15], 0.74, surface)
    target_hands = hands.clone()
    target_hands[..., 2] -= 0.003   # a target 3 mm lower
    half = torch.tensor([[0.02, 0.02, 0.02]])
    state = dyn.initial_state(home[None], home[None], hands[0, :, 0].mean(0, keepdim=True), torch.tensor([[1.0, 0, 0, 0]]))
    features = dyn._hand_features(state, target_hands, home[None], half)[0]   # (2 hands, F)
    start = keypoints * 3 * 3 + keypoints * 2
    now, target = features[:, start:start + keypoints], features[:, start + keypoints:start + 2 * keypoints]
    expected_now = ((hands[0, ..., 2] - surface) / 0.004).clamp(-5, 5)
    np.testing.assert_allclose(now.numpy(), expected_now.numpy(), atol=1e-5)
    inside = (expected_now.abs() < 4).numpy()   # away from the clamp, 3 mm is 0.75
    assert inside[:, FINGERTIPS].all()          # the fingertips sit within 16 mm of the surface here
    np.testing.assert_allclose((now - target).numpy()[inside], 0.75, atol=1e-5)
    across = torch.nn.functional.normalize(hands[0, :, 1] - hands[0, :, 6], dim=-1)   # pad a minus pad b
    width = 2 * (across.abs() * half).sum(-1)   # the identity orientation: object frame = world frame
    squeeze = features[:, start + 2 * keypoints + 6 + 2:start + 2 * keypoints + 6 + 4]
    expected = ((width[:, None] - home[14:].view(2, 1).expand(2, 2)) / 0.005).clamp(-10, 10)
    np.testing.assert_allclose(squeeze.numpy(), expected.numpy(), atol=1e-5)


def test_a_held_object_moves_with_the_nearer_hand_and_a_loose_one_stays():
    """With the learned motion at zero, a servo that reaches its target in one step and the object
    at the left grasp point: held, the object takes the left grasp point's step; not held, it stays."""
    home = torch.tensor([KIN.home[n] for n in ARM], dtype=torch.float32)[None]
    target = home.clone()
    target[0, :7] += 0.05   # the left arm moves, the right stays
    dyn = ObjectDynamics(16, 2, 4, 8, 8, HANDS)
    servo = torch.zeros(16, SERVO_LAGS)
    servo[:, 2] = 1.0       # q + (target - q): the target in one step
    dyn.set_statistics(servo, torch.zeros(16), torch.ones(16), [14, 15], 0.74, 0.70)
    with torch.no_grad():
        for head in (dyn.object[-1], dyn.joints[-1]):
            head.weight.zero_(), head.bias.zero_()
    _, _, hands = HANDS(home)
    _, _, target_hands = HANDS(target)
    start = hands[:, 0, 0]  # the left grasp point
    step = target_hands[:, 0, 0] - start
    assert step.norm() > 0.01
    for held_logit, moved in ((20.0, step), (-20.0, torch.zeros_like(step))):
        with torch.no_grad():
            dyn.object[-1].bias[6] = held_logit
        state = dyn.initial_state(home, home, start, torch.tensor([[1.0, 0, 0, 0]]))
        with torch.no_grad():
            nxt, _ = dyn.step(state, target, target_hands, torch.full((1, 3), 0.02), start,
                              torch.zeros(1, dtype=torch.long))
        np.testing.assert_allclose(nxt.q.numpy(), target.numpy(), atol=1e-6)
        np.testing.assert_allclose((nxt.pos - start).numpy(), moved.numpy(), atol=1e-6)


def test_a_plane_map_pixel_projects_back_to_itself_and_a_ray_into_the_sky_is_invalid():
    """Each valid pixel's plane point, projected with the same camera, lands on that pixel's centre."""
    size = (20, 32)
    intrinsics, c2w = camera_geometry(KIN, KIN.complete({}), size)
    centre = torch.tensor([0.4, 0.0])
    maps = plane_maps(torch.from_numpy(intrinsics), torch.from_numpy(c2w), *size, torch.tensor(0.72), centre)
    assert maps.shape == (len(VIEWS), 3, *size)
    for v in range(len(VIEWS)):
        valid = maps[v, 2].bool()
        assert valid.float().mean() > 0.3   # every view sees the workspace
        assert (maps[v, :2][:, valid].abs() < 6).all() and not maps[v, :2][:, ~valid].any()
        ys, xs = torch.nonzero(valid, as_tuple=True)
        world = torch.stack([maps[v, 0][valid] * PLANE_SCALE_M + centre[0], maps[v, 1][valid] * PLANE_SCALE_M + centre[1],
                             torch.full_like(xs, 0.72, dtype=torch.float32)], 1).numpy()
        w2c = np.linalg.inv(c2w[v])
        cam = world @ w2c[:3, :3].T + w2c[:3, 3]
        uv = cam @ intrinsics[v].T
        np.testing.assert_allclose(uv[:, :2] / uv[:, 2:], np.stack([xs + 0.5, ys + 0.5], 1), atol=1e-3)
    up = torch.eye(4)
    up[:3, :3] = torch.tensor([[1.0, 0, 0], [0, -1, 0], [0, 0, -1]]).T @ torch.diag(torch.tensor([1.0, 1, -1]))
    up[2, 3] = 1.0   # a camera 1 m up, its optical axis (z) pointing at the sky: no ray meets the plane
    assert up[2, 2] > 0.99
    sky = plane_maps(torch.from_numpy(intrinsics[0]), up, *size, torch.tensor(0.72), centre)
    assert not sky[2].any() and not sky[:2].any()


def test_a_top_down_patch_turns_with_its_angle_and_marks_what_the_camera_does_not_see():
    """A camera 1 m above the origin looking straight down (f = 100 px) has one lit pixel: the plane
    z = 0 from x 0.10 to 0.11 m, y -0.01 to 0 m. A patch of that plane around the origin, 1 cm a cell
    (cell 16 starts at 0), has it 10 cells along its x axis at angle 0 (row 15, column 26), and turned
    90 degrees (its x axis along world y), 11 cells against its y axis (row 5, column 15)."""
    size = 64
    intrinsics = torch.tensor([[100.0, 0, size / 2], [0, 100.0, size / 2], [0, 0, 1]])
    c2w = torch.eye(4)
    c2w[:3, :3] = torch.tensor([[1.0, 0, 0], [0, -1, 0], [0, 0, -1]])   # optical x, y, z in world columns
    c2w[2, 3] = 1.0
    image = torch.zeros(1, 1, 3, size, size)
    image[0, 0, 0, 32, 42] = 1.0      # u = 100 * 0.1 + 32, v = 32
    centre = torch.zeros(2, 3)
    patches = object_patches(image.expand(2, -1, -1, -1, -1), intrinsics.expand(2, 1, 3, 3), c2w.expand(2, 1, 4, 4),
                             centre, torch.tensor([0.0, math.pi / 2]), 32, 0.32)
    assert patches.shape == (2, 4, 32, 32)
    peaks = [divmod(int(patches[i, 0].argmax()), 32) for i in range(2)]   # (row: patch y, column: patch x)
    assert peaks == [(15, 26), (5, 15)]
    assert (patches[:, 3] == 1).all()   # 16 cm either side: inside the camera's 32 cm
    wide = object_patches(image, intrinsics[None, None], c2w[None, None], centre[:1], torch.zeros(1), 32, 1.0)
    assert wide[0, 3, 16, 16] == 1 and wide[0, 3, 0, 0] == 0 and wide[0, 3, 31, 31] == 0
    assert (wide[0, :3][wide[0, 3:].expand(3, -1, -1) == 0] == 0).all()   # unseen cells carry no colour


def test_servo_prior_recovers_a_linear_servo():
    rng = np.random.default_rng(1)
    coef = np.array([0.6, -0.1, 0.5, -0.3, 0.05, 0.02])
    positions, actions = [], []
    for _ in range(4):
        a = torch.tensor(np.cumsum(rng.normal(0, 0.02, (60, 2)), 0), dtype=torch.float32)
        q = [torch.zeros(2)] * 3
        ap = torch.cat([a[:1].expand(3, -1), a])
        for t in range(60):
            x = torch.stack([q[-1] - q[-2], q[-2] - q[-3], ap[t + 3] - q[-1], ap[t + 2] - q[-1], ap[t + 1] - q[-1],
                             ap[t] - q[-1]], -1)
            q.append(q[-1] + (x * torch.tensor(coef, dtype=torch.float32)).sum(-1))
        positions.append(torch.stack(q[2:]))
        actions.append(a)
    fitted = fit_servo_prior(positions, actions)
    assert fitted.shape == (2, SERVO_LAGS)
    np.testing.assert_allclose(fitted.numpy(), np.tile(coef, (2, 1)), atol=1e-4)


def test_rotation_vectors_and_quaternions_round_trip():
    v = torch.tensor([[0.3, -0.2, 0.1], [0.0, 0.0, 1e-9], [0.0, 2.0, 0.0]])
    np.testing.assert_allclose(rotvec_from_quat(quat_from_rotvec(v)).numpy(), v.numpy(), atol=1e-6)
    q = quat_from_rotvec(torch.tensor([[0.0, 0.0, 0.4]]))
    np.testing.assert_allclose(quat_multiply(q, q).numpy(), quat_from_rotvec(torch.tensor([[0.0, 0.0, 0.8]])).numpy(),
                               atol=1e-6)


def _scene(yaw: float, half=(0.02, 0.02, 0.02)) -> np.ndarray:
    scene = np.zeros((3, len(SCENE_STATE_NAMES)), np.float32)
    scene[:, OBJECT_QUAT] = [math.cos(yaw / 2), 0, 0, math.sin(yaw / 2)]
    scene[2, OBJECT_QUAT] = [math.cos((yaw + 0.2) / 2), 0, 0, math.sin((yaw + 0.2) / 2)]
    scene[:, OBJECT_HALF] = half
    return scene


@pytest.mark.parametrize("yaw", [0.3, 0.9, -1.0, 2.5])
def test_square_objects_take_the_quarter_turn_that_puts_their_first_yaw_within_45_degrees(yaw):
    out = _quarter_turn_canonical(_scene(yaw))
    first = 2 * math.atan2(out[0, 6], out[0, 3])
    assert -math.pi / 4 < first <= math.pi / 4 + 1e-6
    turned = (first - yaw) / (math.pi / 2)
    assert abs(turned - round(turned)) < 1e-5   # a whole number of quarter turns
    later = 2 * math.atan2(out[2, 6], out[2, 3])
    assert math.isclose(math.remainder(later - first - 0.2, 2 * math.pi), 0.0, abs_tol=1e-5)   # the motion is kept


def test_objects_that_are_not_square_keep_their_quaternions():
    scene = _scene(0.9, half=(0.015, 0.0125, 0.025))
    np.testing.assert_array_equal(_quarter_turn_canonical(scene), scene)
