"""The `world_model` node in its own process, seen from outside: shadow mode against a synthetic robot,
gesim_http against `gesim-ros serve-wm` (server down at start, killed mid-episode, back), bad input."""

import math
import signal
import socket
import time
from collections import defaultdict

import numpy as np
import pytest
from gesim_ros_interfaces.msg import ActionChunk, EpisodeEvent
from gesim_ros_interfaces.srv import ResetEpisode

from gesim_ros.contract.contract import load_contract, message_class, ros_qos
from gesim_ros.episodes.data import EpisodeRecord
from gesim_ros.contract.image_codec import colour_camera_msg, from_compressed_msg
from gesim_ros.contract.messages import action_chunk_msg, header, joint_state_msg, seconds
from gesim_ros.ros.process_harness import spin_until

C = load_contract()
WM, ROBOT = C.namespace("world_model"), C.namespace("robot")
ARM = list(C.arm_joint_names)
VIEWS = [t for t in C.cameras if t.view]
DT = 1.0 / 30.0
SCALE = 0.25


class Listener:
    """Everything the world model publishes, as an external subscriber sees it."""

    def __init__(self, node):
        self.node = node
        self.msgs = defaultdict(list)
        topics = [(s, WM) for s in C.topics_with_role("sensor")] + [
            (C.topic("judge"), WM), (C.topic("backend_status"), WM), (C.topic("episode_events"), ROBOT),
            (C.topic("clock"), ROBOT)]
        for spec, ns in topics:
            node.create_subscription(message_class(spec.type), spec.resolve(ns), self.msgs[spec.key].append,
                                     ros_qos(spec.qos))
        chunk = C.topic("action_chunk")
        self.chunks = node.create_publisher(ActionChunk, chunk.resolve(WM), ros_qos(chunk.qos))
        events = C.topic("episode_events")
        self.events = node.create_publisher(EpisodeEvent, events.resolve(ROBOT), ros_qos(events.qos))
        self.sync_client = node.create_client(ResetEpisode, C.service("world_model_sync").resolve(ROBOT))

    def wait(self, condition, timeout=30.0):
        return spin_until(self.node, condition, timeout)

    def sync(self, episode_id, task="stack", seed=1, attempts=20, answer_s=30.0):
        """Call the sync service until it succeeds (the robot or server may still be starting). A call
        unanswered after ``answer_s`` (longer than any sync here takes) is asked again: Fast DDS drops a
        response whose client the service has not discovered yet ("failed to send response (timeout)",
        seen once on a loaded host), and the same sync asked twice starts the same episode."""
        assert self.sync_client.wait_for_service(timeout_sec=30), "world_model_sync service never appeared"
        unanswered = 0
        for _ in range(attempts):
            future = self.sync_client.call_async(ResetEpisode.Request(episode_id=episode_id, task=task, seed=seed))
            if not self.wait(future.done, answer_s):
                self.sync_client.remove_pending_request(future)
                unanswered += 1
                continue
            if future.result().success:
                break
            self.wait(lambda: False, 0.5)
        assert future.done(), f"world_model_sync answered none of {unanswered} calls within {answer_s:g} s each"
        return future.result()

    def send_chunk(self, episode_id, sequence, positions, names=ARM):
        assert self.wait(lambda: self.chunks.get_subscription_count() > 0)
        self.chunks.publish(action_chunk_msg(0.0, "base_link", episode_id, sequence, names, positions, DT))

    def send_event(self, event, episode_id):
        assert self.wait(lambda: self.events.get_subscription_count() > 0)
        self.events.publish(EpisodeEvent(event=event, episode_id=episode_id, side="runner"))

    def joints(self, msg=None):
        msg = msg or self.msgs["joint_states"][-1]
        return dict(zip(msg.name, msg.position))

    def arm(self, msg=None):
        return np.array([self.joints(msg)[n] for n in ARM])

    def world_model_events(self, event):
        return [e for e in self.world_model_events_all() if e.event == event]

    def world_model_events_all(self):
        return [e for e in self.msgs["episode_events"] if e.side == "world_model"]


def target_near(arm):
    """A reachable target 0.1 rad from ``arm`` with the grippers half open (all within the limits)."""
    lower = np.array([C.joint_limits[n][0] for n in ARM])
    upper = np.array([C.joint_limits[n][1] for n in ARM])
    target = np.clip(arm + 0.1, lower, upper)
    target[-2:] = 0.03
    return target


