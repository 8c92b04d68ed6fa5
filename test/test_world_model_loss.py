"""The world-model process killed (SIGKILL) in the middle of a shadow-mode episode.

The lab graph without a robot, each node in its own process: the `g2_twin` as the robot, the
`world_model` (kinematic backend, shadow mode), the `backend_switch` (shadow, armed), the `policy`
(scripted) and the `episode_runner` with two episodes. The world model is killed as soon as the
first episode's commands reach it. Expected: the switch holds the robot and ABORTs the episode with
the cause and the fix, forwards nothing more, keeps answering; the runner fails the second episode at
its start with the same cause and ends cleanly; a restarted world model gets commands again.

No assertion is about time: waits are bounded only so that a broken graph fails instead of hanging.
"""

from __future__ import annotations

import signal
import time

import pytest
from diagnostic_msgs.msg import DiagnosticStatus
from gesim_ros_interfaces.msg import ActionChunk

from gesim_ros.contract.contract import load_contract, message_class, ros_qos
from gesim_ros.contract.messages import joint_state_msg
from gesim_ros.switch.logic import WORLD_MODEL_LOST
from gesim_ros.ros.process_harness import spin_until

C = load_contract()
EVENT = message_class("gesim_ros_interfaces/msg/EpisodeEvent")
JointState = message_class(C.topic("joint_command").type)
ROBOT, WM, POLICY = (C.namespace(k) for k in ("robot", "world_model", "policy"))
WAIT_S = 120.0  # hang guard
TASK, SEED = "pick_place", 1  # a 6.6 s plan: the kill lands well inside the first episode
MARKER_S = 4242  # the stamp of this test's own command, told apart from the policy's and the holds


def start_world_model(procs):
    return procs.start("world_model", "--ros-args", "-p", "backend:=kinematic", "-p", "mode:=shadow",
                       "-p", "camera_scale:=0.1")


class Observer:
    """Episode events, what reaches the robot and the world model, the switch's status and diagnostics."""

    def __init__(self, node):
        self.node = node
        self.events, self.status, self.diagnostics = [], [], []
        self.to_robot: list[tuple[float, JointState]] = []   # (arrival, message)
        self.to_model: list[tuple[float, object]] = []
        self.robot_joints: JointState | None = None
        self._sub("episode_events", ROBOT, self.events.append)
        self._sub("backend_status", ROBOT, self.status.append)
        self._sub("diagnostics", ROBOT, self.diagnostics.append)
        self._sub("joint_command", ROBOT, lambda m: self.to_robot.append((time.monotonic(), m)))
        self._sub("joint_states", ROBOT, lambda m: setattr(self, "robot_joints", m))
        for key in ("joint_command", "action_chunk"):
            self._sub(key, WM, lambda m: self.to_model.append((time.monotonic(), m)))
        spec = C.topic("joint_command")
        self.policy_commands = node.create_publisher(JointState, spec.resolve(POLICY), ros_qos(spec.qos))
        select = C.service("select_backend")
        self.select = node.create_client(message_class(select.type), select.resolve(ROBOT))

    def _sub(self, key, namespace, callback):
        spec = C.topic(key)
        self.node.create_subscription(message_class(spec.type), spec.resolve(namespace), callback, ros_qos(spec.qos))

    def spin(self, condition, timeout=WAIT_S) -> bool:
        return spin_until(self.node, condition, timeout)

    def of(self, episode_id, kind):
        return [e for e in self.events if e.episode_id == episode_id and e.event == kind]

    def path(self, name: str) -> dict[str, str]:
        """The latest diagnostics values of switch path ``name`` (e.g. world_model.commands)."""
        for array in reversed(self.diagnostics):
            for s in array.status:
                if s.name == f"backend_switch: {name}":
                    return {kv.key: kv.value for kv in s.values}
        return {}

    def world_model_diagnostic(self):
        found = [s for a in self.diagnostics for s in a.status if s.name == "backend_switch: world model"]
        return found[-1] if found else None

    def commands_forwarded(self) -> dict[str, int]:
        s = self.status[-1]
        return {path: n for path, n in zip(s.paths, s.message_counts) if path.endswith(".commands")}

    def send_command(self) -> None:
        """One valid command on the policy namespace: the robot's measured positions (a zero step)."""
        q = self.robot_joints
        self.policy_commands.publish(joint_state_msg(MARKER_S, C.topic("joint_command").frame_id, q.name, q.position))

    def switch_processed_command(self, key: str, before: dict[str, str]) -> bool:
        now = self.path(key)
        return any(int(now.get(k, 0)) > int(before.get(k, 0)) for k in ("forwarded", "rejected", "dropped"))


def marked(messages) -> list:
    return [m for _, m in messages if isinstance(m, JointState) and m.header.stamp.sec == MARKER_S]


