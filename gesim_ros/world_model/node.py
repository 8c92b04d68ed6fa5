"""Node `world_model`: a world-model backend that looks exactly like the robot on ROS 2.

Under ``contract.namespace('world_model')`` it publishes the contract's sensor topics from the
model's predictions (cameras in the contract's type and encoding at the contract rate, joint states
at the joint-state rate) and consumes ``joint_command`` / ``action_chunk``, which the backend switch
forwards there. The backend (``backend`` by name, ``backend_config`` JSON) runs in the session's
worker thread (``world_model_session``); this node only moves messages. The judge (``judge`` by name,
entry-point group gesim_ros.judges, ``judge_config`` JSON) is a plugin of its own: ``backend`` (the
default) is the backend's own judge, or none where the backend is no Judge; ``none``; or e.g.
``gesim_reward_http`` (a reward model behind GE-Sim's reward interface).

Episodes start with the ``world_model_sync`` service (ResetEpisode): in ``shadow`` mode from the
first REAL frames and joint state (robot namespace) received and stamped after the request, so a twin reset just
before it counts; in ``world_model`` mode from step 0 of a recorded episode (``initial_observation``). From the
request until the new episode starts the sensors are silent: the previous episode's last prediction is not shown on
the next one's time.
Runner events on ``episode_events`` name and end episodes; the node reports OUTCOME (the judge's
verdict; UNKNOWN at once without a judge, e.g. judge ``backend`` with the kinematic baseline or gesim_http) and
ABORTED (backend failures) there with side ``world_model``. OUTCOME follows the
runner's ENDED/ABORTED or ``max_steps``: in world_model mode, where the runner waits for this OUTCOME,
set ``max_steps`` to the episode length (otherwise the runner's timeout ends the episode first). After ENDED,
commands stamped before it that arrive within ``end_grace_s`` are still predicted and judged: they come
through the switch, one hop more than ENDED, and the robot acted on them.

Sensors the model does not predict follow ``sensor_policy.<topic key>``: ``hold_last`` republishes
the last robot-namespace message received before the sync, restamped on the model's timeline;
``silent`` publishes nothing. Defaults: IMU and LiDAR ``hold_last`` (the G2 base does not drive in
these episodes, so both stay as they were); depth and tactile ``silent`` (they change exactly where
manipulation happens, and a held value would contradict the predicted images).

Where topics live: sensors, commands, JudgeStatus and BackendStatus under the world-model
namespace; ``episode_events``, the sync service and ``/clock`` under the robot namespace (shared).
"""

from __future__ import annotations

import threading
import time

import numpy as np
from gesim_ros_interfaces.msg import BackendStatus, EpisodeEvent, JudgeStatus
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup
from rclpy.node import Node
from rclpy.task import Future
from rosgraph_msgs.msg import Clock

from gesim_ros.contract.command_validation import CommandRejected
from gesim_ros.contract.contract import TopicSpec, message_class, ros_qos
from gesim_ros.contract.image_codec import ImageCodecError, colour_camera_msg, rgb_from_camera_msg
from gesim_ros.contract.messages import chunk_positions, header, joint_state_msg, seconds, time_msg
from gesim_ros.ros.node_setup import declare, declare_contract, run_node
from gesim_ros.world_model.initial_observation import (find_initial_observation, initial_observations,
                                                      observation_from_record)
from gesim_ros.world_model.session import (Observation, SessionConfigError, SessionSettings, WorldModelSession,
                                           load_backend, load_episode_judge)
from gesim_ros.world_model.timeline import EpisodeReport

SENSOR_POLICIES = ("hold_last", "silent")
DEFAULT_SENSOR_POLICY = {"sensor_msgs/msg/Imu": "hold_last", "sensor_msgs/msg/PointCloud2": "hold_last"}  # else silent
_RAW_VIEW_ENCODINGS = ("rgb8", "bgr8")
_OUTCOMES = {"success": EpisodeEvent.OUTCOME_SUCCESS, "failure": EpisodeEvent.OUTCOME_FAILURE,
             "unknown": EpisodeEvent.OUTCOME_UNKNOWN}
