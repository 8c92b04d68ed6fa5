"""Node `g2_twin`: the MuJoCo twin of the G2 on the robot's own topics, standing in for the robot.

It publishes every sensor topic of the contract under ``contract.namespace(side)`` (the robot's by
default) with the contract's types, encodings, frame ids and QoS, at the contract's rates, and takes
``joint_command`` (JointState) and ``action_chunk`` (ActionChunk) there, each validated first: a
rejected command is logged with its reason, counted, and never reaches the physics. Without commands
the robot holds its last target. Everything it publishes and accepts comes from ``TwinStreams``,
which `gesim-ros collect` uses too.

Time: by default the twin runs in real time and stamps with the wall clock; when the host cannot keep
up it lets sim time fall behind by at most ``MAX_LAG_S`` and then skips ahead (a *slip*; the stamps
jump forward, commands stay on the sender's clock). With ``publish_clock:=true`` it publishes /clock
(contract ``clock``) from sim time and runs as fast as it can; nodes with ``use_sim_time:=true``
follow it, and nothing is skipped.

Cameras: every camera renders at ``camera_width`` x ``camera_height``, 320x200 by default, not the
contract's 640x400 (head) and 1280x1056 (hands): MuJoCo renders in software (EGL/llvmpipe) on a CPU
machine, where three cameras and depth at 30 Hz cost ~15 ms of CPU per frame at 320x200 and twice
that at 640x400. On a machine with a GPU, raise them.

Episodes: the ``twin_reset`` service (ResetEpisode) builds the scene for a task and seed and returns
the task text; ``episode_events`` STARTED (backend mode real, shadow or unset) starts following an
episode on that scene (a STARTED without a preceding reset for its task and seed resets first). When
the task's checker decides, or at ENDED if it has not, the twin publishes OUTCOME with side ``real``
(its ground truth); ABORTED drops the episode. Diagnostics (1 Hz, contract ``diagnostics``) carry the
real-time factor, slips and command counts.
"""

from __future__ import annotations

import math
import time

from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from gesim_ros_interfaces.msg import ActionChunk, EpisodeEvent
from rclpy.node import Node
from rosgraph_msgs.msg import Clock
from sensor_msgs.msg import JointState

from gesim_ros.contract.contract import message_class, ros_qos
from gesim_ros.contract.messages import header, time_msg
from gesim_ros.contract.modes import ROBOT_MODES
from gesim_ros.ros.node_setup import declare, declare_contract, run_node
from gesim_ros.twin.streams import TwinStreams

MAX_LAG_S = 0.5             # real time: how far sim time may fall behind (and catch up) before it slips
DIAGNOSTICS_PERIOD_S = 1.0
#: the episodes the robot (and so its twin) takes part in; "" is a STARTED that names no mode (a lab's
#: own runner, one published by hand), which the robot acts in too
FOLLOWED_MODES = ("", *ROBOT_MODES)


