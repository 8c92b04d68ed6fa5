"""Check a `gesim-ros collect` output folder: every episode reads back, and the outcome mix.

For each episode in ``DIR/summary.json`` it compares the message counts read back from the MCAP
folder with those counted while writing, and checks the events (STARTED, then one OUTCOME of side
real matching the summary's label); with ``--records`` it also builds the training arrays
(``episode_record``) of every episode. Then it prints the outcome mix against the failure-rate knob:
per task, the success fraction against 1 - failure_rate (within +-10 points?), how often a failure
was injected, and how often the twin's label is the one the injected mode is designed to cause.
Exit status 1 when an episode does not read back.

Run: .venv/bin/python bench/check_collected.py /tmp/collect200 [--records]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

from gesim_ros.contract.contract import load_contract, message_class
from gesim_ros.episodes.recording import RecordingError, bag_message_counts, episode_record, read_messages
from gesim_ros.twin.controllers import CONTROLLERS

EVENT = message_class("gesim_ros_interfaces/msg/EpisodeEvent")
TOLERANCE_POINTS = 10.0


def check_episode(folder: Path, ep: dict, contract, records: bool) -> list[str]:
    """What is wrong with one episode folder (empty: nothing)."""
    problems = []
    counts = bag_message_counts(folder)
    if counts != ep["message_counts"]:
        diff = {t: (ep["message_counts"].get(t), counts.get(t)) for t in set(counts) | set(ep["message_counts"])
                if counts.get(t) != ep["message_counts"].get(t)}
        problems.append(f"message counts differ (written, read): {diff}")
    events = [m for _, _, m in read_messages(folder, [contract.topic("episode_events").resolve("/")])]
    kinds = [(e.event, e.side) for e in events]
    if kinds != [(EVENT.STARTED, "runner"), (EVENT.OUTCOME, "real")]:
        problems.append(f"events {kinds}, expected STARTED then one OUTCOME of side real")
    elif events[1].label != ep["label"] or events[1].reason != ep["injected_failure"]:
        problems.append(f"OUTCOME says {events[1].label!r}/{events[1].reason!r}, summary {ep['label']!r}/"
                        f"{ep['injected_failure']!r}")
    if records:
        try:
            rec = episode_record(folder, contract)
        except RecordingError as exc:
            problems.append(f"episode_record: {exc}")
        else:
            if rec.label != ep["label"] or rec.steps == 0:
                problems.append(f"episode_record: label {rec.label}, {rec.steps} steps")
    return problems


def outcome_mix(episodes: list[dict], failure_rate: float) -> list[str]:
    lines = [f"{'task':12} {'n':>4} {'success':>8} {'vs 1-F':>7} {'injected':>9} {'as designed':>12}  labels"]
    within = True
    for task in [*sorted({e["task"] for e in episodes}), "all"]:
        eps = [e for e in episodes if task in ("all", e["task"])]
        success = sum(e["success"] for e in eps) / len(eps)
        gap = 100 * (success - (1 - failure_rate))
        within &= task != "all" or abs(gap) <= TOLERANCE_POINTS
        injected = [e for e in eps if e["injected_failure"]]
        designed = sum(e["label"] == CONTROLLERS[e["task"]].FAILURE_MODES[e["injected_failure"]] for e in injected)
        clean_ok = sum(e["success"] for e in eps if not e["injected_failure"])
        labels = ", ".join(f"{k} {n}" for k, n in Counter(e["label"] for e in eps).most_common())
        lines.append(f"{task:12} {len(eps):4d} {success:8.2f} {gap:+6.0f}p {len(injected) / len(eps):9.2f} "
                     f"{designed:5d}/{len(injected):<5d}  {labels} (clean episodes succeeding: "
                     f"{clean_ok}/{len(eps) - len(injected)})")
    lines.append(f"overall success within +-{TOLERANCE_POINTS:g} points of 1 - failure rate "
                 f"({1 - failure_rate:.2f}): {'yes' if within else 'NO'}")
    for task in sorted({e["task"] for e in episodes}):
        modes = Counter((e["injected_failure"], e["label"]) for e in episodes if e["task"] == task
                        and e["injected_failure"])
        if modes:
            lines.append(f"  {task}: " + ", ".join(f"{m} -> {label} {n}" for (m, label), n in sorted(modes.items())))
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out", type=Path, help="the --out folder of gesim-ros collect")
    parser.add_argument("--records", action="store_true", help="also build episode_record arrays of every episode")
    args = parser.parse_args(argv)
    summary = json.loads((args.out / "summary.json").read_text())
    contract = load_contract(summary["contract"])
    episodes = [e for e in summary["episode_list"] if e["folder"]]
    bad = 0
    for ep in episodes:
        problems = check_episode(args.out / ep["folder"], ep, contract, args.records)
        if problems:
            bad += 1
            print(f"{ep['folder']}: " + "; ".join(problems))
    strays = sorted(p.name for p in args.out.iterdir() if p.is_dir()) != sorted(e["folder"] for e in episodes)
    print(f"{len(episodes) - bad}/{len(episodes)} episodes read back with the counts written"
          + (" and build training arrays" if args.records else "")
          + ("; folders other than the summary's are present" if strays else ""))
    not_recorded = len(summary["episode_list"]) - len(episodes)
    if not_recorded:
        print(f"{not_recorded} episode(s) not recorded (infeasible plan)")
    print(f"collection: {summary['recorded_now']} recorded in {summary['wall_s'] / 60:.1f} min "
          f"({summary['episodes_per_min']} episodes/min), {summary['camera'][0]}x{summary['camera'][1]} cameras")
    print("\n".join(outcome_mix(summary["episode_list"], summary["failure_rate"])))
    return 1 if bad or strays else 0


if __name__ == "__main__":
    sys.exit(main())
