"""`gesim-ros collect`: labelled twin episodes on disk, one rosbag2/MCAP folder per episode.

Each episode runs the scripted controller for (task, seed) against TwinStreams in this process, as
fast as the machine allows (no DDS): the plan goes in as ActionChunks, the way the `policy` node's
``scripted`` plugin sends it, and the folder holds every contract topic under the robot namespace,
the chunks, and the episode's STARTED and OUTCOME events (side ``real``: the twin's ground truth,
with the injected failure mode as the reason). The node and this command share TwinStreams, so a
collected episode carries the same messages a live one does.

Every episode runs to its task's time limit, also after the checker decided (the OUTCOME event is
written when it did): stopping at the verdict would let episode length give the outcome away to a
model trained on these episodes (failures by collision would all be short).

Existing episode folders are never overwritten: they are kept and their recorded outcome counts in
the summary, so an interrupted run continues where it stopped (an episode is written under
``.partial/`` and moved into place when complete).
"""

from __future__ import annotations

import json
import math
import shutil
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

from gesim_ros_interfaces.msg import EpisodeEvent

from gesim_ros.contract.contract import DEFAULT_PROFILE, Contract, load_contract
from gesim_ros.episodes.recording import EpisodeBagWriter, bag_message_counts, read_messages, recorded_topics
from gesim_ros.contract.messages import action_chunk_msg, seconds
from gesim_ros.twin.controllers import PlanningError, make_controller
from gesim_ros.twin.streams import TwinStreams
from gesim_ros.twin.tasks import TASKS

#: Rows per ActionChunk, as the scripted policy plugin sends them by default (policy.builtin.ScriptedPolicy).
CHUNK_HORIZON = 10
POLICY = "scripted"


class CollectError(RuntimeError):
    """The collection cannot go on (a bad argument, or a plan the twin refused)."""


@dataclass
class EpisodeSummary:
    episode_id: str
    task: str
    seed: int
    label: str                          # the twin's ground truth, or planning_error
    success: bool
    injected_failure: str = ""
    folder: str = ""
    resumed: bool = False               # the folder existed and was kept
    wall_s: float = 0.0
    message_counts: dict[str, int] = field(default_factory=dict)   # as written (read back when resumed)


def add_arguments(parser) -> None:
    parser.add_argument("--task", required=True, choices=[*TASKS, "all"],
                        help="the task of every episode; all: cycle through the tasks")
    parser.add_argument("--episodes", type=int, required=True, help="number of episodes")
    parser.add_argument("--failure-rate", type=float, default=0.3,
                        help="probability that an episode gets an injected failure mode (default %(default)s)")
    parser.add_argument("--out", type=Path, required=True, help="directory of the episode folders")
    parser.add_argument("--seed-start", type=int, default=0, help="seed of the first episode; then one seed per "
                        "episode (default %(default)s)")
    parser.add_argument("--camera-width", type=int, default=320,
                        help="width of every camera in pixels (default %(default)s; the contract's is larger, "
                        "software rendering makes it slow)")
    parser.add_argument("--camera-height", type=int, default=200, help="height of every camera (default %(default)s)")
    parser.add_argument("--contract", default=DEFAULT_PROFILE, help="contract profile or YAML path")


def collection_plan(task: str, episodes: int, seed_start: int) -> list[tuple[str, str, int]]:
    """(episode id, task, seed) per episode: one seed each, tasks in turn for ``all``."""
    if episodes < 1:
        raise CollectError(f"--episodes is {episodes}; collect at least 1 episode")
    if seed_start < 0:
        raise CollectError(f"--seed-start is {seed_start}; seeds are non-negative integers")
    tasks = sorted(TASKS) if task == "all" else [task]
    return [(f"{tasks[k % len(tasks)]}-{seed_start + k:05d}", tasks[k % len(tasks)], seed_start + k)
            for k in range(episodes)]


