"""Does the world model turn the task object as the twin does? (issue #17)

Reads ``eval-wm --json`` files and, for one task's episodes whose object ends upright in the twin
(tilt < 15 degrees, the push checker's limit), counts those the model imagines tipped over (tilt >= 45
degrees, the checker's knocked-over limit), by how far the real object turned about the vertical: a
block pushed off centre turns about z and stays up. An upright success imagined tipped is one the
judge calls a failure. Then it lists those episodes with the steps from the real object's first shift
to the imagined tipping: whether the push itself tips it or a long rollout drifts into it.

    .venv/bin/python bench/imagined_object_turn.py runs/jp3b/graded.json runs/jp3b/graded2.json [--task push]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

UPRIGHT_DEG = 15.0       # the push checker's upright limit
TIPPED_DEG = 45.0        # and its knocked-over one
TURN_BINS_DEG = (0, 10, 20, 30, 45, 180)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("evals", nargs="+", type=Path, help="eval-wm --json files")
    parser.add_argument("--task", default="push", help="the task whose episodes to count (default %(default)s)")
    args = parser.parse_args(argv)
    episodes = []
    for path in args.evals:
        try:
            judged = json.loads(path.read_text())["judge"]["episodes"]
        except (OSError, ValueError, KeyError) as exc:
            print(f"imagined_object_turn: {path}: not an eval-wm --json file ({exc})", file=sys.stderr)
            return 2
        episodes += [e for e in judged if e["task"] == args.task]
    if any("final_object_tilt_deg" not in e for e in episodes):
        print("imagined_object_turn: these files have no object tilt per episode: evaluate again with today's "
              "eval-wm --json", file=sys.stderr)
        return 2
    upright = [e for e in episodes if e["final_object_tilt_deg"]["real"] < UPRIGHT_DEG]
    print(f"{len(episodes)} {args.task} episodes in {len(args.evals)} files, {len(upright)} upright at the end in the twin")
    print(" real turn about z (deg)   upright   imagined tipped   of them real successes   judged successes")
    for low, high in zip(TURN_BINS_DEG, TURN_BINS_DEG[1:]):
        rows = [e for e in upright if low <= abs(e["object_yaw_turn_deg"]["real"]) < high]
        tipped = [e for e in rows if e["final_object_tilt_deg"]["imagined"] >= TIPPED_DEG]
        print(f"   {low:3d}-{high:<3d}               {len(rows):7d}   {len(tipped):15d}   "
              f"{sum(e['real_success'] for e in tipped):22d}   {sum(e['model_success'] for e in tipped):16d}")
    tipped = [e for e in upright if e["final_object_tilt_deg"]["imagined"] >= TIPPED_DEG]
    if tipped and all("object_tipped_at_step" in e for e in tipped):
        # steps from the real object's first shift (5 mm) to the imagined tipping: the dynamics trains on
        # windows of at most 64 steps from a recorded state
        print("upright, imagined tipped: steps from the real first shift to the imagined tipping (step of tipping)")
        for e in sorted(tipped, key=lambda e: e["object_tipped_at_step"]["imagined"]):
            moved, tip = e["object_moved_at_step"]["real"], e["object_tipped_at_step"]["imagined"]
            print(f"   {e['episode_id']:<32s} {tip - moved if moved else '-':>5} ({tip})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
