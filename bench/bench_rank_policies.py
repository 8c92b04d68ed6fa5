"""World-model-mode episodes per minute through rank-policies' Ray jobs, with 1 and 2 local Ray
workers in the same run: the same jobs (a scripted policy's world_model episodes, each job a
world_model_only lab-test graph of real processes in its worker's own DDS domain) run first on a
Ray of 1 worker, then of 2. Wall time includes each job's graph start and its episodes' starts on
the twin, as a rank-policies run pays them.

    .venv/bin/python bench/bench_rank_policies.py --jobs 2 --episodes-per-job 2
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path

from gesim_ros.episodes.rank_policies import plan_jobs, run_jobs


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2, help="world_model jobs per measurement")
    parser.add_argument("--episodes-per-job", type=int, default=2)
    parser.add_argument("--task", default="push")
    parser.add_argument("--world-model", default="learned")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    args = parser.parse_args()
    os.environ.setdefault("MUJOCO_GL", "egl")
    seeds = list(range(args.jobs * args.episodes_per_job))
    # model-only seeds only: the real side is not measured here
    jobs = [j for j in plan_jobs([("scripted-fail050", "scripted", {"failure_rate": 0.5})], [args.task],
                                 [0], len(seeds) - 1, 1, args.episodes_per_job) if j["mode"] == "world_model"]
    options = {"world_model": args.world_model, "world_model_config": "{}", "world_model_server": "",
               "judge": "backend", "judge_config": "{}", "episode_timeout": 60.0}
    episodes = sum(len(j["plan"]) for j in jobs)
    work = Path(tempfile.mkdtemp(prefix="bench-rank-"))
    print(f"{len(jobs)} world_model jobs, {episodes} episodes of {args.task}, backend {args.world_model}; "
          f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs", flush=True)
    print(f"{'workers':>7} {'episodes':>8} {'complete':>8} {'seconds':>8} {'episodes/min':>12} {'mean job s':>10}")
    try:
        for workers in args.workers:
            start = time.monotonic()
            results, _ = run_jobs(jobs, options, workers=workers, ray_address="", log_dir=work / f"ray-{workers}")
            wall = time.monotonic() - start
            complete = sum(r["status"] == "complete" for res in results for r in res["rows"])
            errors = [res["error"] for res in results if res["error"]]
            mean_job = sum(res["wall_s"] for res in results) / len(results)
            print(f"{workers:>7} {episodes:>8} {complete:>8} {wall:>8.1f} {episodes / wall * 60:>12.2f} "
                  f"{mean_job:>10.1f}" + (f"  errors: {errors}" if errors else ""), flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
