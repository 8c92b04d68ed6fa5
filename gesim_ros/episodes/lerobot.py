"""LeRobot datasets as EpisodeRecords, and this package's episodes as a LeRobot dataset.

Read: LeRobot v2.1 (``meta/episodes.jsonl``, ``meta/tasks.jsonl``, one parquet and one mp4 per
camera per episode) and v3.0 (``meta/episodes/chunk-XXX/file-XXX.parquet``, ``meta/tasks.parquet``,
parquet and mp4 files holding many episodes, each episode's span of a video given by
``videos/<key>/from_timestamp`` / ``to_timestamp`` in its episode row), with pyarrow and PyAV (the
``lerobot`` package itself pins torch<2.12, so it cannot live beside this package's torch). A
*feature mapping* (a YAML file; presets in ``lerobot_mappings/``: ``g2a`` for AgiBot's G2 conversion,
``gesim_ros`` for what ``export-lerobot`` writes) says which dimensions of which features are the
contract's action joints and which video features are its camera views. ``LeRobotReader`` checks the
whole dataset against the mapping when it opens and then yields one :class:`LeRobotEpisode` at a
time: the EpisodeRecord resampled to the control period, the dataset timestamps of its samples, and
the outcome label (an episode field, or a labels CSV ``episode_index,label``).

Write: :func:`write_lerobot` turns EpisodeRecords (from recorded episode folders or ``.npz``) into a
LeRobot v3.0 (or v2.1) dataset in the ``gesim_ros`` layout, with ``success`` and ``label`` per
episode, into a temporary folder renamed into place only when complete.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Callable, Iterable, Iterator

import av
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import yaml

from gesim_ros.contract.modes import SIDES  # (real, world_model): a shadow run's recording folders
from gesim_ros.contract.contract import DEFAULT_PROFILE, Contract, load_contract
from gesim_ros.episodes.data import VIEWS, EpisodeRecord

MAPPING_DIR = Path(__file__).parent / "lerobot_mappings"
VERSIONS = ("v2.1", "v3.0")
CHUNKS_SIZE = 1000
DATA_FILE_MB = 100
VIDEO_FILE_MB = 200
# What LeRobot's own writer uses for each layout (its utils.py and the v2.1 -> v3.0 converter).
V21_DATA_PATH = "data/chunk-{episode_chunk:03d}/episode_{episode_index:06d}.parquet"
V21_VIDEO_PATH = "videos/chunk-{episode_chunk:03d}/{video_key}/episode_{episode_index:06d}.mp4"
V30_DATA_PATH = "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
V30_VIDEO_PATH = "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"
V30_EPISODES_PATH = "meta/episodes/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
DEFAULT_FEATURES = {"timestamp": "float32", "frame_index": "int64", "episode_index": "int64", "index": "int64",
                    "task_index": "int64"}
UNLABELLED = "unlabelled"
# Episode-row fields export-lerobot adds so that a round trip gives back the same EpisodeRecord.
OWN_FIELDS = ("gesim_ros/episode_id", "gesim_ros/task", "gesim_ros/seed", "gesim_ros/failure_mode")


class LeRobotError(ValueError):
    """A LeRobot dataset, mapping or export request that cannot be used as it is; says how to fix it."""


# ---------------------------------------------------------------------------------------------- mapping

@dataclass(frozen=True)
class VectorPart:
    groups: tuple[str, ...]          # contract joint groups, in order
    field: str | None = None         # a `field_descriptions` entry of the dataset that gives the indices
    indices: tuple[int, ...] | None = None
    by_name: bool = False            # find each joint in the feature's `names`


@dataclass(frozen=True)
class VectorMapping:
    feature: str
    dim: int | None
    parts: tuple[VectorPart, ...]


@dataclass(frozen=True)
class FeatureMapping:
    name: str
    source: str
    state: VectorMapping
    action: VectorMapping
    cameras: dict[str, str]                        # view -> video feature
    camera_shapes: dict[str, tuple[int, int]]      # view -> declared (H, W), checked against info.json
    label_field: str = "label"
    success_field: str = "success"


def available_mappings() -> list[str]:
    return sorted(p.stem for p in MAPPING_DIR.glob("*.yaml"))


def load_mapping(name_or_path: str | Path) -> FeatureMapping:
    """A preset by name (``available_mappings()``) or a mapping YAML file."""
    path = Path(name_or_path)
    if not path.is_file():
        path = MAPPING_DIR / f"{name_or_path}.yaml"
        if not path.is_file():
            raise LeRobotError(f"mapping '{name_or_path}': no such file and no such preset; presets: "
                               f"{', '.join(available_mappings())}, or pass a YAML file like {MAPPING_DIR / 'g2a.yaml'}")
    try:
        data = yaml.safe_load(path.read_text())
        return _parse_mapping(data, str(path))
    except (KeyError, TypeError, ValueError, yaml.YAMLError) as e:
        if isinstance(e, LeRobotError):
            raise
        raise LeRobotError(f"mapping {path}: {e!r}; see {MAPPING_DIR / 'g2a.yaml'} for the format") from None


def _parse_mapping(data: dict, source: str) -> FeatureMapping:
    def vector(key: str) -> VectorMapping:
        m = data[key]
        parts = tuple(VectorPart(groups=tuple(p["groups"]), field=p.get("field"), by_name=bool(p.get("by_name")),
                                 indices=tuple(int(i) for i in p["indices"]) if "indices" in p else None)
                      for p in m["parts"])
        for p in parts:
            if not p.by_name and p.field is None and p.indices is None:
                raise LeRobotError(f"mapping {source}: {key} part {list(p.groups)} says neither `indices`, "
                                   "`field` nor `by_name: true`; give one of them")
        return VectorMapping(feature=m["feature"], dim=m.get("dim"), parts=parts)

    cams = data["cameras"]
    missing = [v for v in VIEWS if v not in cams]
    if missing:
        raise LeRobotError(f"mapping {source}: cameras has no entry for view(s) {', '.join(missing)}; "
                           f"add e.g. `{missing[0]}: {{feature: observation.images.<key>}}`")
    label = data.get("label", {})
    return FeatureMapping(
        name=data.get("name", Path(source).stem), source=source, state=vector("state"), action=vector("action"),
        cameras={v: cams[v]["feature"] for v in VIEWS},
        camera_shapes={v: tuple(cams[v]["shape"]) for v in VIEWS if "shape" in cams[v]},
        label_field=label.get("label_field", "label"), success_field=label.get("success_field", "success"))


def _feature_names(feature: dict) -> list[str] | None:
    """A feature's per-dimension names: LeRobot writes a list, a nested list or {"motors": [...]}."""
    names = feature.get("names")
    if isinstance(names, dict) and len(names) == 1:
        names = next(iter(names.values()))
    if isinstance(names, list) and len(names) == 1 and isinstance(names[0], list):
        names = names[0]
    return names if isinstance(names, list) and all(isinstance(n, str) for n in names) else None


