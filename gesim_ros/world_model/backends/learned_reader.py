"""The learned world model's scene reader: the task object's pose and size and the goal, from the
first frame of an episode.

Millimetres matter (issue #17: a grasp 1-2 cm off the object ends another way), so the reader uses
what a robot knows about its cameras: each view comes with its calibration (GE-Sim's
``set_camera_params``: intrinsics and camera-to-world at the first frame), from which every pixel
gets the point where its ray meets the horizontal plane the objects rest on (``plane_maps``). A small
conv net turns each view into heatmaps; the heatmaps' expected plane points (a spatial soft-argmax
over world coordinates, not pixels) and their sharpness go, with the measured joints and the task,
through an MLP to the object's position, its half extents and the goal. Training also points each
view's first heatmap at the object's pixel and its second at the goal's wherever they are in view
(``VIEW_OBJECT``, ``VIEW_GOAL``; cross-entropy over the pixels), so the conv net learns to find them
directly, not only through the MLP.

The object's yaw (modulo a quarter turn: the task objects look the same turned by 90 degrees) is read
where it shows, in a second pass: each view is resampled onto a square grid of the horizontal plane
through the object's top face, centred where the first pass put the object (``object_patches``: a
top-down, perspective-free patch in which the yaw is the patch's rotation of the object's outline), and
a small conv net (a ``PatchReader``) reads it from the patches. Heatmap statistics could not carry it: the
first pass alone read the cube's yaw about 18 degrees off (median), barely better than guessing, and
which way a grasp meets the cube decides pick-and-place.

A second ``PatchReader`` on the same patches, the object refiner, reads the object's offset from the
patch centre and its horizontal half size, which then replace the first pass's: millimetres decide a
grasp, and the first pass read the position 5.5-6.6 mm off (median) and the half size 0.5-0.7 mm off on
the graded probes; a net of this shape trained alone on the same patches read them to 3.1-3.4 mm and
0.16-0.19 mm (``bench/patch_refiner_probe.py`` at 5da75d5).
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from gesim_ros.world_model.backends.learned_dynamics import mlp

#: Outputs of the first pass: position (3, normalised), half extents (3, in units of HALF_SCALE_M
#: around HALF_MEAN_M), goal (3, normalised).
READER_OUTPUTS = 9
HALF_MEAN_M, HALF_SCALE_M = 0.02, 0.01
VIEW_OBJECT, VIEW_GOAL = 0, 1   # the heatmaps that training points at the object and at the goal
YAW_NORM_GROUPS = 8   # the patch readers' group norms: their widths are multiples of it
#: The object refiner's outputs: the object's offset from the patch centre in the patch's frame (2, in
#: units of REFINE_OFFSET_UNIT_M) and its horizontal half size (1, in units of REFINE_HALF_UNIT_M around
#: REFINE_HALF_MEAN_M): finer units than the first pass's, whose errors it corrects.
REFINE_OUTPUTS = 3
REFINE_OFFSET_UNIT_M, REFINE_HALF_MEAN_M, REFINE_HALF_UNIT_M = 0.01, 0.022, 0.002
PLANE_SCALE_M = 0.1   # plane coordinates in units of 10 cm from the objects' mean position
_PLANE_REACH = 6.0    # and only within 60 cm of it (the workspace): farther pixels are not on the table


def plane_maps(intrinsics: torch.Tensor, c2w: torch.Tensor, height: int, width: int, plane_z: torch.Tensor,
               centre: torch.Tensor) -> torch.Tensor:
    """Per pixel of images ``height x width`` seen by cameras with ``intrinsics (..., 3, 3)`` (pixels at
    that size) and optical-frame camera-to-world ``c2w (..., 4, 4)`` (x right, y down, z forward): where
    its ray meets the plane z = ``plane_z``, as ``(x, y)`` from ``centre (2,)`` in PLANE_SCALE_M units,
    and whether it does within 60 cm of ``centre``: ``(..., 3, height, width)``."""
    v, u = torch.meshgrid(torch.arange(height, dtype=torch.float32) + 0.5,
                          torch.arange(width, dtype=torch.float32) + 0.5, indexing="ij")
    fx, fy = intrinsics[..., 0, 0, None, None], intrinsics[..., 1, 1, None, None]
    cx, cy = intrinsics[..., 0, 2, None, None], intrinsics[..., 1, 2, None, None]
    rays = torch.stack([(u - cx) / fx, (v - cy) / fy, torch.ones_like(u).expand_as((u - cx) / fx)], -1)
    world = (rays[..., None, :] * c2w[..., None, None, :3, :3]).sum(-1)          # R @ ray, per pixel
    origin = c2w[..., None, None, :3, 3]
    t = (plane_z - origin[..., 2]) / world[..., 2].clamp(max=-1e-6)
    xy = (origin[..., :2] + t[..., None] * world[..., :2] - centre) / PLANE_SCALE_M
    valid = (world[..., 2] < -1e-6) & (xy.abs() < _PLANE_REACH).all(-1)
    xy = torch.where(valid[..., None], xy, torch.zeros_like(xy))
    return torch.cat([xy, valid[..., None].float()], -1).movedim(-1, -3)


def camera_geometry(kinematics, joints: np.ndarray, size: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
    """The views' intrinsics ``(V, 3, 3)`` at image ``size`` (H, W) and optical-frame camera-to-world
    ``(V, 4, 4)`` (float32) from the contract's calibration, for the G2 at ``joints`` (contract order);
    ``kinematics`` is a :class:`~gesim_ros.twin.kinematics.G2Kinematics` of the model's views. Training
    and the backend both come through here."""
    cameras, _ = kinematics.poses(np.asarray(joints, np.float64)[None])
    return kinematics.intrinsics(size).astype(np.float32), cameras[:, 0].astype(np.float32)


def project(points: torch.Tensor, intrinsics: torch.Tensor, c2w: torch.Tensor, height: int,
            width: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Pixels ``(B, V, 2)`` (x, y) of world ``points (B, 3)`` in images ``height x width`` of the cameras
    ``intrinsics (B, V, 3, 3)``, ``c2w (B, V, 4, 4)``, and whether they are in the image ``(B, V)``."""
    rot, origin = c2w[..., :3, :3], c2w[..., :3, 3]
    cam = ((points[:, None] - origin)[..., None, :] @ rot)[..., 0, :]    # R^T (p - o)
    pix = (intrinsics @ cam[..., None])[..., 0]
    uv = pix[..., :2] / pix[..., 2:].clamp(min=1e-6)
    seen = (cam[..., 2] > 0.01) & (uv[..., 0] >= 0) & (uv[..., 0] < width) & (uv[..., 1] >= 0) & (uv[..., 1] < height)
    return uv, seen


