"""Prototype for issue #17 (b), not part of the model: can a second look at the yaw reader's top-down
patches read the task object's position and size better than the learned model's first pass?

A net of the yaw reader's shape (a ``PatchReader`` giving 3 values) is trained alone on the
rich set's reader frames: patches centred on the recorded top face moved by the first pass's error and
turned by a random angle, as the yaw reader learns, targets the object's offset from the patch centre
(in the patch's frame) and its horizontal half size. Then, on each probe's first frames, it is applied
once around the checkpoint's own first-pass reading, and the script prints the first pass's and the
refined errors against the recorded object. With ``--evals`` (each probe's ``eval-wm --json``) it writes
copies whose ``first_object_read`` carries the refined position and size, for
``bench/hidden_physics_ceiling.py --as-read``: exact physics on the refined reading.

    .venv/bin/python bench/patch_refiner_probe.py --data data/rich --probes data/probe_graded \\
        --evals graded.json --out runs/refiner [--steps 3000] [--threads 2]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from gesim_ros.episodes.data import EpisodeRecord
from gesim_ros.world_model.backends.learned_checkpoint import DEFAULT_CHECKPOINT, load_checkpoint
from gesim_ros.world_model.backends.learned_network import OBJECT_HALF, OBJECT_POS
from gesim_ros.world_model.backends.learned_reader import PatchReader, object_patches
from gesim_ros.world_model.training import TrainConfig, _learning_rate, _prepare, _reader_frames

# The refiner's output units (its own, not the first pass's HALF_MEAN_M / HALF_SCALE_M).
OFFSET_UNIT_M, SIZE_MEAN_M, SIZE_UNIT_M = 0.01, 0.022, 0.002


def targets(scene: torch.Tensor, centre: torch.Tensor, angle: torch.Tensor) -> torch.Tensor:
    """The object's offset from ``centre`` in the patch frame turned by ``angle``, and its horizontal
    half size, in the refiner's units ``(B, 3)``."""
    d = scene[:, :2] - centre[:, :2]
    c, s = torch.cos(angle), torch.sin(angle)
    local = torch.stack([c * d[:, 0] + s * d[:, 1], -s * d[:, 0] + c * d[:, 1]], -1)
    half = scene[:, OBJECT_HALF][:, :2].mean(1)
    return torch.cat([local / OFFSET_UNIT_M, ((half - SIZE_MEAN_M) / SIZE_UNIT_M)[:, None]], 1)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, required=True, help="training episodes (record-training --recipe rich)")
    ap.add_argument("--probes", type=Path, nargs="+", required=True, help="probe folders to measure on")
    ap.add_argument("--evals", type=Path, nargs="*", default=[], help="each probe's eval-wm --json, in --probes order")
    ap.add_argument("--ckpt", default=DEFAULT_CHECKPOINT, help="whose first pass and patches (default: the shipped)")
    ap.add_argument("--out", type=Path, required=True, help="folder for the refiner and the rewritten eval JSONs")
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    if args.evals and len(args.evals) != len(args.probes):
        print(f"--evals: {len(args.evals)} files for {len(args.probes)} probes; give one per probe, in order",
              file=sys.stderr)
        return 2
    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    args.out.mkdir(parents=True, exist_ok=True)
    loaded = load_checkpoint(args.ckpt)
    net = loaded.net.eval()
    cfg = TrainConfig(model=net.config, seed=args.seed)

    def episodes(folder: Path):
        t0 = time.monotonic()
        eps = _prepare((EpisodeRecord.load_npz(p) for p in sorted(folder.glob("*.npz"))), cfg).episodes
        print(f"{folder}: {len(eps)} episodes read in {time.monotonic() - t0:.0f} s", flush=True)
        return eps

    def patches(images, intrinsics, c2w, centre, angle):
        return object_patches(images, intrinsics, c2w, centre, angle, net.config.yaw_patch, net.config.yaw_patch_m)

    refiner = PatchReader(net.config.num_views, net.config.yaw_channels, net.config.yaw_patch, net.config.hidden_dim, 3)
    train = episodes(args.data)
    opt = torch.optim.AdamW(refiner.parameters(), cfg.learning_rate, weight_decay=cfg.weight_decay)
    gen = torch.Generator().manual_seed(args.seed)
    t0 = time.monotonic()
    for step in range(args.steps):
        for group in opt.param_groups:   # the training stages' schedule
            group["lr"] = _learning_rate(cfg, step, args.steps)
        picked = [train[int(i)] for i in torch.randint(len(train), (cfg.batch_size,), generator=gen)]
        images, intrinsics, c2w, steps = _reader_frames(picked, gen)
        scene = torch.stack([e.scene[t] for e, t in zip(picked, steps)])
        top = scene[:, OBJECT_POS] + F.pad(scene[:, OBJECT_HALF][:, 2:], (2, 0))
        centre = top + cfg.yaw_centre_noise_m * F.pad(torch.randn(len(picked), 2, generator=gen), (0, 1))
        angle = 2 * math.pi * torch.rand(len(picked), generator=gen)
        loss = ((refiner(patches(images, intrinsics, c2w, centre, angle)) - targets(scene, centre, angle)) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(refiner.parameters(), 1.0)
        opt.step()
        if step % 500 == 0 or step == args.steps - 1:
            print(f"step {step + 1}/{args.steps} loss {loss.item():.3f} ({time.monotonic() - t0:.0f} s)", flush=True)
    torch.save(refiner.state_dict(), args.out / "refiner.pt")

    for k, folder in enumerate(args.probes):
        rows = None
        if args.evals:
            figures = json.loads(args.evals[k].read_text())
            rows = {j["episode_id"]: j for j in figures["judge"]["episodes"]}
        errors = {"first pass": ([], []), "refined": ([], [])}
        with torch.no_grad():
            for e in episodes(folder):
                images = e.reader_images[:1].float() / 255
                intrinsics, c2w = e.reader_cameras[0][:1], e.reader_cameras[1][:1]
                read = net.read_first_frame(images, intrinsics, c2w, e.positions[:1],
                                            torch.tensor([loaded.task_id(e.task)]))
                pos, half = read["pos"][0], read["half"][0]
                top = (pos + torch.tensor([0.0, 0.0, float(half[2])]))[None]
                out = refiner(patches(images, intrinsics, c2w, top, torch.zeros(1)))[0]
                refined = pos.clone()
                refined[:2] += out[:2] * OFFSET_UNIT_M
                refined_half = SIZE_MEAN_M + SIZE_UNIT_M * float(out[2])
                truth, true_half = e.scene[0, OBJECT_POS], float(e.scene[0, OBJECT_HALF][:2].mean())
                for name, p, h in (("first pass", pos, float(half[:2].mean())), ("refined", refined, refined_half)):
                    errors[name][0].append(float(torch.linalg.norm(p[:2] - truth[:2])))
                    errors[name][1].append(h - true_half)
                if rows is not None:
                    row = rows[e.episode_id]["first_object_read"]
                    sizes = {"pick_place": [refined_half] * 3, "push": [refined_half, refined_half,
                                                                          row["half_extents_m"][2]]}
                    row.update(position_m=[float(x) for x in refined],
                               half_extents_m=sizes.get(e.task, row["half_extents_m"]))   # the plug's size is fixed
        for name, (position, size) in errors.items():
            position, size = np.array(position) * 1000, np.array(size) * 1000
            print(f"{folder} {name}: position error median {np.median(position):.1f} mm, rms per axis "
                  f"{np.sqrt((position ** 2).mean() / 2):.1f}, max {position.max():.1f}; half size error median "
                  f"{np.median(np.abs(size)):.2f} mm, rms {np.sqrt((size ** 2).mean()):.2f}, max {np.abs(size).max():.2f}")
        if rows is not None:
            out_path = args.out / f"{folder.name}-refined.json"
            out_path.write_text(json.dumps(figures))
            print(f"{out_path}: {args.evals[k]} with the refined readings", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