def _resolve_vector(vm: VectorMapping, role: str, info: dict, contract: Contract, where: str,
                    mapping: FeatureMapping) -> np.ndarray:
    """Indices into the feature's vector of the contract's action joints, in contract order."""
    features = info["features"]
    if vm.feature not in features:
        vectors = sorted(k for k, f in features.items() if f.get("dtype") not in ("video", "image")
                         and k not in DEFAULT_FEATURES)
        raise LeRobotError(
            f"{where}: has no feature '{vm.feature}' (the {role} of mapping {mapping.name}); its vector features: "
            f"{', '.join(k + ' ' + str(list(features[k].get('shape', []))) for k in vectors) or 'none'}. Map one in a "
            f"mapping file, e.g.\n  {role}:\n    feature: <one of them>\n    parts:\n      - {{groups: [left_arm, "
            f"right_arm, left_gripper, right_gripper], indices: [0, 1, ...]}}\nand pass it with --mapping FILE")
    feature = features[vm.feature]
    shape = list(feature.get("shape", []))
    dim = int(np.prod(shape)) if shape else 0
    if vm.dim is not None and dim != vm.dim:
        raise LeRobotError(f"{where}: '{vm.feature}' is {shape}-D, mapping {mapping.name} expects {vm.dim}; "
                           "this is not the layout the mapping describes: pass the mapping of this dataset "
                           "(--mapping FILE) or correct `dim` and the indices")
    names = _feature_names(feature)
    described = feature.get("field_descriptions", {})
    index: dict[str, int] = {}
    for part in vm.parts:
        joints = [n for g in part.groups for n in contract.joint_groups[g]]
        if part.by_name:
            if names is None:
                raise LeRobotError(f"{where}: '{vm.feature}' names no dimensions, so {list(part.groups)} cannot be "
                                   "found by name; give `indices: [...]` for them in the mapping")
            absent = [n for n in joints if n not in names]
            if absent:
                raise LeRobotError(f"{where}: '{vm.feature}' has no dimension named {', '.join(absent)} (names: "
                                   f"{', '.join(names)}); give `indices: [...]` for {list(part.groups)} in the mapping")
            found = [names.index(n) for n in joints]
        elif part.field is not None and part.field in described:
            found = [int(i) for i in described[part.field].get("indices", [])]
        elif part.indices is not None:
            found = list(part.indices)
        else:
            raise LeRobotError(f"{where}: '{vm.feature}' has no field_descriptions entry '{part.field}' "
                               f"(it has: {', '.join(described) or 'none'}); add `indices: [...]` to that part")
        if len(found) != len(joints):
            raise LeRobotError(f"{where}: '{vm.feature}' gives {len(found)} dimensions for {list(part.groups)}, "
                               f"the contract has {len(joints)} joints there ({', '.join(joints)}); the joint counts "
                               "do not match: map a contract whose groups match the dataset, or fix the indices")
        if found and (max(found) >= dim or min(found) < 0):
            raise LeRobotError(f"{where}: '{vm.feature}' has {dim} dimensions, the mapping indexes {found} for "
                               f"{list(part.groups)}; fix the indices")
        index.update(zip(joints, found))
    uncovered = [n for n in contract.arm_joint_names if n not in index]
    if uncovered:
        raise LeRobotError(f"{where}: mapping {mapping.name} gives no {role} dimension for {', '.join(uncovered)}; "
                           "add a part for their groups")
    return np.array([index[n] for n in contract.arm_joint_names], np.int64)


# ---------------------------------------------------------------------------------------------- reading

@dataclass
class LeRobotEpisode:
    """One dataset episode at the control period, with what a replay needs beside the arrays."""
    index: int                       # the dataset's episode_index
    record: EpisodeRecord
    timestamps: np.ndarray           # (T + 1,) the dataset timestamp (s) of each sample of the record
    label: str | None                # None when neither the episode nor a labels CSV says
    success: bool | None


def detect_version(root: Path) -> str:
    info = _info(root)
    version = info.get("codebase_version")
    if version not in VERSIONS:
        raise LeRobotError(f"{root}: codebase_version {version!r} in meta/info.json; this reader reads "
                           f"{' and '.join(VERSIONS)} (convert others with LeRobot's converter scripts)")
    return version


def is_lerobot_dataset(path: Path) -> bool:
    return (Path(path) / "meta" / "info.json").is_file()


