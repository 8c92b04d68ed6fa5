"""The `g2_twin` node in its own process: what an external subscriber (`topic_monitor`) sees, bad
commands, the reset service, and episodes driven by the `policy` node (scripted plugin) remapped
into the robot namespace, with the twin's ground-truth OUTCOME.

Cameras are reduced to 64x40 so that the twin keeps real time next to the other processes on a
small machine. Nothing here is measured against the wall clock: what arrives is checked against the
contract, and bench/bench_twin.py measures the rates. Waits are bounded only so that a broken node
fails instead of hanging.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from diagnostic_msgs.msg import DiagnosticArray
from rosgraph_msgs.msg import Clock

from gesim_ros.twin import scene as ts
from gesim_ros.contract.contract import load_contract, message_class, ros_qos
from gesim_ros.contract.messages import action_chunk_msg, joint_state_msg, seconds
from gesim_ros.ros.process_harness import contract_violations, spin_until
from gesim_ros.twin.tasks import LABELS

C = load_contract()
EVENT = message_class("gesim_ros_interfaces/msg/EpisodeEvent")
RESET = message_class("gesim_ros_interfaces/srv/ResetEpisode")
EVENTS = C.topic("episode_events")
ROBOT = C.namespace("robot")
ARM = list(C.arm_joint_names)
WAIT_S = 60.0
CAMERA = ("-p", "camera_width:=64", "-p", "camera_height:=40")


def start_twin(procs, *params: str):
    return procs.start("g2_twin", "--ros-args", *CAMERA, *[a for p in params for a in ("-p", p)])


class Wire:
    """The test's side: episode events both ways, the reset service, commands and diagnostics."""

    def __init__(self, node):
        self.node = node
        self.events, self.diagnostics = [], []
        self.events_pub = node.create_publisher(EVENT, EVENTS.resolve("/"), ros_qos(EVENTS.qos))
        node.create_subscription(EVENT, EVENTS.resolve("/"), self.events.append, ros_qos(EVENTS.qos))
        diag = C.topic("diagnostics")
        node.create_subscription(DiagnosticArray, diag.resolve("/"), self.diagnostics.append, ros_qos(diag.qos))
        self.reset_client = node.create_client(RESET, C.service("twin_reset").resolve("/"))
        self.commands = {key: node.create_publisher(message_class(C.topic(key).type), C.topic(key).resolve(ROBOT),
                                                    ros_qos(C.topic(key).qos))
                         for key in ("joint_command", "action_chunk")}
        joints = C.topic("joint_states")
        self.joint_states = []
        node.create_subscription(message_class(joints.type), joints.resolve(ROBOT), self.joint_states.append,
                                 ros_qos(joints.qos))

    def wait(self, condition, what, timeout=WAIT_S):
        assert spin_until(self.node, condition, timeout), f"timed out waiting for {what}"

    def wait_for_twin(self):
        self.wait(lambda: self.joint_states and self.reset_client.service_is_ready()
                  and all(p.get_subscription_count() for p in self.commands.values()), "the twin")

    def reset(self, task, seed):
        future = self.reset_client.call_async(RESET.Request(episode_id="", task=task, seed=seed))
        self.wait(future.done, "the twin_reset answer")
        return future.result()

    def publish(self, kind, episode_id, task, seed, backend_mode="real", task_text=""):
        self.events_pub.publish(EVENT(event=kind, episode_id=episode_id, task=task, task_text=task_text, seed=seed,
                                      policy="scripted", backend_mode=backend_mode, side="runner"))

    def outcomes(self, episode_id):
        return [e for e in self.events if e.episode_id == episode_id and e.event == EVENT.OUTCOME]

    def twin_status(self):
        """The latest g2_twin diagnostics values."""
        mine = [s for d in self.diagnostics for s in d.status if s.name == "g2_twin"]
        return {kv.key: kv.value for kv in mine[-1].values} if mine else {}


def bump(q, amount):
    q = np.array(q, dtype=float)
    q[0] += amount   # left shoulder pitch: limits +-3 rad, home -0.76
    return q


@pytest.mark.slow
def test_every_topic_reaches_an_outside_subscriber_and_bad_commands_are_refused(procs, ros_node, tmp_path):
    twin = start_twin(procs)
    wire = Wire(ros_node)
    wire.wait_for_twin()
    home = ts.home_pose(C)
    q = [home[n] for n in ARM]
    bad = {  # command -> what the twin's log says about it
        "nan": (joint_state_msg(0, "", ARM, np.where(np.arange(16) == 2, np.nan, q)), "must be finite"),
        "unknown": (joint_state_msg(0, "", ARM[:-1] + ["elbow"], q), "unknown joint name(s) ['elbow']"),
        "length": (joint_state_msg(0, "", ARM, q[:15]), "15 target values for 16 joints"),
        "limits": (joint_state_msg(0, "", ARM[-1:], [0.2]), "outside its limits [0.0, 0.08]"),
        "too fast": (joint_state_msg(0, "", ARM, bump(q, 0.3)), "in one control period"),
        "chunk too fast": (action_chunk_msg(0, "base_link", "x", 0, ARM, np.stack([q, bump(q, 0.5)]), 0.1),
                           "at step 1"),
    }
    report = tmp_path / "monitor.json"
    monitor = procs.start("topic_monitor", "--ros-args", "-p", "side:=robot", "-p", "duration:=3.0",
                          "-p", "warmup:=1.0", "-p", f"json_out:={report}")
    for msg, _ in bad.values():   # refused while the monitor watches: the streams go on as the contract says
        wire.commands["action_chunk" if hasattr(msg, "horizon") else "joint_command"].publish(msg)
    assert monitor.process.wait(timeout=WAIT_S) == 0, monitor.log()
    assert contract_violations(json.loads(report.read_text())["topics"], C, ROBOT) == []
    wire.wait(lambda: wire.twin_status().get("rejected.joint_command") == "5"
              and wire.twin_status().get("rejected.action_chunk") == "1", "the rejections in the diagnostics")
    assert wire.twin_status()["accepted.joint_command"] == "0"
    log = twin.log()
    for _, reason in bad.values():
        assert reason in log


