"""The policy node and the episode runner, each in its own process, against stand-ins in the test.

The stand-in robot is `contract_publisher` with side `policy` (publishing straight into the policy
namespace, where the backend switch would relay a backend); the test process plays the runner for
the policy node, and the twin, the policy and the operator for the episode runner.
"""

import importlib.metadata
import json
import os
import subprocess
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import rclpy
from rclpy.executors import SingleThreadedExecutor
from rclpy.parameter import Parameter

import policy_fixtures
from gesim_ros.contract.contract import load_contract, message_class, ros_qos
from gesim_ros.episodes.runner import EpisodeRunner
from gesim_ros.contract.image_codec import to_image_msg
from gesim_ros.contract.messages import chunk_positions, joint_state_msg
from gesim_ros.plugins import PluginConfigError
from gesim_ros.policy.api import CHECKER_GROUP, IMAGES, STATE, ObservationError
from gesim_ros.policy.observation_inputs import ObservationInputs
from gesim_ros.ros.process_harness import executable_path, spin_until

C = load_contract()
EVENT = message_class("gesim_ros_interfaces/msg/EpisodeEvent")
CHUNK = message_class("gesim_ros_interfaces/msg/ActionChunk")
RESET = message_class("gesim_ros_interfaces/srv/ResetEpisode")
CONTROL = message_class("gesim_ros_interfaces/srv/EpisodeControl")
EVENTS = C.topic("episode_events")
CHUNKS = C.topic("action_chunk")
POLICY_NS = C.namespace("policy")
TEST_DIR = str(Path(__file__).parent)
H = 4


class Bench:
    """The test's side of the wire: episode events both ways and the policy's chunks."""

    def __init__(self, node):
        self.node = node
        self.events_pub = node.create_publisher(EVENT, EVENTS.resolve("/"), ros_qos(EVENTS.qos))
        self.events, self.chunks = [], []
        self.on_event = lambda event: None  # a test's reaction to an event, once the event is in self.events
        node.create_subscription(EVENT, EVENTS.resolve("/"), self._record, ros_qos(EVENTS.qos))
        node.create_subscription(CHUNK, CHUNKS.resolve(POLICY_NS), self.chunks.append, ros_qos(CHUNKS.qos))

    def _record(self, event):
        self.events.append(event)
        self.on_event(event)

    def publish(self, kind, episode_id, task="push", seed=0, **fields):
        self.events_pub.publish(EVENT(event=kind, episode_id=episode_id, task=task, task_text=f"do {task}",
                                      seed=seed, side="runner", **fields))

    def wait(self, condition, timeout=60.0, what=""):
        assert spin_until(self.node, condition, timeout), f"timed out waiting for {what}"

    def wait_for_policy(self):
        """Until the policy node publishes chunks and follows the episode events (ours is the other reader)."""
        self.wait(lambda: self.node.count_publishers(CHUNKS.resolve(POLICY_NS)) >= 1
                  and self.events_pub.get_subscription_count() >= 2, what="the policy node")

    def chunks_of(self, episode_id):
        return [c for c in self.chunks if c.episode_id == episode_id]

    def reports_of(self, episode_id):
        return [e for e in self.events if e.episode_id == episode_id and e.event == EVENT.OUTCOME]


def start_policy(procs, policy, config):
    # quoted, so ROS reads the JSON as a string parameter rather than as a YAML mapping
    path = os.pathsep.join(filter(None, [TEST_DIR, os.environ.get("PYTHONPATH")]))  # policy_fixtures
    return procs.start("policy", "--ros-args", "-p", f"policy:={policy}",
                       "-p", f"policy_config:='{json.dumps(config)}'", env={"PYTHONPATH": path})


def start_robot(procs):
    return procs.start("contract_publisher", "--ros-args", "-p", "side:=policy", "-p", "camera_scale:=0.1")