def _info(root: Path) -> dict:
    path = Path(root) / "meta" / "info.json"
    if not path.is_file():
        raise LeRobotError(f"{root}: no meta/info.json, so not a LeRobot dataset; pass the dataset's root folder")
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise LeRobotError(f"{path}: not valid JSON ({e})") from None


def _read_jsonl(path: Path) -> list[dict]:
    if not path.is_file():
        raise LeRobotError(f"{path}: missing; a v2.1 dataset lists its episodes and tasks in meta/*.jsonl")
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _vectors(table: pa.Table, name: str, where: str) -> np.ndarray:
    column = table.column(name).combine_chunks()
    flat = pc.list_flatten(column).to_numpy(zero_copy_only=False)
    if len(column) and len(flat) % len(column):
        raise LeRobotError(f"{where}: '{name}' rows have different lengths; the column is not a fixed-size vector")
    return flat.reshape(len(column), -1).astype(np.float32)


def read_labels_csv(path: Path) -> dict[int, str]:
    """``episode_index,label`` rows (a header line with those names)."""
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows or not {"episode_index", "label"} <= set(rows[0]):
        raise LeRobotError(f"{path}: a labels CSV needs the header `episode_index,label` and one row per episode")
    return {int(r["episode_index"]): r["label"].strip() for r in rows}


