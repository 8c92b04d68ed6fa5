"""What each `record-training --recipe` plays: rich-interaction training episodes and the held-out probes.

The shipped model's data (recipe ``scripted``) injects a failure at a fixed severity, so the actions
alone tell the outcome. The ``rich`` recipe is collected the way AgiBot World collects it on the
real G2: diverse, contact-rich episodes in which the physics decides the outcome. Each episode draws,
from a stream of its own per (task, index):

- a family: the failure-free plan (20 %), one of the task's failure modes at a graded, continuous
  severity from harmless to past failing (50 %: grasp offsets 0 to the scripted maximum, grips 30 %
  to 150 % of the squeeze the object needs, approach height and duration, close height, push
  height, speed and length), or an exploratory contact before the task (30 %: nudge, regrasp,
  repush; see ``controllers``);
- a scene: a varied copy of scene ``index`` (object pose, size, mass, friction; seeds from
  ``tasks.SCENE_VARIATION_BASE``) that the plan either knows (45 %) or not (40 %: planned on the
  unvaried scene, the objects are up to 2 cm elsewhere and of another size), or another training
  seed's varied scene (15 %: the neighbour ``index ^ 1``, often the other arm's side);
- smooth arm-joint noise of 0-0.05 rad (40 % of episodes).

The twin's checker labels every episode; what was drawn is kept in ``extra["interaction"]`` for
analysis only. So the same family ends both ways depending on the scene and the severity.

``rich-boundary`` adds episodes where the rich data has too few to learn the physics from: the
failure modes in ``BOUNDARY``'s ranges, where the outcome flips (push: fast approaches 4-8.5 cm up,
which leave the block upright or tip it by its size; off-centre pushes 2-6.5 cm; pick-and-place and
unplug: the offsets, grips, approach and close heights around where the rich episodes' outcomes
change), in rich's scenes, without arm noise.

Probes (held out, each as issue #17 defines it): ``probe-scripted`` today's scripted plans with the
injected failures; ``probe-graded`` the failure modes at graded severity (the ranges above) on
unvaried scenes; ``probe-scene`` failure-free plans played in another seed's scene (seed s in scene
s + PROBE_SCENE_SHIFT); ``probe-noise`` failure-free plans with 0-0.04 rad of arm noise.

Seed layout (a probe never reuses a training seed or scene): training indices (recipes ``scripted``
and ``rich``) and their scenes lie in TRAIN_SEEDS (rich scenes: SCENE_VARIATION_BASE + index,
varied copies of those; ``rich`` below BOUNDARY_SEEDS, ``rich-boundary`` in it, so the two share
no episode id and can be recorded into one folder), probe seeds in PROBE_SEEDS, probe-scene's
scenes in PROBE_SEEDS + PROBE_SCENE_SHIFT.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gesim_ros.twin.controllers import CONTROLLERS
from gesim_ros.twin.tasks import SCENE_VARIATION_BASE

RECIPES = ("scripted", "rich", "rich-boundary", "probe-scripted", "probe-graded", "probe-scene", "probe-noise")
TRAIN_SEEDS = range(0, 100_000)
BOUNDARY_SEEDS = range(50_000, 100_000)    # rich-boundary's share of TRAIN_SEEDS: its ids never meet rich's
PROBE_SEEDS = range(100_000, 500_000)
PROBE_SCENE_SHIFT = 500_000
RICH_NOISE_RAD = 0.05
PROBE_NOISE_RAD = 0.04

#: severity ranges per task and failure mode: key -> (lo, hi)
SeverityRanges = dict[str, dict[str, dict[str, tuple[float, float]]]]

# Graded severities per (task, failure mode): key -> (lo, hi), from harmless to past the scripted
# failure (whose ranges are the top ends: offsets 5.5-7 / 4.5-6 cm, grips 30-50 %, ...).
_GRIP = {"grip_force_ratio": (0.3, 1.5)}
_APPROACH = {"approach_s": (0.9, 2.2)}
GRADED: SeverityRanges = {
    "pick_place": {"grasp_offset": {"offset_m": (0.0, 0.07)}, "weak_grip": _GRIP,
                   "fast_approach": {"too_low_m": (0.0, 0.06), **_APPROACH},
                   "early_close": {"close_above_m": (0.0, 0.06)}},
    "push": {"grasp_offset": {"offset_m": (0.0, 0.11)},
             "fast_approach": {"push_height_m": (0.01, 0.10), "push_s": (0.7, 1.8)},
             "early_stop": {"push_fraction": (0.3, 1.0)}},
    "unplug": {"grasp_offset": {"offset_m": (0.0, 0.06)}, "weak_grip": _GRIP,
               "fast_approach": {"too_low_m": (0.0, 0.04), **_APPROACH},
               "early_close": {"close_above_m": (0.0, 0.06)}},
}
# Where the physics decides a failure mode's outcome in the rich data (push: 4.9-7.3 cm fast approaches
# end upright or tipped by the block's size; off-centre pushes turn or miss; the grasps' ranges span
# the rich episodes' severities that ended both ways): recipe rich-boundary. Push's entry came first;
# adding tasks leaves its draws unchanged (each task draws from a stream of its own).
BOUNDARY: SeverityRanges = {
    "push": {"fast_approach": {"push_height_m": (0.04, 0.085), "push_s": (0.7, 1.8)},
             "grasp_offset": {"offset_m": (0.02, 0.065)}},
    "pick_place": {"grasp_offset": {"offset_m": (0.005, 0.035)}, "weak_grip": {"grip_force_ratio": (0.6, 1.5)},
                   "fast_approach": {"too_low_m": (0.0, 0.025), **_APPROACH},
                   "early_close": {"close_above_m": (0.0, 0.035)}},
    "unplug": {"grasp_offset": {"offset_m": (0.0, 0.02)}, "weak_grip": {"grip_force_ratio": (0.85, 1.5)},
               "fast_approach": {"too_low_m": (0.0, 0.02), **_APPROACH},
               "early_close": {"close_above_m": (0.015, 0.04)}},
}
EXPLORATION_PARAMS: dict[str, dict[str, tuple[float, float]]] = {
    "nudge": {"nudge_m": (-0.01, 0.04), "nudge_dir": (0.0, 2 * np.pi)},
    "regrasp": {"first_offset_m": (0.0, 0.05)},
    "repush": {"first_fraction": (0.2, 0.7)},
}


@dataclass(frozen=True)
class EpisodeDraw:
    """One episode of a recipe: the plan's seed and options, the scene it plays in, and what was drawn."""
    plan_seed: int
    scene_seed: int | None                  # None: the plan's own scene
    failure_rate: float = 0.0
    options: dict[str, Any] = field(default_factory=dict)   # make_controller keywords
    info: dict[str, Any] = field(default_factory=dict)      # for extra["interaction"]


