"""Benchmark: agreement report over 1000 synthetic shadow-mode episodes (target <= 10 s).

Fills a temporary episode store through the public EpisodeStore API (so the fill
time is also the comparator node's write cost), then times build_report and
write_report and prints the figures.  Exit status 1 when write_report misses the
target.  Run: .venv/bin/python bench/bench_report.py
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import cv2
import numpy as np

from gesim_ros.comparator.store import EpisodeStore
from gesim_ros.contract.modes import SIDES
from gesim_ros.comparator.report import build_report, text_summary, write_report

TARGET_S = 10.0
HORIZON = 50
SIMILARITY_STEPS = list(range(0, HORIZON, 5))
VIEWS = ("wrist", "overhead")
FILM_STEPS = (0, 15, 30, 45)


def _thumbnail(rng: np.random.Generator) -> bytes:
    image = cv2.GaussianBlur(rng.integers(0, 256, (72, 96, 3), dtype=np.uint8), (9, 9), 0)
    return cv2.imencode(".jpg", image, [cv2.IMWRITE_JPEG_QUALITY, 80])[1].tobytes()


def fill(path: Path, n_episodes: int, n_filmstrips: int, seed: int) -> None:
    """Random tasks/policies; the model agrees with reality ~80% of the time."""
    rng = np.random.default_rng(seed)
    tasks = [f"task_{i}" for i in range(8)]
    policies = [f"ckpt_{i:02d}" for i in range(12)]
    skill = dict(zip(policies, rng.uniform(0.1, 0.9, len(policies))))
    filmstrips = 0
    with EpisodeStore(path) as store:
        for i in range(n_episodes):
            episode_id = f"ep{i:05d}"
            task, policy = str(rng.choice(tasks)), str(rng.choice(policies))
            store.start_episode(episode_id, task=task, policy=policy, seed=i,
                                started_at=1.7e9 + 60 * i)
            fate = rng.random()
            if fate < 0.02:
                continue  # left incomplete, as after a crash
            real = rng.random() < skill[policy]
            world_model = real if rng.random() < 0.8 else not real
            store.record_outcome(episode_id, "real", "success" if real else "failure",
                                 time_to_outcome_s=float(rng.uniform(5, 30)))
            store.record_outcome(episode_id, "world_model", "success" if world_model else "failure",
                                 judge_success_prob=float(rng.uniform(0.5, 1.0) if world_model
                                                          else rng.uniform(0.0, 0.5)))
            growth = rng.uniform(0.002, 0.01)
            rmse = np.cumsum(rng.uniform(0.5, 1.5, HORIZON) * growth)
            store.record_divergence(episode_id, list(range(HORIZON)), rmse.tolist())
            for view in VIEWS:
                steps = np.asarray(SIMILARITY_STEPS)
                store.record_image_similarity(
                    episode_id, view, SIMILARITY_STEPS,
                    (35 - 0.3 * steps + rng.normal(0, 1, len(steps))).tolist(),
                    np.clip(0.95 - 0.008 * steps + rng.normal(0, 0.02, len(steps)), -1, 1)
                    .tolist())
            if real != world_model and filmstrips < n_filmstrips:
                filmstrips += 1
                for view in VIEWS:
                    for step in FILM_STEPS:
                        for side in SIDES:
                            store.add_filmstrip_frame(episode_id, view=view, horizon_step=step,
                                                      side=side, jpeg=_thumbnail(rng))
            if fate < 0.05:
                store.abort_episode(episode_id, "operator stopped the robot",
                                    ended_at=1.7e9 + 60 * i + 30)
            else:
                store.complete_episode(episode_id, ended_at=1.7e9 + 60 * i + 40)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=1000)
    parser.add_argument("--filmstrips", type=int, default=30,
                        help="disagreeing episodes that get thumbnails")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench_report_") as tmp:
        db = Path(tmp) / "episodes.db"
        t0 = time.perf_counter()
        fill(db, args.episodes, args.filmstrips, args.seed)
        t_fill = time.perf_counter() - t0
        t0 = time.perf_counter()
        report = build_report(db)
        t_build = time.perf_counter() - t0
        t0 = time.perf_counter()
        html_path, json_path = write_report(db, Path(tmp) / "report")
        t_write = time.perf_counter() - t0
        print(text_summary(report))
        print()
        print(f"fill store ({args.episodes} episodes, public API): {t_fill:.2f} s "
              f"({1000 * t_fill / args.episodes:.1f} ms/episode), "
              f"db {db.stat().st_size / 1e6:.1f} MB")
        print(f"build_report: {t_build:.3f} s")
        print(f"write_report: {t_write:.3f} s (target <= {TARGET_S:.0f} s) "
              f"html {html_path.stat().st_size / 1e6:.2f} MB, "
              f"json {json_path.stat().st_size / 1e6:.2f} MB")
    if t_write > TARGET_S:
        print(f"FAIL: write_report took {t_write:.2f} s, over the {TARGET_S:.0f} s target")
        return 1
    print("OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
