"""TwinStreams: the MuJoCo twin as the robot's topics, on a sim-time schedule (no rclpy node).

It owns a G2Twin and turns it into (contract topic key, message) pairs for every sensor topic of the
contract, each at its nominal rate and in the contract's type and encoding, and it accepts the
robot's commands (JointState on ``joint_command``, ActionChunk on ``action_chunk``) through the same
CommandValidator as the backend switch. The `g2_twin` node publishes what ``advance`` returns (paced
in real time, or as fast as it can with /clock) and `gesim-ros collect` writes it into episode bags,
so a live episode and a recorded one are the same messages from the same code.

Times: the *timeline* is sim time that keeps running across episodes (each reset starts the new
scene where the previous one stopped, so stamps never go back); a message's stamp is
``stamp_offset_s`` + timeline (0 for pure sim time, a wall-clock time to look like live data).

Commands: the velocity check measures a command's first step, per joint, from the nearer of the
target the twin is tracking at the command's start and the joint's measured position: a smooth
stream of targets passes although the servos lag behind it (a squeezing gripper never reaches its
target), a hold at the measured position passes, and a jump away from both does not. ActionChunk
row k is due at header stamp + k x control period (stamp 0: now), the ros2_control trajectory
convention: rows are placed by the sender's clock, so arrival jitter never shifts them, and a chunk
replaces whatever was planned from its start on. A JointState command applies at once. After the
last row the twin holds it (position servos keep the last target), also when no command ever
arrives. A rejected command changes nothing.
"""

from __future__ import annotations

import bisect
import math
from collections import Counter
from dataclasses import dataclass
from typing import Any

import numpy as np
from gesim_ros_interfaces.msg import ActionChunk, EpisodeEvent
from sensor_msgs.msg import JointState

from gesim_ros.contract.command_validation import CommandRejected, CommandValidator
from gesim_ros.contract.contract import Contract, TopicSpec, load_contract
from gesim_ros.contract.image_codec import colour_camera_msg, to_image_msg
from gesim_ros.contract.messages import chunk_positions, header, imu_msg, joint_state_msg, point_cloud_msg, seconds, tactile_msg
from gesim_ros.twin.physics import G2Twin
from gesim_ros.twin.tasks import EpisodeSpec

DEPTH_ENCODINGS = ("16UC1", "32FC1")
JPEG_QUALITY = 90
#: A chunk whose first row is due further ahead of the twin's clock than this, or whose last row is
#: older than this, was stamped on another clock (e.g. a policy without use_sim_time).
CLOCK_TOLERANCE_S = 1.0
_EPS = 1e-9


@dataclass(frozen=True)
class CommandResult:
    """What became of one command: accepted, or rejected with the reason (what, and the fix)."""

    key: str        # contract topic key: joint_command or action_chunk
    accepted: bool
    reason: str = ""


