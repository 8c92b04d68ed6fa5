"""GE-Sim's trajectory band (world_model/trajectory_band.py): layout, what is drawn where, the gripper
colour mapping (0..1 -> 35..120 mm), and the gripper unit conversions between metres and GE-Sim's."""

import numpy as np
import pytest

from gesim_ros.world_model.api import WorldModelInputError
from gesim_ros.world_model.gripper_units import GripperUnits
from gesim_ros.world_model.trajectory_band import (BACKGROUND, GREENS, REDS, STICK_COLOURS, disc_radius,
                                                   gripper_shade, render_band, scale_colour)

H, W = 96, 128
K = np.array([[100.0, 0, 64], [0, 100.0, 48], [0, 0, 1]])


def tool_at(x, y, z):
    """A tool-to-world pose at (x, y, z) with the world's axes."""
    pose = np.eye(4)
    pose[:3, 3] = (x, y, z)
    return pose


def band_of(left, right, grippers=(0.0, 0.0), views=1):
    """One frame: the camera at the world origin looking along world z (its optical frame is the world's)."""
    tools = np.stack([left, right])[None]
    c2w = np.tile(np.eye(4), (views, 1, 1, 1))
    return render_band(tools, np.array([grippers], float), c2w, np.tile(K, (views, 1, 1)), (H, W))


def rgb8(band, view, u, v):
    return tuple(int(round(c * 255)) for c in band[:, view, 0, v, u])


FAR_AWAY = tool_at(0, 0, -1.0)  # behind the camera: not drawn


def test_layout_range_and_background():
    rng = np.random.default_rng(0)
    steps, views = 5, 3
    tools = np.tile(np.eye(4), (steps, 2, 1, 1))
    tools[:, :, :3, 3] = rng.uniform([-0.2, -0.2, 0.4], [0.2, 0.2, 0.8], (steps, 2, 3))
    band = render_band(tools, rng.uniform(0, 1, (steps, 2)), np.tile(np.eye(4), (views, steps, 1, 1)),
                       np.tile(K, (views, 1, 1)), (H, W))
    assert band.shape == (3, views, steps, H, W) and band.dtype == np.float32
    assert 0.0 <= band.min() and band.max() <= 1.0
    assert rgb8(band, 0, 0, 0) == (BACKGROUND,) * 3