def drive(listener, episode_id, start, target, sequence=0):
    """A 25-step ramp of the arms to ``target`` then 25 steps holding it; grippers go straight to theirs
    (the synthetic robot's gripper value can lie outside the limits a command must keep)."""
    ramp = np.linspace(start, target, 25)
    ramp[:, -2:] = target[-2:]
    listener.send_chunk(episode_id, sequence, ramp)
    listener.send_chunk(episode_id, sequence + 1, np.tile(target, (25, 1)))


def settled_on(listener, target, tol=2e-3):
    return lambda: bool(listener.msgs["joint_states"]) and np.abs(listener.arm() - target).max() < tol


def not_settled(listener, target) -> str:
    """What the world model showed when its arm did not reach ``target``: enough to tell a model that
    stopped predicting (its status and events) from a subscription that stopped receiving."""
    states, statuses = listener.msgs["joint_states"], listener.msgs["backend_status"]
    first, last = seconds(states[0].header.stamp), seconds(states[-1].header.stamp)
    status = (f"{len(statuses)} statuses, the last (commands, predicted frames) {list(statuses[-1].message_counts)} "
              f"stamped {seconds(statuses[-1].header.stamp) - last:.3f} s after the last joint state, rejections "
              f"{list(statuses[-1].rejection_counts)}, error {statuses[-1].last_error!r}") if statuses else "no status"
    return (f"arm {listener.arm().round(4).tolist()} != target {target.round(4).tolist()}; {len(states)} joint "
            f"states, the last stamped {last - first:.3f} s after the first; world model events "
            f"{[(e.event, e.reason) for e in listener.world_model_events_all()]}; {status}")


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def save_episode(path, task="stack", seed=1):
    rng = np.random.default_rng(seed)
    frames = {v: rng.integers(0, 255, (3, 96, 128, 3), np.uint8) for v in ("head", "left_wrist", "right_wrist")}
    start = np.full(16, 0.05)
    start[-2:] = 0.02
    positions = np.tile(start, (3, 1)).astype(np.float32)
    EpisodeRecord(episode_id=f"rec-{task}", task=task, task_text=f"{task} the blocks", seed=seed, success=True,
                  label="success", control_period_s=DT, joint_names=ARM, actions=positions[:2],
                  joint_positions=positions, frames=frames).save_npz(path)
    return positions[0]


@pytest.mark.slow
def test_shadow_mode_predicts_what_the_commands_imply(procs, ros_node):
    procs.start("contract_publisher", "--ros-args", "-p", f"camera_scale:={SCALE}")
    procs.start("world_model", "--ros-args", "-p", f"camera_scale:={SCALE}")
    listener = Listener(ros_node)
    reply = listener.sync("ep1", "stack")
    assert reply.success, reply.message
    assert reply.task_text == "stack"
    assert listener.wait(lambda: listener.msgs["joint_states"])
    synced = listener.msgs["joint_states"][0]
    assert list(synced.name) == list(C.joint_names)
    start = listener.arm(synced)
    target = target_near(start)
    drive(listener, "ep1", start, target)

    assert listener.wait(settled_on(listener, target)), not_settled(listener, target)
    held = [n for n in C.joint_names if n not in ARM]
    last = listener.joints()
    assert all(last[n] == listener.joints(synced)[n] for n in held)  # waist and head stay as synced
    assert not listener.msgs["judge"]  # the kinematic baseline is no Judge: no probability to publish

    for spec in VIEWS:
        frames = listener.msgs[spec.key]
        assert len(frames) > 10, spec.key
        assert {f.header.frame_id for f in frames} == {spec.frame_id} and "jpeg" in frames[-1].format
        stamps = [seconds(f.header.stamp) for f in frames]
        assert all(b > a for a, b in zip(stamps, stamps[1:])), spec.key
        assert from_compressed_msg(frames[-1]).shape == (int(spec.height * SCALE), int(spec.width * SCALE), 3)
    assert listener.msgs["imu"] and listener.msgs["imu"][-1].header.frame_id == C.topic("imu").frame_id  # hold_last
    assert not any(listener.msgs[k] for k in ("head_depth", "tactile_left", "tactile_right"))  # silent

    listener.send_event(EpisodeEvent.ENDED, "ep1")
    assert listener.wait(lambda: listener.world_model_events(EpisodeEvent.OUTCOME))
    outcome, = listener.world_model_events(EpisodeEvent.OUTCOME)
    # Unknown, not a success: a constant prior met the threshold before, and every episode "succeeded".
    assert (outcome.episode_id, outcome.backend_mode, outcome.outcome) == ("ep1", "shadow", EpisodeEvent.OUTCOME_UNKNOWN)
    assert math.isnan(outcome.success_probability) and outcome.label == ""
    assert ("outcome unknown after 50 steps: no judge (judge 'none', or 'backend' with backend 'kinematic', "
            "which is no Judge)") in outcome.reason, outcome.reason
    status = listener.msgs["backend_status"][-1]
    assert status.message_counts[0] == 2 and status.rejection_counts[0] == 0


