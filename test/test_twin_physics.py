"""Tests of the MuJoCo twin's physics core (no ROS): contract agreement, command validation,
tracking, determinism, task checkers against the scripted controllers, and sensor outputs."""

import dataclasses
import math

import numpy as np
import pytest

from gesim_ros.twin import scene as ts
from gesim_ros.contract.contract import load_contract
from gesim_ros.twin.controllers import CONTROLLERS, make_controller, run_episode
from gesim_ros.twin.physics import G2Twin, TwinCommandError
from gesim_ros.twin.scene import mujoco
from gesim_ros.twin.records import record_twin_episode
from gesim_ros.twin.tasks import TASKS

W, H = 160, 100


@pytest.fixture(scope="module")
def contract():
    return load_contract()


@pytest.fixture(scope="module")
def twin(contract):
    t = G2Twin(contract, camera_width=W, camera_height=H)
    yield t
    t.close()


def play_until(twin, ctrl, t_end):
    """Reset to the controller's episode and play its plan open-loop up to time t_end."""
    twin.reset(ctrl.task, ctrl.spec.seed)
    k = 0
    while twin.time < t_end - 1e-9 and not twin.done:
        twin.set_joint_targets(ctrl.plan.joint_names, ctrl.chunk(k)[0])
        twin.step(ctrl.period_s)
        k += 1


def test_joints_actuators_and_limits_come_from_the_contract(twin, contract):
    twin.reset("pick_place", 0)
    m = twin.model
    assert twin.joint_names == contract.joint_names
    for name in contract.joint_names:
        lo, hi = contract.joint_limits[name]
        assert tuple(m.actuator(name).ctrlrange) == pytest.approx((lo, hi))
        if "gripper" not in name:
            assert tuple(m.joint(name).range) == pytest.approx((lo, hi))
    pos, vel, eff = twin.joint_state()
    assert pos.shape == vel.shape == eff.shape == (24,)
    home = ts.home_pose(contract)
    np.testing.assert_allclose(pos, [home[n] for n in contract.joint_names], atol=1e-9)


def test_tracks_arm_and_gripper_targets(twin, contract):
    twin.reset("push", 3)
    names = list(contract.joint_groups["right_arm"]) + list(contract.joint_groups["right_gripper"])
    start = twin.joint_state()[0][[twin.joint_names.index(n) for n in names]]
    target = start + np.array([0.25, -0.2, 0.3, 0.3, -0.3, -0.25, 0.4, -0.03])
    twin.set_joint_targets(names, target)
    twin.step(1.5)
    pos, vel, _ = twin.joint_state()
    idx = [twin.joint_names.index(n) for n in names]
    np.testing.assert_allclose(pos[idx[:7]], target[:7], atol=0.01)   # rad
    assert pos[idx[7]] == pytest.approx(target[7], abs=1e-3)            # gripper opening, m
    assert np.abs(vel[idx]).max() < 0.01
    waist = [twin.joint_names.index(n) for n in contract.joint_groups["waist"]]
    np.testing.assert_allclose(pos[waist], 0.0, atol=2e-3)             # untouched joints hold home


BAD_COMMANDS = [
    ("nan", lambda n: ([n[8]], [float("nan")]), "non-finite"),
    ("inf", lambda n: ([n[8]], [float("inf")]), "non-finite"),
    ("unknown name", lambda n: (["elbow"], [0.0]), "unknown joint names"),
    ("no names", lambda n: ([], []), "no joint names"),
    ("length mismatch", lambda n: (list(n[8:10]), [0.1]), "one position per name"),
    ("2-d positions", lambda n: ([n[8]], [[0.1]]), "one position per name"),
    ("duplicate", lambda n: ([n[8], n[8]], [0.1, 0.2]), "listed twice"),
    ("bare string", lambda n: (n[8], [0.1]), "list of joint names"),
    ("above limit", lambda n: ([n[8], n[11]], [0.0, 0.5]), "idx24_arm_l_joint4=0.5 outside"),
    ("below limit", lambda n: (["idx31_gripper_l_joint1"], [-0.01]), "outside"),
    ("not numbers", lambda n: ([n[8]], ["up"]), "must be numbers"),
]


@pytest.mark.parametrize("make,reason", [(m, r) for _, m, r in BAD_COMMANDS], ids=[b[0] for b in BAD_COMMANDS])
def test_invalid_commands_are_refused_and_change_nothing(twin, contract, make, reason):
    twin.reset("unplug", 1)
    ok_names = list(contract.joint_groups["left_arm"])
    twin.set_joint_targets(ok_names, twin.joint_state()[0][8:15] + 0.1)
    ctrl_before = twin.data.ctrl.copy()
    names, positions = make(contract.joint_names)
    with pytest.raises(TwinCommandError, match=reason):
        twin.set_joint_targets(names, positions)
    np.testing.assert_array_equal(twin.data.ctrl, ctrl_before)
    assert issubclass(TwinCommandError, ValueError)