class LeRobotReader:
    """A LeRobot v2.1 / v3.0 dataset seen through a feature mapping; iterate for LeRobotEpisodes.

    Everything the mapping needs is checked when it opens (features, dimensions, joint counts, camera
    shapes, video files present and holding a video stream), so a dataset that cannot be read is
    refused before the first episode; a video that fails while decoding is refused naming its file
    and episode. ``image_size_hw`` resizes every view (None: the dataset's own size);
    ``control_period_s`` resamples (None: the dataset's 1/fps), holding the latest row at each step.
    """

    def __init__(self, root: str | Path, mapping: str | Path | FeatureMapping | None = None,
                 contract: Contract | None = None, labels_csv: str | Path | None = None,
                 image_size_hw: tuple[int, int] | None = None, control_period_s: float | None = None):
        self.root = Path(root)
        self.info = _info(self.root)
        self.version = detect_version(self.root)
        self.contract = contract or load_contract(DEFAULT_PROFILE)
        self.mapping = (mapping if isinstance(mapping, FeatureMapping)
                        else load_mapping(mapping or self._default_mapping()))
        self.fps = float(self.info.get("fps", 0))
        if self.fps <= 0:
            raise LeRobotError(f"{self.root}: meta/info.json has no positive `fps`")
        self.period = control_period_s or 1.0 / self.fps
        self.image_size_hw = image_size_hw
        where = f"{self.root} (mapping {self.mapping.name})"
        self.state_index = _resolve_vector(self.mapping.state, "state", self.info, self.contract, where, self.mapping)
        self.action_index = _resolve_vector(self.mapping.action, "action", self.info, self.contract, where,
                                            self.mapping)
        self._check_cameras(where)
        self.tasks = self._tasks()
        self.episodes = self._episodes()
        self.labels = read_labels_csv(Path(labels_csv)) if labels_csv else {}
        unknown = sorted(set(self.labels) - {int(e["episode_index"]) for e in self.episodes})
        if unknown:
            raise LeRobotError(f"{labels_csv}: labels for episode(s) {unknown[:10]} the dataset does not have")
        self._check_files()
        self._table_cache: tuple[Path, pa.Table] | None = None

    def _default_mapping(self) -> str:
        if self.info.get("robot_type") == "g2a":
            return "g2a"
        if all(f"observation.images.{v}" in self.info.get("features", {}) for v in VIEWS):
            return "gesim_ros"
        raise LeRobotError(f"{self.root}: robot_type {self.info.get('robot_type')!r} has no preset mapping; pass "
                           f"--mapping with a preset ({', '.join(available_mappings())}) or a YAML file "
                           f"(format: {MAPPING_DIR / 'g2a.yaml'})")

    def _check_cameras(self, where: str) -> None:
        features = self.info["features"]
        videos = sorted(k for k, f in features.items() if f.get("dtype") == "video")
        for view, key in self.mapping.cameras.items():
            if key not in features:
                raise LeRobotError(f"{where}: has no camera feature '{key}' (view {view}); its video features: "
                                   f"{', '.join(videos) or 'none'}. Map the view in a mapping file:\n  cameras:\n"
                                   f"    {view}: {{feature: <one of them>}}")
            if features[key].get("dtype") != "video":
                raise LeRobotError(f"{where}: '{key}' is {features[key].get('dtype')!r}, not video; this reader "
                                   "reads cameras stored as mp4 (dtype video)")
            declared = self.mapping.camera_shapes.get(view)
            shape = tuple(features[key].get("shape", ()))
            # (H, W, C) as LeRobot writes it; some converters write (C, H, W)
            shape = shape[1:3] if len(shape) == 3 and shape[0] in (1, 3) and shape[2] not in (1, 3) else shape[:2]
            if declared and shape != declared:
                raise LeRobotError(f"{where}: '{key}' is {shape[0]}x{shape[1]}, mapping {self.mapping.name} declares "
                                   f"{declared[0]}x{declared[1]}; pass a mapping with this dataset's camera shapes")

    def _tasks(self) -> dict[int, str]:
        if self.version == "v2.1":
            return {int(t["task_index"]): t["task"] for t in _read_jsonl(self.root / "meta" / "tasks.jsonl")}
        path = self.root / "meta" / "tasks.parquet"
        if not path.is_file():
            raise LeRobotError(f"{path}: missing; a v3.0 dataset names its tasks in meta/tasks.parquet")
        table = pq.read_table(path)
        text = next((c for c in ("task", "__index_level_0__") if c in table.column_names), None)
        if text is None:
            raise LeRobotError(f"{path}: no `task` column or index (columns: {', '.join(table.column_names)})")
        return dict(zip(table.column("task_index").to_pylist(), table.column(text).to_pylist()))

    def _episodes(self) -> list[dict]:
        if self.version == "v2.1":
            rows = _read_jsonl(self.root / "meta" / "episodes.jsonl")
        else:
            files = sorted((self.root / "meta" / "episodes").glob("chunk-*/file-*.parquet"))
            if not files:
                raise LeRobotError(f"{self.root}: no meta/episodes/chunk-*/file-*.parquet; a v3.0 dataset lists "
                                   "its episodes there")
            rows = []
            for path in files:
                table = pq.read_table(path)
                keep = [c for c in table.column_names if not c.startswith("stats/")]
                rows.extend(table.select(keep).to_pylist())
        if not rows:
            raise LeRobotError(f"{self.root}: the dataset lists no episodes")
        return sorted(rows, key=lambda r: int(r["episode_index"]))

    def _video_file(self, ep: dict, key: str) -> tuple[Path, float]:
        """The mp4 holding this episode's camera and where in it the episode starts (s)."""
        i = int(ep["episode_index"])
        template = self.info.get("video_path") or (V21_VIDEO_PATH if self.version == "v2.1" else V30_VIDEO_PATH)
        if self.version == "v2.1":
            chunk = i // int(self.info.get("chunks_size", CHUNKS_SIZE))
            return self.root / template.format(episode_chunk=chunk, video_key=key, episode_index=i), 0.0
        missing = [c for c in (f"videos/{key}/chunk_index", f"videos/{key}/file_index", f"videos/{key}/from_timestamp")
                   if c not in ep]
        if missing:
            raise LeRobotError(f"{self.root}: episode {i} row has no {', '.join(missing)}; the episodes metadata "
                               f"does not locate camera '{key}'")
        path = template.format(video_key=key, chunk_index=int(ep[f"videos/{key}/chunk_index"]),
                               file_index=int(ep[f"videos/{key}/file_index"]))
        return self.root / path, float(ep[f"videos/{key}/from_timestamp"])

    def _data_file(self, ep: dict) -> Path:
        i = int(ep["episode_index"])
        template = self.info.get("data_path") or (V21_DATA_PATH if self.version == "v2.1" else V30_DATA_PATH)
        if self.version == "v2.1":
            return self.root / template.format(episode_chunk=i // int(self.info.get("chunks_size", CHUNKS_SIZE)),
                                               episode_index=i)
        return self.root / template.format(chunk_index=int(ep["data/chunk_index"]),
                                           file_index=int(ep["data/file_index"]))

    def _check_files(self) -> None:
        probed: set[Path] = set()
        for ep in self.episodes:
            data = self._data_file(ep)
            if not data.is_file():
                raise LeRobotError(f"{data}: missing (episode {ep['episode_index']}'s data)")
            for key in self.mapping.cameras.values():
                path, _ = self._video_file(ep, key)
                if path in probed:
                    continue
                if not path.is_file():
                    raise LeRobotError(f"{path}: missing (episode {ep['episode_index']}, camera {key})")
                try:
                    with av.open(str(path)) as container:
                        if not container.streams.video:
                            raise LeRobotError(f"{path}: has no video stream (episode {ep['episode_index']}, "
                                               f"camera {key}); re-encode it as mp4 video")
                except av.FFmpegError as e:
                    raise LeRobotError(f"{path}: cannot be decoded (episode {ep['episode_index']}, camera {key}): "
                                       f"{e}; re-encode or re-download that file") from None
                probed.add(path)

    def __len__(self) -> int:
        return len(self.episodes)

    def __iter__(self) -> Iterator[LeRobotEpisode]:
        for ep in self.episodes:
            yield self._episode(ep)

    def episode(self, episode_index: int) -> LeRobotEpisode:
        for ep in self.episodes:
            if int(ep["episode_index"]) == episode_index:
                return self._episode(ep)
        raise LeRobotError(f"{self.root}: no episode {episode_index} (it has {len(self.episodes)})")

    def _rows(self, ep: dict) -> pa.Table:
        path = self._data_file(ep)
        if self._table_cache is None or self._table_cache[0] != path:
            columns = ["timestamp", "episode_index", "frame_index", self.mapping.state.feature,
                       self.mapping.action.feature]
            self._table_cache = (path, pq.read_table(path, columns=columns))
        table = self._table_cache[1]
        if self.version == "v3.0":
            table = table.filter(pc.equal(table.column("episode_index"), int(ep["episode_index"])))
        return table.sort_by("frame_index")

    def _episode(self, ep: dict) -> LeRobotEpisode:
        i = int(ep["episode_index"])
        where = f"{self.root} episode {i}"
        table = self._rows(ep)
        if table.num_rows < 2:
            raise LeRobotError(f"{where}: {table.num_rows} data rows; an episode needs at least 2")
        stamps = table.column("timestamp").to_numpy().astype(np.float64)
        sample_times = np.arange(stamps[0], stamps[-1] + 1e-6, self.period)
        rows = np.clip(np.searchsorted(stamps, sample_times + 1e-6, side="right") - 1, 0, len(stamps) - 1)
        if len(rows) < 2:
            raise LeRobotError(f"{where}: shorter than two control periods of {self.period:g} s")
        state = _vectors(table, self.mapping.state.feature, where)[rows][:, self.state_index]
        action = _vectors(table, self.mapping.action.feature, where)[rows[:-1]][:, self.action_index]
        frames = {}
        for view, key in self.mapping.cameras.items():
            path, start = self._video_file(ep, key)
            frames[view] = decode_frames(path, start + stamps[rows], self.image_size_hw,
                                         f"episode {i}, camera {key}")
        label, success = self._outcome(ep)
        tasks = ep.get("tasks") or []
        task_text = tasks[0] if tasks else self.tasks.get(0, "")
        record = EpisodeRecord(
            episode_id=ep.get("gesim_ros/episode_id") or f"{self.root.name}/episode_{i:06d}",
            task=ep.get("gesim_ros/task") or task_text, task_text=task_text,
            seed=int(ep["gesim_ros/seed"]) if ep.get("gesim_ros/seed") is not None else i,
            success=bool(success), label=label or UNLABELLED, control_period_s=self.period,
            joint_names=list(self.contract.arm_joint_names), actions=action, joint_positions=state, frames=frames,
            failure_mode=ep.get("gesim_ros/failure_mode") or None,
            extra={"lerobot_dataset": str(self.root), "lerobot_episode_index": i, "labelled": label is not None})
        return LeRobotEpisode(index=i, record=record, timestamps=stamps[rows], label=label, success=success)

    def _outcome(self, ep: dict) -> tuple[str | None, bool | None]:
        i = int(ep["episode_index"])
        if i in self.labels:
            label = self.labels[i]
            return label, label == "success"
        label = ep.get(self.mapping.label_field)
        success = ep.get(self.mapping.success_field)
        if label is None and success is None:
            return None, None
        if success is None:
            success = label == "success"
        return (label if label is not None else ("success" if success else "failure")), bool(success)