def _rng(recipe: str, task: str, index: int) -> np.random.Generator:
    return np.random.default_rng([int(index), zlib.crc32(task.encode()), zlib.crc32(recipe.encode())])


def _uniform(ranges: dict[str, tuple[float, float]], rng: np.random.Generator) -> dict[str, float]:
    return {k: round(float(rng.uniform(lo, hi)), 6) for k, (lo, hi) in ranges.items()}


def _graded(task: str, rng: np.random.Generator, ranges: SeverityRanges = GRADED) -> tuple[str, dict[str, float]]:
    modes = list(ranges[task])
    mode = modes[int(rng.integers(len(modes)))]
    return mode, _uniform(ranges[task][mode], rng)


def _varied_scene(index: int, rng: np.random.Generator) -> tuple[int, int | None, str]:
    """-> (plan seed, scene seed or None, scene kind) of a rich episode: a varied scene, known or not."""
    varied = SCENE_VARIATION_BASE + index
    u = rng.random()
    if u < 0.45:
        return varied, None, "varied_known"
    if u < 0.85:
        return index, varied, "varied_unknown"
    return index, SCENE_VARIATION_BASE + (index ^ 1), "other_seed"


def draw(recipe: str, task: str, index: int, failure_rate: float = 0.5, scene_shift: int = 0) -> EpisodeDraw:
    """Episode ``index`` of ``recipe`` for ``task`` (``failure_rate`` and ``scene_shift`` apply to
    the scripted recipes only)."""
    if recipe == "scripted":
        return EpisodeDraw(index, index + scene_shift if scene_shift else None, failure_rate,
                           info={"recipe": recipe, "family": "scripted"})
    if recipe == "probe-scripted":
        return EpisodeDraw(index, None, failure_rate, info={"recipe": recipe, "family": "scripted"})
    rng = _rng(recipe, task, index)
    if recipe == "probe-graded":
        mode, severity = _graded(task, rng)
        return EpisodeDraw(index, None, options={"failure_mode": mode, "severity": severity},
                           info={"recipe": recipe, "family": mode, "severity": severity})
    if recipe == "probe-scene":
        return EpisodeDraw(index, index + PROBE_SCENE_SHIFT, info={"recipe": recipe, "family": "nominal"})
    if recipe == "probe-noise":
        noise = round(float(rng.uniform(0.0, PROBE_NOISE_RAD)), 6)
        return EpisodeDraw(index, None, options={"arm_noise_rad": noise},
                           info={"recipe": recipe, "family": "nominal", "arm_noise_rad": noise})
    if recipe == "rich-boundary":
        if task not in BOUNDARY:
            raise ValueError(f"recipe rich-boundary has no severities for task '{task}'; it plays {', '.join(BOUNDARY)}")
        family, severity = _graded(task, rng, BOUNDARY)
        plan_seed, scene_seed, scene = _varied_scene(index, rng)
        return EpisodeDraw(plan_seed, scene_seed, options={"failure_mode": family, "severity": severity},
                           info={"recipe": recipe, "index": index, "family": family, "scene": scene,
                                 "severity": severity, "arm_noise_rad": 0.0})
    if recipe != "rich":
        raise ValueError(f"unknown recipe '{recipe}'; known: {', '.join(RECIPES)}")
    options: dict[str, Any] = {}
    u = rng.random()
    if u < 0.2:
        family = "nominal"
    elif u < 0.7:
        family, options["severity"] = _graded(task, rng)
        options["failure_mode"] = family
    else:
        kinds = CONTROLLERS[task].EXPLORATIONS
        family = kinds[int(rng.integers(len(kinds)))]
        options.update(exploration=family, severity=_uniform(EXPLORATION_PARAMS[family], rng))
    plan_seed, scene_seed, scene = _varied_scene(index, rng)
    if rng.random() < 0.4:
        options["arm_noise_rad"] = round(float(rng.uniform(0.0, RICH_NOISE_RAD)), 6)
    return EpisodeDraw(plan_seed, scene_seed, options=options,
                       info={"recipe": recipe, "index": index, "family": family, "scene": scene,
                             "severity": options.get("severity", {}),
                             "arm_noise_rad": options.get("arm_noise_rad", 0.0)})


