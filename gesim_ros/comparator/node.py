"""Node `comparator`: does the world model agree with reality, episode by episode?

It listens to the contract's ``episode_events`` and to both sensor streams (the contract's topics
under the robot namespace = side real, under the world_model namespace = side world_model) and keeps
a durable SQLite campaign database (:mod:`gesim_ros.comparator.store`): per episode the real and the
world-model outcome, joint-space divergence per horizon step, PSNR/SSIM per camera view, filmstrip thumbnails,
and the paths of both sides' rosbag2/MCAP recordings. The comparison itself is
:mod:`gesim_ros.comparator.comparison`; this node only moves messages in and out.

How a lab uses it: launch it alongside the backend switch in shadow mode (the robot acts, the
world model imagines the same episode from the same actions), e.g.

    ros2 run gesim_ros backend_switch --ros-args -p mode:=shadow -p armed:=true
    ros2 run gesim_ros comparator --ros-args -p database:=campaign.sqlite

run the episodes (STARTED; OUTCOME from side real and from the world model's judge, side
world_model; ENDED), and afterwards write the agreement report (HTML + JSON beside the database):

    gesim-ros report campaign.sqlite

One comparator writes a database; reports and notebooks may read it at any time.

A restart is safe: completed episodes are committed, an episode interrupted by a crash stays
'incomplete' (listed in the log at start and in the report), and new episodes carry on.

Threads: the executor thread only queues messages, so the DDS history does not overflow while a
frame pair is being decoded and compared; one worker thread applies them in order.
"""

from __future__ import annotations

import queue
import re
import threading
import traceback
from collections.abc import Sequence
from functools import partial
from pathlib import Path

from rclpy.node import Node
from rclpy.serialization import deserialize_message
from rosbags.rosbag2 import WriterError
from sensor_msgs.msg import JointState

from gesim_ros.contract.contract import Contract, TopicSpec, message_class, ros_qos
from gesim_ros.comparator.comparison import ComparisonError, EpisodeComparator
from gesim_ros.episodes.recording import EpisodeBagWriter, RecordingError, recorded_topics
from gesim_ros.comparator.store import EpisodeStore
from gesim_ros.contract.image_codec import rgb_from_camera_msg
from gesim_ros.contract.messages import header_stamp, seconds
from gesim_ros.contract.modes import SIDE_NAMESPACE
from gesim_ros.ros.node_setup import declare, declare_contract, run_node

TICK_PERIOD_S = 1.0  # how often measured rows are committed, so a crash loses at most this much
MAX_BACKLOG = 2000  # queued messages (about 2 s at full contract load) before new ones are dropped


class _BagRecording:
    """One episode recorded as a rosbag2/MCAP folder per side its mode runs,
    ``<record_dir>/<episode>/{real,world_model}``, written from the CDR bytes as received."""

    def __init__(self, contract: Contract, record_dir: Path, episode_id: str, sides: Sequence[str]):
        folder = record_dir / re.sub(r"[^A-Za-z0-9._-]", "_", episode_id)
        self.paths = {side: folder / side for side in sides}
        self._events_topic = contract.topic("episode_events").resolve("/")
        self._writers: dict[str, EpisodeBagWriter] = {}
        try:
            for side in sides:
                topics = recorded_topics(contract, contract.namespace(SIDE_NAMESPACE[side]))
                self._writers[side] = EpisodeBagWriter(self.paths[side], topics)
        except (RecordingError, WriterError, OSError) as exc:
            self.close()
            raise RecordingError(f"cannot record to {self.paths[side]}: {exc}") from exc

    def write(self, side: str, topic: str, log_ns: int, cdr: bytes) -> None:
        self._writers[side].write(topic, log_ns, cdr)

    def write_event(self, event, log_ns: int) -> None:
        for writer in self._writers.values():
            writer.write_message(self._events_topic, log_ns, event)

    def close(self) -> None:
        for writer in self._writers.values():
            writer.close()
        self._writers.clear()


