"""Recorded episodes as what the robot side of a shadow episode publishes, for `replay-shadow`.

A :class:`ReplayDataset` opens a dataset and checks it whole (readable, every episode labelled
unless an operator labels them) before the first episode is loaded; iterating it loads one
:class:`ReplayEpisode` at a time: the messages to publish, each at its time since STARTED, as CDR
bytes keyed by contract topic key, the start state the world model is synced from, and the real
side's outcome.

* Recorded episodes (rosbag2/MCAP folders: a shadow or real run's ``<db>_recordings/<episode>/real``,
  or `gesim-ros collect` folders): the sensor messages as recorded, at their recorded log times, and
  the recorded commands (from the sibling ``world_model`` folder where there is one: exactly what the
  world model received live; else the robot-side commands), up to ENDED and, after it, the commands
  stamped before it; the outcome is the recorded OUTCOME.
* EpisodeRecords (a LeRobot dataset, or ``*.npz``): camera frames and joint states at the control
  rate, the actions in chunks of ``chunk_horizon`` steps; the outcome is the record's label (a
  LeRobot episode's metadata or the reader's labels CSV).

* Plain bags (a lab's own ``ros2 bag record`` of the contract topics, MCAP storage, no EpisodeEvents):
  replayed as recorded episodes; the episode id is the folder's name, STARTED is the first recorded
  message, the end the last, and the task and label come from the labels CSV row.

A labels CSV (``episode_id,label``, or ``episode_index,label`` for a LeRobot dataset; optional
columns ``task`` and ``task_text``, which a plain bag's row needs) overrides the recorded labels;
``success`` is success, any other label a failure.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import numpy as np
from rclpy.serialization import deserialize_message, serialize_message
from rosbags.rosbag2 import Reader

from gesim_ros.comparator.comparison import VERDICT_SIDES
from gesim_ros.contract.contract import Contract, message_class
from gesim_ros.contract.image_codec import colour_camera_msg
from gesim_ros.contract.messages import (
    action_chunk_msg,
    header_stamp,
    joint_state_msg,
    restamped,
    seconds,
    stamp_fields,
)
from gesim_ros.episodes.data import EpisodeRecord
from gesim_ros.episodes.lerobot import LeRobotError, LeRobotReader, is_lerobot_dataset
from gesim_ros.episodes.recording import LabelRow, bag_episode_id, plain_bag_row

EpisodeEvent = message_class("gesim_ros_interfaces/msg/EpisodeEvent")
COMMAND_KEYS = ("action_chunk", "joint_command")
#: sides whose recorded OUTCOME is the acting side's verdict (the world model's is what is measured)
REAL_SIDES = ("real", *VERDICT_SIDES)


class ReplayError(ValueError):
    """A dataset that cannot be replayed as it is; the message names it and the fix."""


class UnreplayableRecording(ReplayError):
    """One recorded episode holds nothing to replay (e.g. its policy sent no command): it is left out."""


@dataclass(frozen=True)
class LeftOut:
    """A recorded episode the replay leaves out, and why (the rest of the dataset still replays)."""

    episode_id: str
    source: str
    reason: str


@dataclass(frozen=True)
class Outcome:
    side: str
    outcome: int      # EpisodeEvent.OUTCOME_*
    label: str
    reason: str
    offset_s: float   # when the real side reported it, seconds after STARTED


@dataclass
class ReplayEpisode:
    episode_id: str
    task: str
    task_text: str
    seed: int
    policy: str
    source: str
    messages: list[tuple[float, str, bytes]]   # (seconds after STARTED, contract topic key, CDR), in time order
    start: dict[str, bytes]                     # sensor key -> the episode's first message: its start state
    started_stamp_s: float                      # the recorded STARTED stamp; header stamps shift by replay - this
    end_s: float                                # when the recorded episode ENDED, seconds after STARTED
    ended_stamp_s: float | None = None          # the recorded ENDED stamp (None: none recorded)
    outcome: Outcome | None = None              # None: an operator labels it
    extra: dict = field(default_factory=dict)


def read_labels(path: Path) -> tuple[str, dict]:
    """A labels CSV: ('episode_id' or 'episode_index', {episode: label})."""
    key, rows = read_label_rows(path)
    return key, {episode: row.label for episode, row in rows.items()}


def read_label_rows(path: Path) -> tuple[str, dict[object, LabelRow]]:
    """A labels CSV: ('episode_id' or 'episode_index', {episode: LabelRow}); the optional ``task`` and
    ``task_text`` columns give a plain bag (no EpisodeEvents) its task."""
    try:
        with open(path, newline="") as f:
            rows = list(csv.DictReader(f))
    except OSError as exc:
        raise ReplayError(f"labels CSV {path}: {exc.strerror}; pass an existing file") from None
    for key in ("episode_id", "episode_index"):
        if rows and {key, "label"} <= set(rows[0]):
            try:
                return key, {(int(r[key]) if key == "episode_index" else r[key]): LabelRow(
                    r["label"].strip(), (r.get("task") or "").strip(), (r.get("task_text") or "").strip())
                    for r in rows}
            except ValueError:
                raise ReplayError(f"labels CSV {path}: an episode_index that is no integer") from None
    raise ReplayError(f"labels CSV {path}: needs the header `episode_id,label` (or `episode_index,label` for a "
                      "LeRobot dataset; optional columns task,task_text) and one row per episode")


def _labelled(label: str, offset_s: float, source: str) -> Outcome:
    outcome = EpisodeEvent.OUTCOME_SUCCESS if label == "success" else EpisodeEvent.OUTCOME_FAILURE
    return Outcome("real", outcome, label, f"label from {source}", offset_s)


class ReplayDataset:
    """Episodes of a dataset to replay, checked when it opens; iterate for ReplayEpisodes."""

    def __init__(self, path: str | Path, contract: Contract, labels_csv: str = "", mapping: str = "",
                 operator_labels: bool = False, chunk_horizon: int = 10):
        self.path, self.contract, self.chunk_horizon = Path(path), contract, chunk_horizon
        self.operator_labels = operator_labels
        self.labels_csv = labels_csv
        key, self.label_rows = read_label_rows(Path(labels_csv)) if labels_csv else ("episode_id", {})
        self.labels = {episode: row.label for episode, row in self.label_rows.items()}
        if chunk_horizon < 1:
            raise ReplayError(f"chunk_horizon {chunk_horizon}: give at least 1 step per action chunk")
        if not self.path.exists():
            raise ReplayError(f"{self.path}: no such dataset; pass a LeRobot dataset, a folder of *.npz episodes or "
                              "of recorded episode folders (e.g. a shadow run's shadow_recordings)")
        self.reader: LeRobotReader | None = None
        self.bags: list[Path] = []
        self.npz: list[Path] = []
        self.skipped: list[Path] = []   # recordings of aborted episodes
        if is_lerobot_dataset(self.path):
            try:
                self.reader = LeRobotReader(self.path, mapping or None, contract,
                                            labels_csv if key == "episode_index" else None)
            except (LeRobotError, FileNotFoundError) as exc:
                raise ReplayError(str(exc)) from None
        elif key == "episode_index":
            raise ReplayError(f"labels CSV {labels_csv}: episode_index rows label LeRobot episodes; "
                              f"{self.path} is none, so label by episode_id")
        else:
            bags, self.npz = self._files()
            # Read each recording's events once: an aborted one has no outcome to compare and is left out.
            events = {p: _events(p, contract) for p in bags}
            self.skipped = [p for p in bags if any(e.event == EpisodeEvent.ABORTED for e in events[p])]
            self.bags = [p for p in bags if p not in self.skipped]
            self._recorded = {p: (next((e for e in events[p] if e.event == EpisodeEvent.STARTED), None),
                                  next((e for e in events[p] if e.event == EpisodeEvent.OUTCOME
                                        and e.side in REAL_SIDES), None)) for p in self.bags}
            if not len(self):
                raise ReplayError(f"{self.path}: every recorded episode in it was aborted; nothing to replay")
        self._check_labels()

    def _files(self) -> tuple[list[Path], list[Path]]:
        root = self.path
        runs = sorted(root.glob("*_recordings"))  # a run folder: its comparator's recordings
        if len(runs) == 1 and not (root / "metadata.yaml").exists():
            root = runs[0]
        bags = sorted(p.parent for p in root.glob("*/metadata.yaml"))
        bags += sorted(p.parent for p in root.glob("*/real/metadata.yaml"))
        if (root / "metadata.yaml").is_file():
            bags = [root]
        npz = sorted(p for p in root.glob("*.npz") if not p.name.endswith(".tmp.npz"))
        if not bags and not npz:
            raise ReplayError(f"{self.path}: no episodes in it: not a LeRobot dataset (no meta/info.json), no *.npz "
                              "EpisodeRecords, no recorded episode folders (*/metadata.yaml, */real/metadata.yaml)")
        return sorted(bags, key=lambda p: str(p)), npz

    def __len__(self) -> int:
        return len(self.reader) if self.reader is not None else len(self.bags) + len(self.npz)

    def _check_labels(self) -> None:
        """Refuse an episode nobody labels before anything starts (an operator labels them all)."""
        for p, (started, outcome) in getattr(self, "_recorded", {}).items():
            if started is None and outcome is None:   # a plain bag: its labels CSV row gives the task (and label)
                plain_bag_row(p, self.label_rows, self.labels_csv, ReplayError)
            elif started is None:
                raise ReplayError(f"{p}: no STARTED event recorded; not a complete episode recording")
        if self.operator_labels:
            return
        if self.reader is not None:
            m = self.reader.mapping
            missing = [int(ep["episode_index"]) for ep in self.reader.episodes
                       if int(ep["episode_index"]) not in self.reader.labels and ep.get(m.label_field) is None
                       and ep.get(m.success_field) is None and ep.get("gesim_ros/episode_id") not in self.labels]
        else:
            missing = [str(p) for p, (started, outcome) in self._recorded.items()
                       if outcome is None and (started.episode_id if started else bag_episode_id(p)) not in self.labels]
        if missing:
            raise ReplayError(f"{self.path}: {len(missing)} episode(s) carry no outcome label (e.g. {missing[0]}); "
                              "give a labels CSV (--labels) or let an operator label them (--label-outcomes)")

    def __iter__(self) -> Iterator[ReplayEpisode | LeftOut]:
        if self.reader is not None:
            for ep in self.reader:
                yield self._from_record(ep.record, str(self.path), ep.label is not None)
            return
        for path in self.npz:
            yield self._from_record(EpisodeRecord.load_npz(path), str(path), True)
        for path in self.bags:
            try:
                yield self._from_bag(path)
            except UnreplayableRecording as exc:
                yield LeftOut(path.parent.name if path.name == "real" else path.name, str(path), str(exc))

    def _outcome(self, episode_id: str, recorded: Outcome | None, end_s: float) -> Outcome | None:
        if self.operator_labels:
            return None
        if episode_id in self.labels:
            return _labelled(self.labels[episode_id], recorded.offset_s if recorded else end_s, "the labels CSV")
        return recorded

    # ------------------------------------------------------------------ recorded episode folders

    def _from_bag(self, path: Path) -> ReplayEpisode:
        c = self.contract
        robot, wm = c.namespace("robot"), c.namespace("world_model")
        sensor_of = {t.resolve(robot): t.key for t in c.topics_with_role("sensor")}
        sibling = path.parent / "world_model"
        commands_from = sibling if path.name == "real" and (sibling / "metadata.yaml").is_file() else path
        command_ns = wm if commands_from is sibling else robot
        command_of = {c.topic(k).resolve(command_ns): k for k in COMMAND_KEYS}
        events = c.topic("episode_events").resolve("/")
        started = ended = outcome = None
        timed: list[tuple[int, str, bytes]] = []
        for topic, log_ns, raw in _raw_messages(path, [*sensor_of, events]):
            if topic == events:
                event = deserialize_message(raw, EpisodeEvent)
                if event.event == EpisodeEvent.STARTED and started is None:
                    started = (log_ns, event)
                elif event.event == EpisodeEvent.OUTCOME and event.side in REAL_SIDES and outcome is None:
                    outcome = (log_ns, event)
                elif event.event in (EpisodeEvent.ENDED, EpisodeEvent.ABORTED) and ended is None:
                    ended = (log_ns, event)
            else:
                timed.append((log_ns, sensor_of[topic], raw))
        timed += [(log_ns, command_of[topic], raw) for topic, log_ns, raw in _raw_messages(commands_from, command_of)]
        timed.sort(key=lambda m: m[0])
        if started is None and outcome is None and ended is None and timed:   # a plain bag: STARTED is its first message, the CSV row its task
            row = plain_bag_row(path, self.label_rows, self.labels_csv, ReplayError)
            started = (timed[0][0], EpisodeEvent(episode_id=bag_episode_id(path), task=row.task,
                                                 task_text=row.task_text, seed=0))
            started[1].header.stamp.sec, started[1].header.stamp.nanosec = stamp_fields(header_stamp(timed[0][2]))
        if started is None:
            raise ReplayError(f"{path}: no STARTED event recorded; not a complete episode recording")
        t0 = started[0]
        sensors = [m for m in timed if m[1] not in COMMAND_KEYS]
        if not sensors or len(sensors) == len(timed):
            raise UnreplayableRecording(f"{path}: needs recorded sensor messages and commands ({commands_from} has "
                              f"{'none' if sensors else 'only commands'})")
        last = (ended or outcome or (timed[-1][0], None))[0]
        ended_stamp = seconds(ended[1].header.stamp) if ended is not None and ended[1].event == EpisodeEvent.ENDED else None
        # After ENDED only the commands stamped before it (recorded on their way through the switch): the
        # world model steps them within its end_grace_s, as it did live.
        messages = [((ns - t0) * 1e-9, key, raw) for ns, key, raw in timed if ns <= last or (
            key in COMMAND_KEYS and ended_stamp is not None and header_stamp(raw) <= ended_stamp)]
        start: dict[str, bytes] = {}
        for _, key, raw in sensors:
            start.setdefault(key, raw)
        ev = started[1]
        recorded = None
        if outcome is not None:
            o = outcome[1]
            recorded = Outcome(o.side, o.outcome, o.label, o.reason, (outcome[0] - t0) * 1e-9)
        end_s = (last - t0) * 1e-9
        return ReplayEpisode(
            episode_id=ev.episode_id, task=ev.task, task_text=ev.task_text, seed=int(ev.seed), policy=ev.policy,
            source=str(path), messages=messages, start=start,
            started_stamp_s=seconds(ev.header.stamp), end_s=end_s,
            ended_stamp_s=ended_stamp, outcome=self._outcome(ev.episode_id, recorded, end_s))

    # ------------------------------------------------------------------ EpisodeRecords

    def _from_record(self, rec: EpisodeRecord, source: str, labelled: bool) -> ReplayEpisode:
        """Frames and joint states at the control rate, stamped from 0 at STARTED; the actions in
        chunks of ``chunk_horizon``, each sent when its step 0 is due, as a policy sends them."""
        c, period = self.contract, rec.control_period_s
        joints = c.topic("joint_states")
        cameras = {view: c.camera_for_view(view) for view in rec.frames}
        chunk = c.topic("action_chunk")
        messages = []
        for k in range(rec.steps + 1):
            t = k * period
            for view, spec in cameras.items():
                msg = colour_camera_msg(np.ascontiguousarray(rec.frames[view][k]), spec.type, spec.encoding)
                messages.append((t, spec.key, restamped(serialize_message(msg), t)))
            # The record holds the action joints only: the other joints are not published.
            messages.append((t, joints.key, serialize_message(
                joint_state_msg(t, joints.frame_id, rec.joint_names, rec.joint_positions[k]))))
            if k < rec.steps and k % self.chunk_horizon == 0:
                messages.append((t, chunk.key, serialize_message(action_chunk_msg(
                    t, chunk.frame_id, rec.episode_id, k // self.chunk_horizon, rec.joint_names,
                    rec.actions[k:k + self.chunk_horizon], period))))
        end_s = rec.steps * period
        recorded = _labelled(rec.label, end_s, f"{source}'s metadata") if labelled else None
        return ReplayEpisode(
            episode_id=rec.episode_id, task=rec.task, task_text=rec.task_text, seed=rec.seed, policy="",
            source=source, messages=messages, start={key: raw for t, key, raw in messages if t == 0.0
                                                      and key != chunk.key},
            started_stamp_s=0.0, end_s=end_s, outcome=self._outcome(rec.episode_id, recorded, end_s))


def _raw_messages(path: Path, topics) -> Iterator[tuple[str, int, bytes]]:
    wanted = set(topics)
    with Reader(path) as reader:
        connections = [c for c in reader.connections if c.topic in wanted]
        if not connections:   # rosbags reads every topic for an empty list (a bag without the episode events)
            return
        for conn, log_ns, raw in reader.messages(connections=connections):
            yield conn.topic, log_ns, bytes(raw)


def _events(path: Path, contract: Contract) -> list:
    topic = contract.topic("episode_events").resolve("/")
    return [deserialize_message(raw, EpisodeEvent) for _, _, raw in _raw_messages(path, [topic])]