def seed_problem(recipe: str, first: int, count: int, scene_shift: int = 0) -> str | None:
    """Why seeds first..first+count-1 (and their scenes) break the seed layout for ``recipe``, or None."""
    last = first + count - 1
    if recipe.startswith("probe-"):
        if first < PROBE_SEEDS.start or last >= PROBE_SEEDS.stop:
            return (f"--seed-start {first} with {count} episodes per task: probe seeds must lie in "
                    f"{PROBE_SEEDS.start}..{PROBE_SEEDS.stop - 1}, never a training seed or scene "
                    f"(training: {TRAIN_SEEDS.start}..{TRAIN_SEEDS.stop - 1})")
        return None
    seeds = BOUNDARY_SEEDS if recipe == "rich-boundary" else range(TRAIN_SEEDS.start, BOUNDARY_SEEDS.start)
    if recipe.startswith("rich") and (first < seeds.start or last >= seeds.stop):
        return (f"--seed-start {first} with {count} episodes per task: recipe {recipe}'s seeds lie in "
                f"{seeds.start}..{seeds.stop - 1}, so its episodes never share an id with the other rich recipe's")
    scenes_last = last + scene_shift
    if last >= TRAIN_SEEDS.stop or scenes_last >= TRAIN_SEEDS.stop:
        return (f"--seed-start {first} with {count} episodes per task (scene shift {scene_shift}): training "
                f"seeds and scenes must stay below {TRAIN_SEEDS.stop}, where the probes' seeds begin")
    return None