def test_same_seed_and_commands_give_identical_episodes(contract):
    ctrl = make_controller("pick_place", 5)
    runs = []
    for _ in range(2):
        twin = G2Twin(contract)
        play_until(twin, ctrl, 3.0)
        runs.append((twin.data.qpos.copy(), twin.joint_state()[2], twin.spec))
    np.testing.assert_array_equal(runs[0][0], runs[1][0])
    np.testing.assert_array_equal(runs[0][1], runs[1][1])
    assert runs[0][2] == runs[1][2]
    other = G2Twin(contract).reset("pick_place", 6)
    assert other.randomisation != runs[0][2].randomisation


def test_reset_to_builds_the_scene_a_spec_describes(twin):
    """reset_to plays a spec with other parameters: here a heavier, slipperier cube, which no camera shows."""
    spec = twin.reset("pick_place", 3)
    frames = twin.render_cameras()
    cube = twin.model.body("cube").id
    assert twin.model.body_mass[cube] == pytest.approx(spec.params["cube_mass"])
    heavier = dataclasses.replace(spec, randomisation={
        **spec.randomisation, "task": {**spec.params, "cube_mass": 0.5, "cube_friction": 0.3}})
    assert twin.reset_to(heavier) is heavier and twin.spec == heavier
    assert twin.model.body_mass[cube] == pytest.approx(0.5)
    assert twin.model.geom_friction[twin.model.body_geomadr[cube], 0] == pytest.approx(0.3)
    for key, image in twin.render_cameras().items():
        np.testing.assert_array_equal(image, frames[key])


def test_step_keeps_time_at_the_control_rate(twin):
    twin.reset("push", 0)
    for _ in range(90):
        twin.step(1 / 30)
    assert twin.time == pytest.approx(3.0, abs=twin.physics_dt / 2)
    for bad in (-0.1, float("nan"), "1"):
        with pytest.raises(ValueError, match="duration_s"):
            twin.step(bad)


def test_twin_without_episode_and_unknown_task_explain_themselves(contract):
    twin = G2Twin(contract)
    with pytest.raises(RuntimeError, match="call reset"):
        twin.joint_state()
    with pytest.raises(ValueError, match="unknown task 'juggle'; known tasks: pick_place, push, unplug"):
        twin.reset("juggle", 0)


@pytest.mark.parametrize("task", sorted(TASKS))
@pytest.mark.parametrize("seed", [0, 1])
def test_clean_controller_succeeds_within_the_contract(twin, contract, task, seed):
    ctrl = make_controller(task, seed)
    assert ctrl.failure_mode is None and ctrl.plan.expected_label == "success"
    names = ctrl.plan.joint_names
    speed = np.abs(np.diff(ctrl.plan.targets, axis=0)).max(axis=0) / ctrl.period_s
    assert (speed <= [contract.max_joint_velocity[n] for n in names]).all()
    outcome = run_episode(twin, ctrl)
    assert outcome.success and outcome.label == "success", outcome
    assert 3.0 < outcome.details["time_s"] < 8.0


@pytest.mark.parametrize("task,mode", [(t, m) for t, c in CONTROLLERS.items() for m in c.FAILURE_MODES])
@pytest.mark.parametrize("seed", [2, 3])
def test_forced_failure_modes_fail_with_their_label(twin, task, mode, seed):
    ctrl = make_controller(task, seed, failure_mode=mode)
    outcome = run_episode(twin, ctrl)
    assert not outcome.success
    assert outcome.label == ctrl.plan.expected_label == CONTROLLERS[task].FAILURE_MODES[mode], outcome


def test_idle_robot_times_out_and_outcome_is_in_progress_before(twin):
    twin.reset("pick_place", 4)
    twin.step(1.0)
    assert not twin.done and twin.outcome().label == "in_progress"
    while not twin.done:
        twin.step(0.5)
    assert twin.time == pytest.approx(twin.spec.time_limit_s, abs=0.01)
    assert twin.outcome().label == "timeout" and not twin.outcome().success


def test_failure_draw_and_controller_arguments():
    assert make_controller("push", 1, failure_rate=0.0).failure_mode is None
    assert make_controller("push", 1, failure_rate=1.0).failure_mode in CONTROLLERS["push"].FAILURE_MODES
    ctrl = make_controller("unplug", 2, failure_rate=1.0, rng=np.random.default_rng(9))
    assert ctrl.failure_mode == make_controller("unplug", 2, 1.0, np.random.default_rng(9)).failure_mode
    assert ctrl.chunk(0, 4).shape == (4, 16)
    np.testing.assert_array_equal(ctrl.chunk(len(ctrl.plan.targets) + 5, 2), [ctrl.plan.targets[-1]] * 2)
    np.testing.assert_array_equal(ctrl.chunk_at(3.5 * ctrl.period_s, 2), ctrl.plan.targets[3:5])
    with pytest.raises(ValueError, match="failure_rate"):
        make_controller("push", 1, failure_rate=1.5)
    with pytest.raises(ValueError, match="unknown failure_mode 'weak_grip' for task push"):
        make_controller("push", 1, failure_mode="weak_grip")
    with pytest.raises(ValueError, match="no scripted controller for task 'juggle'"):
        make_controller("juggle", 1)