def decode_frames(path: Path, times: np.ndarray, size_hw: tuple[int, int] | None, what: str) -> np.ndarray:
    """RGB frames of ``path`` at ``times`` (s, ascending): at each time the latest frame at or before it
    (half a frame of tolerance), resized to ``size_hw`` when given."""
    out: list[np.ndarray] = []
    try:
        with av.open(str(path)) as container:
            stream = container.streams.video[0]
            stream.thread_type = "AUTO"
            rate = float(stream.average_rate or stream.base_rate or 30)
            tolerance = 0.5 / rate
            if times[0] > 1.0:   # start near the episode in a file that holds many
                container.seek(int((times[0] - 1.0) / stream.time_base), stream=stream, backward=True)
            last = None
            cache: list = [None]   # the last frame as an array, converted only when some time needs it

            def take() -> None:
                if cache[0] is None:
                    frame = last if size_hw is None else last.reformat(
                        width=size_hw[1], height=size_hw[0], format="rgb24", interpolation="AREA")
                    cache[0] = frame.to_ndarray(format="rgb24")
                out.append(cache[0])

            q = 0
            for frame in container.decode(stream):
                t = float(frame.time)
                while q < len(times) and t > times[q] + tolerance:
                    if last is None or times[q] - last.time > 1.5 / rate:
                        raise LeRobotError(f"{path}: no frame near t={times[q]:.3f} s ({what}); the video does "
                                           "not cover the episode's timestamps")
                    take()
                    q += 1
                if q == len(times):
                    break
                last, cache[0] = frame, None
            while q < len(times) and last is not None and times[q] - last.time <= 1.5 / rate:
                take()   # the episode's last frames are the file's last
                q += 1
    except av.FFmpegError as e:
        raise LeRobotError(f"{path}: cannot be decoded ({what}): {e}; re-encode or re-download that file") from None
    if len(out) != len(times):
        raise LeRobotError(f"{path}: decoded {len(out)} of {len(times)} frames ({what}); the video is truncated "
                           "or shorter than the episode's data")
    return np.stack(out)


# ---------------------------------------------------------------------------------------------- writing

@dataclass
class _VideoOut:
    """One camera's mp4 being written (v3.0: many episodes in one file)."""
    path: Path
    container: object
    stream: object
    frames: int = 0


