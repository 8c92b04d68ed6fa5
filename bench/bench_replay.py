"""Benchmark: replay throughput of `gesim-ros replay-shadow` on recorded twin episodes (episodes/minute).

Records ``--episodes`` live shadow episodes with `gesim-ros shadow-run` (twin + learned world model,
the defaults) unless ``--dataset`` names a run folder that holds some, then replays them with
`gesim-ros replay-shadow` and prints: episodes replayed per minute of the replay's wall time, the
recorded episodes' own length (the replay publishes at recorded timing, so that is its floor), and
whether each episode's outcomes and agreement match the live run's.

Run: .venv/bin/python bench/bench_replay.py [--episodes 10] [--dataset runs/shadow-...]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from gesim_ros.comparator.store import EpisodeStore
from gesim_ros.contract.contract import load_contract
from gesim_ros.episodes.replay import ReplayDataset


def _gesim(*args) -> None:
    done = subprocess.run([sys.executable, "-m", "gesim_ros.cli", *map(str, args)], capture_output=True, text=True)
    if done.returncode:
        sys.exit(f"gesim-ros {args[0]} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")


def _outcomes(database: Path) -> dict:
    with EpisodeStore(database, readonly=True) as store:
        return {e.episode_id: (e.status, e.real_outcome, e.world_model_outcome, e.agrees) for e in store.episodes()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--episodes", type=int, default=10, help="live episodes to record first (default 10)")
    parser.add_argument("--dataset", type=Path, default=None, help="a shadow-run folder to replay instead")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench_replay_"))
    run = args.dataset
    if run is None:
        run = work / "live"
        print(f"recording {args.episodes} live shadow episodes into {run} ...", flush=True)
        _gesim("shadow-run", "--episodes", args.episodes, "--out", run)
    dataset = ReplayDataset(run, load_contract())
    recorded_s = sum(ep.end_s for ep in dataset)
    print(f"replaying {len(dataset)} recorded episode(s) ({recorded_s:.1f} s recorded) ...", flush=True)
    start = time.monotonic()
    _gesim("replay-shadow", run, "--out", work / "replay")
    wall = time.monotonic() - start
    live, replayed = _outcomes(next(run.glob("*.sqlite"))), _outcomes(work / "replay" / "replay_shadow.sqlite")
    live = {i: o for i, o in live.items() if o[0] == "complete"}
    same = sum(replayed.get(i) == o for i, o in live.items())
    print("episode: live (status, real, world model, agrees) | replayed")
    for i, o in live.items():
        print(f"  {i}: {o} | {replayed.get(i)}{'' if replayed.get(i) == o else '  DIFFERENT'}")
    print(f"replay-shadow: {len(replayed)} episode(s) in {wall:.1f} s wall (graph start-up and report included): "
          f"{60 * len(replayed) / wall:.2f} episodes/min; recorded length {recorded_s:.1f} s "
          f"({60 * len(replayed) / recorded_s:.2f} episodes/min at recorded timing alone)")
    print(f"outcomes and agreement as live: {same}/{len(live)} episode(s)")


if __name__ == "__main__":
    main()