def object_patches(images: torch.Tensor, intrinsics: torch.Tensor, c2w: torch.Tensor, centre: torch.Tensor,
                   angle: torch.Tensor, size: int, extent_m: float) -> torch.Tensor:
    """Each view of ``images (B, V, 3, H, W)`` (cameras ``intrinsics (B, V, 3, 3)`` in pixels at H x W,
    ``c2w (B, V, 4, 4)``) resampled onto a ``size x size`` grid of the horizontal plane through world
    points ``centre (B, 3)``, ``extent_m`` on a side, its x axis at ``angle (B,)`` (rad) from the
    world's: ``(B, V * 4, size, size)``, each view's colours (bilinear, centred on grey, 0 where it does
    not see the cell) and whether it sees the cell."""
    batch, views, _, height, width = images.shape
    cells = ((torch.arange(size, dtype=torch.float32) + 0.5) / size - 0.5) * extent_m
    gy, gx = torch.meshgrid(cells, cells, indexing="ij")               # patch rows run along its y axis
    cos, sin = torch.cos(angle)[:, None, None], torch.sin(angle)[:, None, None]
    points = torch.stack([centre[:, 0, None, None] + cos * gx - sin * gy, centre[:, 1, None, None] + sin * gx + cos * gy,
                          centre[:, 2, None, None].expand(-1, size, size)], -1)          # (B, S, S, 3)
    def per_cell(camera: torch.Tensor) -> torch.Tensor:   # each cell a batch row of project's
        return camera[:, None].expand(batch, size * size, *camera.shape[1:]).flatten(0, 1)

    uv, seen = project(points.flatten(0, 2), per_cell(intrinsics), per_cell(c2w), height, width)
    uv = uv.view(batch, size, size, views, 2).permute(0, 3, 1, 2, 4)
    seen = seen.view(batch, size, size, views).permute(0, 3, 1, 2).float()
    grid = torch.stack([uv[..., 0] / width, uv[..., 1] / height], -1) * 2 - 1   # grid_sample's [-1, 1]
    sampled = F.grid_sample(images.flatten(0, 1), grid.flatten(0, 1), align_corners=False)
    sampled = (sampled.view(batch, views, 3, size, size) - 0.5) * seen[:, :, None]
    return torch.cat([sampled, seen[:, :, None]], 2).flatten(1, 2)