def drive_one_episode(bench, episode_id):
    bench.publish(EVENT.STARTED, episode_id)
    bench.wait(lambda: len(bench.chunks_of(episode_id)) >= 3 or bench.reports_of(episode_id),
               what=f"chunks of {episode_id}")
    assert not bench.reports_of(episode_id), bench.reports_of(episode_id)[0].reason
    bench.publish(EVENT.ENDED, episode_id)
    chunks = bench.chunks_of(episode_id)
    for k, chunk in enumerate(chunks):
        assert chunk.sequence == k and list(chunk.joint_names) == list(C.arm_joint_names)
        assert chunk.horizon == H and np.isfinite(chunk_positions(chunk)).all()
        assert chunk_positions(chunk).size == H * 16
    spin_until(bench.node, lambda: False, 1.0)  # chunks already in flight at ENDED
    settled = len(bench.chunks_of(episode_id))
    spin_until(bench.node, lambda: False, 1.5)  # ~7 chunk periods
    assert len(bench.chunks_of(episode_id)) == settled, "the policy kept acting after ENDED"
    return chunks


@pytest.mark.slow
def test_torchscript_policy_drives_an_episode(procs, ros_node, tmp_path):
    policy_fixtures.save_tiny_net(tmp_path / "tiny.pt", H)
    start_robot(procs)
    start_policy(procs, "torchscript", {"path": str(tmp_path / "tiny.pt"), "chunk_horizon": H,
                                        "control_period_s": 0.05, "cameras": ["head_color"]})
    bench = Bench(ros_node)
    bench.wait_for_policy()
    chunks = drive_one_episode(bench, "ts-1")
    assert chunks[0].control_period.nanosec == 50_000_000


@pytest.mark.slow
def test_module_factory_policy_sees_the_policy_namespace(procs, ros_node):
    start_robot(procs)
    keys = ["observation.state", "observation.images.hand_left_color", "observation.tactile.left", "observation.imu"]
    start_policy(procs, "module", {"factory": "policy_fixtures:make_follow", "chunk_horizon": H,
                                   "observation_keys": keys})
    bench = Bench(ros_node)
    bench.wait_for_policy()
    chunks = drive_one_episode(bench, "mod-1")
    # FollowState holds the measured state: contract_publisher's mid pose +- 0.1, in contract order
    mid = np.array([np.mean(C.joint_limits[n]) for n in C.arm_joint_names])
    for chunk in chunks:
        assert np.all(np.abs(chunk_positions(chunk).reshape(H, 16) - mid) <= 0.1 + 1e-6)


@pytest.mark.slow
def test_a_failing_policy_fails_only_its_episode(procs, ros_node):
    start_robot(procs)
    node = start_policy(procs, "module", {"factory": "policy_fixtures:make_faulty", "chunk_horizon": H})
    bench = Bench(ros_node)
    bench.wait_for_policy()
    for task, reason in [("nan", "NaN/inf value(s), first at step 1, joint 3"),
                         ("raise", "Faulty.act raised RuntimeError: boom in Faulty.act"),
                         ("wrong_shape", "shape (4, 15); expected (4, 16)")]:
        episode_id = f"bad-{task}"
        bench.publish(EVENT.STARTED, episode_id, task=task, seed=4)
        bench.wait(lambda: bench.reports_of(episode_id), what=f"the failure report of {episode_id}")
        report = bench.reports_of(episode_id)[0]
        assert (report.side, report.outcome, report.label) == ("policy", EVENT.OUTCOME_FAILURE, "policy_error")
        assert reason in report.reason and report.task == task and report.seed == 4
        assert not bench.chunks_of(episode_id)
        bench.publish(EVENT.ENDED, episode_id, task=task)
    assert node.running
    drive_one_episode(bench, "good-after-bad")
    assert "failed (policy_error)" in node.log()


class TwinStandIn:
    """ResetEpisode `twin_reset` in the test process; seed 4 is a scene that will not reset."""

    def __init__(self, node):
        self.requests = []
        node.create_service(RESET, C.service("twin_reset").resolve("/"), self.reset)

    def reset(self, request, response):
        self.requests.append((request.episode_id, request.task, request.seed))
        response.success = request.seed != 4
        response.task_text = "push the block to the line"
        response.message = "" if response.success else "scene unstable"
        return response