@dataclass
class _Writer:
    root: Path
    version: str
    contract: Contract
    codec: str
    progress: Callable[[str], None]
    fps: int = 0
    shapes: dict[str, tuple[int, int]] = field(default_factory=dict)
    tasks: dict[str, int] = field(default_factory=dict)
    episodes: list[dict] = field(default_factory=list)
    total_frames: int = 0
    data_writer: pq.ParquetWriter | None = None
    data_file: tuple[int, int] = (0, 0)
    data_bytes: int = 0
    videos: dict[str, _VideoOut] = field(default_factory=dict)
    video_file: dict[str, tuple[int, int]] = field(default_factory=dict)
    codec_name: str = ""

    def key(self, view: str) -> str:
        return f"observation.images.{view}"

    def schema(self) -> pa.Schema:
        n = len(self.contract.arm_joint_names)
        return pa.schema([("observation.state", pa.list_(pa.float32(), n)), ("action", pa.list_(pa.float32(), n)),
                          ("timestamp", pa.float32()), ("frame_index", pa.int64()), ("episode_index", pa.int64()),
                          ("index", pa.int64()), ("task_index", pa.int64())])

    def add(self, rec: EpisodeRecord) -> None:
        where = f"episode {rec.episode_id}"
        if list(rec.joint_names) != list(self.contract.arm_joint_names):
            raise LeRobotError(f"{where}: joints {rec.joint_names} are not the contract's action joints "
                               f"{list(self.contract.arm_joint_names)}; export with the contract it was recorded "
                               "with (--contract)")
        missing = [v for v in VIEWS if v not in rec.frames]
        if missing:
            raise LeRobotError(f"{where}: no frames of view(s) {', '.join(missing)}; every exported episode needs "
                               "all three cameras")
        fps = 1.0 / rec.control_period_s
        if not self.fps:
            if abs(fps - round(fps)) > 1e-3 * fps:
                raise LeRobotError(f"{where}: control period {rec.control_period_s} s is not a whole number of "
                                   "frames per second, which LeRobot's info.json `fps` must be")
            self.fps = round(fps)
            self.shapes = {v: rec.frames[v].shape[1:3] for v in VIEWS}
            for v, (h, w) in self.shapes.items():
                if h % 2 or w % 2:
                    raise LeRobotError(f"{where}: view {v} is {h}x{w}; H.264 needs even sizes: choose an even "
                                       "--image-size")
        if abs(fps - self.fps) > 1e-3 * self.fps:
            raise LeRobotError(f"{where}: control period {rec.control_period_s} s differs from the first episode's "
                               f"1/{self.fps} s; a dataset has one fps: export them separately")
        for v in VIEWS:
            if rec.frames[v].shape[1:3] != self.shapes[v]:
                raise LeRobotError(f"{where}: view {v} is {rec.frames[v].shape[1:3]}, the first episode's is "
                                   f"{self.shapes[v]}; export at one --image-size")
        index = len(self.episodes)
        rows = rec.steps + 1
        task_index = self.tasks.setdefault(rec.task_text, len(self.tasks))
        # Row k holds the state and frames before action k; the last row repeats the last action (a hold).
        actions = np.concatenate([rec.actions, rec.actions[-1:]]).astype(np.float32)
        table = pa.table({
            "observation.state": pa.FixedSizeListArray.from_arrays(
                pa.array(rec.joint_positions.astype(np.float32).ravel()), rec.joint_positions.shape[1]),
            "action": pa.FixedSizeListArray.from_arrays(pa.array(actions.ravel()), actions.shape[1]),
            "timestamp": pa.array(np.arange(rows, dtype=np.float32) / np.float32(self.fps)),
            "frame_index": pa.array(np.arange(rows, dtype=np.int64)),
            "episode_index": pa.array(np.full(rows, index, np.int64)),
            "index": pa.array(np.arange(self.total_frames, self.total_frames + rows, dtype=np.int64)),
            "task_index": pa.array(np.full(rows, task_index, np.int64))}, schema=self.schema())
        row = {"episode_index": index, "tasks": [rec.task_text], "length": rows,
               "success": bool(rec.success), "label": rec.label, "gesim_ros/episode_id": rec.episode_id,
               "gesim_ros/task": rec.task, "gesim_ros/seed": int(rec.seed),
               "gesim_ros/failure_mode": rec.failure_mode or ""}
        if self.version == "v2.1":
            chunk = index // CHUNKS_SIZE
            path = self.root / V21_DATA_PATH.format(episode_chunk=chunk, episode_index=index)
            path.parent.mkdir(parents=True, exist_ok=True)
            pq.write_table(table, path)
            for v in VIEWS:
                out = self._open_video(self.root / V21_VIDEO_PATH.format(
                    episode_chunk=chunk, video_key=self.key(v), episode_index=index), v)
                self._encode(out, rec.frames[v])
                self._close_video(out)
        else:
            row.update(self._write_v30(table, rec))
        row["dataset_from_index"] = self.total_frames
        row["dataset_to_index"] = self.total_frames + rows
        self.episodes.append(row)
        self.total_frames += rows

    def _write_v30(self, table: pa.Table, rec: EpisodeRecord) -> dict:
        if self.data_writer is not None and self.data_bytes > DATA_FILE_MB * 2 ** 20:
            self.data_writer.close()
            self.data_writer, self.data_file, self.data_bytes = None, _next_file(*self.data_file), 0
        if self.data_writer is None:
            path = self.root / V30_DATA_PATH.format(chunk_index=self.data_file[0], file_index=self.data_file[1])
            path.parent.mkdir(parents=True, exist_ok=True)
            self.data_writer = pq.ParquetWriter(path, self.schema())
        self.data_writer.write_table(table)
        self.data_bytes += table.nbytes
        meta = {"data/chunk_index": self.data_file[0], "data/file_index": self.data_file[1]}
        for v in VIEWS:
            key = self.key(v)
            out = self.videos.get(key)
            if out is not None and out.path.stat().st_size > VIDEO_FILE_MB * 2 ** 20:
                self._close_video(out)
                self.video_file[key] = _next_file(*self.video_file[key])
                out = None
            if out is None:
                chunk, file = self.video_file.setdefault(key, (0, 0))
                out = self.videos[key] = self._open_video(
                    self.root / V30_VIDEO_PATH.format(video_key=key, chunk_index=chunk, file_index=file), v)
            start = out.frames
            self._encode(out, rec.frames[v])
            chunk, file = self.video_file[key]
            meta.update({f"videos/{key}/chunk_index": chunk, f"videos/{key}/file_index": file,
                         f"videos/{key}/from_timestamp": start / self.fps,
                         f"videos/{key}/to_timestamp": out.frames / self.fps})
        return meta

    def _open_video(self, path: Path, view: str) -> _VideoOut:
        path.parent.mkdir(parents=True, exist_ok=True)
        container = av.open(str(path), "w")
        stream = container.add_stream(self.codec, rate=self.fps)
        h, w = self.shapes[view]
        stream.width, stream.height, stream.pix_fmt = w, h, "yuv420p"
        stream.codec_context.time_base = Fraction(1, self.fps)
        if self.codec == "libx264":
            stream.options = {"crf": "18", "g": "10", "preset": "veryfast"}   # short GOP: quick seeks into a file
        self.codec_name = stream.codec_context.codec.canonical_name
        return _VideoOut(path, container, stream)

    def _encode(self, out: _VideoOut, frames: np.ndarray) -> None:
        for image in frames:
            frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(image), format="rgb24")
            frame.pts = out.frames   # pts in 1/fps units, so frame k of the file is at exactly k/fps s
            out.frames += 1
            for packet in out.stream.encode(frame):
                out.container.mux(packet)

    def _close_video(self, out: _VideoOut) -> None:
        for packet in out.stream.encode():
            out.container.mux(packet)
        out.container.close()

    def finish(self) -> None:
        if not self.episodes:
            raise LeRobotError("no episodes to export")
        for out in self.videos.values():
            self._close_video(out)
        if self.data_writer is not None:
            self.data_writer.close()
        meta = self.root / "meta"
        meta.mkdir(parents=True, exist_ok=True)
        if self.version == "v2.1":
            (meta / "episodes.jsonl").write_text("".join(json.dumps(e) + "\n" for e in self.episodes))
            (meta / "tasks.jsonl").write_text("".join(json.dumps({"task_index": i, "task": t}) + "\n"
                                                      for t, i in self.tasks.items()))
        else:
            episodes = [{**e, "meta/episodes/chunk_index": 0, "meta/episodes/file_index": 0} for e in self.episodes]
            path = self.root / V30_EPISODES_PATH.format(chunk_index=0, file_index=0)
            path.parent.mkdir(parents=True, exist_ok=True)
            pq.write_table(pa.Table.from_pylist(episodes), path)
            pq.write_table(_tasks_table(self.tasks), meta / "tasks.parquet")
        names = list(self.contract.arm_joint_names)
        features = {"observation.state": {"dtype": "float32", "shape": [len(names)], "names": names},
                    "action": {"dtype": "float32", "shape": [len(names)], "names": names}}
        for v in VIEWS:
            h, w = self.shapes[v]
            features[self.key(v)] = {
                "dtype": "video", "shape": [h, w, 3], "names": ["height", "width", "channels"],
                "info": {"video.height": h, "video.width": w, "video.codec": self.codec_name,
                         "video.pix_fmt": "yuv420p", "video.is_depth_map": False, "video.fps": self.fps,
                         "video.channels": 3, "has_audio": False}}
        features.update({k: {"dtype": t, "shape": [1], "names": None} for k, t in DEFAULT_FEATURES.items()})
        n = len(self.episodes)
        info = {"codebase_version": self.version, "robot_type": f"gesim_ros/{self.contract.profile}",
                "total_episodes": n, "total_frames": self.total_frames, "total_tasks": len(self.tasks),
                "chunks_size": CHUNKS_SIZE, "fps": self.fps, "splits": {"train": f"0:{n}"}, "features": features}
        if self.version == "v2.1":
            info.update({"total_chunks": (n - 1) // CHUNKS_SIZE + 1, "total_videos": n * len(VIEWS),
                         "data_path": V21_DATA_PATH, "video_path": V21_VIDEO_PATH})
        else:
            info.update({"data_files_size_in_mb": DATA_FILE_MB, "video_files_size_in_mb": VIDEO_FILE_MB,
                         "data_path": V30_DATA_PATH, "video_path": V30_VIDEO_PATH})
        (meta / "info.json").write_text(json.dumps(info, indent=2))

    def abort(self) -> None:
        for out in self.videos.values():
            try:
                out.container.close()
            except av.FFmpegError:
                pass   # the folder is removed anyway
        if self.data_writer is not None:
            self.data_writer.close()


