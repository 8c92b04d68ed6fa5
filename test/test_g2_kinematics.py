"""Forward kinematics of the G2 model (twin/kinematics.py): camera poses from the contract's mounts
on MuJoCo's link poses, tool poses at the grasp points, intrinsics scaled to a model's image size."""

import copy

import mujoco
import numpy as np
import pytest

from gesim_ros.contract.contract import load_contract, parse_contract
from gesim_ros.twin import scene as ts
from gesim_ros.twin.kinematics import G2Kinematics, rpy_matrix

CONTRACT = load_contract()
VIEWS = ("head", "left_wrist", "right_wrist")
KIN = G2Kinematics(CONTRACT, VIEWS)
HOME = KIN.complete({})


def with_joints(**offsets):
    row = HOME.copy()
    for name, delta in offsets.items():
        row[CONTRACT.joint_names.index(name)] += delta
    return row


def mujoco_cameras(row):
    """The twin model's own cameras (mj_forward) as optical-frame camera-to-world matrices."""
    data = mujoco.MjData(KIN.model)
    for name, value in zip(CONTRACT.joint_names, row):
        if name in KIN._hinges:
            data.qpos[KIN.model.joint(name).qposadr[0]] = value
    mujoco.mj_forward(KIN.model, data)
    out = np.tile(np.eye(4), (len(VIEWS), 1, 1))
    for v, view in enumerate(VIEWS):
        cam = KIN.model.camera(ts.CAMERA_FOR_VIEW[view]).id
        out[v, :3, :3] = data.cam_xmat[cam].reshape(3, 3) @ np.diag([1.0, -1.0, -1.0])  # MuJoCo looks along -z
        out[v, :3, 3] = data.cam_xpos[cam]
    return out


@pytest.mark.parametrize("profile", ["g2_gdk", "genie_sim"])
def test_the_contracts_camera_mounts_are_the_twins_cameras(profile):
    kin = G2Kinematics(load_contract(profile), VIEWS)
    rng = np.random.default_rng(3)
    rows = [HOME] + [HOME + rng.uniform(-0.3, 0.3, HOME.shape) for _ in range(3)]
    cameras, _ = kin.poses(np.stack(rows))
    for t, row in enumerate(rows):
        np.testing.assert_allclose(cameras[:, t], mujoco_cameras(row), atol=1e-5)


def test_rpy_is_urdfs_fixed_axis_convention():
    roll, pitch, yaw = 0.3, -0.2, 1.1
    rx = np.array([[1, 0, 0], [0, np.cos(roll), -np.sin(roll)], [0, np.sin(roll), np.cos(roll)]])
    ry = np.array([[np.cos(pitch), 0, np.sin(pitch)], [0, 1, 0], [-np.sin(pitch), 0, np.cos(pitch)]])
    rz = np.array([[np.cos(yaw), -np.sin(yaw), 0], [np.sin(yaw), np.cos(yaw), 0], [0, 0, 1]])
    np.testing.assert_allclose(rpy_matrix((roll, pitch, yaw)), rz @ ry @ rx, atol=1e-12)


def test_the_head_camera_stays_on_its_mount_while_the_arms_move_and_follows_the_head():
    moved_arms = with_joints(idx21_arm_l_joint1=-0.5, idx64_arm_r_joint4=0.4, idx67_arm_r_joint7=1.0)
    moved_head = with_joints(idx13_head_joint3=0.2)
    cameras, _ = KIN.poses(np.stack([HOME, moved_arms, moved_head]))
    np.testing.assert_array_equal(cameras[0, 1], cameras[0, 0])
    assert np.abs(cameras[0, 2] - cameras[0, 0]).max() > 0.01


def test_wrist_cameras_and_tools_follow_their_arm_links():
    moved_right = with_joints(idx61_arm_r_joint1=-0.4, idx66_arm_r_joint6=0.3)
    cameras, tools = KIN.poses(np.stack([HOME, moved_right]))
    right, left = 2, 1
    assert np.linalg.norm(cameras[right, 1, :3, 3] - cameras[right, 0, :3, 3]) > 0.05
    np.testing.assert_array_equal(cameras[left, 1], cameras[left, 0])
    np.testing.assert_array_equal(tools[1, 0], tools[0, 0])
    assert np.linalg.norm(tools[1, 1, :3, 3] - tools[0, 1, :3, 3]) > 0.05
    # The camera is rigid on the wrist: the tool seen from it does not move.
    seen = [np.linalg.inv(cameras[right, t]) @ tools[t, 1] for t in (0, 1)]
    np.testing.assert_allclose(seen[1], seen[0], atol=1e-9)


def test_tools_sit_at_the_grasp_points_pointing_out_of_the_grippers():
    _, tools = KIN.poses(HOME[None])
    data = mujoco.MjData(KIN.model)
    data.qpos[KIN._qadr] = HOME[KIN._hinge_cols]
    mujoco.mj_kinematics(KIN.model, data)
    for arm, side in enumerate(ts.ARMS):
        site = KIN.model.site(ts.grasp_site(side)).id
        np.testing.assert_allclose(tools[0, arm, :3, 3], data.site_xpos[site])
        wrist = data.xpos[KIN.model.body(f"arm_{side}_link7").id]
        approach = tools[0, arm, :3, 2]
        np.testing.assert_allclose(approach, (data.site_xpos[site] - wrist) / ts.WRIST_TO_GRASP, atol=1e-9)
    # Home pose: both grippers point down over the table.
    assert (tools[0, :, 2, 2] < -0.9).all()


