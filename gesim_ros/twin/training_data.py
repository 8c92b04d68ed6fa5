"""`gesim-ros record-training`: world-model training episodes from the MuJoCo twin and the scripted
controllers (no ROS), the recipe of the shipped learned model's data.

Each episode plays one scripted plan open loop on the twin (as ``scripted_controllers.run_episode``
does, holding the last targets after the plan ends) and records, before every action and once after
the last, the three RGB views and the 16 action joints, then the twin's outcome label
(``gesim_ros.twin.records.record_twin_episode``); it is saved as ``<task>-<seed>.npz``
(:class:`~gesim_ros.episodes.data.EpisodeRecord`). Cameras render at 160x100 by default: half the
twin node's 320x200 and its aspect (the contract's calibrated cameras resized), enough for the
learned model's scene reader (80x128) and frames (48x64).

Every episode runs to its task's time limit, also after the twin has decided the outcome (the label
is the twin's verdict at that moment). Stopping at the verdict would make episode length reveal the
outcome (successes end early, most failures at the limit), and a judge trained on such data learns
to read the clock instead of the imagined scene.

``--recipe`` picks what is played (twin/interaction.py, which also documents the seed layout):
``scripted`` (default) the shipped model's recipe; ``rich`` rich-interaction episodes (graded
severities, exploratory contacts, arm noise, varied scenes) where the physics decides the outcome;
``rich-boundary`` more such episodes at the severities where the outcome flips;
``probe-scripted``, ``probe-graded``, ``probe-scene``, ``probe-noise`` the held-out probes of issue
#17, whose seeds (default from 100000) never overlap a training seed or scene: a range that would is
refused. Every record carries the scene state (object pose, held, table contact, goal) and, in
``extra["interaction"]``, what its recipe drew.

Episodes already in ``--out`` are kept, so an interrupted collection continues where it stopped
(use a new ``--out`` for other settings). Worker processes each own one twin.

Run: gesim-ros record-training --out runs/twin_records --episodes-per-task 270
"""

from __future__ import annotations

import multiprocessing
import sys
import time
from collections import Counter
from pathlib import Path

from gesim_ros.twin import interaction
from gesim_ros.twin import tasks as twin_tasks
from gesim_ros.twin.controllers import PlanningError
from gesim_ros.twin.physics import G2Twin
from gesim_ros.twin.records import record_twin_episode, twin_episode_id

TASKS = tuple(twin_tasks.TASKS)
_twin: G2Twin | None = None


def _init_worker(width: int, height: int) -> None:
    global _twin
    _twin = G2Twin(camera_width=width, camera_height=height)


def _draw(args, task: str, index: int) -> interaction.EpisodeDraw:
    return interaction.draw(args.recipe, task, index, args.failure_rate, args.scene_shift)


def _episode_id(d: interaction.EpisodeDraw, task: str) -> str:
    return twin_episode_id(task, d.plan_seed, d.scene_seed)


def _job(args: tuple[str, interaction.EpisodeDraw, str]) -> tuple[str, str, str, str, str, float]:
    """-> (task, episode id, family, outcome label or 'planning_error', what to print, seconds)."""
    task, d, out = args
    t0 = time.monotonic()
    family = d.info["family"]
    try:
        rec = record_twin_episode(_twin, task, d.plan_seed, d.failure_rate, scene_seed=d.scene_seed,
                                  controller_options=d.options, interaction=d.info)
    except PlanningError as exc:
        return task, _episode_id(d, task), family, "planning_error", f"not recorded: {exc}", time.monotonic() - t0
    rec.save_npz(Path(out) / f"{rec.episode_id}.npz")
    if family == "scripted":
        family = rec.failure_mode or "nominal"
    note = f"{family} -> {rec.label} ({rec.steps} steps)"
    return task, rec.episode_id, family, rec.label, note, time.monotonic() - t0


