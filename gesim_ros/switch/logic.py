"""What the backend switch decides, in plain Python so it is tested without rclpy.

The node (``backend_switch.py``) moves bytes and messages; everything it decides lives here: which
source the policy sees in each mode, where a policy command goes, whether a switch is allowed now,
when the robot must be told to hold, the episode it follows, and the per-path counters.
Times are seconds on one clock of the caller's choosing (the node uses its ROS clock).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Mapping

from gesim_ros.contract.modes import SIDES, SIDES_BY_MODE, unknown_mode
from gesim_ros.ros.sequence_numbers import messages_missed


@dataclass(frozen=True)
class Route:
    """Where the policy's observations come from and where its commands go in one mode."""

    observations_from: str | None
    commands_to: tuple[str, ...]  # the first one's measured state is what commands are validated against


# The policy sees the first acting side (the robot in shadow mode, while the model imagines the same
# episode from the same commands); its commands go to every acting side.
ROUTES: Mapping[str, Route] = {mode: Route(sides[0] if sides else None, sides) for mode, sides in SIDES_BY_MODE.items()}
PATHS = tuple(f"{side}.{kind}" for side in SIDES for kind in ("observations", "commands"))
WORLD_MODEL_LOST = ("the world model is gone: its status publisher lost DDS liveliness (process killed, crashed "
                    "or exited); no command goes to it, nor in shadow mode to the robot. Fix: restart the "
                    "world_model node; the next episode's world_model_sync starts it again")


class HoldUnavailable(RuntimeError):
    """No hold can be built: the robot's measured position of some joint is not known yet."""


def hold_targets(joint_names: Iterable[str], measured: Mapping[str, float]) -> list[float]:
    """The robot's latest measured position of every joint, in ``joint_names`` order."""
    names = list(joint_names)
    missing = [n for n in names if n not in measured]
    if missing:
        raise HoldUnavailable(f"no measured position yet for {len(missing)} of {len(names)} joints "
                              f"(e.g. '{missing[0]}'); the robot's joint_states must arrive before a hold "
                              "can be sent")
    return [float(measured[n]) for n in names]


@dataclass
class PathCounter:
    """One path's totals. ``dropped``: for observations, messages the source published that never
    reached the switch (gaps in its publication sequence numbers); for commands, accepted commands
    withheld because the robot is not armed or the world model the mode needs is gone. ``received``
    counts arrivals per input stream (topic)."""

    forwarded: int = 0
    rejected: int = 0
    dropped: int = 0
    received: dict[str, int] = field(default_factory=dict)
    _last_sequence: dict[str, int] = field(default_factory=dict, repr=False)

    def receive(self, stream: str, sequence: int | None) -> None:
        """A message arrived on ``stream`` with its publication sequence number (None where the
        middleware gives none); a jump in the numbers counts the messages in between as dropped."""
        self.received[stream] = self.received.get(stream, 0) + 1
        if sequence is None:
            return
        self.dropped += messages_missed(self._last_sequence.get(stream), sequence)
        self._last_sequence[stream] = sequence


@dataclass(frozen=True)
class PathRate:
    """One path over the last diagnostics window."""

    path: str
    rate_hz: float
    forwarded: int
    rejected: int
    dropped: int
    new_rejections: int
    new_drops: int
    silent: tuple[str, ...]  # expected input streams with no message in the window


@dataclass(frozen=True)
class Transition:
    """The answer to a mode request. When accepted, the caller sends the hold (if ``hold``) and then
    the ABORTED event (if ``aborted_episode``) before it answers the request."""

    accepted: bool
    previous: str
    reason: str
    hold: bool = False
    aborted_episode: str = ""


@dataclass(frozen=True)
class WorldModelLoss:
    """The world model the mode routes to is gone: the caller sends the hold (if ``hold``), then the
    ABORTED event (if ``aborted_episode``)."""

    hold: bool
    aborted_episode: str
    reason: str


