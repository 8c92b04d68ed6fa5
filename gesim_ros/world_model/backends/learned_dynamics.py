"""The learned world model's dynamics: one control step of the robot's joints and the task object.

Issue #17 measured that a video latent does not keep what decides an episode: a few millimetres of
grasp offset or a fingertip brushing the table. So the imagined state is object-centric: the joints
(and their last two values), the task object's pose (and its last), whether it is held, and whether
the robot has hit something so far; static per episode are the object's half extents, the goal and
the task. Each control step:

* both hands' keypoints (grasp point, pads, fingertip corners) come from the G2's forward kinematics
  (:class:`~gesim_ros.world_model.backends.learned_kinematics.HandKinematics`) of the joints now,
  of the joints one step before and of the commanded targets;
* an edge network reads, per hand, those keypoints in the object's frame (where the fingers are
  around the object and where the servos pull them), their heights above the object's resting
  plane, the openings, and the object's own state; the sum over hands and the object's state give
  the object's motion, its held logit, the contact forces and the collision logit. Two things are
  decided by millimetres, so the edge also reads them on a millimetre scale: the keypoints' heights
  above the work surface (a fingertip commanded 3 mm into the table presses it past the twin's
  20 N collision limit, 1 mm does not) and the squeeze, how much narrower the commanded and the
  present openings are than the object across the fingers (whether a grip holds);
* the joints follow a servo prior (per joint, a linear model of the last two joint velocities and
  the last four targets, fitted to the training data by least squares: ``fit_servo_prior``) plus a
  learned correction from the same edge features (a hand blocked by the table, a gripper closed on
  the object);
* a held object moves with the hand that holds it: its step is the nearer grasp point's step,
  weighted by the held probability, plus the learned motion. Learned alone, a carried object lagged
  the hand, the fingers seemed to leave it and the model dropped it mid-carry (issue #17's graded
  grasps).

Everything is learned from recorded twin episodes but the kinematics; the collision flag is sticky
(the maximum of its per-step probabilities), as the twin's verdict is.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from gesim_ros.world_model.backends.learned_kinematics import KEYPOINT_NAMES, HandKinematics

SERVO_LAGS = 6          # inputs of the servo prior per joint (see servo_inputs)
ACTION_HISTORY = 3      # targets kept besides the current one
_KEYPOINT_SCALE_M = 0.05
_SPEED_SCALE_M = 0.005  # per control step
_FORCE_SCALE_N = 5.0
_SIZE_SCALE_M = 0.03
_CLEARANCE_SCALE_M = 0.004  # keypoint heights above the work surface, read within +-5 of these
_SQUEEZE_SCALE_M = 0.005    # object width across the fingers minus the opening, within +-10 of these
_HOLDER_SCALE_M = 0.01      # the hand nearer the object by a few of these carries it


def quat_matrix(q: torch.Tensor) -> torch.Tensor:
    """Rotation matrices ``(..., 3, 3)`` of unit quaternions ``(..., 4)`` (w x y z)."""
    w, x, y, z = q.unbind(-1)
    return torch.stack([1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y),
                        2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x),
                        2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)], -1).unflatten(-1, (3, 3))


def quat_multiply(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    aw, ax, ay, az = a.unbind(-1)
    bw, bx, by, bz = b.unbind(-1)
    return torch.stack([aw * bw - ax * bx - ay * by - az * bz, aw * bx + ax * bw + ay * bz - az * by,
                        aw * by - ax * bz + ay * bw + az * bx, aw * bz + ax * by - ay * bx + az * bw], -1)


def quat_conjugate(q: torch.Tensor) -> torch.Tensor:
    return torch.cat([q[..., :1], -q[..., 1:]], -1)


def quat_from_rotvec(v: torch.Tensor) -> torch.Tensor:
    angle = v.norm(dim=-1, keepdim=True)
    # sin(a/2)/a, with its series near 0 (no division by a vanishing angle)
    k = torch.where(angle > 1e-6, torch.sin(angle / 2) / angle.clamp(min=1e-6), 0.5 - angle ** 2 / 48)
    return torch.cat([torch.cos(angle / 2), v * k], -1)


def rotvec_from_quat(q: torch.Tensor) -> torch.Tensor:
    q = q * torch.where(q[..., :1] < 0, -1.0, 1.0)
    s = q[..., 1:].norm(dim=-1, keepdim=True)
    angle = 2 * torch.atan2(s, q[..., :1])
    return q[..., 1:] * torch.where(s > 1e-6, angle / s.clamp(min=1e-6), 2.0)


def quat_from_yaw(yaw: torch.Tensor) -> torch.Tensor:
    zero = torch.zeros_like(yaw)
    return torch.stack([torch.cos(yaw / 2), zero, zero, torch.sin(yaw / 2)], -1)


def yaw_from_quat(q: torch.Tensor) -> torch.Tensor:
    """Rotation about world z (rad) of quaternions ``(..., 4)`` (w, x, y, z)."""
    w, x, y, z = q.unbind(-1)
    return torch.atan2(2 * (w * z + x * y), 1 - 2 * (y * y + z * z))


def mlp(inputs: int, hidden: int, outputs: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(inputs, hidden), nn.SiLU(), nn.Linear(hidden, hidden), nn.SiLU(),
                         nn.Linear(hidden, outputs))


def servo_inputs(q: torch.Tensor, q_prev: torch.Tensor, q_prev2: torch.Tensor, target: torch.Tensor,
                 targets_before: torch.Tensor) -> torch.Tensor:
    """Per joint: the last two velocities and the current and three earlier targets relative to the
    joint now, ``(..., J, SERVO_LAGS)``; ``targets_before (..., 3, J)`` newest first."""
    return torch.stack([q - q_prev, q_prev - q_prev2, target - q, *(targets_before - q[..., None, :]).unbind(-2)], -1)


def fit_servo_prior(positions: list[torch.Tensor], actions: list[torch.Tensor]) -> torch.Tensor:
    """Least-squares coefficients ``(J, SERVO_LAGS)`` of each joint's next step on ``servo_inputs``,
    over episodes of measured ``positions (T + 1, J)`` and ``actions (T, J)`` (both padded at the start
    as a rollout pads them: the robot at rest at its first position, the first target repeated)."""
    rows, steps = [], []
    for q, a in zip(positions, actions):
        q, a = q.double(), a.double()
        qp = torch.cat([q[:1], q[:1], q])
        ap = torch.cat([a[:1].expand(ACTION_HISTORY, -1), a])
        t = torch.arange(len(a))
        history = torch.stack([ap[t + ACTION_HISTORY - k] for k in range(1, ACTION_HISTORY + 1)], 1)
        rows.append(servo_inputs(qp[t + 2], qp[t + 1], qp[t], ap[t + ACTION_HISTORY], history))
        steps.append(q[1:] - q[:-1])
    x, y = torch.cat(rows), torch.cat(steps)
    return torch.stack([torch.linalg.lstsq(x[:, j], y[:, j, None]).solution[:, 0] for j in range(x.shape[1])]).float()


class RolloutState(NamedTuple):
    """The imagined state of B episodes after a control step (raw joints in the checkpoint's order)."""
    q: torch.Tensor            # (B, J) joints now
    q_prev: torch.Tensor       # (B, J) one step before
    q_prev2: torch.Tensor      # (B, J) two steps before
    targets: torch.Tensor      # (B, 3, J) the last three targets, newest first
    hands: torch.Tensor        # (B, 2, K, 3) hand keypoints at q (world frame, m)
    hands_prev: torch.Tensor   # (B, 2, K, 3) at q_prev
    pos: torch.Tensor          # (B, 3) object position (m)
    pos_prev: torch.Tensor     # (B, 3)
    quat: torch.Tensor         # (B, 4) object orientation (w x y z)
    quat_prev: torch.Tensor    # (B, 4)
    held: torch.Tensor         # (B,) probability that both pads hold the object
    contact: torch.Tensor      # (B,) probability that the robot has hit something so far (sticky)


class StepOutput(NamedTuple):
    held_logit: torch.Tensor   # (B,)
    contact_logit: torch.Tensor  # (B,) the collision logit of this step alone
    forces: torch.Tensor       # (B, 2) static and press contact forces of this step, log1p(F / 5 N)


class ObjectDynamics(nn.Module):
    """One control step of joints and object (see the module doc)."""

    def __init__(self, joint_dim: int, num_tasks: int, task_dim: int, hidden: int, edge_dim: int,
                 kinematics: HandKinematics) -> None:
        super().__init__()
        self.kinematics = kinematics
        keypoints = len(KEYPOINT_NAMES)
        self.object_features_dim = 1 + 4 + 3 + 3 + 2 + 3 + 3 + task_dim
        hand_features = keypoints * 3 * 3 + keypoints * 2 * 2 + 6 + 2 + 2 + 2
        self.task_embedding = nn.Embedding(num_tasks, task_dim)
        self.edge = mlp(hand_features + self.object_features_dim, hidden, edge_dim)
        self.object = mlp(edge_dim + self.object_features_dim, hidden, 3 + 3 + 1 + 1 + 2)
        self.joints = mlp(4 * joint_dim + 2 * edge_dim, hidden, joint_dim)
        # Set from the checkpoint's normalisation (set_statistics), so not in the state_dict.
        self.register_buffer("servo", torch.zeros(joint_dim, SERVO_LAGS), persistent=False)
        self.register_buffer("joint_mean", torch.zeros(joint_dim), persistent=False)
        self.register_buffer("joint_std", torch.ones(joint_dim), persistent=False)
        # The correction's scale per joint: arm radians and gripper metres per control step.
        self.register_buffer("correction_scale", torch.full((joint_dim,), 0.002), persistent=False)
        # The objects' mean resting height (m): keypoint heights are measured from it.
        self.register_buffer("plane_z", torch.zeros(()), persistent=False)
        # The work surface's height (m, Normalisation.surface_z): clearances are measured from it.
        self.register_buffer("surface_z", torch.zeros(()), persistent=False)

    def set_statistics(self, servo: torch.Tensor, joint_mean: torch.Tensor, joint_std: torch.Tensor,
                       gripper_dims: list[int], plane_z: float, surface_z: float) -> None:
        self.servo.copy_(servo)
        self.joint_mean.copy_(joint_mean)
        self.joint_std.copy_(joint_std)
        self.correction_scale.fill_(0.002)
        self.correction_scale[gripper_dims] = 0.001
        self.plane_z.fill_(plane_z)
        self.surface_z.fill_(surface_z)

    def initial_state(self, q0: torch.Tensor, first_target: torch.Tensor, pos: torch.Tensor, quat: torch.Tensor,
                      held: torch.Tensor | None = None, contact: torch.Tensor | None = None) -> RolloutState:
        """The robot at rest at ``q0 (B, J)``, its earlier targets all ``first_target``, the object at
        ``pos, quat``; held and contact default to 0 (an episode's start)."""
        _, _, hands = self.kinematics(q0)
        zero = torch.zeros(len(q0))
        return RolloutState(q0, q0, q0, first_target[:, None].expand(-1, ACTION_HISTORY, -1), hands, hands,
                            pos, pos, quat, quat, zero if held is None else held, zero if contact is None else contact)

    def _object_features(self, s: RolloutState, half: torch.Tensor, goal: torch.Tensor, task: torch.Tensor) -> torch.Tensor:
        turn = rotvec_from_quat(quat_multiply(s.quat, quat_conjugate(s.quat_prev)))
        return torch.cat([(s.pos[:, 2:] - self.plane_z) / _KEYPOINT_SCALE_M, s.quat * torch.where(s.quat[:, :1] < 0, -1.0, 1.0),
                          (s.pos - s.pos_prev) / _SPEED_SCALE_M, turn / 0.05, torch.stack([s.held, s.contact], -1),
                          half / _SIZE_SCALE_M, (goal - s.pos) / _KEYPOINT_SCALE_M, self.task_embedding(task)], -1)

    def _hand_features(self, s: RolloutState, target_hands: torch.Tensor, target: torch.Tensor,
                       half: torch.Tensor) -> torch.Tensor:
        to_object = quat_matrix(s.quat)[:, None]   # world -> object frame: x @ R

        def in_object_frame(points: torch.Tensor, scale: float) -> torch.Tensor:
            return ((points @ to_object) / scale).flatten(-2).clamp(-20, 20)

        centre = s.pos[:, None, None]
        # the hand's axes (grasp point to pad 'a', fingertips to grasp point) in the object's frame
        across = F.normalize(s.hands[:, :, 1] - s.hands[:, :, 6], dim=-1)
        along = F.normalize(s.hands[:, :, 0] - (s.hands[:, :, 2] + s.hands[:, :, 3]) / 2, dim=-1)
        openings = torch.stack([s.q[:, -2:], target[:, -2:]], -1)
        across_object = (across[:, :, None] @ to_object)[:, :, 0]
        width = 2 * (across_object.abs() * half[:, None]).sum(-1, keepdim=True)   # (B, 2, 1) across the fingers
        batch = len(s.q)
        return torch.cat([in_object_frame(s.hands - centre, _KEYPOINT_SCALE_M),
                          in_object_frame(s.hands - s.hands_prev, _SPEED_SCALE_M),
                          in_object_frame(target_hands - centre, _KEYPOINT_SCALE_M),
                          ((s.hands[..., 2] - self.plane_z) / _KEYPOINT_SCALE_M).clamp(-20, 20),
                          ((target_hands[..., 2] - self.plane_z) / _KEYPOINT_SCALE_M).clamp(-20, 20),
                          ((s.hands[..., 2] - self.surface_z) / _CLEARANCE_SCALE_M).clamp(-5, 5),
                          ((target_hands[..., 2] - self.surface_z) / _CLEARANCE_SCALE_M).clamp(-5, 5),
                          across_object, (along[:, :, None] @ to_object)[:, :, 0], openings / 0.04,
                          ((width - openings) / _SQUEEZE_SCALE_M).clamp(-10, 10), torch.eye(2).expand(batch, 2, 2)],
                         -1)

    def step(self, s: RolloutState, target: torch.Tensor, target_hands: torch.Tensor, half: torch.Tensor,
             goal: torch.Tensor, task: torch.Tensor) -> tuple[RolloutState, StepOutput]:
        """Apply ``target (B, J)`` (raw) for one control step; ``target_hands`` are its keypoints
        (``kinematics(target)``, computed by the caller for a whole chunk at once)."""
        obj = self._object_features(s, half, goal, task)
        hand = self._hand_features(s, target_hands, target, half)
        edges = self.edge(torch.cat([hand, obj[:, None].expand(-1, 2, -1)], -1))
        out = self.object(torch.cat([edges.sum(1), obj], -1))
        quat = F.normalize(quat_multiply(quat_from_rotvec(out[:, 3:6] * 0.05), s.quat), dim=-1)
        normalised = (s.q - self.joint_mean) / self.joint_std
        correction = self.joints(torch.cat([normalised, (s.q - s.q_prev) / 0.01, (s.q_prev - s.q_prev2) / 0.01,
                                            (target - s.q) / 0.05, edges.flatten(1)], -1))
        prior = (servo_inputs(s.q, s.q_prev, s.q_prev2, target, s.targets) * self.servo).sum(-1)
        q = s.q + prior + correction * self.correction_scale
        _, _, hands = self.kinematics(q)
        held = torch.sigmoid(out[:, 6])
        grasp = s.hands[:, :, 0]
        holder = torch.softmax(-(grasp - s.pos[:, None]).norm(dim=-1) / _HOLDER_SCALE_M, -1)
        carried = (holder[..., None] * (hands[:, :, 0] - grasp)).sum(1)
        contact_logit = out[:, 7]
        nxt = RolloutState(q, s.q, s.q_prev, torch.cat([target[:, None], s.targets[:, :-1]], 1), hands, s.hands,
                           s.pos + held[:, None] * carried + out[:, :3] * _SPEED_SCALE_M, s.pos, quat, s.quat, held,
                           torch.maximum(s.contact, torch.sigmoid(contact_logit)))
        return nxt, StepOutput(out[:, 6], contact_logit, out[:, 8:10])

    @staticmethod
    def force_target(forces_n: torch.Tensor) -> torch.Tensor:
        """Recorded contact forces (N) in the scale the dynamics predicts them."""
        return torch.log1p(forces_n.clamp(min=0) / _FORCE_SCALE_N)

    @staticmethod
    def forces_newton(predicted: torch.Tensor) -> torch.Tensor:
        """Predicted contact forces (StepOutput.forces) in N."""
        return torch.expm1(predicted).clamp(min=0) * _FORCE_SCALE_N