def record_episode(streams: TwinStreams, folder: Path, episode_id: str, task: str, seed: int,
                   failure_rate: float) -> EpisodeSummary:
    """Play the scripted plan for (task, seed) on ``streams`` to the task's time limit, writing the
    episode to ``folder`` (which must not exist)."""
    c = streams.contract
    controller = make_controller(task, seed, failure_rate, contract=c)
    plan = controller.plan
    streams.reset(task, seed)
    namespace = c.namespace("robot")
    topic = {spec.key: spec.resolve(namespace) for spec in c.topics.values()}
    events = c.topic("episode_events").resolve("/")
    chunk_frame = c.topic("action_chunk").frame_id
    with EpisodeBagWriter(folder, recorded_topics(c, namespace)) as bag:
        def write(name: str, msg) -> None:
            bag.write_message(name, round(seconds(msg.header.stamp) * 1e9), msg)

        started = streams.started_event(episode_id, POLICY)
        write(events, started)
        outcome = None
        t0 = streams.time
        for k in range(math.ceil(streams.spec.time_limit_s / plan.period_s - 1e-9)):
            if k % CHUNK_HORIZON == 0:
                chunk = action_chunk_msg(streams.stamp, chunk_frame, episode_id, k // CHUNK_HORIZON,
                                         plan.joint_names, controller.chunk(k, CHUNK_HORIZON), plan.period_s)
                result = streams.command(chunk)
                if not result.accepted:
                    raise CollectError(f"{episode_id}: the twin rejected the scripted plan's chunk "
                                       f"{k // CHUNK_HORIZON}: {result.reason}")
                write(topic["action_chunk"], chunk)
            for key, msg in streams.advance(t0 + (k + 1) * plan.period_s):
                write(topic[key], msg)
            if outcome is None and streams.done:
                outcome = streams.outcome_event(started, plan.injected_failure or "")
                write(events, outcome)
        counts = dict(bag.counts)
    return EpisodeSummary(episode_id, task, seed, outcome.label, outcome.outcome == EpisodeEvent.OUTCOME_SUCCESS,
                          plan.injected_failure or "", folder.name, message_counts=counts)


def recorded_summary(folder: Path, contract: Contract, episode_id: str, task: str, seed: int) -> EpisodeSummary:
    """The summary of an episode folder written before (its events and message counts, read back)."""
    started = outcome = None
    for _, _, msg in read_messages(folder, [contract.topic("episode_events").resolve("/")]):
        if msg.event == EpisodeEvent.STARTED:
            started = msg
        elif msg.event == EpisodeEvent.OUTCOME and msg.side == "real":
            outcome = msg
    if started is None or outcome is None or (started.task, started.seed) != (task, seed):
        raise CollectError(f"{folder} exists but is not a complete episode of {task} seed {seed}; move it away "
                           "or choose another --out (existing episode folders are never overwritten)")
    return EpisodeSummary(episode_id, task, seed, outcome.label, outcome.outcome == EpisodeEvent.OUTCOME_SUCCESS,
                          outcome.reason, folder.name, resumed=True, message_counts=bag_message_counts(folder))


def progress_line(k: int, total: int, ep: EpisodeSummary, done: list[EpisodeSummary], run_wall_s: float,
                  ran: int) -> str:
    """Episode k/N, task, label, running success rate, episodes/min and ETA of what is left."""
    wins = sum(e.success for e in done)
    rate = ran / run_wall_s * 60 if run_wall_s > 0 and ran else 0.0
    eta = f"{int((total - k) / rate)}:{int((total - k) / rate * 60) % 60:02d} min" if rate else "unknown"
    what = "kept (folder existed)" if ep.resumed else f"{ep.wall_s:.1f} s"
    injected = f" [{ep.injected_failure}]" if ep.injected_failure else ""
    return (f"episode {k}/{total} {ep.task} seed {ep.seed}: {ep.label}{injected}, {what} | success "
            f"{wins}/{len(done)} = {100 * wins / len(done):.0f}% | {rate:.1f} episodes/min | ETA {eta}")