class SceneReader(nn.Module):
    """First frame ``(B, V, 3, H, W)`` and its plane maps ``(B, V, 3, H, W)`` -> READER_OUTPUTS raw values
    and each view's heatmap logits ``(B, V, heatmaps, H / 2, W / 2)`` (off-plane pixels at -1e4)."""

    def __init__(self, num_views: int, channels: tuple[int, ...], heatmaps: int, joint_dim: int, task_dim: int,
                 hidden: int) -> None:
        super().__init__()
        first, *rest = channels
        self.stem = nn.Conv2d(6, first, 3, padding=1)
        self.view_embedding = nn.Parameter(torch.zeros(num_views, first))
        layers, width = [], first
        for i, out in enumerate(rest):   # the first of them halves the resolution
            layers += [nn.Conv2d(width, out, 3, stride=2 if i == 0 else 1, padding=1), nn.SiLU()]
            width = out
        self.body = nn.Sequential(*layers)
        self.heatmaps = nn.Conv2d(width, heatmaps, 1)
        self.head = mlp(num_views * heatmaps * 5 + joint_dim + task_dim, hidden, READER_OUTPUTS)

    def forward(self, images: torch.Tensor, planes: torch.Tensor, q: torch.Tensor,
                task: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``q`` normalised joints ``(B, J)``, ``task`` a task embedding ``(B, task_dim)``."""
        batch, views = images.shape[:2]
        x = torch.cat([images, planes], 2).flatten(0, 1)
        x = F.silu(self.stem(x) + self.view_embedding.repeat(batch, 1)[:, :, None, None])
        logits = self.heatmaps(self.body(x))
        h, w = logits.shape[-2:]
        small = F.adaptive_avg_pool2d(planes.flatten(0, 1), (h, w))
        valid = small[:, 2:] > 0.5
        logits = logits.masked_fill(~valid, -1e4)
        weights = torch.softmax(logits.flatten(2), -1).view_as(logits)
        mean = (weights[:, :, None] * small[:, None, :2]).sum((-1, -2))              # (N, K, 2) plane x, y
        spread = (weights[:, :, None] * (small[:, None, :2] - mean[..., None, None]) ** 2).sum((-1, -2))
        peak = weights.flatten(2).max(-1).values * h * w                              # 1: flat, large: sharp
        features = torch.cat([mean, spread.sqrt(), torch.log(peak)[..., None]], -1)    # (N, K, 5)
        return self.head(torch.cat([features.view(batch, -1), q, task], 1)), logits.view(batch, views, *logits.shape[1:])


class PatchReader(nn.Module):
    """Patches ``(B, V * 4, size, size)`` (:func:`object_patches`) -> ``outputs`` values. The yaw reader
    is one (cos and sin of 4 x the object's yaw from the patches' x axis), the object refiner another
    (``REFINE_OUTPUTS``). Group norms after the convs: without them the yaw reader sat at its untrained
    loss for 1300 steps trained alone, and for all 1450 steps watched of the recipe's 1760-step reader
    stage; with them, trained alone on that stage's schedule, it left it after 200 and 600 steps (two
    seeds)."""

    def __init__(self, num_views: int, width: int, size: int, hidden: int, outputs: int) -> None:
        super().__init__()
        layers, channels = [], num_views * 4
        for out, stride in ((width, 1), (width, 1), (2 * width, 2), (2 * width, 1), (2 * width, 2), (2 * width, 2)):
            layers += [nn.Conv2d(channels, out, 3, stride=stride, padding=1), nn.GroupNorm(YAW_NORM_GROUPS, out), nn.SiLU()]
            channels = out
        self.body = nn.Sequential(*layers, nn.Flatten())
        self.head = mlp(channels * (size // 8) ** 2, hidden, outputs)

    def forward(self, patches: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(patches))
