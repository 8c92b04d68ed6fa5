"""Policies and a success checker for the policy tests, importable by the test process and (with
PYTHONPATH=test) by a policy node process through the `module` plugin."""

import numpy as np
import torch

from gesim_ros.policy.api import STATE, Policy, SuccessChecker, Verdict


class FollowState(Policy):
    """Holds the measured state plus ``offset``: its chunks show which observations arrived. It
    refuses to act without every input it asked for, so a decoding gap fails the episode."""

    def __init__(self, offset=0.0, chunk_horizon=5, control_period_s=0.05, observation_keys=(STATE,)):
        self.offset, self.chunk_horizon, self.control_period_s = offset, chunk_horizon, control_period_s
        self.observation_keys = tuple(observation_keys)

    def act(self, observation):
        missing = [k for k in self.observation_keys if k not in observation]
        if missing:
            raise KeyError(f"observation lacks {missing}")
        return np.tile(observation[STATE] + self.offset, (self.chunk_horizon, 1))


class Faulty(FollowState):
    """Misbehaves as the episode's task says: wrong_shape, nan or raise; any other task is fine."""

    def act(self, observation):
        chunk = super().act(observation)
        task = observation["episode"]["task"]
        if task == "wrong_shape":
            return chunk[:, :15]
        if task == "nan":
            chunk[1, 3] = np.nan
        if task == "raise":
            raise RuntimeError("boom in Faulty.act")
        return chunk


def make_follow(**kwargs):
    return FollowState(**kwargs)


def make_faulty(**kwargs):
    return Faulty(**kwargs)


def make_not_a_policy():
    return object()


class TinyNet(torch.nn.Module):
    """A randomly initialised state + head-camera policy, small enough to script in a test."""

    def __init__(self, horizon: int):
        super().__init__()
        self.horizon = horizon
        self.linear = torch.nn.Linear(16 + 3, horizon * 16)

    def forward(self, state: torch.Tensor, image: torch.Tensor) -> torch.Tensor:
        features = torch.cat([state, image.mean(dim=(2, 3))], dim=1)
        return self.linear(features).reshape(1, self.horizon, 16)


def save_tiny_net(path, horizon: int) -> TinyNet:
    net = TinyNet(horizon).eval()
    torch.jit.save(torch.jit.script(net), str(path))
    return net


class GripperClosed(SuccessChecker):
    """Succeeds once the left gripper opening is below ``threshold``."""

    def __init__(self, threshold=0.05):
        self.threshold = threshold

    def check(self, observation):
        if observation[STATE][14] < self.threshold:
            return Verdict(True, "grasped", f"left gripper {observation[STATE][14]:.3f} m")
        return None
