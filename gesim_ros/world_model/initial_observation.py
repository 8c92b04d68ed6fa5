"""Recorded episode starts, for world_model mode: each episode starts from step 0 of a recorded
EpisodeRecord of its task (and seed, where one was recorded)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from gesim_ros.contract.contract import Contract
from gesim_ros.episodes.data import EpisodeRecord
from gesim_ros.world_model.session import Observation, SessionConfigError


def initial_observations(path: str | Path) -> list[tuple[Path, dict]]:
    """Every recorded episode start in ``path`` (an EpisodeRecord ``.npz`` or a folder of them, by
    name order) with its ``meta``; raises SessionConfigError when it is not set, does not exist,
    holds none or holds a file that is not one. Only the small ``meta`` member of each file is read."""
    root = Path(path)
    if not str(path):
        raise SessionConfigError("initial_observation: not set; mode world_model starts each episode from a "
                                 "recorded one. Fix: set it to an EpisodeRecord .npz or a folder of them")
    if root.is_dir():
        files = sorted(f for f in root.glob("*.npz") if not f.name.endswith(".tmp.npz"))
    elif root.is_file():
        files = [root]
    else:
        raise SessionConfigError(f"initial_observation: {root} does not exist. Fix: point it at an "
                                 "EpisodeRecord .npz or a folder of them")
    if not files:
        raise SessionConfigError(f"initial_observation: {root} holds no EpisodeRecord .npz. Fix: record the "
                                 "episode starts there (EpisodeRecord.save_npz) or point it at a folder that has them")
    metas = []
    for f in files:
        try:
            with np.load(f) as data:
                metas.append((f, json.loads(str(data["meta"]))))
        except (OSError, ValueError, KeyError) as exc:
            raise SessionConfigError(f"initial_observation: {f} is not an EpisodeRecord .npz ({exc}). "
                                     "Fix: remove it or re-save it with EpisodeRecord.save_npz") from None
    return metas


def find_initial_observation(path: str | Path, task: str, seed: int) -> EpisodeRecord:
    """The recorded episode to start a world_model-mode episode from: of ``initial_observations(path)``,
    the first whose task and seed match, else the first one of that task."""
    metas = initial_observations(path)
    same_task = [(f, m) for f, m in metas if m.get("task") == task]
    exact = [f for f, m in same_task if m.get("seed") == seed]
    if exact or same_task:
        return EpisodeRecord.load_npz(exact[0] if exact else same_task[0][0])
    tasks = sorted({str(m.get("task")) for _, m in metas})
    raise SessionConfigError(f"initial_observation: no recorded episode of task '{task}' in {Path(path)} "
                             f"(tasks there: {', '.join(tasks)}). Fix: record one or sync a listed task")


def observation_from_record(record: EpisodeRecord, contract: Contract, episode_id: str, seed: int) -> Observation:
    """Step 0 of a recorded episode as an Observation (its views mapped onto the contract's cameras)."""
    images = {}
    for view, frames in record.frames.items():
        try:
            images[contract.camera_for_view(view).key] = frames[0]
        except KeyError:
            continue  # a view the contract has no camera for: the model cannot be fed it anyway
    return Observation(episode_id=episode_id, task=record.task, task_text=record.task_text, seed=seed,
                       images=images, joints=dict(zip(record.joint_names, map(float, record.joint_positions[0]))))