def _next_file(chunk: int, file: int) -> tuple[int, int]:
    return (chunk + 1, 0) if file == CHUNKS_SIZE - 1 else (chunk, file + 1)


def _tasks_table(tasks: dict[str, int]) -> pa.Table:
    """meta/tasks.parquet as LeRobot writes it: pandas reads `task` back as the index (LeRobot looks a
    task's index up with ``tasks.loc[task]``), so the pandas metadata naming it the index is written too."""
    table = pa.table({"task_index": pa.array(list(tasks.values()), pa.int64()),
                      "task": pa.array(list(tasks), pa.string())})
    pandas_meta = {"index_columns": ["task"], "column_indexes": [], "pandas_version": "2.2.3",
                   "creator": {"library": "pyarrow", "version": pa.__version__},
                   "columns": [{"name": "task_index", "field_name": "task_index", "pandas_type": "int64",
                                "numpy_type": "int64", "metadata": None},
                               {"name": "task", "field_name": "task", "pandas_type": "unicode",
                                "numpy_type": "object", "metadata": None}]}
    return table.replace_schema_metadata({b"pandas": json.dumps(pandas_meta).encode()})


def write_lerobot(records: Iterable[EpisodeRecord], out: str | Path, contract: Contract | None = None,
                  version: str = "v3.0", codec: str = "libx264",
                  progress: Callable[[str], None] | None = None) -> dict:
    """Write ``records`` (consumed one at a time) as a LeRobot dataset at ``out``, which must not exist.
    Built in a temporary folder beside ``out`` and renamed into place only when complete; on any
    error nothing is left. Returns info.json's contents."""
    out = Path(out)
    if version not in VERSIONS:
        raise LeRobotError(f"version {version!r}: choose one of {', '.join(VERSIONS)}")
    if out.exists():
        raise LeRobotError(f"{out} already exists; choose a new --out folder (nothing is overwritten)")
    try:
        av.codec.Codec(codec, "w")
    except av.FFmpegError:
        raise LeRobotError(f"video codec {codec!r} cannot encode with this PyAV build; use libx264") from None
    out.parent.mkdir(parents=True, exist_ok=True)
    progress = progress or (lambda line: print(line, file=sys.stderr, flush=True))
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.partial-", dir=out.parent))
    writer = _Writer(tmp, version, contract or load_contract(DEFAULT_PROFILE), codec, progress)
    try:
        for rec in records:
            writer.add(rec)
            progress(f"export-lerobot: episode {len(writer.episodes)} {rec.episode_id} {rec.task} "
                     f"{rec.steps + 1} frames, {'success' if rec.success else 'failure'} ({rec.label})")
        writer.finish()
        os.rename(tmp, out)
    except BaseException:
        writer.abort()
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return json.loads((out / "meta" / "info.json").read_text())


