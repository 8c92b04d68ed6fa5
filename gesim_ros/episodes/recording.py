"""Episodes on disk: rosbag2 folders with MCAP storage (open in Foxglove and with `ros2 bag`).

One folder per episode holds every contract topic that was recorded, the commands, and the
episode's EpisodeEvents (STARTED carries the task and task text, OUTCOME/ENDED the ground truth).
A lab's own ``ros2 bag record`` of the contract topics (MCAP storage) has no events: its episode id is
the bag folder's name, and its task, task text and label come from a labels CSV row (``LabelRow``).
Messages are written as CDR bytes, exactly as they travel over DDS, so a recorder fed by raw
subscriptions never deserialises. ``episode_record`` turns a recorded episode into the arrays the
world model trains on, sampled at the control period of the recorded commands.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator

import cv2
import numpy as np
from rclpy.serialization import deserialize_message, serialize_message
from rosbags.rosbag2 import Reader, StoragePlugin, Writer
from rosbags.typesys import Stores, get_types_from_msg, get_typestore

from gesim_ros.contract.contract import Contract, message_class
from gesim_ros.episodes.data import EpisodeRecord
from gesim_ros.contract.image_codec import rgb_from_camera_msg
from gesim_ros.contract.messages import chunk_positions, seconds

INTERFACES = "gesim_ros_interfaces"
EpisodeEvent = message_class(f"{INTERFACES}/msg/EpisodeEvent")


class RecordingError(ValueError):
    """A recorded episode is missing what is needed, or is not a readable rosbag2 folder."""


def _interface_definitions() -> dict:
    """Message definitions of gesim_ros_interfaces, from its installed share folder."""
    import gesim_ros_interfaces

    share = Path(gesim_ros_interfaces.__file__).resolve().parents[4] / "share" / INTERFACES / "msg"
    types = {}
    for path in sorted(share.glob("*.msg")):
        types.update(get_types_from_msg(path.read_text(), f"{INTERFACES}/msg/{path.stem}"))
    if not types:
        raise RecordingError(f"no message definitions found in {share}; is {INTERFACES} installed?")
    return types


_TYPESTORE = None
_REPLAN_EPS_S = 1e-6   # a chunk stamped at a planned row's due time replaces that row despite float rounding


def typestore():
    global _TYPESTORE
    if _TYPESTORE is None:
        _TYPESTORE = get_typestore(Stores.ROS2_KILTED)
        _TYPESTORE.register(_interface_definitions())
    return _TYPESTORE


class EpisodeBagWriter:
    """Writes one episode folder; ``close()`` (or leaving the ``with`` block) finalises it."""

    def __init__(self, path: Path, topics: Iterable[tuple[str, str]]):
        path = Path(path)
        if path.exists():
            raise RecordingError(f"{path} already exists; choose a new episode folder (nothing is overwritten)")
        self.path = path
        self._writer = Writer(path, version=9, storage_plugin=StoragePlugin.MCAP)
        self._writer.open()
        store = typestore()
        self._connections = {name: self._writer.add_connection(name, mtype, typestore=store)
                             for name, mtype in topics}
        self.counts = {name: 0 for name in self._connections}

    def write(self, topic: str, stamp_ns: int, cdr: bytes) -> None:
        self._writer.write(self._connections[topic], int(stamp_ns), cdr)
        self.counts[topic] += 1

    def write_message(self, topic: str, stamp_ns: int, msg) -> None:
        self.write(topic, stamp_ns, serialize_message(msg))

    def close(self) -> None:
        self._writer.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def recorded_topics(contract: Contract, namespace: str) -> list[tuple[str, str]]:
    """(name, type) of everything an episode folder holds: sensors and commands under ``namespace``,
    plus the episode events."""
    specs = [t for t in contract.topics.values() if t.role in ("sensor", "command")]
    return [(t.resolve(namespace), t.type) for t in specs] + [
        (contract.topic("episode_events").resolve("/"), contract.topic("episode_events").type)]


def bag_message_counts(path: Path) -> dict[str, int]:
    with _open(path) as reader:
        return {c.topic: c.msgcount for c in reader.connections}


def read_messages(path: Path, topics: Iterable[str] | None = None) -> Iterator[tuple[str, int, object]]:
    """(topic, log time ns, deserialised message) in log-time order."""
    wanted = set(topics) if topics is not None else None
    with _open(path) as reader:
        conns = [c for c in reader.connections if wanted is None or c.topic in wanted]
        classes = {c.topic: message_class(c.msgtype) for c in conns}
        if not conns:   # rosbags reads every topic for an empty list
            return
        for conn, stamp, raw in reader.messages(connections=conns):
            yield conn.topic, stamp, deserialize_message(bytes(raw), classes[conn.topic])


@dataclass(frozen=True)
class LabelRow:
    """One labels CSV row: the outcome label and, for a bag recorded without EpisodeEvents, its task."""
    label: str
    task: str = ""
    task_text: str = ""


def bag_episode_id(path: Path) -> str:
    """A recorded episode folder's id: its name (a shadow run's ``<episode>/real``: the episode's)."""
    path = Path(path)
    return path.parent.name if path.name == "real" else path.name


