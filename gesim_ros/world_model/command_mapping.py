"""World-model commands, without ROS: contract-named joint targets checked and mapped onto the
backends' 16-D action layout."""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

from gesim_ros.contract.command_validation import CommandRejected, CommandValidator
from gesim_ros.contract.contract import Contract
from gesim_ros.world_model.layouts import ActionLayout


def gesim_layout(contract: Contract) -> ActionLayout:
    """The backends' 16-D layout [L7 arm, L grip, R7 arm, R grip] over the contract's joint names."""
    g = contract.joint_groups
    return ActionLayout.gesim(g["left_arm"], g["left_gripper"][0], g["right_arm"], g["right_gripper"][0])


class CommandMapper:
    """Contract-named joint targets -> the backend's layout; joints a command leaves out keep their target.

    Names, counts, NaN/inf and position limits are checked with the contract's CommandValidator. The
    velocity limit is not: the backend switch holds commands bound for the robot to it, and queued
    receding-horizon chunks legitimately start away from the previous chunk's end. Joints outside
    the action layout (waist, head) cannot be moved by the model and are ignored.
    """

    def __init__(self, contract: Contract, layout: ActionLayout):
        self.validator = CommandValidator(contract, velocity_scale=math.inf)
        self.names = layout.names
        self.index = {n: i for i, n in enumerate(layout.names)}
        self.last = np.zeros(len(self.names), np.float32)

    def reset(self, joints: Mapping[str, float]) -> None:
        self.last = np.array([joints.get(n, 0.0) for n in self.names], np.float32)

    def map(self, names, positions, horizon: int, period_s: float) -> tuple[np.ndarray, float]:
        """(horizon, D) targets in the backend layout and the validated control period."""
        cmd = self.validator.validate(names, positions, period_s, horizon)
        cols = [(j, self.index[n]) for j, n in enumerate(cmd.joint_names) if n in self.index]
        if not cols:
            raise CommandRejected(f"command moves none of the world model's action joints (it names "
                                  f"{list(cmd.joint_names)}); send targets for {list(self.names)}")
        src, dst = zip(*cols)
        targets = np.tile(self.last, (len(cmd.targets), 1))
        targets[:, list(dst)] = cmd.targets[:, list(src)]
        self.last = targets[-1].copy()
        return targets, cmd.control_period_s
