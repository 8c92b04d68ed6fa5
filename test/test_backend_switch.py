"""The backend switch end to end: a stand-in robot and world model (contract_publisher processes told
apart by their stamp marker), the switch, and a test policy/observer in this process.

No assertion here is about time: waits are bounded only so that a broken switch fails instead of
hanging, and "nothing arrived" is proved by ordering (a later message from the same publisher
arrives, so an earlier one would have arrived before it).
"""

from __future__ import annotations

import math
import time

import numpy as np
import pytest
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus
from gesim_ros_interfaces.msg import BackendStatus, EpisodeEvent
from gesim_ros_interfaces.srv import SelectBackend
from rclpy.executors import SingleThreadedExecutor
from rclpy.parameter import Parameter
from rclpy.parameter_client import AsyncParameterClient
from rclpy.serialization import deserialize_message
from sensor_msgs.msg import JointState
from std_msgs.msg import Header

from gesim_ros.contract.contract import load_contract, message_class, ros_qos
from gesim_ros.contract.messages import action_chunk_msg, header, joint_state_msg
from gesim_ros.contract.modes import SIDE_NAMESPACE
from gesim_ros.switch.logic import ROUTES, SIDES
from gesim_ros.ros.process_harness import spin_until

C = load_contract()
MARKER = {"real": 1, "world_model": 2}  # contract_publisher stamp_marker per side
ARMS = C.joint_groups["left_arm"] + C.joint_groups["right_arm"]  # the synthetic grippers leave their limits
WAIT_S = 30.0  # hang guard for anything expected to arrive
COMMAND_KEYS = ("joint_command", "action_chunk")
SENSORS = [t.key for t in C.topics_with_role("sensor")]


def start_stand_in(procs, side: str, camera_scale: float = 0.1):
    """A contract_publisher standing in for ``side``, its stamps marked with the side's marker."""
    return procs.start("contract_publisher", "--ros-args", "-p", f"side:={SIDE_NAMESPACE[side]}",
                       "-p", f"camera_scale:={camera_scale}", "-p", f"stamp_marker:={MARKER[side]}")


def start_switch(procs, *switch_params: str):
    """The test policy commands at 10 Hz (command_period_s 0.1): the synthetic joints keep moving, and
    on a loaded machine the state a command is built from can be a few hundred milliseconds old by
    the time the switch checks it."""
    return procs.start("backend_switch", "--ros-args",
                       *[a for p in ("command_period_s:=0.1", *switch_params) for a in ("-p", p)])


def start(procs, *switch_params: str, world_model: bool = True, camera_scale: float = 0.1) -> None:
    """The stand-in robot (and world model) and the switch."""
    for side in ("real", "world_model") if world_model else ("real",):
        start_stand_in(procs, side, camera_scale)
    start_switch(procs, *switch_params)


def is_hold(msg: JointState) -> bool:
    """Policy commands in these tests carry their number as stamp seconds; holds carry the time."""
    return msg.header.stamp.sec > 1_000_000


