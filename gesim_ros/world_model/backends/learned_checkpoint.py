"""The learned world model's checkpoints: the file format, atomic saving, and loading that names
what differs (format, version, joints, views) when a checkpoint does not fit."""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from gesim_ros.world_model.backends.learned_network import ModelConfig, Normalisation, WorldModelNet

_LOG = logging.getLogger(__name__)

FORMAT = "gesim_ros.learned_world_model"  # the checkpoint format's name, kept when the module moved
# 7: the object-centric model (scene reader, object dynamics over the G2's hand kinematics, frame
# renderer, scene judge; issue #17) whose reader reads the object's horizontal position and size again
# on the yaw reader's top-down patches (the object refiner). 6 had no object refiner; 5's judge did not
# read the time and moved the reader's task embedding after the reader was trained; 4 read the object's
# yaw from heatmap statistics, not from top-down patches; 3 had no millimetre contact features and did
# not move a held object with the hand; 1 and 2 were video-latent models. None of them is built any more.
FORMAT_VERSION = 7
#: Formats whose scene reader, dynamics and frame renderer this code runs: a judge can be trained for
#: them alone ('train-wm --judge-from'), or new dynamics and a judge ('--dynamics-from'), after an
#: object refiner for 5 and 6.
RETRAINABLE_VERSIONS = (5, 6, FORMAT_VERSION)
#: Formats without the object refiner.
REFINERLESS_VERSIONS = (5, 6)
UNKNOWN_TASK = "<unknown>"
DEFAULT_CHECKPOINT = Path(__file__).parents[1] / "models" / "learned_world_model.pt"
_REQUIRED_KEYS = ("format", "format_version", "model_config", "state_dict", "normalisation",
                  "task_vocabulary", "task_texts", "joint_names", "views", "control_period_s")


class CheckpointError(ValueError):
    """A checkpoint cannot be used: missing, corrupt, another format version, or made for other
    joints or views. The message names the file and what differs (expected versus found)."""


@dataclass
class LoadedModel:
    """A checkpoint's network and metadata."""

    net: WorldModelNet
    path: Path
    task_vocabulary: list[str]
    task_texts: dict[str, str]
    joint_names: list[str]
    views: list[str]
    control_period_s: float
    task_horizons: dict[str, int] = field(default_factory=dict)  # task -> steps of its training episodes
    _warned: set[str] = field(default_factory=set, repr=False)

    def task_id(self, task: str) -> int:
        """Vocabulary index of a task name or of an instruction seen in training; 0 (unknown) else."""
        if task in self.task_vocabulary:
            return self.task_vocabulary.index(task)
        if task in self.task_texts:
            return self.task_vocabulary.index(self.task_texts[task])
        if task and task not in self._warned:
            self._warned.add(task)
            _LOG.warning("task %r is neither a task name %s nor an instruction seen in training; "
                         "judging it as an unknown task", task, self.task_vocabulary[1:])
        return 0

    def task_horizon(self, task: str) -> int | None:
        """Steps of the longest training episode of ``task`` (a name or a seen instruction); for an
        unknown task, of any task's (the judge reads the time and never read a later one); None if
        the checkpoint lists no horizons."""
        task_id = self.task_id(task)
        if task_id == 0:
            return max(self.task_horizons.values(), default=None)
        return self.task_horizons.get(self.task_vocabulary[task_id])


def _differences(what: str, expected: Sequence[str], found: Sequence[str]) -> str:
    expected, found = list(expected), list(found)
    if len(expected) != len(found):
        return f"{what} differ: expected {len(expected)} {expected}, found {len(found)} {found}"
    i = next(i for i, (a, b) in enumerate(zip(expected, found)) if a != b)
    return f"{what} differ at index {i}: expected {expected[i]!r}, found {found[i]!r} (expected {expected}, found {found})"


