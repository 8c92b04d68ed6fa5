"""Node `backend_switch`: one unchanged policy node against the physical robot or the world model.

The policy subscribes to the contract's sensor topics under the policy namespace and publishes
joint_command and action_chunk there. This node fills the policy namespace from the robot's
namespace or the world model's, and forwards the policy's commands to the robot, the world model,
both (shadow) or neither (none) -- see ``switch_logic.ROUTES``. The mode is chosen with the
SelectBackend service or the ``mode`` parameter, between episodes (it follows episode_events).

Observations are relayed as serialized bytes with each topic's contract QoS (no deserialisation).
Commands are deserialised and validated (``CommandValidator``, against the measured joint state of
the side they are checked for) before they go anywhere; a rejected command is never forwarded. A
side's joint state is kept as it arrived, with its arrival time, and parsed only when a command or a
hold needs it. A command is refused while the side has no measured state of every joint it moves,
or, checked against the robot, while the robot's newest one arrived more than ``max_state_age_s``
ago (its driver stopped publishing). The world model's state has no age bound: its joint states
stop, by design, while the model is behind, and a stale model endangers nothing. Nor is a command's
lead over it bounded: the model starts each command where the previous one ended, so after a stall
it runs behind the policy's clock and stays there (only the velocity bound applies).

Safety: commands reach the physical robot only in real or shadow mode AND while the ``armed``
parameter is true. ``armed`` is false by default, so a freshly started switch never moves the robot;
unarmed, nothing at all (not even a hold) is sent to it.

The world model's presence comes from DDS liveliness on its BackendStatus (``WorldModelPresence``).
Once seen, its loss while the mode routes commands to it (shadow, world_model) holds the robot (where
the switch may command it), ABORTs the running episode with the cause and the fix, and stops every
command of that mode, and a STARTED in that mode is ABORTED at once, until the world model is back.

Everything runs on one executor thread, on purpose: a relay callback's mode check and a mode change
can never interleave, so once a SelectBackend response has been sent no message from the old source
is published to the policy, and the hold and ABORTED event of a forced switch go out before it.
"""

from __future__ import annotations

import math
import time

from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from gesim_ros_interfaces.msg import ActionChunk, BackendStatus, EpisodeEvent
from rcl_interfaces.msg import SetParametersResult
from rclpy.event_handler import PublisherEventCallbacks, SubscriptionEventCallbacks
from rclpy.node import Node
from rclpy.parameter import Parameter
from rclpy.serialization import deserialize_message
from sensor_msgs.msg import JointState

from gesim_ros.contract.command_validation import CommandRejected, CommandValidator
from gesim_ros.contract.contract import Contract, TopicSpec, message_class, relay_qos, ros_qos
from gesim_ros.contract.messages import chunk_positions, header, joint_state_msg, seconds, time_msg
from gesim_ros.ros.node_setup import declare, declare_contract, run_node
from gesim_ros.contract.modes import MODES, SIDE_NAMESPACE
from gesim_ros.switch.logic import SIDES, WORLD_MODEL_LOST, HoldUnavailable, SwitchLogic, hold_targets
from gesim_ros.ros.liveliness import WorldModelPresence

STATUS_PERIOD_S = 1.0


def check_namespaces(contract: Contract) -> None:
    """Refuse a contract whose namespaces coincide: the switch would relay a topic onto itself."""
    names = {key: contract.namespace(key) for key in ("robot", "world_model", "policy")}
    if len(set(names.values())) != len(names):
        raise ValueError(f"contract {contract.source}: namespaces {names} must all differ for the backend "
                         "switch; give robot, world_model and policy namespaces of their own")