class TwinStreams:
    """The twin's sensor streams and command input; see the module docstring for times and commands."""

    def __init__(self, contract: Contract | None = None, *, camera_width: int = 320, camera_height: int = 200,
                 stamp_offset_s: float = 0.0, command_period_s: float = 1.0 / 30.0):
        """``command_period_s`` is the control period a JointState command is velocity-checked over
        (a JointState carries none); cameras all render at ``camera_width`` x ``camera_height``."""
        self.contract = contract or load_contract()
        self.twin = G2Twin(self.contract, camera_width=camera_width, camera_height=camera_height)
        self.validator = CommandValidator(self.contract, default_control_period_s=command_period_s)
        self.stamp_offset_s = float(stamp_offset_s)
        self.joint_names = self.contract.joint_names
        self._index = {n: i for i, n in enumerate(self.joint_names)}
        self._lower, self._upper = (np.array([self.contract.joint_limits[n][i] for n in self.joint_names])
                                    for i in (0, 1))
        self.sensors = _sensor_order(self.contract)
        self._emit = {spec.key: self._builder(spec) for spec in self.sensors}
        self.accepted: Counter[str] = Counter()
        self.rejected: Counter[str] = Counter()
        self.last_rejection = ""
        self._base = 0.0            # timeline at the current scene's reset
        self._twin_t = 0.0          # twin time requested so far in this scene
        self._sent = {spec.key: 0 for spec in self.sensors}   # messages of this scene per topic
        self._frames: tuple[float, dict[str, np.ndarray]] | None = None
        self._plan_t: list[float] = []          # command breakpoints: stamp s, ascending ...
        self._plan_q: list[np.ndarray] = []     # ... and the full target vector from then on
        self._applied: np.ndarray | None = None

    # -- time and episodes -------------------------------------------------------------------------
    @property
    def time(self) -> float:
        """Timeline seconds: sim time, continued across scenes. It runs on the schedule's instants;
        the physics state is that of the nearest physics step (``twin.physics_dt``)."""
        return self._base + self._twin_t

    @property
    def stamp(self) -> float:
        return self.stamp_offset_s + self.time

    @property
    def spec(self) -> EpisodeSpec:
        return self.twin.spec

    @property
    def done(self) -> bool:
        return self.twin.done

    def reset(self, task: str, seed: int) -> EpisodeSpec:
        """Build the scene for (task, seed); the robot holds its home pose until commanded, and
        commands for the previous scene are dropped."""
        base = self.time + self.twin.physics_dt if self.twin.data is not None else 0.0
        spec = self.twin.reset(task, seed)
        self._base, self._twin_t = base, 0.0
        self._sent = dict.fromkeys(self._sent, 0)
        self._frames = None
        home = self._joint_state()[0]
        self._plan_t, self._plan_q = [self.stamp], [home]
        self._applied = home
        self.validator.forget_commands()
        return spec

    def close(self) -> None:
        self.twin.close()

    def _require_scene(self) -> None:
        if self.twin.data is None:
            raise RuntimeError("the twin has no scene yet: call reset(task, seed) first")

    # -- the schedule --------------------------------------------------------------------------------
    def advance(self, until: float) -> list[tuple[str, Any]]:
        """Step the twin to timeline time ``until``; returns every sensor message due on the way, in
        time order, as (contract topic key, message). Command rows are applied at their due times."""
        self._require_scene()
        out: list[tuple[str, Any]] = []
        while True:
            t_sensor = min(self._due(spec) for spec in self.sensors)
            t_command = self._plan_t[1] - self.stamp_offset_s if len(self._plan_t) > 1 else math.inf
            t = min(t_sensor, t_command)
            if t > until + _EPS:
                break
            self._step_to(t)
            if t_sensor <= t + _EPS:
                for spec in self.sensors:
                    if self._due(spec) <= t + _EPS:
                        out.append((spec.key, self._emit[spec.key](spec)))
                        self._sent[spec.key] += 1
            if t_command <= t + _EPS:
                self._apply()
        self._step_to(until)
        return out

    def _due(self, spec: TopicSpec) -> float:
        return self._base + self._sent[spec.key] / spec.rate_hz

    def _step_to(self, t: float) -> None:
        duration = (t - self._base) - self._twin_t
        if duration > 0:
            self.twin.step(duration)
            self._twin_t += duration

    def _apply(self) -> None:
        """Make the breakpoint active now the twin's target, and forget the ones before it."""
        i = max(bisect.bisect_right(self._plan_t, self.stamp + _EPS) - 1, 0)
        del self._plan_t[:i], self._plan_q[:i]
        target = self._plan_q[0]
        if target is not self._applied:
            self.twin.set_joint_targets(self.joint_names, target)
            self._applied = target

    def _target_at(self, stamp: float) -> np.ndarray:
        return self._plan_q[max(bisect.bisect_right(self._plan_t, stamp + _EPS) - 1, 0)]

    # -- commands ------------------------------------------------------------------------------------
    def command(self, msg: JointState | ActionChunk) -> CommandResult:
        """Validate a command message and, if it passes, schedule it; a rejection is counted, kept in
        ``last_rejection`` and returned with its reason, and changes nothing."""
        self._require_scene()
        now = self.stamp
        if isinstance(msg, ActionChunk):
            key, names, positions, horizon = "action_chunk", msg.joint_names, chunk_positions(msg), msg.horizon
            period = seconds(msg.control_period)
            start = seconds(msg.header.stamp) or now
        elif isinstance(msg, JointState):
            key, names, positions, horizon = "joint_command", msg.name, msg.position, None
            period, start = None, now
        else:
            raise TypeError(f"command must be a JointState or ActionChunk message, got {type(msg).__name__}")
        tracked = self._target_at(start)
        self.validator.observe(self.joint_names, self._step_reference(tracked, names, positions))
        try:
            valid = self.validator.validate(names, positions, period, horizon)
            end = start + (len(valid.targets) - 1) * valid.control_period_s
            if start > now + CLOCK_TOLERANCE_S:
                raise CommandRejected(f"its stamp is {start - now:.3f} s ahead of the twin's clock; stamp commands "
                                      "with the twin's time (nodes following a twin that publishes /clock need "
                                      "use_sim_time:=true)")
            if end < now - CLOCK_TOLERANCE_S:
                raise CommandRejected(f"it is stale: its last row was due {now - end:.3f} s ago; stamp chunks with "
                                      "the time their first row is due (or 0 for now)")
        except CommandRejected as exc:
            self.rejected[key] += 1
            self.last_rejection = f"{key}: {exc.reason}"
            return CommandResult(key, False, exc.reason)
        columns = [self._index[n] for n in valid.joint_names]
        cut = bisect.bisect_left(self._plan_t, start - _EPS)
        del self._plan_t[cut:], self._plan_q[cut:]
        for k, row in enumerate(valid.targets):
            q = tracked.copy()
            q[columns] = row
            self._plan_t.append(start + k * valid.control_period_s)
            self._plan_q.append(q)
        self._apply()
        self.accepted[key] += 1
        return CommandResult(key, True)

    def _step_reference(self, tracked: np.ndarray, names, positions) -> np.ndarray:
        """Per joint, the nearer of the tracked target and the measured position to the command's
        first value (malformed commands keep the tracked target; validation rejects them anyway)."""
        reference = tracked.copy()
        measured = self._joint_state()[0]
        first = np.asarray(positions, dtype=np.float64).ravel()[:len(names)]
        for name, value in zip(names, first):
            j = self._index.get(name)
            if j is not None and abs(value - measured[j]) < abs(value - tracked[j]):
                reference[j] = measured[j]
        return reference

    # -- episode events ------------------------------------------------------------------------------
    def started_event(self, episode_id: str, policy: str, backend_mode: str = "real") -> EpisodeEvent:
        """STARTED for an episode on the current scene, as the runner would publish it."""
        spec = self.spec
        return EpisodeEvent(header=header(self.stamp, ""), event=EpisodeEvent.STARTED, episode_id=episode_id,
                            task=spec.task, task_text=spec.task_text, policy=policy, backend_mode=backend_mode,
                            seed=spec.seed, side="runner", success_probability=math.nan)

    def outcome_event(self, started: EpisodeEvent, reason: str = "") -> EpisodeEvent:
        """The twin's ground truth for the episode ``started`` began (side real): the checker's verdict,
        or, before it decided, a failure labelled ``in_progress``."""
        verdict = self.twin.outcome()
        return EpisodeEvent(
            header=header(self.stamp, ""), event=EpisodeEvent.OUTCOME, episode_id=started.episode_id,
            task=started.task, task_text=started.task_text, policy=started.policy,
            backend_mode=started.backend_mode, seed=started.seed, side="real",
            outcome=EpisodeEvent.OUTCOME_SUCCESS if verdict.success else EpisodeEvent.OUTCOME_FAILURE,
            success_probability=math.nan, label=verdict.label, reason=reason)

    # -- sensor messages -----------------------------------------------------------------------------
    def _builder(self, spec: TopicSpec):
        if spec.is_camera:
            return self._depth_msg if spec.encoding in DEPTH_ENCODINGS else self._colour_msg
        builders = {"sensor_msgs/msg/JointState": self._joint_state_msg, "sensor_msgs/msg/Imu": self._imu_msg,
                    "sensor_msgs/msg/PointCloud2": self._lidar_msg,
                    "gesim_ros_interfaces/msg/Tactile": self._tactile_msg}
        if spec.type not in builders:
            raise ValueError(f"contract {self.contract.source}: topics.{spec.key}: the twin cannot produce "
                             f"{spec.type}. Fix: give the topic role 'system', or one of the types "
                             f"{', '.join(builders)} or a camera")
        return builders[spec.type]

    def _colour_msg(self, spec: TopicSpec):
        return colour_camera_msg(self._colour_frames()[spec.key], spec.type, spec.encoding, JPEG_QUALITY,
                                 header(self.stamp, spec.frame_id))

    def _colour_frames(self) -> dict[str, np.ndarray]:
        """All views rendered once per physics instant (the twin renders them together)."""
        if self._frames is None or self._frames[0] != self.time:
            self._frames = (self.time, self.twin.render_cameras())
        return self._frames[1]

    def _depth_msg(self, spec: TopicSpec):
        depth = self.twin.render_head_depth()
        if spec.encoding == "16UC1":  # millimetres; 0 (no reading) beyond what 16 bits hold
            mm = np.round(depth * 1000.0)
            depth = np.where(mm <= np.iinfo(np.uint16).max, mm, 0).astype(np.uint16)
        return to_image_msg(depth, spec.encoding, header(self.stamp, spec.frame_id))

    def _joint_state_msg(self, spec: TopicSpec):
        return joint_state_msg(self.stamp, spec.frame_id, self.joint_names, *self._joint_state())

    def _joint_state(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The twin's joint state with positions within the contract's limits: MuJoCo's soft limits
        let a joint at its stop overshoot by a hair, and a hold sent back at the published position
        must pass validation."""
        position, velocity, effort = self.twin.joint_state()
        return np.clip(position, self._lower, self._upper), velocity, effort

    def _imu_msg(self, spec: TopicSpec):
        return imu_msg(self.stamp, spec.frame_id, *self.twin.imu())

    def _lidar_msg(self, spec: TopicSpec):
        return point_cloud_msg(self.stamp, spec.frame_id, self.twin.lidar())

    def _tactile_msg(self, spec: TopicSpec):
        return tactile_msg(self.stamp, spec.frame_id, self.twin.tactile()[_tactile_side(spec)])


def _tactile_side(spec: TopicSpec) -> str:
    side = spec.key.removeprefix("tactile_")
    if side not in ("left", "right"):
        raise ValueError(f"tactile topic '{spec.key}': the twin names tactile topics tactile_left and "
                         "tactile_right (one per gripper). Fix: rename the contract key")
    return side


def _sensor_order(contract: Contract) -> list[TopicSpec]:
    """The contract's sensor topics, colour cameras first and depth next: at an instant where both
    are due, the depth render then reuses the head camera's frame."""
    sensors = contract.topics_with_role("sensor")
    for spec in sensors:
        if spec.is_camera and spec.encoding in DEPTH_ENCODINGS and spec.view not in (None, "head"):
            raise ValueError(f"contract {contract.source}: topics.{spec.key}: the twin has depth for the head "
                             f"camera only, not '{spec.view}'. Fix: drop its view or set view: head")
        if spec.is_camera and spec.encoding not in DEPTH_ENCODINGS and spec.view is None:
            raise ValueError(f"contract {contract.source}: topics.{spec.key}: a colour camera needs a view "
                             "(head, left_wrist, right_wrist) for the twin to render it. Fix: set its view")
        if spec.type.endswith("Tactile"):
            _tactile_side(spec)
    return sorted(sensors, key=lambda s: (not s.is_camera, s.encoding in DEPTH_ENCODINGS))