class Wire:
    """This process's side of the switch: the policy (sees the policy namespace, sends numbered
    commands), the command receivers at the robot and at the world model, episode events, the
    switch's status, its service and its parameters."""

    def __init__(self, node):
        self.node = node
        self.executor = SingleThreadedExecutor()
        self.executor.add_node(node)
        policy = C.namespace("policy")
        self.observed: list[tuple] = []  # (topic key, stamp marker, stamp ns, phase) in arrival order
        self.phase: tuple = ("start", -1)
        self.latest_joints: dict[int, tuple[int, dict]] = {}  # marker -> (stamp ns, name -> position)
        self.latest_stamp: dict[tuple[str, int], int] = {}  # (topic key, marker) -> stamp ns
        subs = []
        for spec in C.topics_with_role("sensor"):
            subs.append(node.create_subscription(message_class(spec.type), spec.resolve(policy),
                                                 lambda data, key=spec.key: self._observe(key, data),
                                                 ros_qos(spec.qos), raw=True))
        self.received = {side: {key: [] for key in COMMAND_KEYS} for side in SIDES}
        self.commands = {}
        for key in COMMAND_KEYS:
            spec = C.topic(key)
            msg_type, qos = message_class(spec.type), ros_qos(spec.qos)
            self.commands[key] = node.create_publisher(msg_type, spec.resolve(policy), qos)
            for side in SIDES:
                subs.append(node.create_subscription(msg_type, spec.resolve(C.namespace(SIDE_NAMESPACE[side])),
                                                     self.received[side][key].append, qos))
        events = C.topic("episode_events")
        self.events: list[EpisodeEvent] = []
        self.events_pub = node.create_publisher(EpisodeEvent, events.resolve(), ros_qos(events.qos))
        subs.append(node.create_subscription(EpisodeEvent, events.resolve(), self.events.append,
                                             ros_qos(events.qos)))
        self.status: BackendStatus | None = None
        status = C.topic("backend_status")
        node.create_subscription(BackendStatus, status.resolve(), self._on_status, ros_qos(status.qos))
        self.diagnostics: dict[str, DiagnosticStatus] = {}  # the switch's latest, by name
        self.diagnostics_stamp_ns = 0  # of the latest
        diagnostics = C.topic("diagnostics")
        node.create_subscription(DiagnosticArray, diagnostics.resolve(), self._on_diagnostics,
                                 ros_qos(diagnostics.qos))
        self.client = node.create_client(SelectBackend, C.service("select_backend").resolve())
        self.params = AsyncParameterClient(node, "backend_switch")
        assert self.spin(lambda: self.client.service_is_ready() and self.params.services_are_ready()
                         and self.status is not None
                         and all(p.get_subscription_count() for p in (*self.commands.values(), self.events_pub))
                         and all(s.get_publisher_count() for s in subs)), "the switch did not come up"

    def _observe(self, key: str, data: bytes) -> None:
        stamp = deserialize_message(data, Header).stamp
        marker = stamp.nanosec % 1000
        stamp_ns = stamp.sec * 1_000_000_000 + stamp.nanosec
        self.observed.append((key, marker, stamp_ns, self.phase))
        self.latest_stamp[key, marker] = stamp_ns
        if key == "joint_states":
            msg = deserialize_message(data, JointState)
            self.latest_joints[marker] = (stamp_ns, dict(zip(msg.name, msg.position)))

    def _on_status(self, msg: BackendStatus) -> None:
        self.status = msg

    def _on_diagnostics(self, msg: DiagnosticArray) -> None:
        self.diagnostics = {d.name: d for d in msg.status}
        self.diagnostics_stamp_ns = msg.header.stamp.sec * 1_000_000_000 + msg.header.stamp.nanosec

    def wait_diagnostic(self, name: str, condition, what: str) -> DiagnosticStatus:
        """The switch's next diagnostic status ``backend_switch: <name>`` for which ``condition`` holds."""
        key = f"backend_switch: {name}"
        assert self.spin(lambda: key in self.diagnostics and condition(self.diagnostics[key])), \
            f"diagnostics never showed {what}; last: {self.diagnostics.get(key)}"
        return self.diagnostics[key]

    def spin(self, condition, timeout: float = WAIT_S) -> bool:
        return spin_until(self.node, condition, timeout, self.executor)

    def select(self, mode: str, force: bool = False) -> SelectBackend.Response:
        future = self.client.call_async(SelectBackend.Request(mode=mode, force=force))
        assert self.spin(future.done), f"no answer from select_backend for '{mode}'"
        return future.result()

    def set_parameter(self, name: str, value):
        future = self.params.set_parameters([Parameter(name, value=value)])
        assert self.spin(future.done), f"no answer when setting parameter {name}"
        return future.result().results[0]

    def get_parameter(self, name: str):
        future = self.params.get_parameters([name])
        assert self.spin(future.done), f"no answer when getting parameter {name}"
        return future.result().values[0].string_value

    def wait_status(self, condition, what: str) -> BackendStatus:
        assert self.spin(lambda: self.status is not None and condition(self.status)), \
            f"backend_status never showed {what}; last: {self.status}"
        return self.status

    def fresh_positions(self, side: str, after_ns: int) -> np.ndarray:
        """The arm positions of the newest joint state the policy saw from ``side``, stamped after ``after_ns``."""
        marker = MARKER[side]
        assert self.spin(lambda: self.latest_joints.get(marker, (0,))[0] > after_ns), \
            f"the policy saw no joint state from {side}"
        joints = self.latest_joints[marker][1]
        return np.array([joints[n] for n in ARMS])

    def send(self, number: int, positions, names=ARMS, chunk: bool = True) -> None:
        """A joint_command numbered in its stamp seconds, and an action chunk with that sequence."""
        command = joint_state_msg(number, C.topic("joint_command").frame_id, names, positions)
        self.commands["joint_command"].publish(command)
        if chunk:
            self.commands["action_chunk"].publish(action_chunk_msg(
                time.time(), C.topic("action_chunk").frame_id, "test", number, names,
                np.tile(positions, (2, 1)), 0.1))

    def policy_commands(self, side: str, key: str = "joint_command") -> list[int]:
        msgs = self.received[side][key]
        if key == "joint_command":
            return [m.header.stamp.sec for m in msgs if not is_hold(m)]
        return [m.sequence for m in msgs]

    def holds(self) -> list[JointState]:
        return [m for m in self.received["real"]["joint_command"] if is_hold(m)]

    def start_episode(self, episode_id: str) -> None:
        self.events_pub.publish(EpisodeEvent(header=header(time.time(), ""), event=EpisodeEvent.STARTED,
                                             episode_id=episode_id, success_probability=math.nan))
        self.wait_status(lambda s: s.episode_id == episode_id, f"episode {episode_id} running")