@pytest.mark.slow
def test_episode_runner_sequence_timeout_label_abort_and_refused_reset(procs, ros_node):
    bench = Bench(ros_node)
    twin = TwinStandIn(ros_node)
    ros_node.create_publisher(CHUNK, CHUNKS.resolve(POLICY_NS), ros_qos(CHUNKS.qos))  # a policy is up
    control = ros_node.create_client(CONTROL, C.service("episode_control").resolve("/"))
    labels = []

    def play(event):  # the twin, the operator and the world model, by seed
        if event.event != EVENT.STARTED:
            return
        if event.seed == 0:
            bench.events_pub.publish(EVENT(event=EVENT.OUTCOME, episode_id=event.episode_id, side="real",
                                           outcome=EVENT.OUTCOME_SUCCESS, label="success"))
        elif event.seed == 2:
            labels.append(control.call_async(CONTROL.Request(
                command=CONTROL.Request.LABEL, episode_id=event.episode_id, outcome=EVENT.OUTCOME_FAILURE,
                note="dropped it")))
        elif event.seed == 3:
            bench.events_pub.publish(EVENT(event=EVENT.ABORTED, episode_id=event.episode_id, side="world_model",
                                           reason="model diverged"))

    bench.on_event = play  # a reader of its own would let a reaction reach self.events before its cause
    runner = procs.start("episode_runner", "--ros-args", "-p", "tasks:=[push]", "-p", "seeds:=[0,1,2,3,4]",
                         "-p", "episode_timeout_s:=6.0", "-p", "policy_name:=stand_in", "-p", "run_id:=t",
                         "-p", "robot_reset:=twin_reset")
    bench.wait(lambda: not runner.running, timeout=120, what="the runner to finish")
    assert runner.process.returncode == 0, runner.log()

    def events(episode_id):
        return [e for e in bench.events if e.episode_id == episode_id]

    ids = [f"t-00{k}" for k in range(1, 6)]
    bench.wait(lambda: events(ids[4]), what="the last event")
    assert [r[0] for r in twin.requests] == ids and [r[2] for r in twin.requests] == [0, 1, 2, 3, 4]
    started, outcome, ended = events(ids[0])
    assert (started.event, started.task_text, started.policy, started.backend_mode, started.seed) == (
        EVENT.STARTED, "push the block to the line", "stand_in", "real", 0)
    assert (outcome.event, outcome.side) == (EVENT.OUTCOME, "real")
    assert (ended.event, ended.outcome, ended.side) == (EVENT.ENDED, EVENT.OUTCOME_SUCCESS, "real")
    started, ended = events(ids[1])
    assert (ended.event, ended.outcome, ended.label) == (EVENT.ENDED, EVENT.OUTCOME_FAILURE, "timeout")
    assert "timeout" in ended.reason
    assert labels and labels[0].result().accepted
    started, labelled, ended = events(ids[2])  # the operator's label goes out as an OUTCOME too
    assert (labelled.event, labelled.outcome, labelled.side) == (EVENT.OUTCOME, EVENT.OUTCOME_FAILURE, "operator")
    assert (ended.event, ended.outcome, ended.side, ended.reason) == (
        EVENT.ENDED, EVENT.OUTCOME_FAILURE, "operator", "dropped it")
    assert [e.event for e in events(ids[3])] == [EVENT.STARTED, EVENT.ABORTED]
    (refused,) = events(ids[4])
    assert (refused.event, refused.label) == (EVENT.ABORTED, "reset_failed") and "scene unstable" in refused.reason
    log = runner.log()
    assert "episode 5/5 push seed 4 [real]: ABORTED" in log and "success rate 1/3 = 33%" in log


