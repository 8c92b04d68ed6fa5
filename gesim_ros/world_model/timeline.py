"""The world model's predicted timeline, without ROS: where each predicted step sits in time, and
which contract-rate slot shows which prediction.

Every predicted step is a :class:`Sample` at the time the actions imply: a command's
step k (k = 0..L-1) runs during ``[start + k*dt, start + (k+1)*dt)`` and its predicted observation is
stamped ``start + (k+1)*dt``, where ``start = max(end of the previous command, now)``: commands queue
and start on arrival at the earliest. Header stamps are not used, so a policy on the wrong clock
(wall time against the simulated one) cannot stall the world. Sensor streams publish at their
contract rates on slots ``origin + n/rate`` (origin: the sync), each slot showing the latest sample
at or before it (zero-order hold: between commands the robot stands still). A slot is published once
the world is known up to it: always up to "now" when nothing is pending, and only up to the
predictions made so far while commands wait for inference. "Now" is the wall clock (shadow mode:
predictions are stamped with the real time they predict and arrive late when the model is slow), or
the session's own simulated clock (``own_clock``, world_model mode publishing ``/clock``): it runs
with the wall clock but stops where predictions end, so a slower-than-real-time model still gives
the policy consistent time.
"""

from __future__ import annotations

import bisect
import math
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

EPS = 1e-6  # s: slot/sample times this close count as equal (float round-off)


@dataclass
class Episode:
    """The world model's running episode: what was commanded, predicted and judged so far."""

    episode_id: str
    task: str
    task_text: str
    seed: int
    scheduled: int = 0                  # action steps commanded so far
    steps: int = 0                      # action steps predicted (and shown) so far
    ended: bool = False                 # no more commands: ended, aborted or max_steps reached
    success_probability: float | None = None  # the judge's latest value


@dataclass
class Sample:
    """One point of the predicted timeline (step 0: the synced observation)."""

    t: float
    step: int
    episode: Episode
    joints: np.ndarray      # every contract joint, contract order
    velocity: np.ndarray
    images: dict[str, Any]  # camera key -> payload made by the session's ``encode``
    judge: tuple[float, float] | None = None  # (success probability, progress)


@dataclass(frozen=True)
class EpisodeReport:
    """An EpisodeEvent the node publishes for the world model: ABORTED or OUTCOME."""

    event: str  # "aborted" | "outcome"
    episode: Episode
    outcome: str  # "success" | "failure" | "unknown" (aborted: "unknown")
    success_probability: float
    label: str
    reason: str


@dataclass(frozen=True)
class Due:
    """What the publishing thread must publish now."""

    publications: list[tuple[str, float, Sample]]  # (stream key, slot time, sample shown)
    judged: list[Sample]                           # samples whose JudgeStatus is due
    reports: list[EpisodeReport]
    clock: float | None                            # simulated time to publish (own clock only)
    status_changed: bool


class Timeline:
    """Predicted samples on the time axis the actions imply, and the contract-rate slots showing them.

    Not thread-safe: the session calls it under its lock.
    """

    def __init__(self, rates: Mapping[str, float], own_clock: bool):
        self.rates = dict(rates)
        self.own_clock = own_clock
        self.sim_time = 0.0
        self._last_wall: float | None = None
        self._reports: list[tuple[float, EpisodeReport]] = []
        self.clear()

    def clear(self) -> None:
        """Publish nothing until the next :meth:`start` (posted reports survive)."""
        self._origin: float | None = None
        self._samples: list[Sample] = []
        self._times: list[float] = []
        self._slot = dict.fromkeys(self.rates, 0)
        self._judged = 0
        self._pending: deque[list[float]] = deque()  # [known until, end] per command awaiting samples
        self.end = -math.inf                          # where the last scheduled command ends

    def start(self, origin: float, first: Sample) -> None:
        self.clear()
        self._origin = self.end = origin
        self.add(first)

    def now(self, wall: float) -> float:
        return self.sim_time if self.own_clock else wall

    @property
    def known_until(self) -> float:
        return self._pending[0][0] if self._pending else math.inf

    @property
    def last(self) -> Sample | None:
        return self._samples[-1] if self._samples else None

    def advance(self, wall: float) -> float:
        """Move the own clock on by the wall time passed (never past the known world); returns the horizon."""
        if not self.own_clock:
            return min(wall, self.known_until)
        if self._last_wall is not None:
            self.sim_time = max(self.sim_time, min(self.sim_time + wall - self._last_wall, self.known_until))
        self._last_wall = wall
        return self.sim_time

    def schedule(self, steps: int, period: float, now: float) -> float:
        """Reserve time for a command; returns its start."""
        start = max(self.end, now)
        self.end = start + steps * period
        self._pending.append([start, self.end])
        return start

    def add(self, sample: Sample) -> None:
        """Append a sample (in time order); the world is now known up to it."""
        self._samples.append(sample)
        self._times.append(sample.t)
        while self._pending and sample.t >= self._pending[0][1] - EPS:
            self._pending.popleft()
        if self._pending:
            self._pending[0][0] = max(self._pending[0][0], sample.t)

    def drop_pending(self) -> None:
        """Forget commands not yet predicted (an episode ended early): the world stays where it is."""
        self._pending.clear()
        self.end = self._times[-1] if self._times else -math.inf

    def post(self, t: float, report: EpisodeReport) -> None:
        """Deliver ``report`` once the timeline reaches ``t`` (-inf: at the next tick)."""
        self._reports.append((t, report))

    def due(self, horizon: float) -> tuple[list, list, list]:
        publications = []
        if self._origin is not None:
            for key, rate in self.rates.items():
                while (slot := self._origin + self._slot[key] / rate) <= horizon + EPS:
                    i = bisect.bisect_right(self._times, slot + EPS) - 1
                    publications.append((key, slot, self._samples[i]))
                    self._slot[key] += 1
        judged = []
        while self._judged < len(self._samples) and self._times[self._judged] <= horizon + EPS:
            sample = self._samples[self._judged]
            if sample.judge is not None:
                judged.append(sample)
            self._judged += 1
        reports = [r for t, r in self._reports if t <= horizon + EPS]
        self._reports = [(t, r) for t, r in self._reports if t > horizon + EPS]
        self._prune()
        return publications, judged, reports

    def _prune(self) -> None:
        """Drop samples no stream will show again (each stream still needs the one at its next slot)."""
        if self._origin is None:
            return
        next_slot = min((self._origin + n / self.rates[k] for k, n in self._slot.items()), default=math.inf)
        keep_from = min(bisect.bisect_right(self._times, next_slot + EPS) - 1, self._judged)
        if keep_from > 0:
            del self._samples[:keep_from], self._times[:keep_from]
            self._judged -= keep_from
