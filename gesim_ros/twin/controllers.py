"""Open-loop scripted controllers for the twin's tasks, with an injectable failure mode.

A controller plans the whole episode up front from (task, seed, failure_rate, rng) alone: it rebuilds
the same randomised scene from the seed on its own MjData, solves inverse kinematics there (damped
least squares on ``mj_jacSite``) along straight Cartesian segments with minimum-jerk timing, and
returns joint targets for the 16 action joints ([L7 arm, R7 arm, L gripper, R gripper]) at the
control rate. It never reads the running twin, so the twin and a world model can be driven by the
exact same command stream (shadow mode), and the plan is reproducible from its inputs.

Failure knob: with probability ``failure_rate`` an episode gets one failure mode, drawn uniformly
from the task's ``FAILURE_MODES`` (mode -> the label the twin's checker is expected to give):

- ``grasp_offset``: the hand aims 5-7 cm beside the object (missed grasp / missed contact);
- ``weak_grip``: the grip is commanded only slightly narrower than the object, so the squeeze
  force (gripper kp x interference) gives 30-50 % of the friction needed: the object slips out;
- ``fast_approach``: the approach is fast and ends too low (or, pushing, too high), so the hand
  rams the table/housing or tips the block;
- ``early_close`` / ``early_stop`` (timing noise): the gripper closes before the descent and lands
  on top of the object / the push stops well short of the target.

Graded severities, exploration and arm noise (the rich-interaction recipe, twin/interaction.py):
``severity`` gives a failure mode's parameters explicitly (continuous, from harmless to failing;
the keys are those it records in ``failure_params``, plus ``approach_s`` for a fast approach's
duration, ``push_height_m`` / ``push_s`` for a high fast push and ``close_above_m`` for an early
close at that height above the grasp), ``exploration`` adds a contact before the task (``nudge``:
shove the object by ``nudge_m`` past touching it, towards ``nudge_dir``; ``regrasp``: a first close
``first_offset_m`` beside it, then open and grasp again; ``repush``: a first push to
``first_fraction`` of the way, back off, push again), and ``arm_noise_rad`` adds smooth noise
(a few low-frequency sinusoids per joint) of that amplitude to the working arm's targets. None of
these decide the label: the twin's checker does.

Every plan, failures included, respects the contract's joint limits and velocity limits: failures
come from where and when the robot moves, not from commands a real robot would reject.
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from gesim_ros.twin import scene as ts
from gesim_ros.twin import tasks as tt
from gesim_ros.contract.contract import Contract, load_contract
from gesim_ros.twin.scene import mujoco

if TYPE_CHECKING:
    from gesim_ros.twin.physics import G2Twin


class PlanningError(RuntimeError):
    """The scripted plan is infeasible (IK did not converge or a limit would be exceeded)."""


@dataclass(frozen=True)
class Segment:
    """Move the grasp site in a straight line to ``pos`` with the hand pointing down at ``yaw``
    (tipped by ``tilt`` about its y axis, fingertips towards hand -x), while the gripper opening
    goes to ``grip``, over ``duration`` seconds (minimum-jerk timing)."""
    pos: tuple[float, float, float]
    yaw: float
    grip: float
    duration: float
    tilt: float = 0.0


@dataclass(frozen=True)
class JointPlan:
    targets: np.ndarray            # (T, 16) in ``joint_names`` order
    period_s: float
    joint_names: tuple[str, ...]
    injected_failure: str | None
    expected_label: str
    failure_params: dict[str, float] = field(default_factory=dict)

    @property
    def duration_s(self) -> float:
        return len(self.targets) * self.period_s


def _min_jerk(tau: np.ndarray) -> np.ndarray:
    return tau ** 3 * (10 - 15 * tau + 6 * tau ** 2)


def _hand_quat(yaw: float, tilt: float = 0.0) -> np.ndarray:
    """Hand pointing down (grasp site z up, approach along world -z), turned by ``yaw`` about the
    world z axis, then tipped by ``tilt`` about its own y axis."""
    q = np.zeros(4)
    mujoco.mju_mulQuat(q, np.array([math.cos(yaw / 2), 0.0, 0.0, math.sin(yaw / 2)]),
                       np.array([math.cos(tilt / 2), 0.0, math.sin(tilt / 2), 0.0]))
    return q


def _slerp(q0: np.ndarray, q1: np.ndarray, s: float) -> np.ndarray:
    if np.dot(q0, q1) < 0:
        q1 = -q1
    ang = math.acos(min(1.0, float(np.dot(q0, q1))))
    if ang < 1e-6:
        return q1.copy()
    return (math.sin((1 - s) * ang) * q0 + math.sin(s * ang) * q1) / math.sin(ang)


class ArmIK:
    """Damped-least-squares IK for one arm's grasp site on a private MjData of the episode scene,
    biased in the null space towards the home (elbow-out) posture to stay on one IK branch."""

    def __init__(self, model: mujoco.MjModel, contract: Contract, side: str, home: dict[str, float]):
        self.model, self.data = model, mujoco.MjData(model)
        names = contract.joint_groups[f"{side}_arm"]
        self.qadr = np.array([model.joint(n).qposadr[0] for n in names])
        self.dadr = np.array([model.joint(n).dofadr[0] for n in names])
        self.lo = np.array([contract.joint_limits[n][0] for n in names]) + 0.02
        self.hi = np.array([contract.joint_limits[n][1] for n in names]) - 0.02
        self.q_home = np.array([home[n] for n in names])
        for group in ("waist", "head", "left_arm", "right_arm"):  # grippers are tendons: irrelevant here
            for n in contract.joint_groups[group]:
                self.data.qpos[model.joint(n).qposadr[0]] = home[n]
        self.site = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_SITE, ts.grasp_site(side))
        self._jp, self._jr = np.zeros((3, model.nv)), np.zeros((3, model.nv))

    def fk(self, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        self.data.qpos[self.qadr] = q
        mujoco.mj_kinematics(self.model, self.data)
        quat = np.zeros(4)
        mujoco.mju_mat2Quat(quat, self.data.site_xmat[self.site])
        return self.data.site_xpos[self.site].copy(), quat

    def solve(self, pos: np.ndarray, quat: np.ndarray, q_init: np.ndarray, iters: int = 300) -> np.ndarray:
        q = q_init.copy()
        err_rot = np.zeros(3)
        cur = np.zeros(4)
        for it in range(iters):
            p, cur[:] = self.fk(q)
            mujoco.mj_comPos(self.model, self.data)
            err_pos = pos - p
            mujoco.mju_subQuat(err_rot, quat, cur)       # rotation taking cur to quat, in the cur frame
            err_rot_w = self.data.site_xmat[self.site].reshape(3, 3) @ err_rot
            if np.linalg.norm(err_pos) < 1e-3 and np.linalg.norm(err_rot) < 1e-2:   # 1 mm, 0.6 deg
                return q
            mujoco.mj_jacSite(self.model, self.data, self._jp, self._jr, self.site)
            jac = np.vstack([self._jp, self._jr])[:, self.dadr]
            lam = 0.05 if it < 20 else 0.01   # robust far from the solution, then accurate near it
            jinv = jac.T @ np.linalg.inv(jac @ jac.T + lam ** 2 * np.eye(6))
            dq = jinv @ np.concatenate([err_pos, err_rot_w]) + (np.eye(7) - jinv @ jac) @ (0.05 * (self.q_home - q))
            q = np.clip(q + dq, self.lo, self.hi)
        raise PlanningError(f"IK did not converge to pos {np.round(pos, 3).tolist()} "
                            f"(residual {np.linalg.norm(err_pos) * 1000:.1f} mm, {np.linalg.norm(err_rot):.3f} rad)")


FINGER_REACH = ts.FINGER_THICKNESS + 0.002   # closed fingers' half thickness along the closing axis, with margin
FINGER_TIP_CLEAR = 0.012                     # a nudge's fingertips above the object's bottom
NOISE_FREQ_HZ = (0.15, 0.8)   # arm noise: slow enough to stay within the joints' velocity limits
NOISE_RAMP_S = 0.5            # and faded in, so the first target stays at the home pose


class ScriptedController:
    """Plans one open-loop episode; subclasses define the task's segments and failure modes."""
    task: str
    task_object: str                       # the body the task manipulates
    FAILURE_MODES: dict[str, str]
    EXPLORATIONS: tuple[str, ...]

    def __init__(self, seed: int, failure_rate: float = 0.0, rng: np.random.Generator | None = None, *,
                 contract: Contract | None = None, control_hz: float = 30.0, failure_mode: str | None = None,
                 severity: dict[str, float] | None = None, exploration: str | None = None,
                 arm_noise_rad: float = 0.0):
        """``rng`` drives the failure draw (default: a stream derived from ``seed`` and the task);
        ``failure_mode`` forces one mode regardless of ``failure_rate`` (for tests and targeted
        data collection); ``severity``, ``exploration``, ``arm_noise_rad``: see the module doc."""
        if not (isinstance(failure_rate, (int, float)) and 0.0 <= failure_rate <= 1.0):
            raise ValueError(f"failure_rate must be in [0, 1], got {failure_rate!r}")
        if failure_mode is not None and failure_mode not in self.FAILURE_MODES:
            raise ValueError(f"unknown failure_mode '{failure_mode}' for task {self.task}; "
                             f"known: {', '.join(self.FAILURE_MODES)}")
        if not (control_hz > 0 and math.isfinite(control_hz)):
            raise ValueError(f"control_hz must be a positive number, got {control_hz!r}")
        if exploration is not None and exploration not in self.EXPLORATIONS:
            raise ValueError(f"unknown exploration '{exploration}' for task {self.task}; "
                             f"known: {', '.join(self.EXPLORATIONS)}")
        if not (isinstance(arm_noise_rad, (int, float)) and 0.0 <= arm_noise_rad <= 0.2):
            raise ValueError(f"arm_noise_rad must be in [0, 0.2] rad, got {arm_noise_rad!r}")
        self.contract = contract or load_contract()
        self.spec = tt.make_episode(self.task, seed)
        if rng is None:   # a stream of its own per (seed, task): draws must not repeat across tasks
            rng = np.random.default_rng([int(seed), zlib.crc32(self.task.encode()), 0xFA11])
        if failure_mode is None and rng.random() < failure_rate:
            failure_mode = list(self.FAILURE_MODES)[int(rng.integers(len(self.FAILURE_MODES)))]
        self.failure_mode = failure_mode
        self.fparams: dict[str, float] = {}
        self.severity = dict(severity or {})
        self.exploration, self.arm_noise_rad = exploration, float(arm_noise_rad)
        self.model = tt.build_model(self.contract, self.spec)
        self.home = ts.home_pose(self.contract)
        self._ik = ArmIK(self.model, self.contract, self.spec.side, self.home)
        self.home_site = self._ik.fk(self._ik.q_home)[0]     # where the grasp site starts
        segments = self._segments(self.spec.params, rng)
        unused = sorted(set(self.severity) - set(self.fparams))
        if unused:   # a key the plan never read is a typo or a parameter of another mode
            raise ValueError(f"severity keys {unused} do not apply to task {self.task} with failure mode "
                             f"{self.failure_mode} and exploration {self.exploration}")
        self.plan = self._build(segments, 1.0 / control_hz)

    # -- the plan ---------------------------------------------------------------------------------
    @property
    def period_s(self) -> float:
        return self.plan.period_s

    def chunk(self, k: int, horizon: int = 1) -> np.ndarray:
        """Targets for control steps k .. k+horizon-1 as (horizon, 16); past the end the last
        targets repeat (the robot holds its final pose)."""
        if k < 0 or horizon < 1:
            raise ValueError(f"need step k >= 0 and horizon >= 1, got k={k}, horizon={horizon}")
        idx = np.minimum(np.arange(k, k + horizon), len(self.plan.targets) - 1)
        return self.plan.targets[idx]

    def chunk_at(self, t: float, horizon: int = 1) -> np.ndarray:
        """Like ``chunk`` for the control step active at time ``t`` (seconds from the start)."""
        return self.chunk(int(math.floor(t / self.plan.period_s + 1e-9)), horizon)

    def _segments(self, p: dict[str, Any], rng: np.random.Generator) -> list[Segment]:
        raise NotImplementedError

    def _build(self, segments: list[Segment], period: float) -> JointPlan:
        side, ik = self.spec.side, self._ik
        q = ik.q_home.copy()
        pos0, quat0 = ik.fk(q)
        grip0 = ts.GRIPPER_MAX_OPENING
        names = self.contract.arm_joint_names
        base_row = np.array([self.home[n] for n in names])
        arm_cols = [names.index(n) for n in self.contract.joint_groups[f"{side}_arm"]]
        grip_col = names.index(self.contract.joint_groups[f"{side}_gripper"][0])
        rows = []
        for seg in segments:
            n = max(1, int(round(seg.duration / period)))
            pos1, quat1 = np.array(seg.pos), _hand_quat(seg.yaw, seg.tilt)
            for s in _min_jerk(np.arange(1, n + 1) / n):
                q = ik.solve(pos0 + s * (pos1 - pos0), _slerp(quat0, quat1, s), q)
                row = base_row.copy()
                row[arm_cols] = q
                row[grip_col] = grip0 + s * (seg.grip - grip0)
                rows.append(row)
            pos0, quat0, grip0 = pos1, quat1, seg.grip
        targets = np.array(rows)
        if self.arm_noise_rad > 0:
            targets[:, arm_cols] += self._arm_noise(len(targets), period, len(arm_cols))
            lo = np.array([self.contract.joint_limits[n][0] for n in names])
            hi = np.array([self.contract.joint_limits[n][1] for n in names])
            targets = np.clip(targets, lo, hi)   # noise never asks for what the contract refuses
        self._check_limits(targets, period)
        return JointPlan(targets=targets, period_s=period, joint_names=names, injected_failure=self.failure_mode,
                         expected_label=self.FAILURE_MODES.get(self.failure_mode, "success"),
                         failure_params=dict(self.fparams))

    def _arm_noise(self, steps: int, period: float, joints: int) -> np.ndarray:
        """(steps, joints) smooth noise peaking at ``arm_noise_rad``: three sinusoids per joint at
        NOISE_FREQ_HZ, faded in over NOISE_RAMP_S; drawn from a stream of its own per (seed, task)."""
        rng = np.random.default_rng([int(self.spec.seed), zlib.crc32(self.task.encode()), 0x4015E])
        t = np.arange(1, steps + 1)[:, None, None] * period
        freq = rng.uniform(*NOISE_FREQ_HZ, (1, joints, 3))
        wave = (rng.uniform(0.3, 1.0, (1, joints, 3)) * np.sin(2 * np.pi * freq * t + rng.uniform(0, 2 * np.pi, (1, joints, 3)))).sum(-1)
        wave *= self.arm_noise_rad / np.abs(wave).max(axis=0, keepdims=True)
        ramp = np.clip(t[:, :, 0] / NOISE_RAMP_S, 0.0, 1.0)
        return wave * (ramp * ramp * (3 - 2 * ramp))

    def _check_limits(self, targets: np.ndarray, period: float) -> None:
        names = self.contract.arm_joint_names
        lo = np.array([self.contract.joint_limits[n][0] for n in names])
        hi = np.array([self.contract.joint_limits[n][1] for n in names])
        vmax = np.array([self.contract.max_joint_velocity[n] for n in names])
        start = np.array([self.home[n] for n in names])
        speed = np.abs(np.diff(np.vstack([start, targets]), axis=0)) / period
        if (targets < lo).any() or (targets > hi).any():
            raise PlanningError("plan leaves the contract's joint limits")
        worst = np.unravel_index(np.argmax(speed / vmax), speed.shape)
        if speed[worst] > vmax[worst[1]]:
            raise PlanningError(f"plan moves {names[worst[1]]} at {speed[worst]:.2f} > "
                                f"{vmax[worst[1]]} (contract max velocity) at step {worst[0]}; slow the segment")

    # -- helpers shared by the tasks -------------------------------------------------------------
    def _side_sign(self) -> float:
        return 1.0 if self.spec.side == "left" else -1.0

    def _friction(self, body: str) -> float:
        """Pad-object friction as MuJoCo combines it (the larger coefficient)."""
        geom = self.model.body(body).geomadr[0]
        return max(float(self.model.geom_friction[geom][0]), ts.PAD_FRICTION)

    def _param(self, name: str, lo: float, hi: float, rng: np.random.Generator) -> float:
        """``severity[name]`` if given, else drawn uniformly in [lo, hi); recorded in fparams."""
        value = float(self.severity[name]) if name in self.severity else float(rng.uniform(lo, hi))
        self.fparams[name] = value
        return value

    def _given(self, name: str, default: float) -> float:
        """``severity[name]`` if given (recorded in fparams), else the scripted ``default``."""
        if name not in self.severity:
            return default
        self.fparams[name] = float(self.severity[name])
        return self.fparams[name]

    def _weak_grip(self, width: float, holding_force: float, rng: np.random.Generator) -> float:
        """A grip target whose squeeze gives only 30-50 % (or ``severity``'s grip_force_ratio) of the
        friction ``holding_force`` needs."""
        ratio = self._param("grip_force_ratio", 0.3, 0.5, rng)
        squeeze = ratio * holding_force / (2 * self._friction(self.task_object))
        self.fparams.update(squeeze_n=squeeze)
        return width - squeeze / ts.GRIPPER_KP

    def _aside(self, center: np.ndarray, heading: float, rng: np.random.Generator, lo: float,
               hi: float) -> np.ndarray:
        """``center`` moved lo..hi metres along the horizontal direction ``heading`` (rad), or its
        opposite, whichever is towards the robot, so the offset pose stays reachable."""
        dist = self._param("offset_m", lo, hi, rng)
        axis = np.array([math.cos(heading), math.sin(heading)])
        axis *= -1.0 if axis[0] > 0 else 1.0
        return center + dist * axis

    def _nudge(self, center: np.ndarray, half: float, bottom_z: float, yaw: float,
               reach_s: float = 1.0) -> list[Segment]:
        """Exploration 'nudge' (reach_s + 0.8 s, before the task): the closed fingers come down ``half`` + 3 cm
        from the object on the side away from ``nudge_dir`` and sweep towards it until ``nudge_m``
        past touching its face (negative: they stop short): the object may move before the task."""
        push, heading = self._given("nudge_m", 0.0), self._given("nudge_dir", 0.0)
        axis = np.array([math.cos(heading), math.sin(heading)])
        reach = half + FINGER_REACH                # fingers' centre when touching a face head on
        z = bottom_z + FINGER_TIP_CLEAR + ts.FINGER_TIP_BELOW_GRASP
        start, end = center - (reach + 0.03) * axis, center - (reach - push) * axis
        return [Segment((*start, z + 0.06), yaw, 0.0, reach_s), Segment((*start, z), yaw, 0.0, 0.3),
                Segment((*end, z), yaw, 0.0, 0.5)]

    def _regrasp(self, center: np.ndarray, yaw: float, grasp_z: float, pre_z: float, grip: float,
                 width: float, opened: float) -> list[Segment]:
        """Exploration 'regrasp': the descent and a first close ``first_offset_m`` beside the object
        (along the fingers' width), then open to 2 cm wider than it and slide over it, where the
        task's own close follows (fits the time limit: 1.45 s more than a nominal descent)."""
        off = self._given("first_offset_m", 0.0)
        axis = np.array([math.cos(yaw), math.sin(yaw)])
        axis *= -1.0 if axis[0] > 0 else 1.0          # towards the robot: stays reachable
        at = center + off * axis
        return [Segment((*at, pre_z), yaw, opened, 1.4), Segment((*at, grasp_z), yaw, opened, 0.8),
                Segment((*at, grasp_z), yaw, grip, 0.6), Segment((*at, grasp_z), yaw, width + 0.02, 0.45),
                Segment((*center, grasp_z), yaw, width + 0.02, 0.4)]

    def _early_close(self, at: np.ndarray, pre_z: float, grasp_z: float, yaw: float, opened: float) -> list[Segment]:
        """Graded early close: the gripper shuts ``close_above_m`` above the grasp height, then
        descends closed (0: closes where it grasps, a nominal grasp)."""
        above = self._given("close_above_m", 0.0)
        return [Segment((*at, pre_z), yaw, opened, 1.4), Segment((*at, grasp_z + above), yaw, opened, 0.8),
                Segment((*at, grasp_z + above), yaw, 0.0, 0.9), Segment((*at, grasp_z), yaw, 0.0, 0.5)]


