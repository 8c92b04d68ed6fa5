"""Validation of joint commands against the contract, before anything reaches a robot.

Plain Python: the backend switch validates every command bound for the physical robot with this,
and the twin validates what it accepts, so the rules are one piece of code. A command is a set of
joint names and a (horizon, joints) array of absolute position targets with a control period;
a single JointState command is a horizon of one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from gesim_ros.contract.contract import Contract


class CommandRejected(ValueError):
    """A command failed validation; ``reason`` says what and how to fix it."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class ValidCommand:
    joint_names: tuple[str, ...]
    targets: np.ndarray  # (horizon, joints) float64
    control_period_s: float


#: How far (in control periods of motion at the velocity limit) a command may lead the measured
#: state: a streaming policy's targets run ahead of a position-servoed joint by its tracking lag.
TRACKING_ALLOWANCE_PERIODS = 10


class CommandValidator:
    """Checks names, lengths, NaN/inf, position limits, the measured state and the per-period velocity limit.

    The first step of a command is held to the velocity limit against the nearer of the joint's most
    recent accepted target (``last_targets``, cleared by ``forget_commands``) and its measured
    position (fed in with ``observe``): a streaming policy continues its own targets while the servo
    lags, and a hold at the measured position is always a small step. It may lead the measured
    state by at most ``TRACKING_ALLOWANCE_PERIODS`` periods of motion, so neither a jump in the
    command stream nor a command far from where the robot really is gets through.

    Those checks need where each commanded joint is: a command naming a velocity-limited joint with
    no measured position yet is refused, and so is one whose measured state is older than
    ``max_state_age_s`` (the source stopped publishing). Times are seconds on one clock of the
    caller's choosing: ``observe(..., at)`` when the state was received, ``validate(..., now)``.

    ``check_lead`` False drops the lead bound, for a world model only: its imagined state runs behind
    the policy's clock by the model's stalls and by the gaps its timeline keeps (each command starts
    where the previous one ended), so how far a command leads it says nothing; the velocity bound
    against its own accepted stream still holds.
    """

    def __init__(self, contract: Contract, velocity_scale: float = 1.0,
                 default_control_period_s: float = 0.01, max_state_age_s: float = math.inf,
                 state_source: str = "the joint states", check_lead: bool = True):
        """``max_state_age_s`` inf: a caller that observes right before each validate (the twin);
        ``state_source`` names where measured states come from, in refusals."""
        if not max_state_age_s > 0:
            raise ValueError(f"max_state_age_s is {max_state_age_s}; set a positive number of seconds (how old "
                             "the measured joint state may be when a command is checked against it)")
        self.contract = contract
        self.known = set(contract.joint_names)
        self.lower = {n: lo for n, (lo, hi) in contract.joint_limits.items()}
        self.upper = {n: hi for n, (lo, hi) in contract.joint_limits.items()}
        self.max_step_per_s = {n: v * velocity_scale for n, v in contract.max_joint_velocity.items()}
        self.default_period = default_control_period_s
        self.max_state_age_s = float(max_state_age_s)
        self.state_source = state_source
        self.check_lead = check_lead
        self.last_targets: dict[str, float] = {}
        self.measured: dict[str, float] = {}
        self.measured_at: dict[str, float] = {}

    def observe(self, names, positions, at: float = -math.inf) -> None:
        """Measured joint positions, received at time ``at`` (needed with a finite max_state_age_s)."""
        names = list(names)
        self.measured.update(zip(names, map(float, positions)))
        self.measured_at.update(dict.fromkeys(names, at))

    def forget_commands(self) -> None:
        """Start the next command from the measured state (after a hold, a reset, a new episode)."""
        self.last_targets.clear()

    def _require_measured_state(self, names: tuple[str, ...], now: float | None) -> None:
        """Refuse a command whose velocity-limited joints have no measured position, or a too old one."""
        checked = [n for n in names if math.isfinite(self.max_step_per_s[n])]
        missing = [n for n in checked if n not in self.measured]
        if missing:
            raise CommandRejected(
                f"no measured position yet for {len(missing)} of the {len(names)} commanded joints (e.g. "
                f"'{missing[0]}'), so it cannot be checked against where they are; commands pass once "
                f"{self.state_source} arrive (is the robot's driver, or its stand-in, running and publishing?)")
        if not checked or math.isinf(self.max_state_age_s):
            return
        if now is None:
            raise ValueError("validate() needs now when max_state_age_s is finite")
        oldest = min(checked, key=self.measured_at.__getitem__)
        age = now - self.measured_at[oldest]
        if age > self.max_state_age_s:
            raise CommandRejected(
                f"the newest measured position of '{oldest}' is {age:.3f} s old, more than max_state_age_s "
                f"{self.max_state_age_s:g} s allows: {self.state_source} stopped arriving (the driver stopped "
                "publishing?); commands pass again once they arrive")

    def validate(self, joint_names, positions, control_period_s: float | None = None,
                 horizon: int | None = None, now: float | None = None) -> ValidCommand:
        """The command, validated; ``now`` (the clock of ``observe``'s ``at``) is needed with a finite
        max_state_age_s. Raises CommandRejected with the reason and the fix; a rejection changes nothing."""
        names = tuple(joint_names)
        if not names:
            raise CommandRejected("command names no joints; list the joints it targets")
        unknown = [n for n in names if n not in self.known]
        if unknown:
            raise CommandRejected(f"unknown joint name(s) {unknown}; the contract's joints are "
                                  f"{sorted(self.known)}")
        if len(set(names)) != len(names):
            dup = sorted({n for n in names if names.count(n) > 1})
            raise CommandRejected(f"joint name(s) {dup} appear more than once; name each joint once")
        flat = np.asarray(positions, dtype=np.float64).ravel()
        steps = horizon if horizon is not None else 1
        if steps < 1 or flat.size != steps * len(names):
            raise CommandRejected(f"{flat.size} target values for {len(names)} joints x horizon {steps}; "
                                  f"send exactly {len(names) * max(steps, 1)} values")
        targets = flat.reshape(steps, len(names))
        bad = ~np.isfinite(targets)
        if bad.any():
            step, j = map(int, np.argwhere(bad)[0])
            raise CommandRejected(f"target for '{names[j]}' at step {step} is {targets[step, j]}; "
                                  "targets must be finite numbers")
        for j, n in enumerate(names):
            col = targets[:, j]
            lo, hi = self.lower[n], self.upper[n]
            if col.min() < lo or col.max() > hi:
                step = int(np.argmax((col < lo) | (col > hi)))
                raise CommandRejected(f"target {col[step]:.4f} for '{n}' at step {step} is outside its "
                                      f"limits [{lo}, {hi}]; clamp it to the contract's joint_limits")
        period = self.default_period if control_period_s is None else float(control_period_s)
        if not (np.isfinite(period) and period > 0):
            raise CommandRejected(f"control period {period} s must be a positive number of seconds")
        self._require_measured_state(names, now)
        measured = np.array([self.measured.get(n, np.nan) for n in names])
        commanded = np.array([self.last_targets.get(n, np.nan) for n in names])
        nearer_commanded = np.abs(targets[0] - commanded) <= np.nan_to_num(np.abs(targets[0] - measured), nan=np.inf)
        previous = np.where(nearer_commanded, commanded, measured)
        steps_with_ref = np.vstack([previous[None, :], targets])
        deltas = np.abs(np.diff(steps_with_ref, axis=0))
        limits = np.array([self.max_step_per_s[n] for n in names]) * period
        # Every velocity-limited joint has a measured reference by now; NaN (no reference) only
        # remains where the limit is infinite, and compares as not over.
        over = deltas > limits + 1e-9
        if over.any():
            step, j = map(int, np.argwhere(over)[0])
            raise CommandRejected(
                f"'{names[j]}' moves {deltas[step, j]:.4f} in one control period ({period} s) at step {step}, "
                f"more than its velocity limit allows ({limits[j]:.4f}); send smaller steps")
        if self.check_lead:
            lead = np.abs(targets[0] - measured)
            allowed = limits * TRACKING_ALLOWANCE_PERIODS
            too_far = lead > allowed + 1e-9
            if too_far.any():
                j = int(np.argmax(too_far))
                raise CommandRejected(
                    f"'{names[j]}' target {targets[0, j]:.4f} is {lead[j]:.4f} from its measured position "
                    f"{measured[j]:.4f}, more than {TRACKING_ALLOWANCE_PERIODS} control periods at its velocity "
                    f"limit ({allowed[j]:.4f}); start commands from where the robot is")
        self.last_targets.update(zip(names, targets[-1]))
        return ValidCommand(names, targets, period)
