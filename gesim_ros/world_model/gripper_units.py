"""Gripper values between the contract's metres and a world-model backend's units (no ROS).

The contract gives each gripper one opening value in metres within its joint limits. GE-Sim-V2 takes
gripper commands normalised to [0, 1] and reports its gripper state as an aperture in millimetres
(their demo_000: commands 0..1.01, state 0.2..118 mm, the state about 118 mm x the command, so 1 is
open). ``normalised`` here is 0 at the contract's lower limit (closed) and 1 at its upper (open).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from gesim_ros.world_model.api import check_gripper_units


class GripperUnits:
    """Converts the gripper columns ``dims`` of (T, D) rows; ``limits`` are each column's contract
    [lower, upper] in metres."""

    def __init__(self, dims: Sequence[int], limits: Sequence[tuple[float, float]], command_units: str,
                 state_units: str):
        check_gripper_units("gripper_command_units", command_units)
        check_gripper_units("gripper_state_units", state_units)
        self.dims = list(dims)
        self.lower = np.array([lo for lo, _ in limits], np.float64)
        self.span = np.array([hi - lo for lo, hi in limits], np.float64)
        self.command_units, self.state_units = command_units, state_units

    def normalised(self, metres: np.ndarray) -> np.ndarray:
        """(..., len(dims)) openings in metres -> [0, 1] over the contract's range (not clipped)."""
        return (np.asarray(metres, np.float64) - self.lower) / self.span

    def _from_metres(self, metres: np.ndarray, units: str) -> np.ndarray:
        if units == "normalised":
            return self.normalised(metres)
        return np.asarray(metres, np.float64) * (1000.0 if units == "mm" else 1.0)

    def _to_metres(self, values: np.ndarray, units: str) -> np.ndarray:
        if units == "normalised":
            return self.lower + np.asarray(values, np.float64) * self.span
        return np.asarray(values, np.float64) / (1000.0 if units == "mm" else 1.0)

    def _convert(self, rows: np.ndarray, convert, units: str) -> np.ndarray:
        out = np.array(rows, np.float32)
        out[..., self.dims] = convert(out[..., self.dims], units)
        return out

    def to_command(self, rows: np.ndarray) -> np.ndarray:
        """Action rows in contract units -> the backend's command units (a copy)."""
        return self._convert(rows, self._from_metres, self.command_units)

    def from_state(self, rows: np.ndarray) -> np.ndarray:
        """State rows in the backend's state units -> contract metres (a copy)."""
        return self._convert(rows, self._to_metres, self.state_units)
