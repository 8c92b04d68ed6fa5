"""How far can any world model that is given what the node gives it (the first frame, the measured
joints and the actions) agree with the twin on a probe? (issue #17)

The twin's outcome also depends on what no camera shows: the object's mass and friction, and the
plug's extraction force. For each recorded probe episode this script replays the recorded actions in
the episode's own scene ``--draws`` times, each time with those hidden parameters drawn again from the
task's prior (``Task.sample``, the distribution every probe scene draws them from), everything visible
unchanged. ``p`` is the share of those replays that succeed. The probe's real hidden parameters are
one more draw from the same prior, so a predictor that knows the visible scene exactly and says the
likelier outcome agrees with the twin on max(p, 1 - p) of such an episode in expectation: the mean over
the probe is the ceiling of agreement for a model fed the first frame and the actions. Every episode
is also replayed once with its own parameters; "replay = recording" counts those that give their
recorded label (the check that the replay is the recording).

With ``--eval`` (an ``eval-wm --json`` file of the same probe) it splits the model's wrong verdicts into
those on episodes whose outcome the hidden physics leaves open (0.2 < p < 0.8) and the rest, counts
those where the likelier outcome is right, and lists them with the model's P(success) and how far its
imagined object ends from the real one.

Two more questions, each from the same replays:

* ``--as-read``: every draw is played with the task object where, turned as and as large as the model of
  ``--eval`` read it from the first frame. "likelier outcome right" then counts the episodes where exact
  physics on the model's own reading of the scene gives the real outcome: what a perfect dynamics and
  judge behind this scene reader would reach;
* ``--position-jitter-m S``: the object is moved once per episode by a draw of S rms per table axis,
  and every draw is played there: "likelier outcome right" is then what a perfect dynamics and judge
  behind a reader that reads the object's position that well (and its size and yaw exactly) reach.

    .venv/bin/python bench/hidden_physics_ceiling.py --data data/probe_graded [--draws 16] \\
        [--eval graded.json [--as-read]] [--position-jitter-m 0.006] [--workers 2] [--json out.json]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import multiprocessing
import sys
import time
from pathlib import Path

import numpy as np
import torch

from gesim_ros.episodes.data import EpisodeRecord
from gesim_ros.twin import tasks as twin_tasks
from gesim_ros.twin.physics import G2Twin
from gesim_ros.twin.scene import mujoco
from gesim_ros.world_model.backends.learned_dynamics import yaw_from_quat

# What the first frame cannot show, per task (parameters of Task.sample).
HIDDEN = {"pick_place": ("cube_mass", "cube_friction"),
          "push": ("block_mass", "block_friction"),
          "unplug": ("plug_mass", "plug_friction", "extraction_force")}
OPEN = (0.2, 0.8)
_twin: G2Twin | None = None


def _init_worker() -> None:
    global _twin
    _twin = G2Twin(camera_width=16, camera_height=16)   # nothing is rendered


def scene_spec(rec: EpisodeRecord) -> twin_tasks.EpisodeSpec:
    """The twin's episode ``rec`` was recorded in (its own seed's scene, or the scene it was played in)."""
    scene_seed = rec.extra.get("scene_seed")
    return twin_tasks.make_episode(rec.task, rec.seed if scene_seed is None else scene_seed)


def replay(rec: EpisodeRecord, params: dict, shift_m: np.ndarray | None = None) -> str:
    """The twin's label for ``rec``'s recorded actions played in its scene with task ``params``, the
    task object moved ``shift_m`` (x, y) on the table (a first-frame reading off by that much)."""
    spec = scene_spec(rec)
    if shift_m is not None and rec.task == "unplug":   # the plug sits in the socket: move both
        params = {**params, "socket_pos": [params["socket_pos"][0] + shift_m[0], params["socket_pos"][1] + shift_m[1]]}
    _twin.reset_to(dataclasses.replace(spec, randomisation={**spec.randomisation, "task": params}))
    if shift_m is not None and rec.task != "unplug":   # a free body; the goal (bin, target area) stays
        m, d = _twin.model, _twin.data
        adr = m.jnt_qposadr[m.body(twin_tasks.get_task(rec.task).object_body).jntadr[0]]
        d.qpos[adr:adr + 2] += shift_m
        mujoco.mj_forward(m, d)
    for action in rec.actions:
        _twin.set_joint_targets(rec.joint_names, action)
        _twin.step(rec.control_period_s)
    return _twin.outcome().label


def _quarter_turn(angle: float) -> float:
    """``angle`` wrapped into [-pi/4, pi/4): the task objects look the same turned by 90 degrees."""
    return ((4 * angle + np.pi) % (2 * np.pi) - np.pi) / 4


READ_PARTS = ("position", "yaw", "size")


def as_read(rec: EpisodeRecord, params: dict, reading: dict, parts=READ_PARTS) -> tuple[dict, np.ndarray]:
    """``params`` and the object's shift on the table that put the task object where, turned as and as
    large as the model read it from the first frame (``eval-wm``'s ``first_object_read``); only the
    ``parts`` of that reading, the others as they are."""
    x, y = rec.scene_state[0, :2]
    yaw = float(yaw_from_quat(torch.from_numpy(rec.scene_state[0, 3:7].astype(np.float64))))   # as eval-wm reads it
    turn = _quarter_turn(reading["yaw_rad"] - yaw) if "yaw" in parts else 0.0
    half = reading["half_extents_m"]
    if rec.task == "pick_place":
        params = {**params, "cube_yaw": params["cube_yaw"] + turn}
        if "size" in parts:
            params["cube_half"] = float(np.mean(half))
    elif rec.task == "push":
        params = {**params, "block_yaw": params["block_yaw"] + turn}
        if "size" in parts:
            params["block_half"] = float(np.mean(half[:2]))
    else:   # the plug's size is fixed
        params = {**params, "socket_yaw": params["socket_yaw"] + turn}
    shift = np.subtract(reading["position_m"][:2], (x, y)) if "position" in parts else np.zeros(2)
    return params, shift


def _episode(job: tuple[Path, int, int, float, dict | None, tuple[str, ...]]) -> dict:
    path, draws, seed, jitter_m, reading, parts = job
    t0 = time.monotonic()
    rec = EpisodeRecord.load_npz(path)
    own = scene_spec(rec).params
    scene, shift = as_read(rec, own, reading, parts) if reading else (own, np.zeros(2))
    task = twin_tasks.get_task(rec.task)
    stream = [seed, rec.seed, sorted(HIDDEN).index(rec.task)]
    rng = np.random.default_rng(stream)
    if jitter_m > 0:   # one reading per episode, as a reader reads each first frame once
        shift = shift + np.random.default_rng([*stream, 1]).normal(0.0, jitter_m, 2)
    labels = []
    for _ in range(draws):
        prior = task.sample(rng)
        labels.append(replay(rec, {**scene, **{k: prior[k] for k in HIDDEN[rec.task]}}, shift if shift.any() else None))
    return {"episode_id": rec.episode_id, "task": rec.task, "label": rec.label, "real_success": rec.success,
            "replayed_label": replay(rec, own), "draw_labels": labels,
            "p_success": sum(x == "success" for x in labels) / draws, "seconds": time.monotonic() - t0}


def likelier_right(row: dict) -> bool:
    """Whether the likelier outcome over the replays is the recorded one."""
    return (row["p_success"] >= 0.5) == row["real_success"]


def summarize(rows: list[dict], verdicts: dict[str, bool] | None) -> dict:
    p = np.array([r["p_success"] for r in rows])
    open_ = (p > OPEN[0]) & (p < OPEN[1])
    out = {"episodes": len(rows),
           "replay_reproduces_label": sum(r["replayed_label"] == r["label"] for r in rows),
           "ceiling": float(np.maximum(p, 1 - p).mean()),
           "open_episodes": int(open_.sum()),
           "likelier_outcome_agrees": int(sum(map(likelier_right, rows)))}
    if verdicts is not None:
        wrong = np.array([verdicts[r["episode_id"]] != r["real_success"] for r in rows])
        out["model_agrees"] = int((~wrong).sum())
        out["model_wrong_on_open"] = int((wrong & open_).sum())
        out["model_wrong_on_settled"] = int((wrong & ~open_).sum())
        out["model_wrong_likelier_right"] = int(sum(bool(w) and likelier_right(r) for w, r in zip(wrong, rows)))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, required=True, help="a probe folder of recorded .npz episodes")
    ap.add_argument("--draws", type=int, default=16, help="replays per episode with the hidden parameters redrawn")
    ap.add_argument("--position-jitter-m", type=float, default=0.0,
                    help="move the task object once per episode by a draw of this rms per table axis (m): a "
                         "reader that reads its position from the first frame that well")
    ap.add_argument("--as-read", action="store_true",
                    help="play every draw with the task object where, turned as and as large as the model of "
                         "--eval read it from the first frame: how often exact physics on the model's reading is right")
    ap.add_argument("--read-parts", default=",".join(READ_PARTS),
                    help=f"with --as-read, the parts of the reading to play, comma-separated of "
                         f"{', '.join(READ_PARTS)} (default all); the rest as recorded")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--eval", type=Path, help="eval-wm --json output on the same probe: split the model's errors")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--json", type=Path, help="write every episode's replays and the summary here")
    args = ap.parse_args()
    paths = sorted(args.data.glob("*.npz"))
    if not paths:
        print(f"--data {args.data}: no .npz episodes; record a probe with 'gesim-ros record-training "
              "--recipe probe-graded --out DIR'", file=sys.stderr)
        return 2
    if args.draws < 1 or args.workers < 1 or not 0 <= args.position_jitter_m <= 0.05:
        print("--draws and --workers must be at least 1, --position-jitter-m in 0..0.05 m", file=sys.stderr)
        return 2
    parts = tuple(p for p in args.read_parts.split(",") if p)
    if not parts or set(parts) - set(READ_PARTS):
        print(f"--read-parts {args.read_parts!r}: use a comma-separated choice of {', '.join(READ_PARTS)}",
              file=sys.stderr)
        return 2
    if args.as_read and not args.eval:
        print("--as-read needs --eval: the eval-wm --json whose first_object_read each episode is played at",
              file=sys.stderr)
        return 2
    verdicts, readings, judged = None, {}, {}
    if args.eval:
        judged = {j["episode_id"]: j for j in json.loads(args.eval.read_text())["judge"]["episodes"]}
        verdicts = {i: j["model_success"] for i, j in judged.items()}
        readings = {i: j.get("first_object_read") for i, j in judged.items()}
        missing = [p.stem for p in paths if p.stem not in verdicts]
        if missing:
            print(f"--eval {args.eval}: no verdict for {len(missing)} episodes of {args.data} (e.g. {missing[0]}); "
                  "pass the eval-wm --json of this probe", file=sys.stderr)
            return 2
        if args.as_read and not all(readings.values()):
            print(f"--eval {args.eval}: no first_object_read in it; run eval-wm --json again with this version",
                  file=sys.stderr)
            return 2
    t0, rows = time.monotonic(), []
    with multiprocessing.get_context("spawn").Pool(args.workers, _init_worker) as pool:
        jobs = [(p, args.draws, args.seed, args.position_jitter_m, readings[p.stem] if args.as_read else None, parts)
                for p in paths]
        for r in pool.imap(_episode, jobs):
            rows.append(r)
            print(f"[{len(rows)}/{len(paths)}] {r['episode_id']}: {r['label']}, replayed {r['replayed_label']}, "
                  f"p(success) {r['p_success']:.2f} over {args.draws} hidden-physics draws "
                  f"({r['seconds']:.1f} s, {time.monotonic() - t0:.0f} s in all)", flush=True)
    summary = {"all": summarize(rows, verdicts)}
    for task in sorted({r["task"] for r in rows}):
        summary[task] = summarize([r for r in rows if r["task"] == task], verdicts)
    hidden = ", ".join(f"{t}: {'/'.join(k)}" for t, k in HIDDEN.items())
    jitter = f", the object moved {args.position_jitter_m * 1000:g} mm rms per axis" if args.position_jitter_m else ""
    jitter += f", the object as {args.eval} read it ({', '.join(parts)})" if args.as_read else ""
    print(f"\n{args.data}: {args.draws} draws of the hidden parameters ({hidden}){jitter}")
    for name, s in summary.items():
        line = (f"  {name:<11} {s['episodes']:>4} episodes  replay = recording {s['replay_reproduces_label']:>4}  "
                f"ceiling {s['ceiling']:.3f}  open (p in {OPEN}) {s['open_episodes']:>3}  "
                f"likelier outcome right {s['likelier_outcome_agrees']:>4}")
        if verdicts is not None:
            line += (f"  model right {s['model_agrees']:>4}, wrong on open {s['model_wrong_on_open']}, "
                     f"on settled {s['model_wrong_on_settled']}, where the likelier outcome is right "
                     f"{s['model_wrong_likelier_right']}")
        print(line)
    if verdicts is not None:
        print("model wrong where the likelier outcome is right" + (" (on its own reading: the dynamics' and the judge's "
              "share)" if args.as_read else "") + ":")
        for r in rows:
            j = judged[r["episode_id"]]
            if j["model_success"] != r["real_success"] and likelier_right(r):
                off = j.get("final_object_error_m")   # eval-wm JSONs of format 1 models lack it
                off = f"imagined object ends {off * 100:.1f} cm off" if off is not None else "no imagined object error"
                print(f"  {r['episode_id']:<18} {r['label']:<14} P(success) {j['success_prob']:.2f}, {off}, "
                      f"p(success) {r['p_success']:.2f}")
    if args.json:
        args.json.write_text(json.dumps({"data": str(args.data), "draws": args.draws,
                                         "position_jitter_m": args.position_jitter_m, "as_read": args.as_read,
                                         "read_parts": list(parts) if args.as_read else None,
                                         "summary": summary,
                                         "episodes": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