class BackendSwitch(Node):
    def __init__(self):
        super().__init__("backend_switch")
        contract = self.contract = declare_contract(self)
        mode = declare(self, "mode", "none", f"backend the policy is connected to: {' | '.join(MODES)}; "
                       "a change is checked like a SelectBackend request without force")
        armed = declare(self, "armed", False, "let commands reach the physical robot (real and shadow modes); "
                        "false by default so a fresh switch never moves the robot")
        timeout = declare(self, "policy_timeout_s", 0.5, "hold the robot when the policy has sent it no "
                          "command for this long while it is being commanded", read_only=True)
        self.command_period_s = declare(self, "command_period_s", 0.01, "control period of one joint_command "
                                        "(the time step of the velocity check)", read_only=True)
        max_state_age = declare(self, "max_state_age_s", 1.0, "real and shadow modes: refuse commands while the "
                                "robot's newest joint state arrived longer ago than this (its driver stopped "
                                "publishing): 100 periods of the contract's 100 Hz joint_states, above the bursts "
                                "of a twin on a loaded host", read_only=True)
        check_namespaces(contract)
        sensors = contract.topics_with_role("sensor")
        self.logic = SwitchLogic(mode, armed, timeout, self._now(), observation_streams=[t.key for t in sensors])
        namespace = {side: contract.namespace(SIDE_NAMESPACE[side]) for side in SIDES}
        joint_states = contract.topic("joint_states")
        self.validators = {side: CommandValidator(
            contract, default_control_period_s=self.command_period_s,
            max_state_age_s=max_state_age if side == "real" else math.inf,
            state_source=f"joint states on {joint_states.resolve(namespace[side])}",
            check_lead=side == "real") for side in SIDES}
        self.unparsed_joint_state: dict[str, tuple[bytes, float]] = {}  # side -> (newest message, monotonic arrival)
        policy_ns = contract.namespace("policy")

        # The relay's endpoints get no QoS event handlers: each is a waitable that Python's executor
        # visits on every wake-up, and together they cost a third of the relay's CPU per message. A
        # source topic that never arrives (unpublished, or a QoS that does not match) is named in
        # diagnostics instead.
        self.to_policy = {}
        for spec in sensors:
            msg_type, qos = message_class(spec.type), relay_qos(spec)
            self.to_policy[spec.key] = self.create_publisher(
                msg_type, spec.resolve(policy_ns), qos,
                event_callbacks=PublisherEventCallbacks(use_default_callbacks=False))
            for side in SIDES:
                self.create_subscription(
                    msg_type, spec.resolve(namespace[side]), self._relay(side, spec), qos, raw=True,
                    event_callbacks=SubscriptionEventCallbacks(use_default_callbacks=False))

        self.command_spec = contract.topic("joint_command")
        self.to_backend = {}
        for spec in (self.command_spec, contract.topic("action_chunk")):
            msg_type, qos = message_class(spec.type), ros_qos(spec.qos)
            self.to_backend[spec.key] = {side: self.create_publisher(msg_type, spec.resolve(namespace[side]), qos)
                                         for side in SIDES}
            self.create_subscription(msg_type, spec.resolve(policy_ns),
                                     lambda msg, key=spec.key: self._on_command(key, msg), qos)

        events = contract.topic("episode_events")
        self.events_pub = self.create_publisher(EpisodeEvent, events.resolve(), ros_qos(events.qos))
        self.create_subscription(EpisodeEvent, events.resolve(), self._on_episode_event, ros_qos(events.qos))
        status = contract.topic("backend_status")
        self.status_pub = self.create_publisher(BackendStatus, status.resolve(), ros_qos(status.qos))
        diagnostics = contract.topic("diagnostics")
        self.diagnostics_pub = self.create_publisher(DiagnosticArray, diagnostics.resolve(),
                                                     ros_qos(diagnostics.qos))
        self.world_model = WorldModelPresence(self, contract, self._on_world_model)
        select = contract.service("select_backend")
        self.create_service(message_class(select.type), select.resolve(), self._on_select)
        self.add_on_set_parameters_callback(self._check_parameters)
        self.add_post_set_parameters_callback(self._apply_parameters)
        self.create_timer(STATUS_PERIOD_S, self._periodic)
        self.create_timer(max(timeout / 4, 0.01), self._watchdog)
        self._publish_status()
        self.get_logger().info(f"mode '{mode}', {'ARMED' if armed else 'not armed'}: policy namespace "
                               f"'{policy_ns}' <- robot '{namespace['real']}' | world model "
                               f"'{namespace['world_model']}' ({contract.profile})")

    def _now(self) -> float:
        return self.get_clock().now().nanoseconds * 1e-9

    # --- observations ---------------------------------------------------------------------------
    def _relay(self, side: str, spec: TopicSpec):
        """The callback relaying one source topic to the policy while ``side`` is the selected source."""
        counter = self.logic.counters[f"{side}.observations"]
        publish = self.to_policy[spec.key].publish
        joint_states = spec.key == "joint_states"

        def relay(data: bytes, info) -> None:
            counter.receive(spec.key, info["publication_sequence_number"])
            if self.logic.observations_from == side:
                publish(data)
                counter.forwarded += 1
            if joint_states:
                self.unparsed_joint_state[side] = (data, time.monotonic())
        return relay

    def _catch_up(self, side: str) -> None:
        """Feed the side's newest joint state to its validator, whose measured positions are the
        velocity reference for commands and, the robot's, its holds; parsed only when needed, not on
        each of the 100 messages a second."""
        newest = self.unparsed_joint_state.pop(side, None)
        if newest is None:
            return
        data, arrived = newest
        msg = deserialize_message(data, JointState)
        self.validators[side].observe(msg.name, msg.position, arrived)

    # --- commands -------------------------------------------------------------------------------
    def _on_command(self, key: str, msg) -> None:
        side = self.logic.validation_side
        if side is None:
            return  # mode none: nothing flows
        if isinstance(msg, ActionChunk):
            fields = (msg.joint_names, chunk_positions(msg), seconds(msg.control_period), msg.horizon)
            what = f"{key} (sequence {msg.sequence})"  # which chunk, to match against recordings
        else:
            fields = (msg.name, msg.position, self.command_period_s, None)
            what = key
        self._catch_up(side)
        try:
            self.validators[side].validate(*fields, now=time.monotonic())
        except CommandRejected as exc:
            reason = f"{what} from the policy rejected for the {side} side: {exc.reason}"
            self.logic.command_rejected(reason)
            self.get_logger().warning(reason)
            self._publish_status()
            return
        for target in self.logic.command_accepted(self._now()):
            self.to_backend[key][target].publish(msg)

    def _send_hold(self, why: str) -> str:
        """Command the robot to its latest measured positions; returns what happened, for reasons."""
        self._catch_up("real")
        try:
            positions = hold_targets(self.contract.joint_names, self.validators["real"].measured)
        except HoldUnavailable as exc:
            self.logic.last_error = f"hold NOT sent ({why}): {exc}"
            self.get_logger().error(self.logic.last_error)
            return f"; hold NOT sent: {exc}"
        self.to_backend[self.command_spec.key]["real"].publish(
            joint_state_msg(self._now(), self.command_spec.frame_id, self.contract.joint_names, positions))
        self.logic.hold_sent()
        for validator in self.validators.values():
            validator.forget_commands()  # the next command stream starts from where the robot is
        self.get_logger().info(f"robot sent a hold ({why})")
        return "; the robot was sent a hold"

    def _watchdog(self) -> None:
        if self.logic.watchdog_due(self._now()):
            self._send_hold(f"policy silent for more than {self.logic.policy_timeout_s} s")
            self._publish_status()

    # --- mode, arming, episodes -----------------------------------------------------------------
    def _select(self, mode: str, force: bool, via: str):
        """Apply a mode request: hold, then ABORTED, then the new mode; returns it with its full reason."""
        transition = self.logic.select(mode, force, self._now())
        reason = transition.reason
        if not transition.accepted:
            self.get_logger().warning(f"{via}: {self.logic.last_error}")
        elif transition.previous != mode:
            if transition.hold:
                reason += self._send_hold(f"switch from '{transition.previous}' to '{mode}'")
            if transition.aborted_episode:
                self._publish_aborted(transition.aborted_episode, transition.previous,
                                      f"forced switch from '{transition.previous}' to '{mode}' (SelectBackend force)")
            if via != "parameter":
                self.set_parameters([Parameter("mode", Parameter.Type.STRING, mode)])
            self.get_logger().info(f"{via}: {reason}")
        self._publish_status()
        return transition, reason

    def _publish_aborted(self, episode_id: str, mode: str, reason: str) -> None:
        self.events_pub.publish(EpisodeEvent(
            header=header(self._now(), ""), event=EpisodeEvent.ABORTED, episode_id=episode_id, backend_mode=mode,
            side="switch", success_probability=math.nan, reason=reason))

    def _on_world_model(self, alive: bool) -> None:
        loss = self.logic.world_model_present(alive)
        if alive:
            self.get_logger().info(f"world model alive ({self.world_model.topic}): commands to it flow")
        elif loss is None:
            self.get_logger().warning(f"world model lost ({self.world_model.topic}); mode '{self.logic.mode}' "
                                      "does not use it")
        else:
            reason = loss.reason + (self._send_hold("world model lost") if loss.hold else "")
            if loss.aborted_episode:
                self._publish_aborted(loss.aborted_episode, self.logic.mode, reason)
            self.logic.last_error = reason
            self.get_logger().error(reason)
        self._publish_status()

    def _on_select(self, request, response):
        transition, response.reason = self._select(request.mode, request.force, "select_backend")
        response.accepted, response.previous = transition.accepted, transition.previous
        return response

    def _check_parameters(self, parameters: list[Parameter]) -> SetParametersResult:
        for p in parameters:
            if p.name == "mode":
                refusal = self.logic.refusal(p.value, force=False)
                if refusal:
                    self.logic.last_error = f"parameter mode '{p.value}' refused: {refusal}"
                    self.get_logger().warning(self.logic.last_error)
                    self._publish_status()
                    return SetParametersResult(successful=False, reason=refusal)
        return SetParametersResult(successful=True)

    def _apply_parameters(self, parameters: list[Parameter]) -> None:
        for p in parameters:
            if p.name == "mode" and p.value != self.logic.mode:
                self._select(p.value, False, "parameter")
            elif p.name == "armed" and p.value != self.logic.armed:
                if self.logic.set_armed(p.value):
                    self._send_hold("disarmed")
                self.get_logger().warning("ARMED: commands may reach the robot" if p.value else "disarmed")
                self._publish_status()

    def _on_episode_event(self, event: EpisodeEvent) -> None:
        if event.event == EpisodeEvent.STARTED:
            refusal = self.logic.episode_started(event.episode_id)
            if refusal:
                self._publish_aborted(event.episode_id, self.logic.mode, refusal)
                self.get_logger().error(refusal)
            for validator in self.validators.values():
                validator.forget_commands()  # the backends were reset to a new start
        elif event.event in (EpisodeEvent.ENDED, EpisodeEvent.ABORTED):
            if not self.logic.episode_finished(event.episode_id):
                return
        else:
            return
        self._publish_status()

    # --- status ---------------------------------------------------------------------------------
    def _publish_status(self) -> None:
        logic = self.logic
        counters = logic.counters.values()
        self.status_pub.publish(BackendStatus(
            header=header(self._now(), ""), mode=logic.mode, since=time_msg(logic.since), armed=logic.armed,
            episode_active=bool(logic.episode_id), episode_id=logic.episode_id, paths=list(logic.counters),
            message_counts=[c.forwarded for c in counters], rejection_counts=[c.rejected for c in counters],
            holds_sent=logic.holds_sent, last_error=logic.last_error))

    def _periodic(self) -> None:
        self._publish_status()
        now = self._now()
        statuses = [DiagnosticStatus(
            level=DiagnosticStatus.OK, name="backend_switch: mode", message=self.logic.mode,
            values=[KeyValue(key="armed", value=str(self.logic.armed)),
                    KeyValue(key="episode", value=self.logic.episode_id),
                    KeyValue(key="holds_sent", value=str(self.logic.holds_sent))])]
        statuses.append(self._world_model_diagnostic())
        selected = f"{self.logic.observations_from}.observations"
        for r in self.logic.rates(now):
            silent = r.silent if r.path == selected else ()  # only the selected source must be flowing
            trouble = r.new_drops or r.new_rejections or silent
            message = f"{r.rate_hz:.1f} msg/s, {r.new_drops} dropped, {r.new_rejections} rejected"
            if silent:
                message += f"; nothing on {', '.join(silent)} (not published, or its QoS does not match the contract)"
            statuses.append(DiagnosticStatus(
                level=DiagnosticStatus.WARN if trouble else DiagnosticStatus.OK, name=f"backend_switch: {r.path}",
                message=message,
                values=[KeyValue(key=k, value=str(v)) for k, v in (
                    ("rate_hz", round(r.rate_hz, 2)), ("forwarded", r.forwarded), ("rejected", r.rejected),
                    ("dropped", r.dropped))]))
        self.diagnostics_pub.publish(DiagnosticArray(header=header(now, ""), status=statuses))

    def _world_model_diagnostic(self) -> DiagnosticStatus:
        needed = self.logic.needs_world_model
        if self.world_model.alive:
            level, message = DiagnosticStatus.OK, "alive"
        elif self.logic.world_model_lost:
            level, message = (DiagnosticStatus.ERROR if needed else DiagnosticStatus.WARN), WORLD_MODEL_LOST
        else:
            level, message = (DiagnosticStatus.WARN if needed else DiagnosticStatus.OK), "not seen yet"
        return DiagnosticStatus(level=level, name="backend_switch: world model", message=message,
                                values=[KeyValue(key="status_topic", value=self.world_model.topic)])


def main(args=None):
    run_node(BackendSwitch, args)
