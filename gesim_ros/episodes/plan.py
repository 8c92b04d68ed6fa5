"""The episode runner's plan and bookkeeping, without ROS: which episodes a run has, which backends
each one resets, whose OUTCOME decides it, how it ended, and the progress line; the checks of the
runner's parameters that decide them (``gesim_ros.episodes.runner`` is the node)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from itertools import product

from gesim_ros.contract.contract import Contract, message_class
from gesim_ros.contract.modes import MODES, ROBOT_MODES, SIDES, WORLD_MODEL_MODES

EpisodeEvent = message_class("gesim_ros_interfaces/msg/EpisodeEvent")

#: whose OUTCOME ends an episode under outcome_side auto: the robot's where it acts, else the model's,
#: else (mode none) the operator's
OUTCOME_SIDE_BY_MODE = {mode: "real" if mode in ROBOT_MODES else "world_model" if mode in WORLD_MODEL_MODES
                        else "operator" for mode in MODES}
#: every side outcome_side may name
OUTCOME_SIDES = (*SIDES, "operator", "checker")
OUTCOME_NAMES = {EpisodeEvent.OUTCOME_UNKNOWN: "unknown", EpisodeEvent.OUTCOME_SUCCESS: "success",
                 EpisodeEvent.OUTCOME_FAILURE: "failure"}


class RunnerError(RuntimeError):
    """The run cannot go on (a service is missing, the switch refused a mode, a bad parameter)."""


@dataclass(frozen=True)
class PlannedEpisode:
    task: str
    seed: int
    mode: str


def plan_episodes(tasks, seeds, modes) -> list[PlannedEpisode]:
    """Every task x seed x mode, seed-major, so a short run still covers every task."""
    if not tasks:
        raise RunnerError("no tasks: set the tasks parameter (e.g. -p tasks:=[pick_cube] or --tasks pick_cube)")
    bad = [m for m in modes if m not in MODES]
    if bad or not modes:
        raise RunnerError(f"backend_modes {list(modes)}: use one or more of {', '.join(MODES)}")
    return [PlannedEpisode(t, int(s), m) for s, t, m in product(seeds, tasks, modes)]


@dataclass
class EpisodeResult:
    episode_id: str
    task: str
    seed: int
    mode: str
    task_text: str = ""
    status: str = ""          # "ended" or "aborted"; empty while running
    outcome: int = EpisodeEvent.OUTCOME_UNKNOWN
    side: str = ""            # who decided the outcome
    label: str = ""
    reason: str = ""

    @property
    def outcome_name(self) -> str:
        return OUTCOME_NAMES.get(self.outcome, str(self.outcome))


def reset_services_for(setting: str, robot_reset: str, mode: str) -> tuple[str, ...]:
    """The reset service keys an episode of ``mode`` calls, in order, for the ``reset_services``
    setting (auto, none or comma-separated keys) and the ``robot_reset`` key ('' for none)."""
    if setting == "auto":
        robot = (robot_reset,) if robot_reset and mode in ROBOT_MODES else ()
        return robot + (("world_model_sync",) if mode in WORLD_MODEL_MODES else ())
    if setting == "none":
        return ()
    return tuple(k.strip() for k in setting.split(",") if k.strip())


def format_progress(index: int, total: int, result: EpisodeResult, results: list[EpisodeResult]) -> str:
    """One line per episode: k/N, task, seed, mode, outcome and the running success rate."""
    decided = [r for r in results if r.status == "ended" and r.outcome != EpisodeEvent.OUTCOME_UNKNOWN]
    wins = sum(r.outcome == EpisodeEvent.OUTCOME_SUCCESS for r in decided)
    rate = f"{wins}/{len(decided)} = {100 * wins / len(decided):.0f}%" if decided else "n/a"
    what = "ABORTED" if result.status == "aborted" else result.outcome_name.upper()
    detail = ", ".join(x for x in (result.side, result.label, result.reason) if x)
    return (f"episode {index}/{total} {result.task} seed {result.seed} [{result.mode}]: {what} ({detail}) | "
            f"success rate {rate}")


def plan_from_parameters(params: Mapping) -> list[PlannedEpisode]:
    """The run's episodes from the runner's parameters: tasks x seeds (``seeds``, else ``seed_count``
    from ``seed_start``) x ``backend_modes``, cut to ``max_episodes``."""
    seeds = params["seeds"] or range(params["seed_start"], params["seed_start"] + params["seed_count"])
    plan = plan_episodes(params["tasks"], seeds, params["backend_modes"])
    if params["max_episodes"] < 0:
        raise RunnerError(f"max_episodes {params['max_episodes']}: use 0 (all) or a positive count")
    return plan[:params["max_episodes"] or None]


def checked_resets(contract: Contract, keys: tuple[str, ...]) -> tuple[str, ...]:
    """``keys`` when each is a ResetEpisode service of ``contract``; else a RunnerError naming the choices."""
    for key in keys:
        if key not in contract.services or not contract.services[key].type.endswith("/ResetEpisode"):
            resets = [k for k, s in contract.services.items() if s.type.endswith("/ResetEpisode")]
            raise RunnerError(f"reset_services/robot_reset: '{key}' is not a ResetEpisode service of contract "
                              f"{contract.profile}; use some of {', '.join(resets)} (reset_services also "
                              "takes auto or none; robot_reset '' for none)")
    return keys


def check_outcome_side(outcome_side: str, success_checker: str) -> None:
    """Refuse an ``outcome_side`` that is no side, or ``checker`` without a ``success_checker``."""
    if outcome_side not in ("auto", *OUTCOME_SIDES):
        raise RunnerError(f"outcome_side '{outcome_side}': use auto or one of {', '.join(OUTCOME_SIDES)}")
    if outcome_side == "checker" and not success_checker:
        raise RunnerError("outcome_side is 'checker' but no success_checker is set; set success_checker")


def decisive_sides(outcome_side: str, mode: str) -> set[str]:
    """The sides whose OUTCOME ends an episode of ``mode``; operator labels and policy failures always do."""
    return {OUTCOME_SIDE_BY_MODE[mode] if outcome_side == "auto" else outcome_side, "operator", "policy"}