_EVENTS = {"aborted": EpisodeEvent.ABORTED, "outcome": EpisodeEvent.OUTCOME}


def camera_msg(spec: TopicSpec, rgb: np.ndarray):
    """A contract camera message (type and encoding from ``spec``) of an RGB image; header left empty."""
    return colour_camera_msg(rgb, spec.type, spec.encoding)


class WorldModelNode(Node):
    """Thin ROS edge of a WorldModelSession: parameters, topics, the sync service (see the module doc)."""

    def __init__(self):
        super().__init__("world_model")
        c = self.contract = declare_contract(self)
        backend_name = declare(self, "backend", "kinematic",
                               "world-model plugin name (entry-point group gesim_ros.world_models)", read_only=True)
        backend_config = declare(self, "backend_config", "{}",
                                 "backend config as a JSON object, e.g. {\"url\": \"http://host:9000\"} for gesim_http",
                                 read_only=True)
        judge_name = declare(self, "judge", "backend",
                             "judge plugin name (entry-point group gesim_ros.judges): backend (the backend's own "
                             "judge, none if it has none), none, gesim_reward_http, or a lab's", read_only=True)
        judge_config = declare(self, "judge_config", "{}",
                               "judge config as a JSON object, e.g. {\"url\": \"http://host:9000\"} for "
                               "gesim_reward_http", read_only=True)
        server_url = declare(self, "server_url", "",
                             "address of a world-model server (backend gesim_http), e.g. http://gpu-host:9000; "
                             "becomes backend_config's url", read_only=True)
        self.mode = declare(self, "mode", "shadow",
                            "shadow: sync from the real robot's latest frames; world_model: from a recorded episode",
                            read_only=True)
        self.initial_observation = declare(
            self, "initial_observation", "",
            "world_model mode: EpisodeRecord .npz or folder of them; the sync picks task+seed, else the task's first")
        if self.mode == "world_model":
            initial_observations(self.initial_observation)  # a missing or empty one fails here, not at the first sync
        publish_clock = declare(self, "publish_clock", False,
                                "world_model mode: publish /clock from the model's timeline (run the policy with "
                                "use_sim_time); it stops while the model is behind", read_only=True)
        scale = declare(self, "camera_scale", 1.0, "published camera resolution relative to the contract's",
                        read_only=True)
        self.control_period = declare(self, "control_period_s", 1.0 / 30.0,
                                      "control period of joint_command messages (a JointState has none)")
        self.sync_wait = declare(self, "sync_wait_s", 2.0,
                                 "shadow mode: how long a sync waits for robot frames received and stamped after "
                                 "the request (a twin reset just before the sync must not leave a pre-reset frame)")
        self.views: list[TopicSpec] = []
        self.held_specs: dict[str, TopicSpec] = {}
        for spec in c.topics_with_role("sensor"):
            if spec.type.endswith("JointState"):
                self.joint_spec = spec
            elif spec.is_camera and spec.view:
                if not spec.type.endswith("CompressedImage") and spec.encoding not in _RAW_VIEW_ENCODINGS:
                    raise SessionConfigError(f"contract {c.source}: topics.{spec.key}: encoding {spec.encoding} "
                                             "cannot carry a predicted colour view. Fix: use jpeg, png, rgb8 or bgr8")
                self.views.append(spec)
            else:
                policy = declare(self, f"sensor_policy.{spec.key}", DEFAULT_SENSOR_POLICY.get(spec.type, "silent"),
                                 f"{spec.key} (not predicted): hold_last (republish the last real message, "
                                 "restamped) or silent", read_only=True)
                if policy not in SENSOR_POLICIES:
                    raise SessionConfigError(f"sensor_policy.{spec.key}: '{policy}' is unknown. Fix: use "
                                             f"{' or '.join(SENSOR_POLICIES)}")
                if policy == "hold_last":
                    self.held_specs[spec.key] = spec
        published = [*self.views, self.joint_spec, *self.held_specs.values()]
        model_image_size = declare(self, "model_image_size", [0, 0],
                                   "(H, W) fed to backends that accept any size; [0, 0]: the backend's preferred "
                                   "size (learned: its internal resolution), else GE-Sim's 384x512", read_only=True)
        settings = SessionSettings(
            mode=self.mode, own_clock=publish_clock,
            stream_rates={s.key: s.rate_hz for s in published},
            output_sizes={s.key: (max(8, int(s.width * scale)), max(8, int(s.height * scale))) for s in self.views},
            chunk_mode=declare(self, "chunk_mode", "compress",
                               "chunks longer than the backend's chunk_size: compress (GE-Sim's, one call) or "
                               "split (several calls)", read_only=True),
            judge_threshold=declare(self, "judge_threshold", 0.5,
                                    "OUTCOME is success when the judge's last success probability >= this",
                                    read_only=True),
            max_steps=declare(self, "max_steps", 0, "end the episode (and judge it) after this many commanded "
                              "steps; 0: only the runner ends episodes", read_only=True),
            end_grace_s=declare(self, "end_grace_s", 1.0, "after the runner's ENDED, how long commands stamped "
                                "before it (still on their way through the switch) are predicted before the "
                                "judge decides; 0: judge at once", read_only=True),
            model_image_size=tuple(model_image_size) if any(model_image_size) else None)

        backend = load_backend(backend_name, backend_config, server_url)
        judge = None
        try:
            judge = load_episode_judge(judge_name, judge_config, backend)
            self.session = WorldModelSession(backend, c, settings, lambda key, rgb: camera_msg(c.topic(key), rgb),
                                             judge=judge, backend_name=backend_name, logger=self.get_logger())
        except (ValueError, LookupError):  # a bad judge or setting: nothing may stay open
            backend.close()
            if judge is not None and judge is not backend:
                judge.close()
            raise

        ns, robot = c.namespace("world_model"), c.namespace("robot")
        self.pubs = {s.key: self.create_publisher(message_class(s.type), s.resolve(ns), ros_qos(s.qos))
                     for s in published}
        self.judge_pub = self._publisher("judge", ns)
        self.status_pub = self._publisher("backend_status", ns)
        self.events_pub = self._publisher("episode_events", robot)
        self.clock_pub = self._publisher("clock", robot) if publish_clock else None

        self._publishing = threading.Lock()
        self.latest: dict[str, tuple[float, object]] = {}  # robot-namespace key -> (monotonic receipt, message)
        self.held: dict[str, object] = {}    # snapshot of `latest` for hold_last topics at the sync
        self.started = ("", "")              # (episode_id, task_text) of the runner's last STARTED event
        real_inputs = [*self.views, self.joint_spec] if self.mode == "shadow" else []
        for spec in [*real_inputs, *self.held_specs.values()]:
            self.create_subscription(message_class(spec.type), spec.resolve(robot),
                                     lambda msg, key=spec.key: self.latest.__setitem__(key, (time.monotonic(), msg)),
                                     ros_qos(spec.qos))
        for key, callback in (("action_chunk", self._on_chunk), ("joint_command", self._on_joint_command)):
            spec = c.topic(key)
            self.create_subscription(message_class(spec.type), spec.resolve(ns), callback, ros_qos(spec.qos))
        events = c.topic("episode_events")
        self.create_subscription(EpisodeEvent, events.resolve(robot), self._on_event, ros_qos(events.qos))
        sync = c.service("world_model_sync")
        # A group of its own, held while a sync awaits: the rest runs meanwhile, and syncs come one at a time.
        self.create_service(message_class(sync.type), sync.resolve(robot), self._on_sync,
                            callback_group=MutuallyExclusiveCallbackGroup())
        self.since = self.get_clock().now().to_msg()
        self.create_timer(1.0 / max(settings.stream_rates.values()), self._tick)
        self.create_timer(1.0, self._publish_status)
        self.session.start()
        self.get_logger().info(
            f"world model '{backend_name}' (judge '{judge_name}'"
            + ("" if judge else ": none, outcomes unknown") + f") in {self.mode} mode: sensors under '{ns}', sync service "
            f"'{sync.resolve(robot)}', held sensors {sorted(self.held_specs) or 'none'}"
            + (", publishing /clock" if publish_clock else ""))

    def _publisher(self, key: str, namespace: str):
        spec = self.contract.topic(key)
        return self.create_publisher(message_class(spec.type), spec.resolve(namespace), ros_qos(spec.qos))

    def close(self):
        """The session's threads, backend and judge (run_node calls this before the ROS entities go)."""
        if hasattr(self, "session"):  # none when the constructor refused a parameter
            self.session.close()

    def destroy_node(self):
        self.close()
        super().destroy_node()

    # ----------------------------------------------------------------- inputs

    async def _on_sync(self, request, response):
        """Answered from a thread of its own: a sync waits for fresh robot messages, which the node's one
        executor thread goes on taking meanwhile, and for the session's worker. (rclpy's
        MultiThreadedExecutor, used before, resubmits a queued callback on every spin: its main thread
        then held a core and the GIL, and starved the worker for tens of seconds.)"""
        done = Future()

        def sync():
            try:
                done.set_result(self._sync(request, response))
            except BaseException as exc:  # noqa: BLE001 - raised in the executor, as a callback's own error
                done.set_exception(exc)
            if (executor := self.executor) is not None:
                executor.wake()
        threading.Thread(target=sync, name="world_model_sync", daemon=True).start()
        return await done

    def _sync(self, request, response):
        with self._publishing:  # a tick publishing the previous episode finishes first, and is its last
            self.session.begin_sync()
        try:
            obs = self._observation(request, time.monotonic())
        except (SessionConfigError, ImageCodecError) as exc:
            response.success, response.message = False, f"world_model_sync: {exc}"
            self.get_logger().error(response.message)
            return response
        self.held = {k: self.latest[k][1] for k in self.held_specs if k in self.latest}
        for key in sorted(set(self.held_specs) - set(self.held)):
            self.get_logger().warning(f"sensor_policy.{key} is hold_last but nothing was received on "
                                      f"{self.held_specs[key].resolve(self.contract.namespace('robot'))}; "
                                      "it stays silent this episode")
        response.success, response.message = self.session.sync(obs)
        response.task_text = obs.task_text
        return response

    def _observation(self, request, requested: float) -> Observation:
        if self.mode == "world_model":
            record = find_initial_observation(self.initial_observation, request.task, request.seed)
            return observation_from_record(record, self.contract, request.episode_id, request.seed)
        inputs = [*self.views, self.joint_spec]
        # Fresh means received after the request AND stamped after it: messages queued in a subscription
        # before the request are taken after it, so by receipt alone a frame from before the twin's reset
        # could start the episode (replay-shadow's P(success) was 0.08-0.18 off the live run's in 3 of 4
        # runs without the stamp check).
        requested_stamp = self.get_clock().now().nanoseconds * 1e-9

        def stale():
            return [s for s in inputs if (entry := self.latest.get(s.key)) is None or entry[0] < requested
                    or seconds(entry[1].header.stamp) < requested_stamp]

        deadline = requested + self.sync_wait
        while stale() and time.monotonic() < deadline:
            time.sleep(0.005)  # the executor thread takes them meanwhile
        if late := stale():
            robot = self.contract.namespace("robot")
            behind = {s.resolve(robot): requested_stamp - seconds(self.latest[s.key][1].header.stamp)
                      for s in late if s.key in self.latest}
            raise SessionConfigError(
                f"no message received and stamped within sync_wait_s={self.sync_wait:g} after the request on "
                f"{', '.join(s.resolve(robot) for s in late)}"
                + (f" (the latest stamps are {', '.join(f'{t}: {d:.3f} s' for t, d in behind.items())} before the "
                   "request)" if behind else "")
                + ". Fix: start the robot (or its twin) before syncing a shadow episode, run it on this node's "
                "clock (use_sim_time alike; the robot's clock synchronised), or raise sync_wait_s")
        latest = {s.key: self.latest[s.key][1] for s in inputs}
        joints = latest[self.joint_spec.key]
        started_id, started_text = self.started
        return Observation(
            episode_id=request.episode_id, task=request.task, seed=request.seed,
            task_text=started_text if started_id == request.episode_id and started_text else request.task,
            images={s.key: rgb_from_camera_msg(latest[s.key], f"camera '{s.key}'") for s in self.views},
            joints=dict(zip(joints.name, map(float, joints.position))))

    def _on_chunk(self, msg):
        self._submit(msg, msg.episode_id, msg.joint_names, chunk_positions(msg), msg.horizon,
                     seconds(msg.control_period))

    def _on_joint_command(self, msg):
        self._submit(msg, "", msg.name, msg.position, 1, self.control_period)

    def _submit(self, msg, episode_id, names, positions, horizon, period):
        try:
            self.session.submit(episode_id, names, positions, horizon, period, seconds(msg.header.stamp))
        except CommandRejected:
            pass  # counted, logged and published as last_error by the session

    def _on_event(self, msg):
        if msg.side == "world_model":
            return  # our own reports
        if msg.event == EpisodeEvent.STARTED:
            self.started = (msg.episode_id, msg.task_text)
            self.session.episode_started(msg.episode_id, msg.task_text)
        elif msg.event in (EpisodeEvent.ENDED, EpisodeEvent.ABORTED):
            self.session.end_episode(msg.episode_id, aborted=msg.event == EpisodeEvent.ABORTED,
                                     stamp_s=seconds(msg.header.stamp))

    # ----------------------------------------------------------------- outputs

    def _tick(self):
        with self._publishing:
            self._publish(self.session.tick())

    def _publish(self, due):
        if self.clock_pub is not None:
            self.clock_pub.publish(Clock(clock=time_msg(due.clock)))
        for key, t, sample in due.publications:
            if key == self.joint_spec.key:
                msg = joint_state_msg(t, self.joint_spec.frame_id, self.contract.joint_names, sample.joints,
                                      sample.velocity)
            else:
                msg = self.held.get(key) if key in self.held_specs else sample.images[key]
                if msg is None:
                    continue  # hold_last with nothing received
                msg.header = header(t, self.contract.topic(key).frame_id)
            self.pubs[key].publish(msg)
        for sample in due.judged:
            ep = sample.episode
            self.judge_pub.publish(JudgeStatus(header=header(sample.t, ""), episode_id=ep.episode_id, task=ep.task,
                                               step=sample.step, success_probability=sample.judge[0],
                                               progress=sample.judge[1]))
        for report in due.reports:
            self.events_pub.publish(self._event(report))
        if due.status_changed:
            self._publish_status()

    def _event(self, report: EpisodeReport) -> EpisodeEvent:
        ep = report.episode
        return EpisodeEvent(header=header(self.get_clock().now().nanoseconds * 1e-9, ""),
                            event=_EVENTS[report.event], episode_id=ep.episode_id, task=ep.task,
                            task_text=ep.task_text, backend_mode=self.mode, seed=ep.seed, side="world_model",
                            outcome=_OUTCOMES[report.outcome], success_probability=report.success_probability,
                            label=report.label, reason=report.reason)

    def _publish_status(self):
        s = self.session.status()
        self.status_pub.publish(BackendStatus(
            header=header(self.get_clock().now().nanoseconds * 1e-9, ""), mode=s.mode, since=self.since,
            armed=False, episode_active=s.episode_active, episode_id=s.episode_id,
            paths=["world_model.commands", "world_model.predictions"],
            message_counts=[s.commands, s.predicted_frames], rejection_counts=[s.rejected, 0],
            holds_sent=0, last_error=s.last_error))


def main(args=None):
    run_node(WorldModelNode, args)
