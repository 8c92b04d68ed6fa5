"""Differentiable forward kinematics of both G2 hands, in torch, for the learned world model.

The learned model's object dynamics read where the fingers are relative to the object: a few
millimetres of fingertip height decide whether a hand brushes the table (issue #17), far less than a
network learns from joint angles alone. The chain constants (fixed transforms, joint axes, hand
keypoints) are read once from the twin's MuJoCo model of the G2 (``twin/kinematics.G2Kinematics``'s
model, waist and head at the home pose) and stored in the checkpoint, so the model carries the
kinematics it was trained with and needs no MuJoCo at run time.

Frames: the world is ``base_link``, as in the twin. Joint order: the checkpoint's ``[L7, R7, L grip,
R grip]``; gripper values are openings (m) between the pads.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

ARM_JOINTS = 7
#: Hand keypoints in the last arm link's frame, per arm: the grasp point, then each finger's pad
#: centre and the four bottom corners of the finger (pad included), finger 'a' (hand +y) first.
KEYPOINT_NAMES = ("grasp", "pad_a", "tip_a_0", "tip_a_1", "tip_a_2", "tip_a_3",
                  "pad_b", "tip_b_0", "tip_b_1", "tip_b_2", "tip_b_3")
#: Indices of the fingertip corners, the hand's lowest points.
FINGERTIPS = [i for i, name in enumerate(KEYPOINT_NAMES) if name.startswith("tip_")]


def _cross_matrices(axes: torch.Tensor) -> torch.Tensor:
    """Cross-product matrices ``(..., 3, 3)`` of unit ``axes (..., 3)``: Rodrigues' K."""
    x, y, z = axes.unbind(-1)
    zero = torch.zeros_like(x)
    return torch.stack([zero, -z, y, z, zero, -x, -y, x, zero], -1).unflatten(-1, (3, 3))