@pytest.mark.slow
def test_killing_the_world_model_mid_episode_holds_aborts_and_fails_the_next_start_fast(procs, ros_node):
    wire = Observer(ros_node)
    procs.start("g2_twin", "--ros-args", "-p", "camera_width:=64", "-p", "camera_height:=40")
    world_model = start_world_model(procs)
    # policy_timeout_s: long, so that every hold in this test is the world-model loss's, not the watchdog's
    procs.start("backend_switch", "--ros-args", "-p", "mode:=shadow", "-p", "armed:=true",
                "-p", "command_period_s:=0.0333", "-p", "policy_timeout_s:=60.0")
    procs.start("policy", "--ros-args", "-p", "policy:=scripted")
    state = C.topic("joint_states").resolve(POLICY)
    assert wire.spin(lambda: ros_node.count_publishers(state) and ros_node.count_subscribers(state)), \
        "the switch's relay to the policy never appeared"
    runner = procs.start("episode_runner", "--ros-args", "-p", f"tasks:=[{TASK}]", "-p", f"seeds:=[{SEED}, 2]",
                         "-p", "backend_modes:=[shadow]", "-p", "policy_name:=scripted", "-p", "run_id:=loss",
                         "-p", "robot_reset:=twin_reset",
                         "-p", "episode_timeout_s:=120.0", "-p", "service_timeout_s:=60.0",
                         "-p", "policy_wait_s:=60.0",
                         "-p", "event_readers:=5")  # twin, world model, switch, policy, this test: none misses STARTED

    # The first episode runs: its chunks reach the world model.
    assert wire.spin(lambda: any(isinstance(m, ActionChunk) and m.episode_id == "loss-001"
                                 for _, m in wire.to_model)), "no command of episode loss-001 reached the world model"
    world_model.signal(signal.SIGKILL)
    killed = time.monotonic()

    assert wire.spin(lambda: wire.of("loss-001", EVENT.ABORTED)), "no ABORTED for the episode running at the kill"
    detected = time.monotonic()
    (aborted,) = wire.of("loss-001", EVENT.ABORTED)
    print(f"world model SIGKILL -> ABORTED received: {detected - killed:.2f} s")
    assert aborted.side == "switch" and aborted.backend_mode == "shadow"
    assert WORLD_MODEL_LOST in aborted.reason and "the robot was sent a hold" in aborted.reason, aborted.reason
    assert not wire.of("loss-001", EVENT.ENDED)
    # The policy sends chunks: a JointState at the robot is a hold.
    assert wire.spin(lambda: any(t > killed for t, _ in wire.to_robot), 30.0), "the robot got no hold"
    hold = next(m for t, m in wire.to_robot if t > killed)
    assert list(hold.name) == list(C.joint_names)
    # The loss is a standing condition: the switch's diagnostics report it (BackendStatus.last_error is
    # only the latest error, and a command refused right after, e.g. against a stalled twin, replaces it).
    assert wire.spin(lambda: wire.world_model_diagnostic() is not None
                     and WORLD_MODEL_LOST in wire.world_model_diagnostic().message, 30.0)
    assert wire.world_model_diagnostic().level == DiagnosticStatus.ERROR
    assert wire.spin(lambda: wire.status and wire.status[-1].holds_sent == 1, 30.0)
    assert not wire.status[-1].episode_active

    # The second episode fails at its start with the cause (not a sync timeout); the run ends cleanly.
    assert wire.spin(lambda: not runner.running), "the runner did not finish"
    assert runner.process.returncode == 0, runner.log()
    # (Read from the runner's record: its last event can be lost to this process when it exits.)
    (second,) = [line for line in runner.log().splitlines() if line.startswith("episode 2/2 ")]
    assert second.startswith("episode 2/2 pick_place seed 2 [shadow]: ABORTED (runner, reset_failed, "
                             "the world model is gone") and "restart the world_model node" in second, second
    assert not wire.of("loss-002", EVENT.STARTED)

    # Nothing is forwarded any more, to the lost model nor (shadow) to the robot; the switch answers.
    assert wire.spin(lambda: wire.robot_joints is not None and wire.path("world_model.commands"), 30.0)
    forwarded, before = wire.commands_forwarded(), wire.path("world_model.commands")
    wire.send_command()
    assert wire.spin(lambda: wire.switch_processed_command("world_model.commands", before), 30.0), \
        "the switch never counted this test's command"
    after = wire.path("world_model.commands")
    assert int(after["dropped"]) == int(before["dropped"]) + 1, (before, after, wire.status[-1].last_error)
    assert wire.commands_forwarded() == forwarded
    assert not marked(wire.to_model) and not marked(wire.to_robot)
    assert wire.world_model_diagnostic().message == WORLD_MODEL_LOST
    future = wire.select.call_async(wire.select.srv_type.Request(mode="shadow"))
    assert wire.spin(future.done, 30.0) and future.result().accepted, "the switch does not answer"

    # A restarted world model gets commands again.
    start_world_model(procs)
    assert wire.spin(lambda: wire.world_model_diagnostic().message == "alive"), "the switch never saw it back"
    before = wire.path("world_model.commands")
    wire.send_command()
    assert wire.spin(lambda: marked(wire.to_model)), "a command after the restart did not reach the world model"
    assert wire.spin(lambda: int(wire.path("world_model.commands")["forwarded"]) > int(before["forwarded"]), 30.0)
