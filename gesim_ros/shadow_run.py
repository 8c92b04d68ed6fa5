"""`gesim-ros shadow-run`: the main job on embedded defaults.

Starts the lab-test graph of launch/lab_test.launch.yaml (the MuJoCo twin as the robot, the backend
switch in shadow mode, the learned world model imagining each episode, the scripted policy with
its failure knob, the comparator) as separate processes, exactly as `ros2 launch` would, runs N
episodes with a progress line each, then prints the agreement summary and writes the HTML report.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from rclpy.parameter import Parameter

from .episode_store import EpisodeStore
from .launch_graph import load_launch, package_share
from .report import build_report, text_summary, write_report
from .testing import ProcessGroup, isolate_dds

TASKS = ["pick_place", "push", "unplug"]


def add_arguments(parser) -> None:
    parser.add_argument("--episodes", type=int, default=10, help="episodes to run (tasks interleave)")
    parser.add_argument("--tasks", nargs="+", default=TASKS, help="tasks to cycle through")
    parser.add_argument("--failure-rate", type=float, default=0.3,
                        help="the scripted policy's failure knob, so that both outcomes occur")
    parser.add_argument("--world-model", default="learned", help="world-model backend (entry-point name)")
    parser.add_argument("--out", type=Path, default=None, help="run folder (default: runs/shadow-<time>)")
    parser.add_argument("--episode-timeout", type=float, default=60.0, help="seconds before an episode times out")


def run(args) -> int:
    if args.episodes < 1:
        print(f"gesim-ros shadow-run: --episodes {args.episodes}: run at least one episode")
        return 2
    out = (args.out or Path("runs") / time.strftime("shadow-%Y%m%d-%H%M%S")).resolve()
    out.mkdir(parents=True, exist_ok=True)
    database = out / "shadow.sqlite"
    domain = isolate_dds()
    launch_file = package_share() / "launch" / "lab_test.launch.yaml"
    nodes = load_launch(launch_file, {
        "database": str(database), "world_model_backend": args.world_model,
        "policy_config": json.dumps({"failure_rate": args.failure_rate})})
    print(f"shadow run in {out} (ROS_DOMAIN_ID={domain}, discovery on this machine only)")
    print("starting " + ", ".join(n.executable for n in nodes) + f" from {launch_file.name} ...", flush=True)
    procs = ProcessGroup(out / "logs")
    common = [Parameter("backend_modes", value=["shadow"]), Parameter("policy_name", value="scripted"),
              Parameter("event_readers", value=len(nodes)),  # every node of the graph follows the events
              Parameter("episode_timeout_s", value=args.episode_timeout),
              Parameter("service_timeout_s", value=120.0), Parameter("policy_wait_s", value=120.0)]
    from .episode_runner import STOPPING_ERRORS, run_in_process

    episode_ids = []
    try:
        for node in nodes:
            procs.start(node.executable, *node.command())
        for index in range(args.episodes):
            # One episode at a time: the world model finishes imagining it (and the comparator
            # records both outcomes) before the twin is reset for the next.
            task, seed = args.tasks[index % len(args.tasks)], index // len(args.tasks)
            results = run_in_process([*common, Parameter("tasks", value=[task]), Parameter("seeds", value=[seed]),
                                      Parameter("run_id", value=f"{out.name}-{index + 1:03d}")], args=[])
            episode_ids += [r.episode_id for r in results]
            _wait_for_comparator(database, {r.episode_id for r in results}, timeout_s=120.0)
            print(_progress_line(database, index + 1, args.episodes, results[0]), flush=True)
    except STOPPING_ERRORS as exc:
        print(f"gesim-ros shadow-run: {exc}\n{procs.logs()}")
        return 2
    finally:
        procs.stop_all()
    dead = [p.name for p in procs.processes if p.process.returncode not in (0, -2, 130, None)]
    if dead:
        print(f"note: {', '.join(dead)} exited with an error; logs in {out / 'logs'}")
    print(f"\n{len(episode_ids)} episode(s) run\n")
    report = build_report(database)
    html_path, json_path = write_report(database, out / "report")
    print(text_summary(report))
    print(f"\nHTML report: {html_path}\nJSON figures: {json_path}\ndatabase: {database}")
    return 0


def _wait_for_comparator(database: Path, episode_ids: set[str], timeout_s: float) -> None:
    """Give the comparator time to take the world model's late outcomes and finish every episode."""
    deadline = time.monotonic() + timeout_s
    pending = episode_ids
    while time.monotonic() < deadline:
        if database.is_file():
            with EpisodeStore(database, readonly=True) as store:
                pending = episode_ids & {e.episode_id for e in store.episodes(status="incomplete")}
            if not pending:
                return
        time.sleep(1.0)
    print(f"note: the comparator had not finished {len(pending)} episode(s) after {timeout_s:.0f} s; "
          "they are reported as incomplete")


def _progress_line(database: Path, index: int, total: int, result) -> str:
    with EpisodeStore(database, readonly=True) as store:
        rows = [e for e in store.episodes() if e.episode_id == result.episode_id]
        done = store.episodes(status="complete")
    if not rows:
        return (f"episode {index}/{total} {result.task} seed {result.seed}: {result.status}, not recorded by the "
                f"comparator ({result.reason or 'see its log'})")
    row = rows[0]
    agree = sum(e.real_outcome == e.model_outcome for e in done)
    verdict = (f"real {row.real_outcome}, model {row.model_outcome} "
               f"({'agree' if row.real_outcome == row.model_outcome else 'DISAGREE'})"
               if row.status == "complete" else f"{row.status} (real {row.real_outcome}, model {row.model_outcome})")
    return (f"episode {index}/{total} {result.task} seed {result.seed}: {verdict} ({result.label or '-'}) | "
            f"agreement {agree}/{len(done)}")