def test_a_tool_is_a_disc_sized_by_its_distance_and_shaded_by_its_gripper():
    # 0.5 m ahead, 0.1 m right of the axis: pixel (64 + 100 * 0.1 / 0.5, 48) = (84, 48).
    band = band_of(tool_at(0.1, 0, 0.5), FAR_AWAY, grippers=(1.0, 0.0))
    radius = disc_radius(np.hypot(0.1, 0.5))
    assert radius == int(100 * (1 - np.hypot(0.1, 0.5) - 0.07 / 0.73))
    # Inside the disc, clear of the sticks (they leave the centre along +u, +v and, z, towards the image centre).
    assert rgb8(band, 0, 84 - radius // 2, 48 - radius // 2) == tuple(GREENS[-1].astype(int))  # g = 1: darkest
    assert rgb8(band, 0, 84 - radius - 3, 48) == (BACKGROUND,) * 3
    assert disc_radius(0.95) == 0 and disc_radius(0.0) == int(100 * (1 - 0.07 / 0.73))


def test_each_arm_has_its_scale_and_stick_colours():
    band = band_of(tool_at(-0.1, 0, 0.5), tool_at(0.1, 0, 0.5), grippers=(0.0, 0.0))
    left_disc, right_disc = rgb8(band, 0, 44 - 10, 48 - 12), rgb8(band, 0, 84 - 10, 48 - 12)
    assert left_disc == scale_colour(GREENS, 35 / 120) and right_disc == scale_colour(REDS, 35 / 120)
    # Sticks: 0.1 m along x (to the right in the image: u grows) and y (down: v grows).
    x_end_left = 44 + 100 * 0.1 / 0.5
    assert rgb8(band, 0, int(x_end_left) - 2, 48) == STICK_COLOURS[0][0]      # blue
    assert rgb8(band, 0, 44, 48 + 15) == STICK_COLOURS[0][1]                  # yellow
    assert rgb8(band, 0, 84 + 15, 48) == STICK_COLOURS[1][0]                  # magenta
    assert rgb8(band, 0, 84, 48 + 15) == STICK_COLOURS[1][1]                  # red


def test_a_tool_outside_the_view_or_behind_the_camera_is_not_drawn():
    band = band_of(tool_at(5.0, 0, 0.5), FAR_AWAY)
    assert (band == np.float32(BACKGROUND / 255)).all()


def test_gripper_maps_0_to_1_onto_35_to_120_mm():
    assert gripper_shade(0.0) == pytest.approx(35 / 120) and gripper_shade(1.0) == pytest.approx(1.0)
    assert gripper_shade(0.5) == pytest.approx((35 + 42.5) / 120)
    # The scales pass through their ColorBrewer anchors and darken monotonically.
    for scale in (GREENS, REDS):
        assert scale_colour(scale, 0.0) == tuple(scale[0].astype(int))
        assert scale_colour(scale, 0.5) == tuple(scale[4].astype(int))
        assert scale_colour(scale, 1.0) == tuple(scale[-1].astype(int))
        shades = [sum(scale_colour(scale, gripper_shade(g))) for g in np.linspace(0, 1, 11)]
        assert shades == sorted(shades, reverse=True)


def test_render_band_refuses_mismatched_inputs():
    with pytest.raises(ValueError, match=r"grippers \(2, 2\).*do not fit c2w \(1, 1, 4, 4\)"):
        render_band(np.tile(np.eye(4), (1, 2, 1, 1)), np.zeros((2, 2)), np.tile(np.eye(4), (1, 1, 1, 1)),
                    K[None], (H, W))


# --------------------------------------------------------------------------- gripper units

GRIPPER_LIMITS = [(0.0, 0.08), (0.01, 0.09)]


def rows(left, right):
    out = np.zeros((len(left), 16), np.float32)
    out[:, 7], out[:, 15] = left, right
    out[:, 0] = 0.5  # an arm joint: never converted
    return out


def test_gesim_units_normalised_commands_and_mm_state():
    units = GripperUnits((7, 15), GRIPPER_LIMITS, "normalised", "mm")
    command = units.to_command(rows([0.0, 0.04, 0.08], [0.01, 0.05, 0.09]))
    np.testing.assert_allclose(command[:, 7], [0.0, 0.5, 1.0], atol=1e-6)
    np.testing.assert_allclose(command[:, 15], [0.0, 0.5, 1.0], atol=1e-6)
    state = units.from_state(rows([0.2, 40.0, 80.0], [118.0, 10.0, 0.0]))
    np.testing.assert_allclose(state[:, 7], [0.0002, 0.04, 0.08], atol=1e-7)
    np.testing.assert_allclose(state[:, 15], [0.118, 0.01, 0.0], atol=1e-7)
    assert (command[:, 0] == 0.5).all() and (state[:, 0] == 0.5).all()


def test_metres_pass_through_and_normalised_state_maps_back_onto_the_limits():
    metres = rows([0.03], [0.07])
    np.testing.assert_array_equal(GripperUnits((7, 15), GRIPPER_LIMITS, "m", "m").to_command(metres), metres)
    back = GripperUnits((7, 15), GRIPPER_LIMITS, "mm", "normalised")
    np.testing.assert_allclose(back.from_state(rows([0.5], [1.0]))[0, [7, 15]], [0.04, 0.09], atol=1e-7)
    np.testing.assert_allclose(back.to_command(metres)[0, [7, 15]], [30.0, 70.0], atol=1e-4)


def test_unknown_units_are_refused_naming_the_choices():
    with pytest.raises(WorldModelInputError, match=r"gripper_state_units: 'metres' is not one of \['m', 'mm', "
                                                   r"'normalised'\]"):
        GripperUnits((7, 15), GRIPPER_LIMITS, "m", "metres")
