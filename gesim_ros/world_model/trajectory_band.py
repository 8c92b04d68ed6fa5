"""GE-Sim 2.0's trajectory band: the conditioning images its world model is stepped with (no ROS).

GE-Sim conditions every step on a rendered "band": per view and per action step, a picture of where
the two end effectors will be, seen by that camera. As their docs and conditioning code describe it:

* a canvas of grey 50/255;
* per arm, a filled disc at the projection of the tool point; its radius in pixels is
  ``100 * clip(1 - d - 0.07 / 0.73, 0, 1)`` with ``d`` the tool's distance from the camera in metres
  (near tools draw large: a wrist camera sees its own gripper as a big disc);
* its colour encodes the gripper: the normalised gripper value ``g`` in [0, 1] is mapped to an
  aperture of ``35 + 85 g`` mm and shaded at ``aperture / 120`` on a sequential colour scale, greens
  for the left arm and reds for the right (ColorBrewer's 9-class Greens and Reds, darker = more open);
* then, over the discs, three sticks from the tool point 0.1 m along the tool frame's x, y and z,
  8 px thick: blue, yellow, cyan for the left arm; magenta, red, green for the right.

An arm whose tool point projects outside a view, or lies behind its camera, is not drawn in it.
Output ``(3, V, T, H, W)`` float32 RGB in [0, 1], as ``set_episode_traj`` takes it.
"""

from __future__ import annotations

import cv2
import numpy as np

BACKGROUND = 50
GRIPPER_APERTURE_MM = (35.0, 120.0)  # normalised gripper 0 -> 35 mm, 1 -> 120 mm
RADIUS_SCALE_PX = 100.0
RADIUS_OFFSET_M = 0.07 / 0.73
STICK_LENGTH_M = 0.1
STICK_THICKNESS_PX = 8
# ColorBrewer 9-class sequential scales, light to dark, 8-bit RGB.
GREENS = np.array([(247, 252, 245), (229, 245, 224), (199, 233, 192), (161, 217, 155), (116, 196, 118),
                   (65, 171, 93), (35, 139, 69), (0, 109, 44), (0, 68, 27)], np.float64)
REDS = np.array([(255, 245, 240), (254, 224, 210), (252, 187, 161), (252, 146, 114), (251, 106, 74),
                 (239, 59, 44), (203, 24, 29), (165, 15, 21), (103, 0, 13)], np.float64)
ARM_SCALES = (GREENS, REDS)  # left, right
STICK_COLOURS = (((0, 0, 255), (255, 255, 0), (0, 255, 255)),   # left: x, y, z
                 ((255, 0, 255), (255, 0, 0), (0, 255, 0)))     # right: x, y, z


def gripper_shade(gripper: float) -> float:
    """Where a normalised gripper value falls on the colour scale: its aperture over 120 mm."""
    lo, hi = GRIPPER_APERTURE_MM
    return (lo + (hi - lo) * float(gripper)) / hi


def scale_colour(scale: np.ndarray, shade: float) -> tuple[int, int, int]:
    """8-bit RGB at ``shade`` in [0, 1] on a scale, interpolated linearly between its anchors."""
    pos = np.clip(shade, 0.0, 1.0) * (len(scale) - 1)
    lower = min(int(pos), len(scale) - 2)
    rgb = scale[lower] + (pos - lower) * (scale[lower + 1] - scale[lower])
    return tuple(int(round(c)) for c in rgb)


def disc_radius(distance_m: float) -> int:
    return int(RADIUS_SCALE_PX * np.clip(1.0 - distance_m - RADIUS_OFFSET_M, 0.0, 1.0))


def render_band(tool_poses: np.ndarray, grippers: np.ndarray, c2w: np.ndarray, intrinsics: np.ndarray,
                image_size: tuple[int, int]) -> np.ndarray:
    """The band for ``tool_poses (T, 2, 4, 4)`` (tool-to-world, left then right), normalised
    ``grippers (T, 2)``, cameras ``c2w (V, T, 4, 4)`` and ``intrinsics (V, 3, 3)`` at ``image_size``
    (H, W): ``(3, V, T, H, W)`` float32 in [0, 1]."""
    height, width = image_size
    views, steps = c2w.shape[:2]
    if tool_poses.shape != (steps, 2, 4, 4) or grippers.shape != (steps, 2) or intrinsics.shape != (views, 3, 3):
        raise ValueError(f"render_band: tool_poses {tool_poses.shape}, grippers {grippers.shape}, intrinsics "
                         f"{intrinsics.shape} do not fit c2w {c2w.shape}; expected (T, 2, 4, 4), (T, 2), (V, 3, 3)")
    # The tool point and the ends of its three sticks, as homogeneous columns in the tool frame.
    local = np.hstack([np.zeros((3, 1)), STICK_LENGTH_M * np.eye(3)])
    local = np.vstack([local, np.ones((1, 4))])
    canvas = np.full((views, steps, height, width, 3), BACKGROUND, np.uint8)
    world_to_camera = np.linalg.inv(c2w)
    for v in range(views):
        for t in range(steps):
            image = canvas[v, t]
            drawn = []
            for arm in range(2):
                points = (world_to_camera[v, t] @ tool_poses[t, arm] @ local)[:3]  # (3, 4) camera frame
                if points[2, 0] <= 0:
                    continue  # behind the camera
                pixels = (intrinsics[v] @ points)[:2] / np.maximum(points[2], 1e-6)
                origin = tuple(int(c) for c in np.floor(pixels[:, 0]))
                if not (0 <= origin[0] < width and 0 <= origin[1] < height):
                    continue
                colour = scale_colour(ARM_SCALES[arm], gripper_shade(grippers[t, arm]))
                radius = disc_radius(float(np.linalg.norm(points[:, 0])))
                if radius > 0:
                    cv2.circle(image, origin, radius, colour, -1)
                drawn.append((arm, origin, pixels))
            for arm, origin, pixels in drawn:  # sticks over both discs
                for axis in range(3):
                    end = tuple(int(np.clip(c, -1e6, 1e6)) for c in np.floor(pixels[:, axis + 1]))
                    cv2.line(image, origin, end, STICK_COLOURS[arm][axis], STICK_THICKNESS_PX)
    return np.ascontiguousarray(canvas.transpose(4, 0, 1, 2, 3), dtype=np.float32) / np.float32(255.0)