class HandKinematics(nn.Module):
    """Forward kinematics of the two hands: ``forward(q)`` gives the last links' poses and the hand
    keypoints (``KEYPOINT_NAMES``) in the world frame for raw joints ``(..., 16)``."""

    def __init__(self, constants: dict[str, torch.Tensor] | None = None) -> None:
        super().__init__()
        shapes = {"base_rotation": (2, 3, 3), "base_translation": (2, 3), "link_rotation": (2, ARM_JOINTS, 3, 3),
                  "link_translation": (2, ARM_JOINTS, 3), "joint_axis": (2, ARM_JOINTS, 3),
                  "keypoints": (2, len(KEYPOINT_NAMES), 3), "keypoint_slide": (2, len(KEYPOINT_NAMES), 3)}
        for name, shape in shapes.items():
            value = torch.zeros(shape) if constants is None else torch.as_tensor(constants[name], dtype=torch.float32)
            if tuple(value.shape) != shape:
                raise ValueError(f"hand kinematics: {name} has shape {tuple(value.shape)}, expected {shape}")
            self.register_buffer(name, value.clone())

    @classmethod
    def from_g2(cls, contract) -> HandKinematics:
        """The chain of the twin's G2 model for ``contract``'s joints (MuJoCo: training time only)."""
        from gesim_ros.twin import scene as ts
        from gesim_ros.twin.kinematics import G2Kinematics
        from gesim_ros.twin.scene import mujoco

        kin = G2Kinematics(contract, ("head",))
        m, d = kin.model, mujoco.MjData(kin.model)
        for name, value in kin.home.items():
            joint = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_JOINT, name)
            if joint >= 0 and m.jnt_type[joint] == mujoco.mjtJoint.mjJNT_HINGE:
                d.qpos[m.jnt_qposadr[joint]] = value
        mujoco.mj_kinematics(m, d)
        out = {k: [] for k in ("base_rotation", "base_translation", "link_rotation", "link_translation", "joint_axis",
                               "keypoints", "keypoint_slide")}
        for arm in ts.ARMS:
            bodies = [m.joint(n).bodyid[0] for n in contract.joint_groups[f"{arm}_arm"]]
            if len(bodies) != ARM_JOINTS or any(m.body_parentid[b] != a for a, b in zip(bodies, bodies[1:])):
                raise ValueError(f"the G2 model's {arm} arm is not a chain of {ARM_JOINTS} bodies with one joint each")
            parent = m.body_parentid[bodies[0]]
            out["base_rotation"].append(d.xmat[parent].reshape(3, 3).copy())
            out["base_translation"].append(d.xpos[parent].copy())
            rot, trans, axes = [], [], []
            for b, name in zip(bodies, contract.joint_groups[f"{arm}_arm"]):
                r = np.zeros(9)
                mujoco.mju_quat2Mat(r, m.body_quat[b])
                if np.abs(m.joint(name).pos).max() > 1e-9:
                    raise ValueError(f"joint {name}: anchored off its body's origin; the chain assumes it is not")
                rot.append(r.reshape(3, 3))
                trans.append(m.body_pos[b].copy())
                axes.append(m.joint(name).axis.copy())
            out["link_rotation"].append(np.stack(rot))
            out["link_translation"].append(np.stack(trans))
            out["joint_axis"].append(np.stack(axes))
            points, slides = [m.site(ts.grasp_site(arm)).pos.copy()], [np.zeros(3)]
            for finger, pad in zip(ts.finger_joints(arm), ts.pad_geoms(arm)):
                fj = m.joint(finger)
                slide = m.jnt_axis[fj.id] / 2   # each finger moves half the opening along its axis
                body = m.jnt_bodyid[fj.id]
                offset = m.body_pos[body]       # finger body in the last link's frame (no rotation)
                points.append(offset + m.geom(pad).pos)
                slides.append(slide)
                box = [g for g in range(m.ngeom) if m.geom_bodyid[g] == body and g != m.geom(pad).id][0]
                centre, half = m.geom_pos[box], m.geom_size[box]
                inner_y = offset[1] + m.geom(pad).pos[1] - np.sign(slide[1]) * m.geom(pad).size[2]
                outer_y = offset[1] + centre[1] + np.sign(slide[1]) * half[1]
                bottom = offset[2] + centre[2] - half[2]
                for x in (-half[0], half[0]):
                    for y in (inner_y, outer_y):
                        points.append(np.array([offset[0] + centre[0] + x, y, bottom]))
                        slides.append(slide)
            out["keypoints"].append(np.stack(points))
            out["keypoint_slide"].append(np.stack(slides))
        return cls({k: torch.from_numpy(np.stack(v).astype(np.float32)) for k, v in out.items()})

    def forward(self, q: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Raw joints ``(..., 16)`` -> last-link rotations ``(..., 2, 3, 3)``, their origins ``(..., 2, 3)``
        and the hand keypoints ``(..., 2, K, 3)``, all in the world frame (left arm first)."""
        arms = q[..., :2 * ARM_JOINTS].unflatten(-1, (2, ARM_JOINTS))
        openings = q[..., 2 * ARM_JOINTS:2 * ARM_JOINTS + 2]
        # Rodrigues' K and K^2 per joint: a joint's rotation is I + sin(q) K + (1 - cos(q)) K^2.
        cross = _cross_matrices(self.joint_axis)
        cross2 = cross @ cross
        rot = self.base_rotation.expand(*q.shape[:-1], 2, 3, 3)
        pos = self.base_translation.expand(*q.shape[:-1], 2, 3)
        for j in range(ARM_JOINTS):
            pos = pos + (rot @ self.link_translation[:, j, :, None])[..., 0]
            angle = arms[..., j, None, None]
            joint = torch.eye(3) + torch.sin(angle) * cross[:, j] + (1 - torch.cos(angle)) * cross2[:, j]
            rot = rot @ self.link_rotation[:, j] @ joint
        local = self.keypoints + self.keypoint_slide * openings[..., :, None, None]
        points = pos[..., None, :] + (rot[..., None, :, :] @ local[..., None])[..., 0]
        return rot, pos, points