def plain_bag_row(path: Path, labels: dict | None, labels_csv: str | Path | None = None,
                  error: type[Exception] = RecordingError) -> LabelRow:
    """The labels CSV row of a bag recorded without EpisodeEvents (a plain ``ros2 bag record``), which
    gives its task and label; refused naming the bag and the row to add where it has none with a task."""
    episode = bag_episode_id(path)
    row = (labels or {}).get(episode)
    if row is not None and getattr(row, "task", ""):
        return row
    where = (f"the labels CSV {labels_csv} gives no task for it" if row is not None
             else f"the labels CSV {labels_csv} has no row for it" if labels_csv else "no labels CSV was given")
    raise error(f"{path}: no EpisodeEvents recorded (a plain `ros2 bag record`?) and {where}; add a labels CSV row "
                f"`episode_id,label,task` for it (optional column task_text), e.g. `{episode},success,pick`, "
                "and pass the CSV (--labels)")


def _open(path: Path) -> Reader:
    path = Path(path)
    if not (path / "metadata.yaml").is_file():
        raise RecordingError(f"{path} is not a rosbag2 episode folder (no metadata.yaml); "
                             "pass a folder written by `gesim-ros collect`")
    return Reader(path)  # opened by the caller's `with`


@dataclass
class _Series:
    """Timestamped samples of one stream, looked up by 'latest at or before t'."""
    times: list[float]
    values: list

    def at(self, t: float):
        i = bisect.bisect_right(self.times, t + 1e-6) - 1
        return self.values[max(i, 0)]


def _camera_frame(msg, size_hw: tuple[int, int], source: str) -> np.ndarray:
    h, w = size_hw
    return cv2.resize(rgb_from_camera_msg(msg, source), (w, h), interpolation=cv2.INTER_AREA)


def episode_record(path: Path, contract: Contract, image_size_hw: tuple[int, int] = (48, 64),
                   namespace: str | None = None, labels: dict[str, LabelRow] | None = None,
                   labels_csv: str | Path | None = None) -> EpisodeRecord:
    """Arrays of a recorded episode at its control period: frames and action-joint positions before
    each commanded step, the commanded targets, and the ground-truth outcome. A bag without
    EpisodeEvents takes its task and label from ``labels`` (rows by episode id, read from
    ``labels_csv``; see ``plain_bag_row``)."""
    namespace = contract.namespace("robot") if namespace is None else namespace
    names = list(contract.arm_joint_names)
    cams = {contract.camera_for_view(v).key: v for v in ("head", "left_wrist", "right_wrist")}
    topic_of = {k: contract.topic(k).resolve(namespace) for k in [*cams, "joint_states", "action_chunk"]}
    events_topic = contract.topic("episode_events").resolve("/")
    frames = {k: _Series([], []) for k in cams}
    joints = _Series([], [])
    steps: list[tuple[float, np.ndarray]] = []
    period = None
    started = outcome = None
    by_topic = {v: k for k, v in topic_of.items()}
    for topic, _, msg in read_messages(path, [*topic_of.values(), events_topic]):
        if topic == events_topic:
            if msg.event == msg.STARTED:
                started = msg
            elif msg.side == "real" and msg.outcome != msg.OUTCOME_UNKNOWN:
                outcome = msg
            continue
        key = by_topic[topic]
        t = seconds(msg.header.stamp)
        if key in cams:
            frames[key].times.append(t)
            frames[key].values.append(_camera_frame(msg, image_size_hw, f"{path}: {topic}"))
        elif key == "joint_states":
            index = {n: i for i, n in enumerate(msg.name)}
            joints.times.append(t)
            joints.values.append(np.array([msg.position[index[n]] for n in names], np.float32))
        else:
            targets = chunk_positions(msg).reshape(msg.horizon, len(msg.joint_names))
            order = [list(msg.joint_names).index(n) for n in names]
            period = seconds(msg.control_period)
            # as the robot runs it: a chunk replaces whatever was planned from its stamp on
            steps = [s for s in steps if s[0] < t - _REPLAN_EPS_S]
            steps.extend((t + k * period, targets[k, order]) for k in range(msg.horizon))
    if started is None and outcome is None:   # a plain `ros2 bag record`: the labels CSV says what it was
        row = plain_bag_row(path, labels, labels_csv)
        started = EpisodeEvent(episode_id=bag_episode_id(path), task=row.task, task_text=row.task_text, seed=0)
        outcome = EpisodeEvent(outcome=EpisodeEvent.OUTCOME_SUCCESS if row.label == "success"
                               else EpisodeEvent.OUTCOME_FAILURE, label=row.label)
    if started is None or outcome is None:
        raise RecordingError(f"{path}: no STARTED event or no real outcome recorded; the episode is incomplete")
    if not steps or not joints.times or any(not s.times for s in frames.values()):
        raise RecordingError(f"{path}: needs action chunks, joint states and all three cameras to make arrays")
    times = [s[0] for s in steps] + [steps[-1][0] + period]
    return EpisodeRecord(
        episode_id=started.episode_id, task=started.task, task_text=started.task_text, seed=int(started.seed),
        success=outcome.outcome == outcome.OUTCOME_SUCCESS, label=outcome.label, control_period_s=period,
        joint_names=names, actions=np.stack([s[1] for s in steps]).astype(np.float32),
        joint_positions=np.stack([joints.at(t) for t in times]),
        frames={view: np.stack([frames[key].at(t) for t in times]) for key, view in cams.items()},
        failure_mode=outcome.reason or None)
