"""How long N episodes of the lab-test graph take in each mode through the real `ros2 launch` (a
workstation's path) and through `gesim-ros lab-run` (the bare machine's), measured in the same run.

    .venv/bin/python bench/bench_launch_paths.py --episodes 3
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from gesim_ros.comparator.store import EpisodeStore
from gesim_ros.episodes.lab_run import TASKS, record_starts
from gesim_ros.ros.process_harness import isolate_dds
from gesim_ros.tools.real_launch import LaunchProcess, prepare


def _complete(database: Path) -> str:
    with EpisodeStore(database, readonly=True) as store:
        episodes = store.episodes()
    return f"{sum(e.status == 'complete' for e in episodes)}/{len(episodes)} complete"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=3,
                        help="episodes per mode, rounded up to whole seeds of every task")
    parser.add_argument("--modes", nargs="+", default=["shadow", "real", "world_model"])
    args = parser.parse_args()
    isolate_dds()
    work = Path(tempfile.mkdtemp(prefix="bench-launch-"))
    print(f"building this checkout with colcon and preparing ros2 launch in {work} ...", flush=True)
    env = prepare(work / "colcon")
    seeds = -(-args.episodes // len(TASKS))
    plan = [(task, seed) for task in TASKS for seed in range(seeds)]  # both paths run this whole plan
    print(f"{'mode':<12} {'path':<12} {'episodes':>9} {'seconds':>9}  result")
    for mode in args.modes:
        database = work / f"launch-{mode}.sqlite"
        arguments = {"mode": mode, "run_episodes": "true", "episodes": str(seeds), "database": str(database),
                     "tasks": "[" + ", ".join(TASKS) + "]"}
        if mode == "world_model":
            arguments["initial_observation"], arguments["max_steps"] = record_starts(work / f"starts-{mode}", plan)
        start = time.monotonic()
        launched = LaunchProcess(env, "lab_test.launch.yaml", arguments, work / f"launch-{mode}.log", cwd=work)
        rc = launched.wait(timeout=1800)
        launched.stop()
        seconds = time.monotonic() - start
        print(f"{mode:<12} {'ros2 launch':<12} {seeds * len(TASKS):>9} {seconds:>9.1f}  exit {rc}, "
              f"{_complete(database)}", flush=True)

        out = work / f"lab-run-{mode}"
        start = time.monotonic()
        run = subprocess.run([sys.prefix + "/bin/gesim-ros", "lab-run", "--mode", mode,
                              "--episodes", str(seeds * len(TASKS)), "--out", str(out)],
                             capture_output=True, text=True, timeout=1800)
        seconds = time.monotonic() - start
        print(f"{mode:<12} {'lab-run':<12} {seeds * len(TASKS):>9} {seconds:>9.1f}  exit {run.returncode}, "
              f"{_complete(out / f'{mode}.sqlite')}", flush=True)
    print(f"(logs in {work}; both paths include starting the graph: ros2 launch also its own start-up)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