@pytest.mark.slow
def test_scripted_policy_runs_episodes_on_the_twin(procs, ros_node):
    start_twin(procs)
    policy_ns = C.namespace("policy")
    remap = [a for key in ("joint_states", "action_chunk")
             for a in ("-r", f"{C.topic(key).resolve(policy_ns)}:={C.topic(key).resolve(ROBOT)}")]
    # 10 Hz control: a chunk the policy's timer sends late (a busy machine) still continues its plan
    # within one control period, which the twin's velocity check requires.
    config = json.dumps({"control_hz": 10.0, "chunk_horizon": 10})
    policy = procs.start("policy", "--ros-args", "-p", "policy:=scripted", "-p", f"policy_config:='{config}'", *remap)
    wire = Wire(ros_node)
    wire.wait_for_twin()
    wire.wait(lambda: ros_node.count_publishers(C.topic("action_chunk").resolve(ROBOT)) >= 1
              and wire.events_pub.get_subscription_count() >= 3, "the policy")   # twin, policy and us

    refused = wire.reset("juggle", 0)
    assert not refused.success and "unknown task 'juggle'" in refused.message
    answer = wire.reset("unplug", 1)
    assert answer.success and answer.task_text == "pull the black plug out of the socket"
    wire.publish(EVENT.STARTED, "tw-1", "unplug", 1, task_text=answer.task_text)
    wire.wait(lambda: wire.outcomes("tw-1"), "the twin's outcome")
    (outcome,) = wire.outcomes("tw-1")
    assert (outcome.side, outcome.task, outcome.seed, outcome.policy, outcome.task_text) == (
        "real", "unplug", 1, "scripted", answer.task_text)
    assert outcome.outcome in (EVENT.OUTCOME_SUCCESS, EVENT.OUTCOME_FAILURE)
    assert outcome.label in LABELS and outcome.label != "in_progress"
    assert (outcome.outcome == EVENT.OUTCOME_SUCCESS) == (outcome.label == "success")
    wire.wait(lambda: int(wire.twin_status().get("accepted.action_chunk", "0")) > 0, "accepted chunks")
    wire.publish(EVENT.ENDED, "tw-1", "unplug", 1)

    # Without a reset for it, STARTED resets the scene; ENDED before the checker decides reports that.
    wire.publish(EVENT.STARTED, "tw-2", "push", 2)
    wire.wait(lambda: "tw-2" in wire.twin_status().get("episode_id", "") and wire.twin_status()["task"] == "push",
              "the twin following tw-2")
    wire.publish(EVENT.ENDED, "tw-2", "push", 2)
    wire.wait(lambda: wire.outcomes("tw-2"), "the outcome of the ended episode")
    (early,) = wire.outcomes("tw-2")
    assert (early.outcome, early.label) == (EVENT.OUTCOME_FAILURE, "in_progress")
    assert "ended before the twin's checker decided" in early.reason
    # An episode on the world model is not the twin's: no reset, no outcome.
    wire.publish(EVENT.STARTED, "wm-1", "push", 3, backend_mode="world_model")
    wire.publish(EVENT.ENDED, "wm-1", "push", 3)
    seen = len(wire.diagnostics)
    wire.wait(lambda: len(wire.diagnostics) >= seen + 2, "diagnostics after the world-model episode")
    assert (wire.twin_status()["episode_id"], wire.twin_status()["seed"]) == ("", "2")
    assert not wire.outcomes("wm-1") and len(wire.outcomes("tw-1")) == 1
    assert policy.running


@pytest.mark.slow
def test_with_publish_clock_stamps_follow_sim_time(procs, ros_node):
    start_twin(procs, "publish_clock:=true")
    clocks = []
    ros_node.create_subscription(Clock, C.topic("clock").resolve("/"), clocks.append, ros_qos(C.topic("clock").qos))
    wire = Wire(ros_node)
    wire.wait_for_twin()
    wire.wait(lambda: len(clocks) > 200 and len(wire.joint_states) > 200, "clock and joint states")
    times = [seconds(c.clock) for c in clocks]
    assert all(b > a for a, b in zip(times, times[1:]))
    assert times[-1] < 1000.0                     # sim time from 0, not the wall clock
    stamp = seconds(wire.joint_states[-1].header.stamp)
    assert stamp < 1000.0 and any(abs(t - stamp) < 0.02 for t in times[-50:])