class StampedRobot:
    """The robot's joint state and cameras from the test, with header stamps it chooses."""

    def __init__(self, node):
        self.node = node
        self.pubs = {s.key: node.create_publisher(message_class(s.type), s.resolve(ROBOT), ros_qos(s.qos))
                     for s in [C.topic("joint_states"), *VIEWS]}
        self.frames = {s.key: np.full((int(s.height * SCALE), int(s.width * SCALE), 3), 90, np.uint8) for s in VIEWS}

    def publish(self, arm, age_s):
        """One message per topic showing ``arm``, stamped ``age_s`` before now."""
        stamp = self.node.get_clock().now().nanoseconds * 1e-9 - age_s
        q = dict.fromkeys(C.joint_names, 0.0) | dict(zip(ARM, arm))
        joints = C.topic("joint_states")
        self.pubs[joints.key].publish(joint_state_msg(stamp, joints.frame_id, list(q), list(q.values())))
        for spec in VIEWS:
            self.pubs[spec.key].publish(colour_camera_msg(self.frames[spec.key], spec.type, spec.encoding,
                                                          header=header(stamp, spec.frame_id)))

    def sync_while_publishing(self, listener, episode_id, *streams):
        """Call world_model_sync once, publishing every (arm, age_s) stream at 20 Hz until it answers."""
        assert listener.sync_client.wait_for_service(timeout_sec=30), "world_model_sync service never appeared"
        future = listener.sync_client.call_async(ResetEpisode.Request(episode_id=episode_id, task="stack", seed=1))
        deadline = time.monotonic() + 30
        while not future.done():
            assert time.monotonic() < deadline, "world_model_sync never answered"
            for arm, age_s in streams:
                self.publish(arm, age_s)
            listener.wait(future.done, 0.05)
        return future.result()


@pytest.mark.slow
def test_shadow_sync_takes_only_messages_stamped_after_its_request(procs, ros_node):
    """Messages already queued at the request (from before the twin's reset) reach the node after it; by
    receipt alone they passed as the new episode's start. Their stamps give them away."""
    procs.start("world_model", "--ros-args", "-p", f"camera_scale:={SCALE}", "-p", "sync_wait_s:=1.0")
    listener, robot = Listener(ros_node), StampedRobot(ros_node)
    before, after = np.full(len(ARM), 0.3), np.full(len(ARM), 0.1)
    before[-2:] = after[-2:] = 0.02

    refused = robot.sync_while_publishing(listener, "old", (before, 5.0))
    assert not refused.success
    assert "received and stamped within sync_wait_s=1 after the request" in refused.message, refused.message
    assert "s before the request" in refused.message and "use_sim_time" in refused.message, refused.message

    reply = robot.sync_while_publishing(listener, "new", (before, 5.0), (after, 0.0))
    assert reply.success, reply.message
    assert listener.wait(lambda: listener.msgs["joint_states"])
    assert np.allclose(listener.arm(listener.msgs["joint_states"][0]), after), listener.arm(listener.msgs["joint_states"][0])