def counts(status: BackendStatus, field: str) -> dict[str, int]:
    return dict(zip(status.paths, getattr(status, field)))


CYCLE = ("real", "world_model", "shadow", "none")


def relay_violations(observed: list[tuple], epochs: list[tuple[str, int]]) -> list[str]:
    """Observations from a source that was no longer selected once its switch was acknowledged.

    Sound without timing: a message stamped after the acknowledgement was published by its source
    after the switch, and on one topic the switch's single publisher keeps order, so an old-source
    message after a new-source one was relayed after the switch.
    """
    violations = []
    new_seen: set[str] = set()
    current = -1
    for key, marker, stamp_ns, (phase, index) in observed:
        if index != current:
            current, new_seen = index, set()
        if index < 0:
            continue
        mode, ack_ns = epochs[index]
        source = ROUTES[mode].observations_from
        if source is not None and marker == MARKER[source]:
            new_seen.add(key)
        elif key in new_seen or (phase == "settled" and stamp_ns > ack_ns):
            violations.append(f"switch {index} to {mode}: {key} from marker {marker} stamped {stamp_ns} "
                              f"(ack at {ack_ns})")
    return violations


@pytest.mark.slow
def test_200_switches_under_full_sensor_load(procs, ros_node):
    """Every contract sensor topic from both sides at contract rate (cameras at a quarter of their size);
    the switch cycles real -> world_model -> shadow -> none 50 times, and after each acknowledgement
    the policy sends numbered commands."""
    start(procs, "mode:=none", "armed:=true", "policy_timeout_s:=3600.0", camera_scale=0.25)
    wire = Wire(ros_node)
    epochs: list[tuple[str, int]] = []
    expected = {side: [] for side in SIDES}
    expected_holds = 0
    previous, positions = "none", np.zeros(len(ARMS))
    for i in range(200):
        mode = CYCLE[i % len(CYCLE)]
        wire.phase = ("transition", i)
        response = wire.select(mode)
        ack_ns = time.time_ns()
        assert response.accepted and response.previous == previous, response.reason
        wire.phase = ("settled", i)
        epochs.append((mode, ack_ns))
        route = ROUTES[mode]
        if route.observations_from:
            marker = MARKER[route.observations_from]
            assert wire.spin(lambda: all(wire.latest_stamp.get((key, marker), 0) > ack_ns for key in SENSORS)), \
                f"switch {i} to {mode}: not every sensor topic came through"
            positions = wire.fresh_positions(route.observations_from, ack_ns)
        else:
            wire.spin(lambda: False, timeout=0.1)  # a window for anything leaking through in mode none
        wire.send(i, positions)
        for side in route.commands_to:
            expected[side].append(i)
        # The command and the next SelectBackend travel on different channels: the next switch waits
        # until this command has been routed, else a late delivery is (rightly) routed by the next mode.
        assert wire.spin(lambda: all(i in wire.policy_commands(side, key) for side in route.commands_to
                                     for key in COMMAND_KEYS)), f"switch {i} to {mode}: command {i} not routed"
        if not route.commands_to:
            wire.spin(lambda: False, timeout=0.2)  # mode none routes nothing: give a late delivery time to arrive
        expected_holds += "real" in ROUTES[previous].commands_to and "real" not in route.commands_to
        previous = mode

    def arrived() -> bool:
        return len(wire.holds()) >= expected_holds and all(
            set(wire.policy_commands(side, key)) >= set(expected[side]) for side in SIDES for key in COMMAND_KEYS)
    assert wire.spin(arrived), f"commands were lost; last status: {wire.status}"
    for side in SIDES:
        for key in COMMAND_KEYS:
            assert sorted(wire.policy_commands(side, key)) == expected[side], f"{key} at {side}"
    assert len(wire.holds()) == expected_holds == 100
    assert all(list(h.name) == list(C.joint_names) for h in wire.holds())
    assert relay_violations(wire.observed, epochs) == []
    status = wire.wait_status(lambda s: s.holds_sent == expected_holds and s.mode == previous, "the last switch")
    assert sum(status.rejection_counts) == 0, status.last_error