class SwitchLogic:
    """Mode, arming, episode, watchdog and counters of one backend switch.

    The robot is *commanded* when the mode sends commands to the real side and the switch is armed.
    Whenever that stops (a switch to world_model or none, disarming, a forced switch that aborts an
    episode, or a policy silent for longer than ``policy_timeout_s``) the robot must be sent a hold,
    so it is never left tracking a stale target.

    A world model seen alive and then lost (``world_model_lost``) stops every route through it: shadow
    mode compares both sides or drives neither, so the robot is held until the model is back.
    """

    def __init__(self, mode: str, armed: bool, policy_timeout_s: float, now: float,
                 observation_streams: Iterable[str] = ()):
        problem = unknown_mode(mode)
        if problem:
            raise ValueError(f"parameter mode: {problem}")
        if not policy_timeout_s > 0:
            raise ValueError(f"parameter policy_timeout_s is {policy_timeout_s}; set a positive number of "
                             "seconds (how long the policy may be silent before the robot is held)")
        self.mode = mode
        self.since = now
        self.armed = bool(armed)
        self.policy_timeout_s = float(policy_timeout_s)
        self.episode_id = ""
        self.holds_sent = 0
        self.last_error = ""
        self.counters = {path: PathCounter() for path in PATHS}
        self.world_model_lost = False
        self._last_robot_command: float | None = None  # None: nothing to watch (no command since the last hold)
        self.observation_streams = tuple(observation_streams)
        self._window_start = now
        self._window_counts = {path: (0, 0, 0, {}) for path in PATHS}

    @property
    def observations_from(self) -> str | None:
        return ROUTES[self.mode].observations_from

    @property
    def validation_side(self) -> str | None:
        """The side whose measured state a policy command is checked against (None: mode none)."""
        targets = ROUTES[self.mode].commands_to
        return targets[0] if targets else None

    @property
    def needs_world_model(self) -> bool:
        return "world_model" in ROUTES[self.mode].commands_to

    @property
    def _withheld(self) -> bool:
        return self.world_model_lost and self.needs_world_model

    @property
    def robot_commanded(self) -> bool:
        return self.armed and "real" in ROUTES[self.mode].commands_to and not self._withheld

    def refusal(self, mode: str, force: bool) -> str | None:
        """Why a switch to ``mode`` is not allowed now, or None; changes nothing."""
        problem = unknown_mode(mode)
        if problem:
            return problem
        if self.episode_id and not force and mode != self.mode:
            return (f"episode '{self.episode_id}' is running in mode '{self.mode}'; switch after it ends, "
                    "or set force to abort it (the robot is sent a hold first)")
        return None

    def select(self, mode: str, force: bool, now: float) -> Transition:
        """Switch to ``mode`` if allowed; a refused request changes nothing but ``last_error``."""
        previous = self.mode
        problem = self.refusal(mode, force)
        if problem:
            self.last_error = f"select '{mode}' refused: {problem}"
            return Transition(False, previous, problem)
        if mode == previous:
            return Transition(True, previous, f"already in mode '{mode}'; nothing changed")
        aborted = self.episode_id
        robot_stops = "real" not in ROUTES[mode].commands_to or bool(aborted)
        hold = self.robot_commanded and robot_stops
        self.mode, self.since, self.episode_id = mode, now, ""
        self._last_robot_command = None
        reason = f"switched from '{previous}' to '{mode}'"
        if aborted:
            reason += f"; episode '{aborted}' aborted (forced switch)"
        return Transition(True, previous, reason, hold=hold, aborted_episode=aborted)

    def set_armed(self, armed: bool) -> bool:
        """Arm or disarm; True when the robot must be sent a hold first (it was being commanded)."""
        hold = self.robot_commanded and not armed
        self.armed = bool(armed)
        self._last_robot_command = None
        return hold

    def episode_started(self, episode_id: str) -> str:
        """Follow a new episode; returns why it is aborted at once ('' when it runs): the mode needs
        the world model and it is gone."""
        if self._withheld:
            self.last_error = f"episode '{episode_id}' aborted at its start: {WORLD_MODEL_LOST}"
            return self.last_error
        self.episode_id = episode_id
        return ""

    def world_model_present(self, alive: bool) -> WorldModelLoss | None:
        """The world model's liveliness changed; a loss while the mode routes to it returns what the
        caller must do, and its commands stop until it is alive again."""
        hold = self.robot_commanded
        self.world_model_lost = not alive
        if alive or not self.needs_world_model:
            return None
        aborted, self.episode_id = self.episode_id, ""
        self._last_robot_command = None
        self.last_error = WORLD_MODEL_LOST + (f"; episode '{aborted}' aborted" if aborted else "")
        return WorldModelLoss(hold, aborted, self.last_error)

    def episode_finished(self, episode_id: str) -> bool:
        """An ENDED or ABORTED event; True when it ended the episode being followed."""
        if not self.episode_id or episode_id != self.episode_id:
            return False
        self.episode_id = ""
        return True

    def command_accepted(self, now: float) -> tuple[str, ...]:
        """A validated policy command: the sides to forward it to (the robot only while armed)."""
        targets = ROUTES[self.mode].commands_to
        sent = () if self._withheld else tuple(side for side in targets if side != "real" or self.armed)
        for side in targets:
            counter = self.counters[f"{side}.commands"]
            if side in sent:
                counter.forwarded += 1
            else:
                counter.dropped += 1
        if "real" in sent:
            self._last_robot_command = now
        return sent

    def command_rejected(self, reason: str) -> None:
        self.counters[f"{self.validation_side}.commands"].rejected += 1
        self.last_error = reason

    def watchdog_due(self, now: float) -> bool:
        """True once per silence: the robot got policy commands, then none for ``policy_timeout_s``."""
        if (self.robot_commanded and self._last_robot_command is not None
                and now - self._last_robot_command > self.policy_timeout_s):
            self._last_robot_command = None
            return True
        return False

    def hold_sent(self) -> None:
        self.holds_sent += 1

    def rates(self, now: float) -> list[PathRate]:
        """Per-path rate and totals since the previous call (the diagnostics window), with the
        observation streams that stayed silent in it (not published, or a QoS that does not match)."""
        window = now - self._window_start
        out = []
        for path, c in self.counters.items():
            forwarded0, rejected0, dropped0, received0 = self._window_counts[path]
            expected = self.observation_streams if path.endswith(".observations") else ()
            silent = tuple(s for s in expected if c.received.get(s, 0) == received0.get(s, 0))
            out.append(PathRate(path, (c.forwarded - forwarded0) / window if window > 0 else 0.0,
                                c.forwarded, c.rejected, c.dropped, c.rejected - rejected0,
                                c.dropped - dropped0, silent))
            self._window_counts[path] = (c.forwarded, c.rejected, c.dropped, dict(c.received))
        self._window_start = now
        return out