def add_arguments(parser) -> None:
    parser.add_argument("--out", required=True, type=Path, help="directory for the episode .npz files")
    parser.add_argument("--episodes-per-task", type=int, default=20)
    parser.add_argument("--tasks", nargs="+", default=list(TASKS), choices=TASKS)
    parser.add_argument("--failure-rate", type=float, default=0.5,
                        help="probability that an episode gets an injected failure mode (default %(default)s)")
    parser.add_argument("--recipe", default="scripted", choices=interaction.RECIPES,
                        help="what to play: the shipped model's scripted recipe (default), rich interaction, "
                             "or a held-out probe (see gesim_ros/twin/interaction.py)")
    parser.add_argument("--seed-start", type=int, default=None,
                        help="first seed; each task uses the next N seeds (default 0 for training recipes, "
                             f"{interaction.BOUNDARY_SEEDS.start} for rich-boundary, "
                             f"{interaction.PROBE_SEEDS.start} for probes)")
    parser.add_argument("--width", type=int, default=160, help="camera width in pixels (default %(default)s)")
    parser.add_argument("--height", type=int, default=100, help="camera height in pixels (default %(default)s)")
    parser.add_argument("--workers", type=int, default=2, help="parallel twin processes (default %(default)s)")
    parser.add_argument("--scene-shift", type=int, default=0,
                        help="recipe scripted: play seed S's plan in seed S+K's scene (objects elsewhere): outcomes "
                             "then depend on the scene, not on an injected failure (default 0: the plan's own scene)")


def _argument_problem(args) -> str | None:
    if args.episodes_per_task < 1:
        return f"--episodes-per-task {args.episodes_per_task}: record at least one episode per task"
    if not 0.0 <= args.failure_rate <= 1.0:
        return f"--failure-rate {args.failure_rate}: a probability, give a number in [0, 1]"
    if args.seed_start < 0:
        return f"--seed-start {args.seed_start}: seeds are non-negative integers"
    if args.scene_shift and args.recipe != "scripted":
        return (f"--scene-shift {args.scene_shift}: only the scripted recipe takes it (probe-scene shifts by "
                f"{interaction.PROBE_SCENE_SHIFT}, rich draws its own scenes)")
    layout = interaction.seed_problem(args.recipe, args.seed_start, args.episodes_per_task, args.scene_shift)
    if layout:
        return layout
    if args.width < 1 or args.height < 1:
        return f"--width {args.width} --height {args.height}: camera sizes are positive numbers of pixels"
    if args.workers < 1:
        return f"--workers {args.workers}: use at least one worker process"
    return None


def run(args) -> int:
    if args.seed_start is None:
        args.seed_start = (interaction.PROBE_SEEDS.start if args.recipe.startswith("probe-") else
                           interaction.BOUNDARY_SEEDS.start if args.recipe == "rich-boundary" else 0)
    problem = _argument_problem(args)
    if problem:
        print(f"gesim-ros record-training: {problem}", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    seeds = range(args.seed_start, args.seed_start + args.episodes_per_task)
    draws = [(task, _draw(args, task, seed)) for seed in seeds for task in args.tasks]
    jobs = [(task, d, str(args.out)) for task, d in draws if not (args.out / f"{_episode_id(d, task)}.npz").exists()]
    total = len(draws)
    print(f"{total - len(jobs)} of {total} episodes already in {args.out}; recording {len(jobs)} "
          f"(recipe {args.recipe}, seeds {args.seed_start}..{args.seed_start + args.episodes_per_task - 1}, "
          f"{args.width}x{args.height} cameras, failure rate {args.failure_rate}, {args.workers} workers)")
    labels: Counter = Counter()
    t0 = time.monotonic()
    ctx = multiprocessing.get_context("spawn")  # a fresh GL context per worker, never a forked one
    with ctx.Pool(args.workers, _init_worker, (args.width, args.height)) as pool:
        for done, (task, episode, family, label, note, seconds) in enumerate(pool.imap_unordered(_job, jobs), 1):
            labels[task, family, label] += 1
            eta = (time.monotonic() - t0) / done * (len(jobs) - done)
            print(f"[{done}/{len(jobs)}] {episode}: {note}, {seconds:.1f} s; ETA {eta / 60:.1f} min", flush=True)
    minutes = (time.monotonic() - t0) / 60
    print(f"done in {minutes:.1f} min ({len(jobs) / max(minutes, 1e-9):.1f} episodes/min); outcomes of the "
          "recorded episodes (task, family: label counts):")
    for task in args.tasks:
        per_task: Counter = Counter()
        for (t, _, lab), n in labels.items():
            if t == task:
                per_task[lab] += n
        print(f"  {task:<11} {'all':<14} " + ", ".join(f"{lab} {n}" for lab, n in sorted(per_task.items())))
        for family in sorted({f for t, f, _ in labels if t == task}):
            counts = sorted((lab, n) for (t, f, lab), n in labels.items() if t == task and f == family)
            print(f"  {'':<11} {family:<14} " + ", ".join(f"{lab} {n}" for lab, n in counts))
    return 0
