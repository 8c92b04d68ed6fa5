"""Forward kinematics of gesim_ros's G2 model: camera and tool poses from joint positions (no ROS).

The link poses come from MuJoCo's own kinematics (``mj_kinematics``) on the twin's robot (the MJCF
of ``twin/scene.py`` with its nominal cameras and no task objects), run on a data copy of this
object's own, so nothing here touches a running twin. The cameras' mounts and intrinsics come from
the contract (its camera topics' ``calibration``), the single source of truth for them.

Frames: the world is ``base_link`` (the fixed chassis), as in the twin. Camera poses are
camera-to-world matrices of the optical frame (x right, y down, z forward), the convention of
GE-Sim's ``c2w``. The tool frame of each arm sits at its grasp point (between the finger pads) with
z along the approach direction (wrist to fingertips) and x the wrist link's, as GE-Sim draws its
end effectors.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from gesim_ros.contract.contract import CameraCalibration, Contract
from gesim_ros.twin import scene as ts
from gesim_ros.twin.scene import mujoco

# Grasp-site frame -> tool frame: a half turn about x, so z points out of the gripper, not up the arm.
_SITE_TO_TOOL = np.diag([1.0, -1.0, -1.0])


def rpy_matrix(rpy: Sequence[float]) -> np.ndarray:
    """Rotation of fixed-axis roll, pitch, yaw (URDF's convention): Rz(yaw) @ Ry(pitch) @ Rx(roll)."""
    r, p, y = rpy
    cr, sr, cp, sp, cy, sy = np.cos(r), np.sin(r), np.cos(p), np.sin(p), np.cos(y), np.sin(y)
    return np.array([[cy * cp, cy * sp * sr - sy * cr, cy * sp * cr + sy * sr],
                     [sy * cp, sy * sp * sr + cy * cr, sy * sp * cr - cy * sr],
                     [-sp, cp * sr, cp * cr]])


def mount_matrix(calibration: CameraCalibration) -> np.ndarray:
    """(4, 4) pose of a camera's optical frame in its link's frame."""
    out = np.eye(4)
    out[:3, :3] = rpy_matrix(calibration.rpy)
    out[:3, 3] = calibration.xyz
    return out


def intrinsic_matrix(calibration: CameraCalibration, calibrated_size: tuple[int, int],
                     image_size: tuple[int, int]) -> np.ndarray:
    """(3, 3) pinhole matrix for images resized from ``calibrated_size`` to ``image_size`` (both (W, H)),
    each axis scaled on its own, as a resize does."""
    sx, sy = image_size[0] / calibrated_size[0], image_size[1] / calibrated_size[1]
    return np.array([[calibration.fx * sx, 0.0, calibration.cx * sx],
                     [0.0, calibration.fy * sy, calibration.cy * sy],
                     [0.0, 0.0, 1.0]])


class G2Kinematics:
    """Camera and tool poses of the G2 for joint positions in contract order.

    ``views`` picks the cameras (contract views, e.g. GE-Sim's head, left_wrist, right_wrist); each
    needs a ``calibration`` in the contract, whose ``link`` must be a body of the twin's model.
    """

    def __init__(self, contract: Contract, views: Sequence[str]):
        self.contract = contract
        self.views = tuple(views)
        self.cameras = [contract.camera_for_view(v) for v in self.views]
        missing = [c.key for c in self.cameras if c.calibration is None]
        if missing:
            raise ValueError(f"contract {contract.source}: camera topic(s) {missing} have no 'calibration'. Fix: "
                             "add calibration: {fx, fy, cx, cy, link, xyz, rpy} to them (see the g2_gdk profile)")
        xml = ts.build_mjcf(contract, ts.SceneParams(), ts.TaskXml(""))
        self.model = mujoco.MjModel.from_xml_string(xml)
        self._data = mujoco.MjData(self.model)
        bodies = []
        for c in self.cameras:
            body = mujoco.mj_name2id(self.model, mujoco.mjtObj.mjOBJ_BODY, c.calibration.link)
            if body < 0:
                raise ValueError(f"contract {contract.source}: topics.{c.key}.calibration.link: no body "
                                 f"'{c.calibration.link}' in the G2 model. Fix: use one of its links, e.g. "
                                 "head_link3, arm_left_link7, arm_right_link7")
            bodies.append(body)
        self._camera_bodies = np.array(bodies)
        self._mounts = np.stack([mount_matrix(c.calibration) for c in self.cameras])
        self._sites = np.array([self.model.site(ts.grasp_site(arm)).id for arm in ts.ARMS])
        grippers = {contract.joint_groups[f"{arm}_gripper"][0] for arm in ts.ARMS}
        self._hinges = [n for n in contract.joint_names if n not in grippers]
        self._hinge_cols = [contract.joint_names.index(n) for n in self._hinges]
        self._qadr = np.array([self.model.joint(n).qposadr[0] for n in self._hinges])
        self.home = ts.home_pose(contract)

    def complete(self, joints: Mapping[str, float]) -> np.ndarray:
        """Contract-order positions from named ones; joints not given keep the model's home pose."""
        return np.array([joints.get(n, self.home[n]) for n in self.contract.joint_names], np.float64)

    def intrinsics(self, image_size: tuple[int, int]) -> np.ndarray:
        """(V, 3, 3) pinhole matrices for images of ``image_size`` (H, W)."""
        height, width = image_size
        return np.stack([intrinsic_matrix(c.calibration, (c.width, c.height), (width, height)) for c in self.cameras])

    def poses(self, joints: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """For ``joints (T, J)`` in contract order: camera-to-world ``(V, T, 4, 4)`` of the views' optical
        frames and tool poses ``(T, 2, 4, 4)`` (left, right)."""
        rows = np.atleast_2d(np.asarray(joints, np.float64))
        if rows.shape[1] != len(self.contract.joint_names):
            raise ValueError(f"joints: shape {rows.shape}; expected (T, {len(self.contract.joint_names)}) in "
                             "contract order")
        cameras = np.empty((len(self.views), len(rows), 4, 4))
        tools = np.tile(np.eye(4), (len(rows), 2, 1, 1))
        m, d = self.model, self._data
        for t, row in enumerate(rows):
            d.qpos[self._qadr] = row[self._hinge_cols]
            mujoco.mj_kinematics(m, d)
            links = np.tile(np.eye(4), (len(self._camera_bodies), 1, 1))
            links[:, :3, :3] = d.xmat[self._camera_bodies].reshape(-1, 3, 3)
            links[:, :3, 3] = d.xpos[self._camera_bodies]
            cameras[:, t] = links @ self._mounts
            tools[t, :, :3, :3] = d.site_xmat[self._sites].reshape(-1, 3, 3) @ _SITE_TO_TOOL
            tools[t, :, :3, 3] = d.site_xpos[self._sites]
        return cameras, tools