def test_intrinsics_are_scaled_per_axis_to_the_image_size():
    head = CONTRACT.camera_for_view("head")
    at_contract_size = KIN.intrinsics((head.height, head.width))[0]
    cal = head.calibration
    np.testing.assert_allclose(at_contract_size, [[cal.fx, 0, cal.cx], [0, cal.fy, cal.cy], [0, 0, 1]])
    k = KIN.intrinsics((384, 512))
    hand = CONTRACT.camera_for_view("left_wrist")
    np.testing.assert_allclose(k[0], [[cal.fx * 0.8, 0, cal.cx * 0.8], [0, cal.fy * 0.96, cal.cy * 0.96], [0, 0, 1]])
    np.testing.assert_allclose(k[1, 1, 1], hand.calibration.fy * 384 / hand.height)


def test_a_camera_without_calibration_or_with_an_unknown_link_is_refused_with_the_fix():
    raw = copy.deepcopy(dict(CONTRACT.raw))
    del raw["topics"]["hand_left_color"]["calibration"]
    with pytest.raises(ValueError, match=r"\['hand_left_color'\] have no 'calibration'. Fix: add calibration"):
        G2Kinematics(parse_contract(raw, "no-cal.yaml"), VIEWS)
    raw = copy.deepcopy(dict(CONTRACT.raw))
    raw["topics"]["head_color"]["calibration"]["link"] = "head_link9"
    with pytest.raises(ValueError, match="calibration.link: no body 'head_link9' in the G2 model"):
        G2Kinematics(parse_contract(raw, "bad-link.yaml"), VIEWS)


@pytest.mark.parametrize("topic, change, message", [
    ("head_color", {"fx": 0}, r"topics.head_color.calibration.fx: missing or not a positive focal length"),
    ("head_color", {"cy": "200"}, r"topics.head_color.calibration.cy: missing or not a number"),
    ("hand_left_color", {"xyz": [0, 0]}, r"calibration.xyz: missing or not a list of 3 numbers.*Fix: set 'xyz"),
    ("hand_left_color", {"link": ""}, r"calibration.link: missing or not a non-empty string"),
    ("head_color", {"fov": 60}, r"calibration.fov: unknown calibration key. Fix: use the keys fx, fy"),
    ("imu", {"fx": 1, "fy": 1, "cx": 0, "cy": 0, "link": "x", "xyz": [0, 0, 0], "rpy": [0, 0, 0]},
     r"topics.imu.calibration: calibration on a topic that is not a camera"),
])
def test_a_bad_calibration_fails_at_load_naming_the_key_and_the_fix(topic, change, message):
    raw = copy.deepcopy(dict(CONTRACT.raw))
    raw["topics"][topic]["calibration"] = {**raw["topics"][topic].get("calibration", {}), **change}
    with pytest.raises(ValueError, match=message):
        parse_contract(raw, "bad.yaml")


def _marker_centroids(width: int, height: int, markers) -> np.ndarray:
    """Where each marker sphere shows in each view of the twin rendered at ``width`` x ``height``:
    ``(V, markers, 2)`` pixel centroids (x, y), NaN where a marker is not in view."""
    geoms = "".join(f'<geom type="sphere" size="0.008" pos="{ts.mjcf_vec(p)}" rgba="{ts.mjcf_vec(c)} 1" '
                    f'contype="0" conaffinity="0" group="{ts.GROUP_TASK}"/>' for p, c in markers)
    model = mujoco.MjModel.from_xml_string(ts.build_mjcf(CONTRACT, ts.SceneParams(), ts.TaskXml(geoms),
                                                         camera_width=width, camera_height=height))
    data = mujoco.MjData(model)
    for name, value in zip(CONTRACT.joint_names, HOME):
        if name in KIN._hinges:
            data.qpos[model.joint(name).qposadr[0]] = value
    mujoco.mj_forward(model, data)
    out = np.full((len(VIEWS), len(markers), 2), np.nan)
    with mujoco.Renderer(model, height, width) as renderer:
        for v, view in enumerate(VIEWS):
            renderer.update_scene(data, camera=ts.CAMERA_FOR_VIEW[view])
            image = renderer.render().astype(int)
            for m, (_, colour) in enumerate(markers):
                hit = np.abs(image - np.array(colour) * 255).max(-1) < 40
                if hit.sum() >= 2:
                    ys, xs = np.nonzero(hit)
                    out[v, m] = xs.mean() + 0.5, ys.mean() + 0.5
    return out


def test_the_twins_images_are_the_contracts_calibrated_cameras_at_any_render_size():
    """A point projected with the contract's intrinsics (scaled to the render size) and the kinematics'
    camera poses is where the twin draws it, for renders of other aspect ratios than the contract's too
    (the wrist cameras are 1280x1056; the twin renders 320x200 by default)."""
    markers = [((0.42, 0.22, 0.71), (1.0, 0.0, 0.0)), ((0.42, -0.22, 0.71), (0.0, 1.0, 0.0)),
               ((0.30, 0.30, 0.71), (0.0, 0.0, 1.0)), ((0.30, -0.30, 0.71), (1.0, 1.0, 0.0))]
    cameras, _ = KIN.poses(HOME[None])
    seen = 0
    for width, height in ((320, 200), (200, 320)):
        centroids = _marker_centroids(width, height, markers)
        k = KIN.intrinsics((height, width))
        for v in range(len(VIEWS)):
            w2c = np.linalg.inv(cameras[v, 0])
            for m, (point, _) in enumerate(markers):
                if np.isnan(centroids[v, m, 0]):
                    continue
                x = w2c[:3, :3] @ np.array(point) + w2c[:3, 3]
                u = k[v] @ (x / x[2])
                np.testing.assert_allclose(centroids[v, m], u[:2], atol=1.5, err_msg=f"{VIEWS[v]} at {width}x{height}")
                seen += 1
    assert seen >= 12  # every view sees markers at both sizes