class PickPlaceController(ScriptedController):
    task = "pick_place"
    task_object = "cube"
    FAILURE_MODES = {"grasp_offset": "missed_grasp", "weak_grip": "slip_drop", "fast_approach": "collision",
                     "early_close": "collision"}
    EXPLORATIONS = ("nudge", "regrasp")

    def _segments(self, p, rng):
        mode = self.failure_mode
        z_t, h = ts.TABLE_TOP_Z, p["cube_half"]
        yaw = p["cube_yaw"]
        width = 2 * h
        cube = np.array(p["cube_pos"])
        first = self._nudge(cube, h, z_t, yaw) if self.exploration == "nudge" else []
        first_s = 0.8 if first else 1.4            # from beside the object: a shorter way
        if mode == "grasp_offset":         # along the hand x axis: the fingers pass beside the cube
            cube = self._aside(cube, yaw, rng, 0.055, 0.07)
        grasp_z = z_t + ts.FINGER_TIP_BELOW_GRASP + 0.008       # fingertips 8 mm above the table
        pre_z = grasp_z + 0.10
        grip = width - 0.02                                      # 16 N squeeze
        if mode == "weak_grip":
            grip = self._weak_grip(width, float(self.model.body("cube").mass[0]) * 9.81, rng)
        bx, by = p["bin_pos"]
        release_z = z_t + 0.11                                   # cube bottom ~2 cm above the bin rim
        approach_grip = 0.0 if mode == "early_close" else ts.GRIPPER_MAX_OPENING
        descend = [Segment((*cube, pre_z), yaw, approach_grip, first_s),
                   Segment((*cube, grasp_z), yaw, approach_grip, 0.8)]
        if mode == "early_close" and "close_above_m" in self.severity:
            descend = self._early_close(cube, pre_z, grasp_z, yaw, ts.GRIPPER_MAX_OPENING)
        if mode == "fast_approach":        # no stop above the cube, and a height error into the table
            drop = self._param("too_low_m", 0.04, 0.06, rng)
            descend = [Segment((*cube, grasp_z - drop), yaw, approach_grip, self._given("approach_s", 1.5))]
        if self.exploration == "regrasp":
            descend = self._regrasp(cube, yaw, grasp_z, pre_z, grip, width, ts.GRIPPER_MAX_OPENING)
        return [*first, *descend,
                Segment((*cube, grasp_z), yaw, grip, 0.6),
                Segment((*cube, grasp_z), yaw, grip, 0.2),
                Segment((*cube, pre_z), yaw, grip, 0.8),
                Segment((bx, by, release_z), yaw, grip, 1.2),
                Segment((bx, by, release_z), yaw, ts.GRIPPER_MAX_OPENING, 0.6),
                Segment(tuple(self.home_site), 0.0, ts.GRIPPER_MAX_OPENING, 1.0)]