@pytest.mark.slow
def test_refused_selects_change_nothing_and_a_forced_switch_holds_then_aborts(procs, ros_node):
    start(procs, "mode:=real", "armed:=true", world_model=False)
    wire = Wire(ros_node)
    wire.fresh_positions("real", 0)  # the switch has the robot's joint state: a hold can be built
    before = wire.wait_status(lambda s: s.mode == "real", "mode real")

    refused = wire.select("simulation")
    assert not refused.accepted and refused.previous == "real"
    assert "unknown mode 'simulation'; use one of real, world_model, shadow, none" in refused.reason
    result = wire.set_parameter("mode", "simulation")
    assert not result.successful and "unknown mode 'simulation'" in result.reason
    wire.start_episode("ep-1")
    for mode in ("world_model", "none"):
        refused = wire.select(mode)
        assert not refused.accepted and "episode 'ep-1' is running" in refused.reason
        assert "set force" in refused.reason
    result = wire.set_parameter("mode", "shadow")
    assert not result.successful and "episode 'ep-1' is running" in result.reason
    status = wire.wait_status(lambda s: "parameter mode 'shadow' refused" in s.last_error, "the last refusal")
    assert (status.mode, status.since, status.episode_id, status.holds_sent) == ("real", before.since, "ep-1", 0)
    assert wire.get_parameter("mode") == "real"

    forced = wire.select("world_model", force=True)
    assert forced.accepted and "episode 'ep-1' aborted" in forced.reason, forced.reason
    assert "the robot was sent a hold" in forced.reason
    aborted = lambda: [e for e in wire.events if e.event == EpisodeEvent.ABORTED]  # noqa: E731
    assert wire.spin(lambda: wire.holds() and aborted()), f"no hold or no ABORTED event: {forced.reason} {wire.status} {wire.events}"
    [hold] = wire.received["real"]["joint_command"]  # the first and only: nothing went out on the refusals
    assert list(hold.name) == list(C.joint_names) and np.isfinite(hold.position).all()
    [event] = aborted()
    assert event.episode_id == "ep-1" and event.backend_mode == "real" and "forced switch" in event.reason
    stamp_ns = lambda h: h.stamp.sec * 1_000_000_000 + h.stamp.nanosec  # noqa: E731
    assert stamp_ns(hold.header) <= stamp_ns(event.header), "the hold must go out before the ABORTED event"
    status = wire.wait_status(lambda s: s.mode == "world_model", "the forced switch")
    assert not status.episode_active and status.holds_sent == 1
    assert wire.get_parameter("mode") == "world_model"
    wire.wait_diagnostic("mode", lambda d: d.message == "world_model", "the switch")
    silent = wire.wait_diagnostic("world_model.observations", lambda d: d.level == DiagnosticStatus.WARN,
                                  "the missing world model")
    assert all(key in silent.message for key in SENSORS), silent.message