def summarise(episodes: list[EpisodeSummary], failure_rate: float) -> dict:
    """Outcome counts per task and label, and the success fraction against 1 - failure_rate."""
    per_task = {}
    for task in sorted({e.task for e in episodes}):
        eps = [e for e in episodes if e.task == task]
        wins = sum(e.success for e in eps)
        per_task[task] = {
            "episodes": len(eps), "success": wins, "success_rate": round(wins / len(eps), 4),
            "labels": dict(Counter(e.label for e in eps).most_common()),
            "injected": {mode: dict(Counter(e.label for e in eps if e.injected_failure == mode).most_common())
                         for mode in sorted({e.injected_failure for e in eps if e.injected_failure})}}
    wins = sum(e.success for e in episodes)
    return {"episodes": len(episodes), "success": wins, "success_rate": round(wins / len(episodes), 4),
            "expected_success_rate": round(1 - failure_rate, 4), "labels": dict(Counter(e.label for e in episodes)),
            "per_task": per_task}


def format_summary(summary: dict) -> str:
    lines = [f"{'task':<12} {'episodes':>8} {'success':>8}  labels"]
    for task, s in [*summary["per_task"].items(), ("all", summary)]:
        labels = ", ".join(f"{label} {n}" for label, n in s["labels"].items())
        lines.append(f"{task:<12} {s['episodes']:>8} {100 * s['success_rate']:>7.0f}%  {labels}")
    gap = 100 * (summary["success_rate"] - summary["expected_success_rate"])
    lines.append(f"success {summary['success_rate']:.2f} vs 1 - failure rate {summary['expected_success_rate']:.2f} "
                 f"({gap:+.0f} points)")
    return "\n".join(lines)


def run(args) -> int:
    try:
        return _collect(args)
    except (CollectError, ValueError) as exc:   # ValueError: a bad camera size or contract, named by the twin
        print(f"gesim-ros collect: {exc}")
        return 2


def _collect(args) -> int:
    if not 0.0 <= args.failure_rate <= 1.0:
        raise CollectError(f"--failure-rate is {args.failure_rate}; use a probability in [0, 1]")
    plan = collection_plan(args.task, args.episodes, args.seed_start)
    contract = load_contract(args.contract)
    streams = TwinStreams(contract, camera_width=args.camera_width, camera_height=args.camera_height,
                          stamp_offset_s=time.time())
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    print(f"collecting {len(plan)} episode(s) of {args.task} into {out} (failure rate {args.failure_rate}, "
          f"{args.camera_width}x{args.camera_height} cameras, contract {contract.profile})", flush=True)
    done: list[EpisodeSummary] = []
    t_run, ran = time.monotonic(), 0
    try:
        for k, (episode_id, task, seed) in enumerate(plan, 1):
            folder = out / episode_id
            if folder.exists():
                ep = recorded_summary(folder, contract, episode_id, task, seed)
            else:
                partial = out / ".partial" / episode_id
                if partial.exists():
                    shutil.rmtree(partial)   # an interrupted attempt of this very episode
                partial.parent.mkdir(exist_ok=True)
                t0 = time.monotonic()
                try:
                    ep = record_episode(streams, partial, episode_id, task, seed, args.failure_rate)
                except PlanningError as exc:
                    shutil.rmtree(partial, ignore_errors=True)
                    ep = EpisodeSummary(episode_id, task, seed, "planning_error", False)
                    print(f"{episode_id}: not recorded, the scripted plan is infeasible: {exc}")
                else:
                    partial.rename(folder)
                ep.wall_s = time.monotonic() - t0
                ran += 1
            done.append(ep)
            print(progress_line(k, len(plan), ep, done, time.monotonic() - t_run, ran), flush=True)
    finally:
        streams.close()
    if (out / ".partial").is_dir() and not any((out / ".partial").iterdir()):
        (out / ".partial").rmdir()
    wall = time.monotonic() - t_run
    summary = {"task": args.task, "failure_rate": args.failure_rate, "seed_start": args.seed_start,
               "camera": [args.camera_width, args.camera_height], "contract": contract.profile,
               "recorded_now": ran, "wall_s": round(wall, 1),
               "episodes_per_min": round(ran / wall * 60, 2) if ran else None,
               **summarise(done, args.failure_rate), "episode_list": [asdict(e) for e in done]}
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    print(format_summary(summary))
    print(f"{ran} episode(s) recorded in {wall / 60:.1f} min, {len(done) - ran} kept; "
          f"summary in {out / 'summary.json'}")
    return 0