class TwinNode(Node):
    def __init__(self):
        super().__init__("g2_twin")
        c = self.contract = declare_contract(self)
        side = declare(self, "side", "robot", "namespace to publish under and take commands from: robot, "
                       "world_model or policy", read_only=True)
        task = declare(self, "task", "pick_place", "scene at start-up (twin_reset and STARTED change it)",
                       read_only=True)
        seed = declare(self, "seed", 0, "seed of the start-up scene", read_only=True)
        width = declare(self, "camera_width", 320, "width of every camera in pixels (the contract's: 640 head, "
                        "1280 hands; reduced because software rendering is slow)", read_only=True)
        height = declare(self, "camera_height", 200, "height of every camera in pixels (the contract's: 400 head, "
                         "1056 hands)", read_only=True)
        self.publish_clock = declare(self, "publish_clock", False, "publish /clock from sim time and run as fast as "
                                     "possible (nodes with use_sim_time:=true follow); false: real time, wall-clock "
                                     "stamps", read_only=True)
        command_period = declare(self, "command_period_s", 1.0 / 30.0, "control period a joint_command is "
                                 "velocity-checked over (a JointState carries none)", read_only=True)
        if self.publish_clock and self.get_parameter("use_sim_time").value:
            raise ValueError("parameters publish_clock and use_sim_time are both true; the twin cannot follow "
                             "the clock it publishes. Fix: drop use_sim_time for the twin")
        self.streams = TwinStreams(c, camera_width=width, camera_height=height, command_period_s=command_period)
        self.streams.reset(task, seed)

        namespace = c.namespace(side)
        self.pubs = {spec.key: self.create_publisher(message_class(spec.type), spec.resolve(namespace),
                                                     ros_qos(spec.qos)) for spec in self.streams.sensors}
        for key, msg_type in (("joint_command", JointState), ("action_chunk", ActionChunk)):
            spec = c.topic(key)
            self.create_subscription(msg_type, spec.resolve(namespace), self._on_command, ros_qos(spec.qos))
        events = c.topic("episode_events")
        self.events_pub = self.create_publisher(EpisodeEvent, events.resolve("/"), ros_qos(events.qos))
        self.create_subscription(EpisodeEvent, events.resolve("/"), self._on_event, ros_qos(events.qos))
        reset = c.service("twin_reset")
        self.create_service(message_class(reset.type), reset.resolve("/"), self._on_reset)
        diagnostics = c.topic("diagnostics")
        self.diagnostics_pub = self.create_publisher(DiagnosticArray, diagnostics.resolve("/"),
                                                     ros_qos(diagnostics.qos))
        self.clock_pub = None
        if self.publish_clock:
            clock = c.topic("clock")
            self.clock_pub = self.create_publisher(Clock, clock.resolve("/"), ros_qos(clock.qos))

        self.episode: EpisodeEvent | None = None   # the STARTED event of the episode being followed
        self.reported = False
        self.reset_for: tuple[str, int] | None = None   # scene reset by twin_reset, not yet started
        self.slipped_s = 0.0
        self._window = (time.monotonic(), self.streams.time)
        fastest = max(spec.rate_hz for spec in self.streams.sensors)
        self.clock_step_s = 1.0 / fastest
        self._anchor()
        self.create_timer(0.0 if self.publish_clock else self.clock_step_s, self._tick)
        self.create_timer(DIAGNOSTICS_PERIOD_S, self._diagnose)
        self.get_logger().info(
            f"twin of the G2 ({c.profile}) on '{namespace}', {width}x{height} cameras, "
            + ("publishing /clock, as fast as possible" if self.publish_clock else "real time")
            + f"; scene {task} seed {seed}")

    # -- time ----------------------------------------------------------------------------------------
    def _anchor(self) -> None:
        """Real time: sim time now corresponds to the wall clock now, and stamps are the ROS clock's
        now (after start-up, a reset or a slip, which took wall time but no sim time)."""
        self._wall_to_sim = self.streams.time - time.monotonic()
        if not self.publish_clock:
            self.streams.stamp_offset_s = self.get_clock().now().nanoseconds * 1e-9 - self.streams.time

    def _tick(self) -> None:
        streams = self.streams
        if self.publish_clock:
            until = streams.time + self.clock_step_s
        else:
            until = time.monotonic() + self._wall_to_sim
            lag = until - streams.time
            if lag > MAX_LAG_S:   # cannot keep up: skip ahead on the wall clock instead of lagging
                self.slipped_s += lag
                self._anchor()
                until = streams.time
        for key, msg in streams.advance(until):
            self.pubs[key].publish(msg)
        if self.clock_pub is not None:
            self.clock_pub.publish(Clock(clock=time_msg(streams.stamp)))
        if self.episode is not None and not self.reported and streams.done:
            self._report("")

    # -- commands and episodes -----------------------------------------------------------------------
    def _on_command(self, msg) -> None:
        result = self.streams.command(msg)
        if not result.accepted:
            self.get_logger().warning(f"{result.key} rejected ({self.streams.rejected[result.key]} so far): "
                                      f"{result.reason}")

    def _reset(self, task: str, seed: int) -> str:
        """Build the scene; returns the task text, or raises ValueError naming the bad input."""
        spec = self.streams.reset(task, seed)
        self._anchor()
        self.get_logger().info(f"scene reset: {task} seed {seed} ('{spec.task_text}', {spec.side} arm)")
        return spec.task_text

    def _on_reset(self, request, response):
        if self.episode is not None:
            self.get_logger().warning(f"twin_reset during episode {self.episode.episode_id}: no longer following it")
            self.episode = None
        try:
            response.task_text = self._reset(request.task, request.seed)
        except ValueError as exc:
            response.success, response.message = False, f"twin_reset: {exc}"
            self.get_logger().error(response.message)
            return response
        self.reset_for = (request.task, request.seed)
        response.success, response.message = True, f"scene {request.task} seed {request.seed} ready"
        return response

    def _on_event(self, event: EpisodeEvent) -> None:
        if event.event == EpisodeEvent.STARTED and event.backend_mode in FOLLOWED_MODES:
            self._start(event)
        elif (event.event in (EpisodeEvent.ENDED, EpisodeEvent.ABORTED) and self.episode is not None
              and event.episode_id == self.episode.episode_id):
            if event.event == EpisodeEvent.ENDED and not self.reported:
                self._report(f"ended before the twin's checker decided ({self.streams.twin.time:.2f} s into the "
                             f"task's {self.streams.spec.time_limit_s:g} s)")
            self.episode = None

    def _start(self, event: EpisodeEvent) -> None:
        if self.reset_for != (event.task, event.seed):
            self.get_logger().info(f"episode {event.episode_id} started without a twin_reset for "
                                   f"{event.task} seed {event.seed}: resetting now")
            try:
                self._reset(event.task, event.seed)
            except ValueError as exc:
                reason = f"the twin cannot build {event.task} seed {event.seed}: {exc}"
                self.get_logger().error(reason)
                self.events_pub.publish(EpisodeEvent(
                    header=header(self.streams.stamp, ""), event=EpisodeEvent.ABORTED, episode_id=event.episode_id,
                    task=event.task, policy=event.policy, backend_mode=event.backend_mode, seed=event.seed,
                    side="real", success_probability=math.nan, label="reset_failed", reason=reason))
                return
        self.reset_for = None
        self.episode, self.reported = event, False

    def _report(self, reason: str) -> None:
        msg = self.streams.outcome_event(self.episode, reason)
        self.events_pub.publish(msg)
        self.reported = True
        details = ", ".join(f"{k} {v:g}" for k, v in self.streams.twin.outcome().details.items())
        self.get_logger().info(f"episode {msg.episode_id}: {msg.label} ({details})")

    # -- diagnostics ---------------------------------------------------------------------------------
    def _diagnose(self) -> None:
        wall0, sim0 = self._window
        now = time.monotonic()
        s = self.streams
        rtf = (s.time - sim0) / (now - wall0) if now > wall0 else 0.0
        self._window = (now, s.time)
        values = {"real_time_factor": f"{rtf:.3f}", "sim_time_s": f"{s.time:.3f}", "slipped_s": f"{self.slipped_s:.3f}",
                  "task": s.spec.task, "seed": str(s.spec.seed),
                  "episode_id": self.episode.episode_id if self.episode else "",
                  **{f"accepted.{k}": str(s.accepted[k]) for k in ("joint_command", "action_chunk")},
                  **{f"rejected.{k}": str(s.rejected[k]) for k in ("joint_command", "action_chunk")},
                  "last_rejection": s.last_rejection}
        behind = not self.publish_clock and rtf < 0.9
        self.diagnostics_pub.publish(DiagnosticArray(header=header(s.stamp, ""), status=[DiagnosticStatus(
            level=DiagnosticStatus.WARN if behind else DiagnosticStatus.OK, name="g2_twin",
            message=f"RTF {rtf:.2f}" + (" (behind real time)" if behind else ""),
            values=[KeyValue(key=k, value=v) for k, v in values.items()])]))


def main(args=None):
    run_node(TwinNode, args)
