"""Node `policy`: hosts one policy plugin and drives whichever backend fills the policy namespace.

It subscribes only the policy-facing topics its plugin reads (``observation_keys``, under
``contract.namespace('policy')``) and publishes ActionChunks (or, with ``use_joint_commands``, one
JointState per control period) there; the backend switch decides where they go, so the node cannot
tell the robot from the world model. Episodes come from ``episode_events``: STARTED resets the policy
and starts acting, ENDED/ABORTED stop it. A policy or input failure ends only that episode: the node
reports an OUTCOME failure (side ``policy``) with the reason and waits for the next STARTED.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from rclpy.node import Node

from gesim_ros.contract.contract import message_class, ros_qos
from gesim_ros.contract.messages import action_chunk_msg, header, joint_state_msg
from gesim_ros.ros.node_setup import declare, declare_contract, run_node
from gesim_ros.plugins import plugin_config
from gesim_ros.policy.api import EpisodeInfo, ObservationError, PolicyError, act_checked, check_timing, load_policy
from gesim_ros.policy.observation_inputs import ObservationInputs

EpisodeEvent = message_class("gesim_ros_interfaces/msg/EpisodeEvent")


@dataclass
class _Episode:
    info: EpisodeInfo
    start_ns: int
    step: int = 0       # control periods acted so far
    sequence: int = 0   # chunks published
    chunk: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))


class PolicyNode(Node):
    def __init__(self):
        super().__init__("policy")
        self.contract = declare_contract(self)
        self.policy_name = declare(self, "policy", "scripted",
                                   "policy plugin in entry-point group gesim_ros.policies "
                                   "(scripted, torchscript, module, or a lab's)", read_only=True)
        config_text = declare(self, "policy_config", "{}",
                              'the plugin\'s config as a JSON object, e.g. {"path": "/abs/policy.pt", '
                              '"chunk_horizon": 10} for torchscript', read_only=True)
        self.use_joint_commands = declare(self, "use_joint_commands", False,
                                          "publish one JointState per control period on joint_command "
                                          "instead of ActionChunks on action_chunk", read_only=True)
        self.observation_timeout_s = declare(self, "observation_timeout_s", 10.0,
                                             "fail an episode whose inputs have not all arrived this long "
                                             "after its start", read_only=True)
        config = plugin_config("policy_config", config_text, example='{"path": "/abs/policy.pt"}')
        self.policy = load_policy(self.policy_name, config)

        namespace = self.contract.namespace("policy")
        self.inputs = ObservationInputs(self, self.contract, namespace, self.policy.observation_keys)
        self.joint_names = list(self.contract.arm_joint_names)
        self.out_spec = self.contract.topic("joint_command" if self.use_joint_commands else "action_chunk")
        self.out = self.create_publisher(message_class(self.out_spec.type), self.out_spec.resolve(namespace),
                                         ros_qos(self.out_spec.qos))
        events = self.contract.topic("episode_events")
        self.events = self.create_publisher(EpisodeEvent, events.resolve("/"), ros_qos(events.qos))
        self.create_subscription(EpisodeEvent, events.resolve("/"), self._on_event, ros_qos(events.qos))
        self.episode: _Episode | None = None
        self.timer = None
        self.get_logger().info(f"policy '{self.policy_name}' reads {', '.join(self.inputs.names.values())}; "
                               f"publishes {self.out_spec.resolve(namespace)}")

    def _now_ns(self) -> int:
        return self.get_clock().now().nanoseconds

    def _on_event(self, event) -> None:
        if event.event == EpisodeEvent.STARTED:
            self._start(EpisodeInfo(event.episode_id, event.task, event.task_text, int(event.seed)))
        elif (event.event in (EpisodeEvent.ENDED, EpisodeEvent.ABORTED) and self.episode is not None
              and event.episode_id == self.episode.info.episode_id):
            self.get_logger().info(f"episode {event.episode_id} over after {self.episode.sequence} chunk(s)")
            self._stop()

    def _start(self, info: EpisodeInfo) -> None:
        self._stop()  # a new STARTED supersedes a running episode
        self.inputs.clear()
        self.episode = _Episode(info, self._now_ns())
        try:
            self.policy.reset(info)
            check_timing(self.policy)
        except Exception as exc:
            self._fail(exc if isinstance(exc, PolicyError)
                       else PolicyError(f"{type(self.policy).__name__}.reset raised {type(exc).__name__}: {exc}"))
            return
        self.get_logger().info(f"episode {info.episode_id}: task '{info.task}' seed {info.seed}, acting every "
                               f"{self.policy.chunk_horizon} x {self.policy.control_period_s:g} s")
        self.timer = self.create_timer(self.policy.control_period_s, self._tick)

    def _stop(self) -> None:
        if self.timer is not None:
            self.destroy_timer(self.timer)
            self.timer = None
        self.episode = None

    def _tick(self) -> None:
        ep = self.episode
        if ep is None:
            return
        horizon = self.policy.chunk_horizon
        if ep.step % horizon == 0 and not self._act(ep):
            return
        if self.use_joint_commands:
            self.out.publish(joint_state_msg(self._now_ns() * 1e-9, self.out_spec.frame_id, self.joint_names,
                                             ep.chunk[ep.step % horizon]))
        ep.step += 1

    def _act(self, ep: _Episode) -> bool:
        """Compute and (in chunk mode) publish the next chunk; False while inputs are still missing."""
        elapsed = (self._now_ns() - ep.start_ns) * 1e-9
        missing = self.inputs.missing()
        if missing:
            if elapsed > self.observation_timeout_s:
                self._fail(ObservationError(f"no message on {', '.join(missing)} within "
                                            f"{self.observation_timeout_s:g} s of the episode start; check that "
                                            "the backend switch relays the selected backend to the policy namespace"))
            return False
        info = ep.info
        try:
            observation = self.inputs.observation(info.task_text, {
                "episode_id": info.episode_id, "task": info.task, "seed": info.seed, "time_s": elapsed})
            ep.chunk = act_checked(self.policy, observation, len(self.joint_names))
        except PolicyError as exc:
            self._fail(exc)
            return False
        if not self.use_joint_commands:
            self.out.publish(action_chunk_msg(self._now_ns() * 1e-9, self.out_spec.frame_id, info.episode_id,
                                              ep.sequence, self.joint_names, ep.chunk, self.policy.control_period_s))
        ep.sequence += 1
        return True

    def _fail(self, error: PolicyError) -> None:
        info = self.episode.info
        self.get_logger().error(f"episode {info.episode_id} failed ({error.label}): {error.reason}")
        self.events.publish(EpisodeEvent(
            header=header(self._now_ns() * 1e-9, ""), event=EpisodeEvent.OUTCOME, episode_id=info.episode_id,
            task=info.task, task_text=info.task_text, policy=self.policy_name, seed=info.seed, side="policy",
            outcome=EpisodeEvent.OUTCOME_FAILURE, success_probability=float("nan"), label=error.label,
            reason=error.reason))
        self._stop()


def main(args=None):
    run_node(PolicyNode, args, bad_input=(PolicyError, ImportError))  # a bad policy_config, an unimportable plugin