@pytest.mark.slow
def test_run_episodes_cli_asks_the_operator(ros_node, tmp_path):
    bench = Bench(ros_node)
    ros_node.create_publisher(CHUNK, CHUNKS.resolve(POLICY_NS), ros_qos(CHUNKS.qos))
    cli = subprocess.Popen(
        [executable_path("gesim-ros"), "run-episodes", "--tasks", "push", "--seeds", "9", "--backend-modes", "none",
         "--episode-timeout-s", "1", "--label-outcomes", "--run-id", "cli"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        cli.stdin.write("maybe\ny\n")
        cli.stdin.flush()
        bench.wait(lambda: cli.poll() is not None, timeout=90, what="the CLI to finish")
        output = cli.stdout.read()
    finally:
        if cli.poll() is None:
            cli.kill()
    assert cli.returncode == 0, output
    assert output.count("Success? [y/n]") == 2  # "maybe" is asked again
    assert "episode 1/1 push seed 9 [none]: SUCCESS (operator" in output and "success rate 1/1 = 100%" in output
    kinds = [(e.event, e.side, e.outcome) for e in bench.events if e.episode_id == "cli-001"]
    assert kinds == [(EVENT.STARTED, "runner", EVENT.OUTCOME_UNKNOWN), (EVENT.ENDED, "runner", EVENT.OUTCOME_FAILURE),
                     (EVENT.OUTCOME, "operator", EVENT.OUTCOME_SUCCESS)]


@pytest.mark.slow
def test_the_runner_names_a_policy_that_does_not_follow_the_episode_events(procs, ros_node):
    bench = Bench(ros_node)  # a reader of the events, so the runner does not stop for want of one
    deaf = rclpy.create_node("deaf_policy", namespace="/lab")  # publishes commands, reads no events
    try:
        deaf.create_publisher(CHUNK, CHUNKS.resolve(POLICY_NS), ros_qos(CHUNKS.qos))
        runner = procs.start("episode_runner", "--ros-args", "-p", "tasks:=[push]", "-p", "backend_modes:=[none]",
                             "-p", "episode_timeout_s:=1.0", "-p", "policy_wait_s:=3.0", "-p", "run_id:=deaf")
        bench.wait(lambda: not runner.running, timeout=90, what="the runner to finish")
    finally:
        deaf.destroy_node()
    assert runner.process.returncode == 0, runner.log()
    assert ("/lab/deaf_policy publishing commands on the policy namespace do not subscribe to "
            f"{EVENTS.resolve('/')}: a policy that never sees STARTED never acts") in runner.log(), runner.log()
    # The runner still runs its episode (a lab's policy may act without events), after the warning.
    assert "episode 1/1 push seed 0 [none]: FAILURE (runner, timeout" in runner.log(), runner.log()


def test_a_success_checker_ends_the_episode(ros_node, monkeypatch):
    checker = importlib.metadata.EntryPoint("gripper", "policy_fixtures:GripperClosed.from_config", CHECKER_GROUP)
    monkeypatch.setattr(importlib.metadata, "entry_points",
                        lambda **kw: [checker] if kw.get("group") == CHECKER_GROUP else [])
    bench = Bench(ros_node)
    ros_node.create_publisher(CHUNK, CHUNKS.resolve(POLICY_NS), ros_qos(CHUNKS.qos))
    states = ros_node.create_publisher(message_class(C.topic("joint_states").type),
                                       C.topic("joint_states").resolve(C.namespace("robot")),
                                       ros_qos(C.topic("joint_states").qos))
    started_at = []

    def publish_state():  # the gripper closes 1 s after STARTED
        if not started_at and any(e.event == EVENT.STARTED for e in bench.events):
            started_at.append(time.monotonic())
        closed = started_at and time.monotonic() - started_at[0] > 1.0
        position = np.full(16, 0.0)
        position[14] = 0.01 if closed else 0.08
        states.publish(joint_state_msg(0.0, "base_link", C.arm_joint_names, position))

    ros_node.create_timer(0.05, publish_state)
    runner = EpisodeRunner(parameter_overrides=[
        Parameter("tasks", value=["push"]), Parameter("backend_modes", value=["none"]),
        Parameter("success_checker", value="gripper"), Parameter("run_id", value="chk"),
        Parameter("episode_timeout_s", value=30.0)])
    executor = SingleThreadedExecutor()  # as the runner's own spinner; rclpy's multi-threaded one busy-spins
    for node in (ros_node, runner):
        executor.add_node(node)
    spinner = threading.Thread(target=executor.spin, daemon=True)
    spinner.start()
    try:
        (result,) = runner.run()
        # The verdict goes out as an OUTCOME before ENDED: the comparator records it for the robot.
        deadline = time.monotonic() + 10.0
        while not any(e.event == EVENT.ENDED for e in bench.events) and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        executor.shutdown()
        spinner.join(timeout=5.0)
        runner.destroy_node()
    assert (result.status, result.outcome, result.side, result.label) == (
        "ended", EVENT.OUTCOME_SUCCESS, "checker", "grasped")
    assert started_at and result.reason == "left gripper 0.010 m"
    reported = [(e.event, e.side, e.outcome) for e in bench.events if e.episode_id == "chk-001"][-2:]
    assert reported == [(EVENT.OUTCOME, "checker", EVENT.OUTCOME_SUCCESS),
                        (EVENT.ENDED, "checker", EVENT.OUTCOME_SUCCESS)]


@pytest.mark.parametrize("encoding, pixel", [("mono8", 90), ("bgr8", [30, 20, 10]), ("rgba8", [10, 20, 30, 255])])
def test_policy_images_arrive_as_rgb_whatever_the_cameras_colour_encoding(ros_node, encoding, pixel):
    contract = load_contract("genie_sim")
    inputs = ObservationInputs(ros_node, contract, contract.namespace("policy"), [f"{IMAGES}head_color"])
    inputs.latest[STATE] = joint_state_msg(0.0, "base_link", contract.arm_joint_names, np.zeros(16))
    pixel = np.array(pixel, np.uint8)
    inputs.latest[f"{IMAGES}head_color"] = to_image_msg(np.full((6, 8, *pixel.shape), pixel, np.uint8), encoding)
    image = inputs.observation("push", {})[f"{IMAGES}head_color"]
    expected = [90, 90, 90] if encoding == "mono8" else [10, 20, 30]
    assert image.shape == (6, 8, 3) and (image == expected).all()


def test_a_depth_frame_on_a_policy_camera_fails_the_observation_naming_the_topic(ros_node):
    contract = load_contract("genie_sim")
    inputs = ObservationInputs(ros_node, contract, contract.namespace("policy"), [f"{IMAGES}head_color"])
    inputs.latest[STATE] = joint_state_msg(0.0, "base_link", contract.arm_joint_names, np.zeros(16))
    inputs.latest[f"{IMAGES}head_color"] = to_image_msg(np.zeros((6, 8), np.float32), "32FC1")
    with pytest.raises(ObservationError, match="head_front_camera_rgb: Image encoding '32FC1' is depth"):
        inputs.observation("push", {})


@pytest.mark.parametrize("text, problem", [("{oops", "not valid JSON"), ("[1]", "expected a JSON object, got list")])
def test_a_bad_policy_config_stops_the_policy_node_naming_it(text, problem):
    run = subprocess.run([executable_path("policy"), "--ros-args", "-p", f"policy_config:='{text}'"],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 2 and "Traceback" not in run.stderr, run.stderr
    assert run.stderr.startswith(f"policy: policy_config: {problem}") and "Fix: " in run.stderr, run.stderr


@pytest.mark.parametrize("text, problem", [("{oops", "not valid JSON"), ("[1]", "expected a JSON object, got list")])
def test_a_bad_success_checker_config_stops_the_runner_naming_it(ros_node, text, problem):
    with pytest.raises(PluginConfigError, match=f"^success_checker_config: {problem} .*Fix: "):
        EpisodeRunner(parameter_overrides=[
            Parameter("tasks", value=["push"]), Parameter("backend_modes", value=["none"]),
            Parameter("success_checker", value="gripper"), Parameter("success_checker_config", value=text)])

