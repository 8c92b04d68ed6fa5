"""Episodes of the MuJoCo twin under its scripted controllers, recorded as EpisodeRecords (no ROS).

World-model training data (`gesim-ros record-training`, twin/training_data.py) records whole episodes; `gesim-ros lab-run
--mode world_model` records only their start, the observation a world_model-mode episode begins from.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from gesim_ros.episodes.data import VIEWS, EpisodeRecord
from gesim_ros.twin.controllers import make_controller
from gesim_ros.twin.physics import G2Twin


def twin_episode_id(task: str, seed: int, scene_seed: int | None = None) -> str:
    return f"{task}-{seed:05d}" + ("" if scene_seed is None else f"-scene{scene_seed:05d}")


def record_twin_episode(twin: G2Twin, task: str, seed: int, failure_rate: float,
                        steps: int | None = None, scene_seed: int | None = None,
                        controller_options: dict[str, Any] | None = None,
                        interaction: dict[str, Any] | None = None) -> EpisodeRecord:
    """Play the scripted plan for (task, seed) on ``twin`` for ``steps`` control steps (default: up to the
    task's time limit, holding the last targets after the plan ends) and record it: before every action
    and once after the last, the three RGB views, the 16 action joints and the scene state
    (``SCENE_STATE_NAMES``), then the twin's outcome label at that moment ('in_progress' for
    ``steps=0``, which records only the start).

    ``scene_seed`` plays the plan in another seed's scene (objects elsewhere): the outcome then
    depends on the scene the cameras show, not on a failure written into the actions.
    ``controller_options`` go to ``make_controller`` (graded severity, exploration, arm noise);
    ``interaction`` (what a recipe drew, twin/interaction.py) is kept in ``extra`` for analysis."""
    ctrl = make_controller(task, seed, failure_rate, **(controller_options or {}))
    twin.reset(task, seed if scene_seed is None else scene_seed)
    names = list(ctrl.plan.joint_names)
    columns = [twin.joint_names.index(n) for n in names]
    view_of = {t.key: t.view for t in twin.contract.cameras if t.view in VIEWS}
    frames: dict[str, list[np.ndarray]] = {v: [] for v in VIEWS}
    positions, actions, scene = [], [], []

    def observe() -> None:
        for key, image in twin.render_cameras().items():
            frames[view_of[key]].append(image)
        positions.append(twin.joint_state()[0][columns])
        scene.append(twin.scene_state())

    for step in range(int(round(ctrl.spec.time_limit_s / ctrl.period_s)) if steps is None else steps):
        observe()
        target = ctrl.chunk(step)[0]
        twin.set_joint_targets(names, target)
        twin.step(ctrl.period_s)
        actions.append(target)
    observe()
    outcome = twin.outcome()
    return EpisodeRecord(
        episode_id=twin_episode_id(task, seed, scene_seed), task=task, task_text=ctrl.spec.task_text, seed=seed,
        success=outcome.success, label=outcome.label, control_period_s=ctrl.period_s, joint_names=names,
        actions=np.asarray(actions, np.float32).reshape(len(actions), len(names)),
        joint_positions=np.asarray(positions, np.float32),
        frames={v: np.stack(f) for v, f in frames.items()}, failure_mode=ctrl.failure_mode,
        scene_state=np.stack(scene),
        extra={"outcome": outcome.details, "expected_label": ctrl.plan.expected_label,
               "failure_params": ctrl.plan.failure_params, "scene_seed": scene_seed,
               **({"interaction": interaction} if interaction is not None else {})})