class PushController(ScriptedController):
    task = "push"
    task_object = "block"
    FAILURE_MODES = {"grasp_offset": "missed_contact", "fast_approach": "knocked_over", "early_stop": "missed_target"}
    EXPLORATIONS = ("nudge", "repush")
    PUSH_OPENING = 0.02   # fingers slightly apart: two contact points keep the block from turning
    # Tipped so the fingertip edges lead: the hand (wider than the fingers) then never reaches the
    # block, and the push acts 1 cm above the table, well below the block's tipping height.
    TILT = 0.45

    def _segments(self, p, rng):
        mode = self.failure_mode
        s = self._side_sign()
        z_t, w = ts.TABLE_TOP_Z, p["block_half"]
        yaw = s * math.pi / 2          # hand -x (the leading side) points along the push, -s * y
        x, y0 = p["block_pos"]
        # the push's hand turns a quarter turn from home: a slower reach keeps the wrist within its limit
        first = self._nudge(np.array([x, y0]), w, z_t, yaw, 1.6) if self.exploration == "nudge" else []
        y_target = y0 - s * p["push_distance"]
        if mode == "grasp_offset":         # across the push direction: the fingers pass beside the block
            x = self._aside(np.array([x, y0]), 0.0, rng, w + 0.07, w + 0.085)[0]
        # The leading fingertip edge sits at (-FINGER_HALF_WIDTH, -FINGER_TIP_BELOW_GRASP) in the
        # hand's x-z plane; place the grasp site so that edge touches the block face at tip_z.
        c, sn = math.cos(self.TILT), math.sin(self.TILT)
        lead = ts.FINGER_HALF_WIDTH * c + ts.FINGER_TIP_BELOW_GRASP * sn    # edge ahead of the site
        rise = ts.FINGER_TIP_BELOW_GRASP * c - ts.FINGER_HALF_WIDTH * sn    # site above the edge
        tip_z = z_t + 0.01
        push_s = 1.8
        if mode == "fast_approach":
            tip_z = z_t + self._given("push_height_m", 2 * tt.Push.BLOCK_HALF_HEIGHT - 0.02)
            push_s = self._given("push_s", 0.7)
        contact_y = y0 + s * (w + lead)            # site y when the edge touches the block
        y_end = y_target + s * (w + lead)
        if mode == "early_stop":
            frac = self._param("push_fraction", 0.3, 0.6, rng)
            y_end = contact_y - frac * (contact_y - y_end)
            push_s *= frac
        start = contact_y + s * 0.04
        z, g, tl = tip_z + rise, self.PUSH_OPENING, self.TILT
        above = z_t + 2 * tt.Push.BLOCK_HALF_HEIGHT + 0.04 + rise    # fingertips clear the block top
        pushes = [Segment((x, y_end, z), yaw, g, push_s, tl)]
        if self.exploration == "repush":   # part way, back off 3 cm, then push on to the end
            frac = self._given("first_fraction", 0.5)
            y_first = contact_y - frac * (contact_y - y_end)
            pushes = [Segment((x, y_first, z), yaw, g, push_s * frac, tl),
                      Segment((x, y_first + s * 0.03, z), yaw, g, 0.5, tl),
                      Segment((x, y_end, z), yaw, g, push_s * (1 - frac) + 0.3, tl)]
        return [*first,
                Segment((x, start, above), yaw, g, 1.0 if first else 2.0, tl),
                Segment((x, start, z), yaw, g, 0.7, tl),
                *pushes,
                Segment((x, y_end, z), yaw, g, 0.2, tl),
                Segment((x, y_end + s * 0.04, z), yaw, g, 0.5, tl),
                Segment((x, y_end + s * 0.04, above), yaw, g, 0.8, tl)]