# ---------------------------------------------------------------------------------------------- any source

def load_episodes(path: str | Path, contract: Contract | None = None, image_size_hw: tuple[int, int] | None = None,
                  mapping: str | Path | None = None, labels_csv: str | Path | None = None,
                  control_period_s: float | None = None) -> Iterator[EpisodeRecord]:
    """EpisodeRecords of ``path``, one at a time: a LeRobot dataset (``meta/info.json``; checked whole
    before the first is yielded), a folder of ``*.npz`` EpisodeRecords, or a folder of recorded
    rosbag2/MCAP episode folders (``*/metadata.yaml``; resampled to ``image_size_hw``, default 48x64;
    one without EpisodeEvents, a plain ``ros2 bag record``, takes task and label from ``labels_csv``)."""
    path = Path(path)
    if is_lerobot_dataset(path):
        reader = LeRobotReader(path, mapping, contract, labels_csv, image_size_hw, control_period_s)
        return (e.record for e in reader)
    if not path.is_dir():
        raise FileNotFoundError(f"{path}: no such directory")
    npz = sorted(p for p in path.glob("*.npz") if not p.name.endswith(".tmp.npz"))
    # A shadow run records each episode as <episode>/real and <episode>/world_model: the robot's side is the episode.
    bags = sorted(p.parent for pattern in ("*/metadata.yaml", f"*/{SIDES[0]}/metadata.yaml")
                  for p in path.glob(pattern))
    if not npz and not bags:
        raise FileNotFoundError(f"{path}: no episodes in it: not a LeRobot dataset (no meta/info.json), no *.npz "
                                "EpisodeRecords, no recorded episode folders (*/metadata.yaml, or a shadow run's "
                                f"*/{SIDES[0]}/metadata.yaml)")
    return _npz_and_bags(npz, bags, contract, image_size_hw, labels_csv)


def _npz_and_bags(npz: list[Path], bags: list[Path], contract: Contract | None,
                  image_size_hw: tuple[int, int] | None, labels_csv: str | Path | None) -> Iterator[EpisodeRecord]:
    for p in npz:
        yield EpisodeRecord.load_npz(p)
    if bags:
        from gesim_ros.episodes.recording import episode_record   # rclpy: only when recordings are read
        from gesim_ros.episodes.replay import read_label_rows

        # Bags without EpisodeEvents (a plain `ros2 bag record`) take task and label from the labels CSV.
        key, labels = read_label_rows(Path(labels_csv)) if labels_csv else ("episode_id", {})
        if key != "episode_id":
            raise LeRobotError(f"labels CSV {labels_csv}: episode_index rows label LeRobot episodes; recorded "
                               "episode folders are labelled by episode_id (the folder's name)")
        contract = contract or load_contract(DEFAULT_PROFILE)
        for folder in bags:
            yield episode_record(folder, contract, image_size_hw=image_size_hw or (48, 64), labels=labels,
                                 labels_csv=labels_csv)


# ---------------------------------------------------------------------------------------------- CLI

def _size(text: str) -> tuple[int, int]:
    try:
        h, w = (int(x) for x in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: give HEIGHTxWIDTH, e.g. 240x320") from None
    return h, w


def add_arguments(parser) -> None:
    parser.add_argument("recordings", metavar="RECORDINGS",
                        help="folder of recorded episode folders (gesim-ros collect, the robot) or *.npz EpisodeRecords")
    parser.add_argument("--out", required=True, metavar="DIR", help="the new dataset's folder (must not exist)")
    parser.add_argument("--version", choices=VERSIONS, default="v3.0", help="LeRobot layout (default v3.0)")
    parser.add_argument("--contract", default=DEFAULT_PROFILE, help="contract profile or YAML path")
    parser.add_argument("--image-size", type=_size, default=None, metavar="HxW",
                        help="frame size of recorded episodes (default: the contract's head camera size)")
    parser.add_argument("--codec", default="libx264", help="PyAV video encoder (default libx264: H.264)")
    parser.add_argument("--labels", metavar="CSV", default=None,
                        help="episode_id,label[,task,task_text] rows: the task and outcome of plain ros2 bags "
                             "(recorded without EpisodeEvents)")


def run(args) -> int:
    try:
        contract = load_contract(args.contract)
        size = args.image_size
        if size is None:
            head = contract.camera_for_view("head")
            size = (head.height, head.width) if head.height and head.width else (240, 320)
        source = Path(args.recordings)
        if is_lerobot_dataset(source):
            raise LeRobotError(f"{source} is already a LeRobot dataset; export-lerobot reads recorded episodes")
        records = load_episodes(source, contract, image_size_hw=size, labels_csv=args.labels)
        info = write_lerobot(records, args.out, contract, version=args.version, codec=args.codec)
    except (LeRobotError, FileNotFoundError, ValueError) as e:
        print(f"export-lerobot: {e}", file=sys.stderr)
        return 2
    print(f"export-lerobot: wrote {info['total_episodes']} episodes, {info['total_frames']} frames at "
          f"{info['fps']} fps (LeRobot {info['codebase_version']}) to {args.out}")
    return 0