@pytest.mark.slow
def test_gesim_http_backend_survives_its_server(procs, ros_node, tmp_path):
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    start = save_episode(tmp_path / "stack.npz")
    # gesim_http's default units are GE-Sim's (normalised commands, mm state); serve-wm converts them to
    # and from the kinematic baseline's metres, so the grippers settle where commanded (target_near).
    config = f'{{"url": "{url}", "connect_retries": 1, "retry_backoff_s": 0.1, "timeout_s": 10}}'
    procs.start("world_model", "--ros-args", "-p", "mode:=world_model", "-p", f"initial_observation:={tmp_path}",
                "-p", "publish_clock:=true", "-p", "backend:=gesim_http", "-p", f"backend_config:='{config}'",
                "-p", "camera_scale:=0.1")
    listener = Listener(ros_node)
    # Nothing listens on the port yet: the node reports it and keeps running.
    assert listener.wait(lambda: any("not reachable" in s.last_error and url in s.last_error
                                     for s in listener.msgs["backend_status"]))

    server = procs.start("gesim-ros", "serve-wm", "--backend", "kinematic", "--port", str(port))
    reply = listener.sync("ep1")
    assert reply.success, reply.message
    assert reply.task_text == "stack the blocks"  # from the recorded episode
    target = target_near(start)
    drive(listener, "ep1", start, target)
    assert listener.wait(settled_on(listener, target)), not_settled(listener, target)
    clock = [seconds(m.clock) for m in listener.msgs["clock"]]
    assert len(clock) > 10 and all(b >= a for a, b in zip(clock, clock[1:]))
    assert not listener.msgs["judge"]  # gesim_http is no Judge

    server.signal(signal.SIGKILL)
    server.process.wait(10)
    sequence = 2
    while not listener.world_model_events(EpisodeEvent.ABORTED) and sequence < 60:
        listener.send_chunk("ep1", sequence, np.tile(target, (5, 1)))
        listener.wait(lambda: listener.world_model_events(EpisodeEvent.ABORTED), 0.5)
        sequence += 1
    aborted, = listener.world_model_events(EpisodeEvent.ABORTED)
    assert aborted.episode_id == "ep1" and f"cannot connect to {url}" in aborted.reason, aborted.reason
    assert "backend 'gesim_http' failed" in aborted.reason

    procs.start("gesim-ros", "serve-wm", "--backend", "kinematic", "--port", str(port))
    reply = listener.sync("ep2")
    assert reply.success, reply.message
    drive(listener, "ep2", start, start + (target - start) / 2)
    assert listener.wait(settled_on(listener, start + (target - start) / 2)), listener.arm()


@pytest.mark.slow
def test_malformed_commands_are_rejected_and_the_node_keeps_going(procs, ros_node, tmp_path):
    start = save_episode(tmp_path / "stack.npz")
    procs.start("world_model", "--ros-args", "-p", "mode:=world_model",
                "-p", f"initial_observation:={tmp_path / 'stack.npz'}", "-p", "camera_scale:=0.1")
    listener = Listener(ros_node)
    assert listener.sync("ep1").success

    def rejected(count, text):
        return lambda: any(s.rejection_counts[0] == count and text in s.last_error
                           for s in listener.msgs["backend_status"])

    nan = np.tile(start, (3, 1))
    nan[1, 4] = math.nan
    listener.send_chunk("ep1", 0, nan)
    assert listener.wait(rejected(1, "target for 'idx25_arm_l_joint5' at step 1 is nan; targets must be finite"))
    short = action_chunk_msg(0.0, "base_link", "ep1", 1, ARM, np.tile(start, (2, 1)), DT)
    short.positions = short.positions[:-1]
    listener.chunks.publish(short)
    assert listener.wait(rejected(2, "31 target values for 16 joints x horizon 2"))
    target = target_near(start)
    drive(listener, "ep1", start, target, sequence=2)
    assert listener.wait(settled_on(listener, target))
    assert all(np.isfinite(m.position).all() for m in listener.msgs["joint_states"])


@pytest.mark.slow
def test_unknown_backend_exits_with_the_available_names(procs):
    node = procs.start("world_model", "--ros-args", "-p", "backend:=nope")
    assert node.process.wait(60) != 0
    log = node.log()
    assert "unknown world model 'nope'" in log, log
    available = log.split("available", 1)[-1]
    assert "kinematic" in available and "gesim_http" in available, log


@pytest.mark.parametrize("params, phrases", [
    (["judge:=nope"], ["unknown judge 'nope'", "available in entry-point group 'gesim_ros.judges'", "gesim_reward_http"]),
    (["judge:=gesim_reward_http", "judge_config:='[1]'"],
     ["judge 'gesim_reward_http': judge_config: expected a JSON object, got list"]),
    (["judge:=gesim_reward_http"], ["judge 'gesim_reward_http'", "missing required key(s) ['url']"]),
], ids=["unknown", "not-an-object", "no-url"])
def test_a_bad_judge_exits_2_with_one_line_naming_it(procs, params, phrases):
    args = [a for p in ["backend:=kinematic", *params] for a in ("-p", p)]
    node = procs.start("world_model", "--ros-args", *args)
    assert node.process.wait(60) == 2
    log = node.log()
    assert all(p in log for p in phrases), log