def test_cameras_and_head_depth(twin, contract):
    twin.reset("pick_place", 2)
    images = twin.render_cameras()
    assert set(images) == {"head_color", "hand_left_color", "hand_right_color"}
    for img in images.values():
        assert img.shape == (H, W, 3) and img.dtype == np.uint8 and img.std() > 5
    assert not np.array_equal(images["head_color"], images["hand_left_color"])
    depth = twin.render_head_depth()
    assert depth.shape == (H, W) and depth.dtype == np.float32 and np.isfinite(depth).all()
    # The centre pixel's depth matches a ray cast along the head camera's optical axis.
    m, d = twin.model, twin.data
    cam = m.camera(ts.CAMERA_FOR_VIEW["head"]).id
    axis = -d.cam_xmat[cam].reshape(3, 3)[:, 2]
    geom = np.zeros(1, np.int32)
    dist = mujoco.mj_ray(m, d, d.cam_xpos[cam], axis, None, 1, -1, geom)
    assert 0.5 < dist < 1.5                                 # the table, seen from the head
    assert depth[H // 2 - 1:H // 2 + 1, W // 2 - 1:W // 2 + 1].mean() == pytest.approx(dist, abs=0.01)


def test_lidar_and_imu(twin):
    twin.reset("push", 1)
    twin.step(0.1)
    points = twin.lidar()
    assert points.dtype == np.float32 and points.ndim == 2 and points.shape[1] == 3
    assert 0.5 * 16 * 180 < len(points) <= 16 * 180 and np.isfinite(points).all()
    lidar_height = twin.data.site_xpos[twin.model.site(ts.LIDAR_SITE).id][2]
    assert points[:, 2].min() == pytest.approx(-lidar_height, abs=0.01)   # floor hits
    quat, gyro, accel = twin.imu()
    assert np.linalg.norm(quat) == pytest.approx(1.0)
    np.testing.assert_allclose(gyro, 0.0, atol=1e-6)
    np.testing.assert_allclose(accel, [0.0, 0.0, 9.81], atol=0.01)


def test_tactile_shows_the_grasp_on_the_closing_side(twin, contract):
    ctrl = make_controller("pick_place", 1)
    twin.reset("pick_place", 1)
    idle = twin.tactile()
    for grid in idle.values():
        assert grid.rows * grid.cols == grid.normal.size == grid.contact.size == grid.valid.size
        assert grid.normal.dtype == grid.shear_x.dtype == grid.shear_y.dtype == np.float32
        assert grid.contact.dtype == np.bool_ and not grid.contact.any() and grid.valid.all()
    play_until(twin, ctrl, 3.5)                            # gripper closed, lifting the cube
    side, other = ctrl.spec.side, "left" if ctrl.spec.side == "right" else "right"
    grids = twin.tactile()
    grid = grids[side]
    half = grid.rows * grid.cols // 2
    assert grid.contact[:half].any() and grid.contact[half:].any()     # both fingers' pads
    squeeze = -twin.joint_state()[2][twin.joint_names.index(contract.joint_groups[f"{side}_gripper"][0])]
    per_pad = np.array([grid.normal[:half].sum(), grid.normal[half:].sum()]) / 1000.0
    np.testing.assert_allclose(per_pad, squeeze, rtol=0.2)  # each pad carries the servo's squeeze
    assert abs(grid.shear_x.sum()) / 1000.0 > 0.3            # the cube's weight as shear along the finger
    assert not grids[other].contact.any()
    assert math.isclose(grid.resolution_x_mm, ts.PAD_LENGTH * 1000 / ts.PAD_ROWS)


def test_a_plan_played_in_another_seeds_scene_shows_that_scene(twin):
    """gesim-ros record-training --scene-shift: the outcome then depends on where the objects are."""
    own = record_twin_episode(twin, "pick_place", 3, 0.0, steps=1)
    moved = record_twin_episode(twin, "pick_place", 3, 0.0, steps=1, scene_seed=1003)
    assert (own.episode_id, moved.episode_id) == ("pick_place-00003", "pick_place-00003-scene01003")
    assert moved.extra["scene_seed"] == 1003 and own.extra["scene_seed"] is None
    assert own.actions.shape == (1, 16) and np.array_equal(own.actions, moved.actions)  # the same plan ...
    assert not np.array_equal(own.frames["head"][0], moved.frames["head"][0])  # ... in a scene of its own
