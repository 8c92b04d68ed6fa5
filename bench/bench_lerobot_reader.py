"""Benchmark: the LeRobot reader's decode rate against PyAV's raw decode of the same files, same run.

Writes a synthetic LeRobot dataset with export's own writer (smooth moving images, three views),
then times (a) ``LeRobotReader`` yielding every episode as an EpisodeRecord (parquet rows, video
frames at the row timestamps, all three views; at the dataset's size and resized) and (b) plain
PyAV decoding every frame of the same mp4 files to RGB arrays. Prints frames/s for each (frames =
camera frames, summed over views) and the reader's share of the raw rate.

Run: .venv/bin/python bench/bench_lerobot_reader.py [--version v3.0] [--episodes 4] [--steps 150]
     [--height 400 --width 640]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import av
import numpy as np

from gesim_ros.contract.contract import load_contract
from gesim_ros.episodes.data import VIEWS, EpisodeRecord
from gesim_ros.episodes.lerobot import LeRobotReader, write_lerobot


def synthetic(i: int, steps: int, size: tuple[int, int], names: list[str]) -> EpisodeRecord:
    y, x = np.indices(size) / 16.0
    frames = {}
    for j, view in enumerate(VIEWS):
        phase = 0.2 * np.arange(steps + 1)[:, None, None] + j + i
        base = 128 + 90 * np.sin(x + phase) * np.cos(0.7 * y - phase)
        frames[view] = np.repeat(base[..., None], 3, -1).astype(np.uint8)
    rng = np.random.default_rng(i)
    return EpisodeRecord(episode_id=f"bench-{i}", task="pick", task_text="pick", seed=i, success=bool(i % 2),
                         label="success" if i % 2 else "missed_grasp", control_period_s=1 / 30, joint_names=names,
                         actions=rng.normal(size=(steps, len(names))).astype(np.float32),
                         joint_positions=rng.normal(size=(steps + 1, len(names))).astype(np.float32), frames=frames)


def raw_decode(paths: list[Path]) -> int:
    frames = 0
    for path in paths:
        with av.open(str(path)) as container:
            stream = container.streams.video[0]
            stream.thread_type = "AUTO"
            for frame in container.decode(stream):
                frame.to_ndarray(format="rgb24")
                frames += 1
    return frames


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--version", choices=("v3.0", "v2.1"), default="v3.0")
    parser.add_argument("--episodes", type=int, default=4)
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--height", type=int, default=400)
    parser.add_argument("--width", type=int, default=640)
    args = parser.parse_args()
    contract = load_contract()
    names = list(contract.arm_joint_names)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "dataset"
        t0 = time.perf_counter()
        write_lerobot((synthetic(i, args.steps, (args.height, args.width), names) for i in range(args.episodes)),
                      root, contract, version=args.version, progress=lambda line: print(line, flush=True))
        print(f"wrote {args.episodes} episodes x {args.steps + 1} frames x {len(VIEWS)} views at "
              f"{args.height}x{args.width} ({args.version}) in {time.perf_counter() - t0:.1f} s")
        videos = sorted(root.rglob("*.mp4"))
        t0 = time.perf_counter()
        raw = raw_decode(videos)
        raw_s = time.perf_counter() - t0
        print(f"PyAV raw decode: {raw} frames in {raw_s:.2f} s = {raw / raw_s:.0f} frames/s", flush=True)
        for size in (None, (48, 64)):
            t0 = time.perf_counter()
            read = 0
            for episode in LeRobotReader(root, contract=contract, image_size_hw=size):
                read += sum(len(f) for f in episode.record.frames.values())
            read_s = time.perf_counter() - t0
            shown = "the dataset's size" if size is None else f"resized to {size[0]}x{size[1]}"
            print(f"LeRobotReader ({shown}): {read} frames in {read_s:.2f} s = {read / read_s:.0f} frames/s "
                  f"({100 * (read / read_s) / (raw / raw_s):.0f}% of raw)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