class UnplugController(ScriptedController):
    task = "unplug"
    task_object = "plug"
    FAILURE_MODES = {"grasp_offset": "missed_grasp", "weak_grip": "slip_drop", "fast_approach": "collision",
                     "early_close": "collision"}
    EXPLORATIONS = ("nudge", "regrasp")

    def _segments(self, p, rng):
        mode = self.failure_mode
        plug = np.array(p["socket_pos"])
        plug_bottom = ts.TABLE_TOP_Z + 2 * tt.Unplug.HOUSING_HALF[2] + 0.001
        yaw = p["socket_yaw"]                   # pads close across the plug's narrow (y) side
        first = self._nudge(plug, max(tt.Unplug.PLUG_HALF[:2]), plug_bottom, yaw) if self.exploration == "nudge" else []
        if mode == "grasp_offset":
            plug = self._aside(plug, yaw, rng, 0.045, 0.06)
        top = tt.Unplug().plug_top_z()
        grasp_z = top - 0.015
        width = 2 * tt.Unplug.PLUG_HALF[1]
        grip = width - 0.02
        if mode == "weak_grip":
            weight = float(self.model.body("plug").mass[0]) * 9.81
            grip = self._weak_grip(width, p["extraction_force"] + weight, rng)
        approach_grip = 0.0 if mode == "early_close" else 0.06
        descend = [Segment((*plug, top + 0.08), yaw, approach_grip, 0.8 if first else 1.4),
                   Segment((*plug, grasp_z), yaw, approach_grip, 0.8)]
        if mode == "early_close" and "close_above_m" in self.severity:
            descend = self._early_close(plug, top + 0.08, grasp_z, yaw, 0.06)
        if mode == "fast_approach":
            drop = self._param("too_low_m", 0.03, 0.04, rng)
            descend = [Segment((*plug, grasp_z - drop), yaw, approach_grip, self._given("approach_s", 1.5))]
        if self.exploration == "regrasp":
            descend = self._regrasp(plug, yaw, grasp_z, top + 0.08, grip, width, 0.06)
        return [*first, *descend,
                Segment((*plug, grasp_z), yaw, grip, 0.6),
                Segment((*plug, grasp_z), yaw, grip, 0.3),
                Segment((*plug, grasp_z + 0.08), yaw, grip, 1.0),
                Segment((*plug, grasp_z + 0.08), yaw, grip, 0.5)]


CONTROLLERS: dict[str, type[ScriptedController]] = {
    c.task: c for c in (PickPlaceController, PushController, UnplugController)}


def make_controller(task: str, seed: int, failure_rate: float = 0.0, rng: np.random.Generator | None = None,
                    **kwargs) -> ScriptedController:
    """The scripted controller for ``task`` (see ScriptedController for the keyword options)."""
    try:
        cls = CONTROLLERS[task]
    except KeyError:
        raise ValueError(f"no scripted controller for task '{task}'; known: {', '.join(CONTROLLERS)}") from None
    return cls(seed, failure_rate, rng, **kwargs)


def run_episode(twin: G2Twin, controller: ScriptedController) -> tt.TaskOutcome:
    """Reset ``twin`` to the controller's episode and play the plan open-loop (holding the last
    targets after it ends) until the twin reports done."""
    twin.reset(controller.task, controller.spec.seed)
    names = controller.plan.joint_names
    k = 0
    while not twin.done:
        twin.set_joint_targets(names, controller.chunk(k)[0])
        twin.step(controller.period_s)
        k += 1
    return twin.outcome()