def save_checkpoint(path: str | os.PathLike, payload: Mapping[str, Any]) -> None:
    """Write atomically (temporary file in the same directory, fsync, rename): a crash or Ctrl-C
    mid-write leaves the previous checkpoint intact, never a truncated one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "wb") as fh:
        torch.save(dict(payload), fh)
        fh.flush()
        os.fsync(fh.fileno())
    tmp.replace(path)


def read_checkpoint(path: str | os.PathLike, versions: Sequence[int] = (FORMAT_VERSION,)) -> dict:
    """The raw checkpoint dict after format and version (one of ``versions``) checks (no network built)."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint {path}: no such file (train one with 'gesim-ros train-wm')")
    try:
        data = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # torch raises many types for truncated or foreign files
        raise CheckpointError(f"checkpoint {path}: corrupt or not a torch file ({type(exc).__name__}: {exc})") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        found = data.get("format") if isinstance(data, dict) else type(data).__name__
        raise CheckpointError(f"checkpoint {path}: not a learned world model checkpoint: "
                              f"format expected {FORMAT!r}, found {found!r}")
    if data.get("format_version") not in versions:
        older = {1: "a video-latent model", 2: "a video-latent model",
                 3: "an object-centric model without the millimetre contact features",
                 4: "an object-centric model without the yaw reader",
                 5: "an object-centric model whose judge does not read the time",
                 6: "an object-centric model without the object refiner"}.get(data.get("format_version"))
        fix = ("retrain it with 'gesim-ros train-wm', or keep its trained stages and give it "
               f"{'an object refiner and ' if data.get('format_version') != FORMAT_VERSION else ''}a new judge "
               f"with 'gesim-ros train-wm --judge-from {path}'" if data.get("format_version") in RETRAINABLE_VERSIONS
               else "retrain it with 'gesim-ros train-wm'")
        older = f" ({older} of an earlier gesim_ros, which this one no longer runs: {fix})" if older else ""
        raise CheckpointError(f"checkpoint {path}: format version expected {' or '.join(map(str, versions))}, "
                              f"found {data.get('format_version')!r}{older}")
    missing = [k for k in _REQUIRED_KEYS if k not in data]
    if missing:
        raise CheckpointError(f"checkpoint {path}: corrupt: missing key(s) {missing}")
    return data


def load_checkpoint(path: str | os.PathLike, *, expected_joint_names: Sequence[str] | None = None,
                    expected_views: Sequence[str] | None = None) -> LoadedModel:
    """Load a checkpoint for inference; with ``expected_*`` it must match those joints and views."""
    path = Path(path)
    data = read_checkpoint(path)
    if expected_joint_names is not None and list(data["joint_names"]) != list(expected_joint_names):
        raise CheckpointError(f"checkpoint {path}: made for other joints: "
                              + _differences("joint names", expected_joint_names, data["joint_names"]))
    if expected_views is not None and list(data["views"]) != list(expected_views):
        raise CheckpointError(f"checkpoint {path}: made for other camera views: "
                              + _differences("views", expected_views, data["views"]))
    try:
        config = ModelConfig.from_dict(data["model_config"])
        if len(data["views"]) != config.num_views or len(data["joint_names"]) != config.joint_dim:
            raise ValueError(f"{len(data['views'])} views and {len(data['joint_names'])} joints listed, "
                             f"model built for {config.num_views} and {config.joint_dim}")
        vocabulary = [str(t) for t in data["task_vocabulary"]]
        if not vocabulary or vocabulary[0] != UNKNOWN_TASK:
            raise ValueError(f"task vocabulary must start with {UNKNOWN_TASK!r}, found {vocabulary[:1]}")
        net = WorldModelNet(config, len(vocabulary), Normalisation.from_dict(data["normalisation"], config.joint_dim))
        net.load_state_dict(data["state_dict"])
    except (ValueError, TypeError, KeyError, RuntimeError) as exc:
        raise CheckpointError(f"checkpoint {path}: corrupt: {exc}") from None
    net.eval()
    return LoadedModel(net=net, path=path, task_vocabulary=vocabulary, task_texts=dict(data["task_texts"]),
                       joint_names=list(data["joint_names"]), views=list(data["views"]),
                       control_period_s=float(data["control_period_s"]),
                       task_horizons={str(t): int(n) for t, n in data.get("task_horizons", {}).items()})