def _bad_commands(pos: np.ndarray):
    """(what, joint names, values, words of the refusal) for each kind of malformed joint_command."""
    nan, fast, outside = pos.copy(), pos.copy(), pos.copy()
    nan[3] = math.nan
    fast[0] += 0.5
    outside[0] = C.joint_limits[ARMS[0]][1] + 0.1
    return [("NaN", ARMS, nan, "must be finite"),
            ("unknown joint", (*ARMS[:-1], "no_such_joint"), pos, "unknown joint name"),
            ("wrong length", ARMS, pos[:-1], f"{len(ARMS) - 1} target values for {len(ARMS)} joints"),
            ("out of limits", ARMS, outside, "outside its limits"),
            ("too fast", ARMS, fast, "velocity limit")]


@pytest.mark.slow
def test_malformed_commands_are_refused_and_never_forwarded(procs, ros_node):
    start(procs, "mode:=real", "armed:=true", "policy_timeout_s:=3600.0", world_model=False)
    wire = Wire(ros_node)
    pos = wire.fresh_positions("real", 0)
    bad = [(what, "joint_command", lambda n=names, v=values, k=k: wire.send(k, v, n, chunk=False), words)
           for k, (what, names, values, words) in enumerate(_bad_commands(pos), start=1)]
    short = action_chunk_msg(time.time(), "", "test", 90, ARMS, np.tile(pos, (2, 1)), 0.1)
    short.horizon = 3
    jump = np.tile(pos, (2, 1))
    jump[1, 0] += 0.5
    chunks = wire.commands["action_chunk"]  # a rejected chunk is named by its sequence number
    bad += [("chunk horizon", "action_chunk (sequence 90)", lambda: chunks.publish(short),
             f"{2 * len(ARMS)} target values for {len(ARMS)} joints x horizon 3"),
            ("chunk too fast", "action_chunk (sequence 91)", lambda: chunks.publish(
                action_chunk_msg(time.time(), "", "test", 91, ARMS, jump, 0.1)), "velocity limit")]
    for rejected, (what, key, send, words) in enumerate(bad, start=1):
        send()
        status = wire.wait_status(lambda s: counts(s, "rejection_counts")["real.commands"] == rejected,
                                  f"the {what} command rejected")
        assert f"{key} from the policy rejected" in status.last_error and words in status.last_error, what
        assert status.mode == "real"

    wire.send(100, wire.fresh_positions("real", 0))
    assert wire.spin(lambda: all(wire.policy_commands("real", key) for key in COMMAND_KEYS)), \
        "the valid commands did not arrive"
    assert wire.policy_commands("real") == [100] and wire.policy_commands("real", "action_chunk") == [100]
    log = procs.processes[-1].log()
    assert all(words in log for _, _, _, words in bad), log[-3000:]
    values = lambda d: {v.key: v.value for v in d.values}  # noqa: E731
    commands = wire.wait_diagnostic("real.commands", lambda d: values(d)["forwarded"] == "2", "the valid ones")
    assert values(commands)["rejected"] == str(len(bad))
    observations = wire.wait_diagnostic("real.observations", lambda d: float(values(d)["rate_hz"]) > 0, "relaying")
    assert int(values(observations)["forwarded"]) > 0


@pytest.mark.slow
def test_watchdog_holds_the_robot_once_per_policy_silence(procs, ros_node):
    start(procs, "mode:=real", "armed:=true", "policy_timeout_s:=0.3", world_model=False)
    wire = Wire(ros_node)
    positions = wire.fresh_positions("real", 0)
    for number in (1, 2, 3):
        wire.send(number, positions, chunk=False)
    assert wire.spin(lambda: wire.holds()), "no hold after the policy went silent"
    assert [is_hold(m) for m in wire.received["real"]["joint_command"]] == [False, False, False, True]
    wire.spin(lambda: False, timeout=3.0)  # ten timeouts of the same silence
    assert len(wire.holds()) == 1
    wire.send(4, wire.fresh_positions("real", 0), chunk=False)
    assert wire.spin(lambda: len(wire.holds()) == 2), "no hold after the second silence"
    assert wire.policy_commands("real") == [1, 2, 3, 4]
    wire.wait_status(lambda s: s.holds_sent == 2, "two holds")