class Comparator(Node):
    """Subscribes, stamps and queues; the worker thread applies everything to the comparator."""

    def __init__(self):
        super().__init__("comparator")
        self.store = self._worker = None  # set once opened: a failed start is cleaned up too
        contract = declare_contract(self)
        database = Path(declare(self, "database", "gesim_episodes.sqlite",
                                "SQLite campaign database (created if missing; never overwritten)",
                                read_only=True))
        record_dir = declare(self, "record_dir", "",
                             "folder for per-episode rosbag2/MCAP recordings "
                             "(empty: <database name>_recordings beside the database)", read_only=True)
        record = declare(self, "record", True, "record both sides of every episode to MCAP",
                         read_only=True)
        horizon_step_s = declare(self, "horizon_step_s", 0.1,
                                 "horizon step (s) that both streams are aligned into", read_only=True)
        image_sample_hz = declare(self, "image_sample_hz", 2.0,
                                  "camera frames compared per second and view (decoding costs CPU)",
                                  read_only=True)
        outcome_grace_s = declare(self, "outcome_grace_s", 30.0,
                                  "seconds after ENDED to wait for a missing outcome before leaving "
                                  "the episode incomplete", read_only=True)
        record_dir = Path(record_dir) if record_dir else database.parent / f"{database.stem}_recordings"
        self.store = EpisodeStore(database)
        interrupted = self.store.incomplete_episodes()
        if interrupted:
            self.get_logger().warning(
                f"{len(interrupted)} episode(s) in {database} are incomplete from an earlier run "
                f"(interrupted, or their outcome never came) and stay so: "
                f"{', '.join(e.episode_id for e in interrupted[:10])}"
                + (" ..." if len(interrupted) > 10 else ""))
        self.comparator = EpisodeComparator(
            self.store, joint_names=contract.arm_joint_names,
            views=[c.view for c in contract.cameras if c.view],
            horizon_step_s=horizon_step_s, image_sample_hz=image_sample_hz,
            outcome_grace_s=outcome_grace_s,
            open_recording=partial(_BagRecording, contract, record_dir) if record else None,
            logger=self.get_logger())

        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._dropped = 0
        events = contract.topic("episode_events")
        events_topic = events.resolve("/")
        self.create_subscription(message_class(events.type), events_topic, self._on_event,
                                 ros_qos(events.qos))
        # Receiving costs CPU (the full contract is ~20 MB/s per side): without recording, only
        # the compared topics are subscribed.
        compared = {"joint_states"} | {c.key for c in contract.cameras if c.view}
        for side, namespace_key in SIDE_NAMESPACE.items():
            namespace = contract.namespace(namespace_key)
            specs = {spec.resolve(namespace): spec for spec in contract.topics.values()}
            for topic, _ in recorded_topics(contract, namespace):
                if topic == events_topic:  # read above and recorded by the comparator
                    continue
                spec = specs[topic]
                if record or spec.key in compared:
                    self.create_subscription(message_class(spec.type), topic,
                                             partial(self._on_raw, side, spec, topic),
                                             ros_qos(spec.qos), raw=True)
        self.create_timer(TICK_PERIOD_S, self._on_tick)
        self._worker = threading.Thread(target=self._work, name="comparator", daemon=True)
        self._worker.start()
        self.get_logger().info(
            f"comparing real ({contract.namespace('robot')}) with world model "
            f"({contract.namespace('world_model')}) into {database}; "
            + (f"recording to {record_dir}" if record else "not recording"))

    # Executor thread: stamp and queue, nothing more.

    def _now(self) -> tuple[float, int]:
        ns = self.get_clock().now().nanoseconds
        return ns * 1e-9, ns

    def _on_event(self, msg) -> None:
        self._queue.put((self._apply_event, (msg, *self._now())))

    def _on_raw(self, side: str, spec: TopicSpec, topic: str, cdr: bytes) -> None:
        if self._queue.qsize() >= MAX_BACKLOG:
            self._dropped += 1
            return
        self._queue.put((self._apply_sample, (side, spec, topic, self._now()[1], cdr)))

    def _on_tick(self) -> None:
        if self._dropped:
            self.get_logger().warning(
                f"dropped {self._dropped} sensor messages in the last {TICK_PERIOD_S:g} s: the "
                "comparator cannot keep up; lower image_sample_hz, set record:=false or give it a "
                "CPU of its own")
            self._dropped = 0
        self._queue.put((self.comparator.tick, (self._now()[0],)))

    # Worker thread: everything that touches the comparator, in arrival order.

    def _work(self) -> None:
        while (item := self._queue.get()) is not None:
            apply, args = item
            try:
                apply(*args)
            except Exception:  # keep comparing later episodes; the store rolled this call back
                self.get_logger().error(f"unexpected error, continuing:\n{traceback.format_exc()}")

    def _apply_event(self, msg, received_at: float, log_ns: int) -> None:
        try:
            self.comparator.handle_event(msg, received_at, log_ns)
        except ComparisonError as exc:
            self.get_logger().error(str(exc))

    def _apply_sample(self, side: str, spec: TopicSpec, topic: str, log_ns: int, cdr: bytes) -> None:
        self.comparator.record(side, topic, log_ns, cdr,
                               header_stamp(cdr) if spec.role == "command" else None)
        if self.comparator.running is None:
            return
        try:
            if spec.key == "joint_states":
                msg = deserialize_message(cdr, JointState)
                self.comparator.add_joint_state(side, seconds(msg.header.stamp), msg.name, msg.position)
            elif spec.is_camera and spec.view:
                msg = deserialize_message(cdr, message_class(spec.type))
                self.comparator.offer_image(side, spec.view, seconds(msg.header.stamp),
                                            partial(rgb_from_camera_msg, msg))
        except ValueError as exc:  # e.g. an undecodable frame: say so, but not 30 times a second
            self.get_logger().error(f"{topic}: {exc}", throttle_duration_sec=10.0)

    def close(self) -> None:
        """Apply what is queued, then leave open episodes incomplete with their rows written
        (run_node calls this before the ROS entities go)."""
        if self._worker is not None:
            self._queue.put(None)
            self._worker.join()
            self.comparator.close()
        if self.store is not None:
            self.store.close()

    def destroy_node(self) -> None:
        self.close()
        super().destroy_node()


def main(args=None):
    run_node(Comparator, args, drain_s=1.0)  # events already delivered: the last episode's outcome