@pytest.mark.slow
def test_nothing_reaches_an_unarmed_robot(procs, ros_node):
    start(procs, "mode:=real", "policy_timeout_s:=0.3", world_model=False)  # armed left at its default
    wire = Wire(ros_node)
    assert wire.wait_status(lambda s: s.mode == "real", "mode real").armed is False
    wire.send(1, wire.fresh_positions("real", 0))
    assert wire.select("shadow").accepted
    wire.send(2, wire.fresh_positions("real", 0))
    assert wire.spin(lambda: wire.policy_commands("world_model") == [2]), "shadow copy did not arrive"
    wire.start_episode("ep-2")
    assert wire.select("none", force=True).accepted  # armed, this would hold the robot
    assert wire.select("real").accepted
    wire.spin(lambda: False, timeout=1.0)  # a silence the watchdog would answer with a hold if armed

    assert wire.set_parameter("armed", True).successful
    wire.send(3, wire.fresh_positions("real", 0))
    assert wire.spin(lambda: all(wire.policy_commands("real", key) for key in COMMAND_KEYS)), \
        "the armed commands did not arrive"
    # The first joint_command and chunk the robot ever got (a watchdog hold may follow: it is armed now).
    assert wire.received["real"]["joint_command"][0].header.stamp.sec == 3
    assert wire.policy_commands("real", "action_chunk") == [3]
    wire.wait_status(lambda s: s.armed, "armed")


@pytest.mark.slow
def test_no_command_reaches_the_robot_without_a_fresh_measured_state(procs, ros_node):
    """Armed in mode real with no robot publishing, then a robot, then the robot's driver gone.

    Nothing-forwarded is proved by ordering: the switch forwards on one publisher per topic, so a
    refused command that had gone out would have arrived before the valid one sent after it.
    """
    switch = start_switch(procs, "mode:=real", "armed:=true", "policy_timeout_s:=3600.0", "max_state_age_s:=0.5")
    wire = Wire(ros_node)
    zeros = np.zeros(len(ARMS))  # a jump to any pose within the limits, if it got through
    for number in range(1, 16):
        wire.send(number, zeros)
    status = wire.wait_status(lambda s: counts(s, "rejection_counts")["real.commands"] == 30,
                              "the 15 joint_commands and 15 chunks rejected")
    assert f"no measured position yet for {len(ARMS)} of the {len(ARMS)} commanded joints" in status.last_error, \
        status.last_error
    assert f"joint states on {C.topic('joint_states').resolve(C.namespace('robot'))}" in status.last_error
    assert counts(status, "message_counts")["real.commands"] == 0

    robot = start_stand_in(procs, "real")
    positions = wire.fresh_positions("real", 0)
    wire.send(100, positions)
    wire.send(101, wire.fresh_positions("real", wire.latest_joints[MARKER["real"]][0]))
    assert wire.spin(lambda: len(wire.policy_commands("real", "action_chunk")) == 2), \
        f"the valid commands did not arrive; last status: {wire.status}"
    assert wire.policy_commands("real") == [100, 101] and wire.policy_commands("real", "action_chunk") == [100, 101]
    assert wire.holds() == []

    robot.stop()
    stopped_ns = time.time_ns()
    # A diagnostics window (1 s) after the stop with no joint state in it: the newest one is older
    # than max_state_age_s (0.5 s).
    wire.wait_diagnostic("real.observations", lambda d: wire.diagnostics_stamp_ns > stopped_ns
                         and "joint_states" in d.message.partition("nothing on ")[2],
                         "the robot's joint states stopped")
    last_seen = wire.latest_joints[MARKER["real"]][0]
    wire.send(200, wire.fresh_positions("real", 0))
    status = wire.wait_status(lambda s: counts(s, "rejection_counts")["real.commands"] == 32,
                              "the commands after the robot went silent rejected")
    assert "s old, more than max_state_age_s 0.5 s allows" in status.last_error, status.last_error

    start_stand_in(procs, "real")
    wire.send(300, wire.fresh_positions("real", last_seen))
    assert wire.spin(lambda: len(wire.policy_commands("real", "action_chunk")) == 3), \
        f"the commands after the robot came back did not arrive; last status: {wire.status}"
    assert wire.policy_commands("real") == [100, 101, 300]
    assert wire.policy_commands("real", "action_chunk") == [100, 101, 300]
    log = switch.log()
    assert "no measured position yet" in log and "s old, more than max_state_age_s" in log, log[-3000:]
