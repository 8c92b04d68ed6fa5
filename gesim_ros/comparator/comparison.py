"""Per-episode comparison of the real robot with the world model, in plain Python (no rclpy).

The comparator node feeds this module EpisodeEvents and the two sensor streams; it turns them into
rows of the durable :class:`~gesim_ros.comparator.store.EpisodeStore`:

* STARTED commits the episode (as 'incomplete', so a crash leaves a trace) and opens its recording;
  OUTCOME records the real or the world-model outcome, once per side (UNKNOWN too: a world model
  without a judge reports it, and the episode completes unjudged); ENDED completes the episode
  once the outcomes its mode runs are in (shadow: both; real: the real one; world_model: the
  world model's), waiting ``outcome_grace_s`` for a late one; ABORTED aborts it.
* Both streams are aligned by time since the STARTED stamp into horizon steps of
  ``horizon_step_s``. The first sample of each side in a step is paired with the other side's
  first sample in the same step, which gives joint-space divergence (RMSE over the action joints)
  per step, and PSNR/SSIM per camera view for one step per ``1 / image_sample_hz`` (frames are
  decoded only when paired, which keeps CPU low).
* A few thumbnails per view, spread evenly over the episode however long it runs, go to the
  report's filmstrip.

Metric rows are written in batches by :meth:`EpisodeComparator.tick` (about once a second) and at
the episode's end, so an interrupted episode keeps what was measured before the crash. Bad input
raises :class:`ComparisonError`, naming the event and the fix; nothing is written then. An empty
``backend_mode`` in STARTED is stored as 'shadow', the mode this comparison exists for; only in
shadow mode do both streams run, so divergence and image similarity are measured there alone.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Protocol, Sequence

import cv2
import numpy as np
from gesim_ros_interfaces.msg import EpisodeEvent

from gesim_ros.comparator.store import UNKNOWN, VERDICTS, EpisodeStore, EpisodeStoreError, agreement
from gesim_ros.contract.image_codec import encode_compressed
from gesim_ros.contract.modes import SIDES, SIDES_BY_MODE
from gesim_ros.comparator.image_metrics import match_resolution, psnr, ssim

# Verdicts the runner reports (a success checker's, an operator's) judge the side that acted in the
# episode's mode, the first of its sides: the robot (real, shadow) or the world model (world_model mode).
VERDICT_SIDES = ("checker", "operator")
EVENT_NAMES = {EpisodeEvent.STARTED: "STARTED", EpisodeEvent.ENDED: "ENDED",
               EpisodeEvent.ABORTED: "ABORTED", EpisodeEvent.OUTCOME: "OUTCOME"}
OUTCOMES = {EpisodeEvent.OUTCOME_UNKNOWN: UNKNOWN, EpisodeEvent.OUTCOME_SUCCESS: "success",
            EpisodeEvent.OUTCOME_FAILURE: "failure"}
PSNR_CAP_DB = 100.0  # identical frames have infinite PSNR; the store needs a finite number
MAX_LAG_S = 30.0  # how long a sample waits for the other side's before it is dropped (bounds memory)
FILMSTRIP_FRAMES = 6  # thumbnails kept per view and side
THUMBNAIL_WIDTH = 160


class ComparisonError(ValueError):
    """An event or setting the comparator cannot use; nothing was written for it."""


class Recording(Protocol):
    """One episode's recording of the sides its mode runs (the node writes rosbag2/MCAP folders)."""

    paths: dict[str, Path]  # side -> folder

    def write(self, side: str, topic: str, log_ns: int, cdr: bytes) -> None: ...
    def write_event(self, event: EpisodeEvent, log_ns: int) -> None: ...
    def close(self) -> None: ...


class _StepPairs:
    """The first item of each side per horizon step, handed out once the other side's arrives."""

    def __init__(self, max_waiting: int):
        self._max_waiting = max_waiting
        self._waiting: dict[int, dict[str, object]] = {}
        self._paired: set[int] = set()

    def offer(self, step: int, side: str, item: object) -> tuple[object, object] | None:
        """(real item, world-model item) when this completes the step's pair, else None."""
        if step in self._paired:
            return None
        slot = self._waiting.setdefault(step, {})
        slot.setdefault(side, item)
        if len(slot) == len(SIDES):
            del self._waiting[step]
            self._paired.add(step)
            return slot["real"], slot["world_model"]
        if len(self._waiting) > self._max_waiting:  # the other side never sent this one in time
            del self._waiting[min(self._waiting)]
        return None


class _Filmstrip:
    """At most FILMSTRIP_FRAMES thumbnail pairs per view, evenly spread over the episode: when full,
    every other one is dropped and the stride between kept samples doubles."""

    def __init__(self):
        self.stride = 1
        self.offered = 0
        self.kept: list[tuple[int, bytes, bytes]] = []  # (horizon step, real jpeg, world-model jpeg)

    def offer(self, step: int, real: np.ndarray, world_model: np.ndarray) -> None:
        if self.offered % self.stride == 0:
            self.kept.append((step, _thumbnail(real), _thumbnail(world_model)))
            if len(self.kept) > FILMSTRIP_FRAMES:
                self.kept = self.kept[::2]
                self.stride *= 2
        self.offered += 1


def _thumbnail(image: np.ndarray) -> bytes:
    height = max(1, round(image.shape[0] * THUMBNAIL_WIDTH / image.shape[1]))
    small = cv2.resize(image, (THUMBNAIL_WIDTH, height), interpolation=cv2.INTER_AREA)
    return encode_compressed(small, "rgb8", "jpeg", quality=80)


@dataclass
class _Episode:
    episode_id: str
    started_at: float  # the STARTED stamp, s: time zero of the horizon steps
    recording: Recording | None
    joints: _StepPairs
    images: dict[str, _StepPairs]  # per view
    filmstrips: dict[str, _Filmstrip]
    similarity: dict[str, list[tuple[int, float, float]]]  # per view, rows not yet written
    mode: str
    sides: tuple[str, ...]  # the sides the episode's mode runs: their outcomes complete it
    divergence: list[tuple[int, float]] = field(default_factory=list)  # rows not yet written
    outcomes: dict[str, str] = field(default_factory=dict)
    ended_at: float | None = None
    deadline: float | None = None  # give up waiting for a missing outcome at this time
    divergence_steps: int = 0
    similarity_steps: int = 0


def _period_index(t: float, period: float) -> int:
    """The period ``t`` falls in. Stamps as float seconds since the epoch are exact to about
    0.25 us, so a time up to 1 us before a boundary counts as on it (0.3 s is step 3, not 2)."""
    return math.floor((t + 1e-6) / period)


def _elapsed(episode: _Episode, when: float, what: str) -> float:
    """Seconds from the episode's STARTED to ``when``; an earlier stamp is refused."""
    elapsed = when - episode.started_at
    if elapsed < 0:
        raise ComparisonError(f"{what} is stamped {-elapsed:.3f} s before the episode's STARTED; "
                              "stamp all events from one clock")
    return elapsed


def _event_time(event: EpisodeEvent, received_at: float) -> float:
    """The event's header stamp, or the time it was received where the sender left it unset."""
    stamp = event.header.stamp
    return stamp.sec + stamp.nanosec * 1e-9 if (stamp.sec or stamp.nanosec) else received_at


class EpisodeComparator:
    """Tracks the running episode (and ended ones awaiting an outcome) and writes their rows.

    Not thread-safe: the node calls it from one thread. ``open_recording(episode_id)`` returns the
    episode's :class:`Recording`, or is None to record nothing.
    """

    def __init__(self, store: EpisodeStore, *, joint_names: Sequence[str], views: Sequence[str],
                 horizon_step_s: float = 0.1, image_sample_hz: float = 2.0,
                 outcome_grace_s: float = 30.0,
                 open_recording: Callable[[str], Recording] | None = None,
                 logger: logging.Logger | None = None):
        for name, value in (("horizon_step_s", horizon_step_s), ("image_sample_hz", image_sample_hz)):
            if not (math.isfinite(value) and value > 0):
                raise ComparisonError(f"parameter {name} = {value!r} must be a positive number of "
                                      f"{'seconds' if name.endswith('_s') else 'Hz'}")
        if image_sample_hz * horizon_step_s > 1.0 + 1e-9:
            raise ComparisonError(
                f"parameter image_sample_hz = {image_sample_hz} samples images more often than the "
                f"horizon steps of horizon_step_s = {horizon_step_s} s; set image_sample_hz to at "
                f"most {1.0 / horizon_step_s:g} (each image sample needs a horizon step of its own)")
        if not (math.isfinite(outcome_grace_s) and outcome_grace_s >= 0):
            raise ComparisonError(f"parameter outcome_grace_s = {outcome_grace_s!r} must be >= 0 s")
        self.store = store
        self.joint_names = list(joint_names)
        self.views = list(views)
        self.horizon_step_s = horizon_step_s
        self.image_period_s = 1.0 / image_sample_hz
        self.outcome_grace_s = outcome_grace_s
        self._open_recording = open_recording
        self._log = logger or logging.getLogger(__name__)
        self._episodes: dict[str, _Episode] = {}  # tracked: running, or ended awaiting an outcome
        self.running: _Episode | None = None  # the one the streams belong to

    # ----- events -------------------------------------------------------------------------------

    def handle_event(self, event: EpisodeEvent, received_at: float, log_ns: int) -> None:
        """Apply one EpisodeEvent; ``received_at`` (s) stands in for an unset stamp."""
        if event.event == EpisodeEvent.HELLO:
            return  # a runner making sure this comparator will see its first STARTED: nothing to record
        name = EVENT_NAMES.get(event.event)
        if name is None:
            raise ComparisonError(f"EpisodeEvent for episode {event.episode_id!r} has unknown event "
                                  f"code {event.event}; use STARTED, ENDED, ABORTED, OUTCOME or HELLO")
        what = f"{name} event for episode {event.episode_id!r}"
        if name != "STARTED" and event.episode_id not in self._episodes:
            raise ComparisonError(
                f"{what} ignored: this comparator is not tracking that episode (it never received "
                "its STARTED, the episode already finished, or it started before the comparator "
                "restarted); nothing was recorded. Fix: send STARTED first, and one ENDED or "
                "ABORTED per episode")
        when = _event_time(event, received_at)
        try:
            if name == "STARTED":
                self._start(event, when)
            episode = self._episodes[event.episode_id]
            if episode.recording is not None:  # before applying it: completing closes the recording
                episode.recording.write_event(event, log_ns)
            if name == "OUTCOME":
                self._outcome(episode, event, when, what)
            elif name == "ENDED":
                self._ended(episode, when, received_at, what)
            elif name == "ABORTED":
                self._abort(episode, event, when, what)
        except EpisodeStoreError as exc:
            raise ComparisonError(f"{what} refused: {exc}") from exc

    def _start(self, event: EpisodeEvent, when: float) -> None:
        mode = event.backend_mode or "shadow"
        self.store.start_episode(event.episode_id, task=event.task, policy=event.policy,
                                 seed=int(event.seed), mode=mode, started_at=when)
        if self.running is not None:
            self._give_up(self.running, f"episode {event.episode_id!r} started before it ENDED; "
                          "send ENDED or ABORTED for every episode")
        recording = None
        if self._open_recording is not None:
            try:
                recording = self._open_recording(event.episode_id, SIDES_BY_MODE[mode])
            except (OSError, ValueError) as exc:
                self._log.error(f"episode {event.episode_id!r} is compared but not recorded: {exc}")
        max_steps = max(1, round(MAX_LAG_S / self.horizon_step_s))
        max_images = max(1, round(MAX_LAG_S / self.image_period_s))
        episode = _Episode(event.episode_id, when, recording, joints=_StepPairs(max_steps),
                           images={v: _StepPairs(max_images) for v in self.views},
                           filmstrips={v: _Filmstrip() for v in self.views},
                           similarity={v: [] for v in self.views}, mode=mode, sides=SIDES_BY_MODE[mode])
        self._episodes[event.episode_id] = self.running = episode
        self._log.info(f"episode {event.episode_id!r} started: task {event.task!r}, policy "
                       f"{event.policy!r}, seed {event.seed}, mode {mode!r}")

    def _outcome(self, episode: _Episode, event: EpisodeEvent, when: float, what: str) -> None:
        if event.side in SIDES:
            side = event.side
        elif event.side in VERDICT_SIDES:
            side = episode.sides[0]  # the acting side
        else:
            self._log.info(f"{what} from side {event.side!r} not recorded: the comparator records the sides "
                           f"'real' and 'world_model', and {' and '.join(VERDICT_SIDES)} verdicts on the acting side")
            return
        if side not in episode.sides:
            self._log.info(f"{what} from side {event.side!r} not recorded: the episode's mode runs only "
                           f"the {' and '.join(episode.sides)} side")
            return
        outcome = OUTCOMES.get(event.outcome)
        if outcome is None:
            raise ComparisonError(f"{what} (side {event.side}) has outcome code {event.outcome}, "
                                  "which is not UNKNOWN, SUCCESS or FAILURE; report one of those")
        elapsed = _elapsed(episode, when, what)
        # Only the world model's judge gives a probability (EpisodeEvent: NaN for other sides).
        prob = event.success_probability
        recording = episode.recording
        self.store.record_outcome(
            event.episode_id, side, outcome, time_to_outcome_s=elapsed,
            judge_success_prob=float(prob) if side == "world_model" and math.isfinite(prob) else None,
            mcap_path=None if recording is None else recording.paths[side])
        episode.outcomes[side] = outcome
        self._complete_if_ready(episode)

    def _ended(self, episode: _Episode, when: float, received_at: float, what: str) -> None:
        if episode.ended_at is not None:
            raise ComparisonError(f"{what} ignored: the episode already ENDED; send one ENDED per episode")
        _elapsed(episode, when, what)
        if self.running is episode:
            self.running = None
        self._flush(episode)
        episode.ended_at = when
        episode.deadline = received_at + self.outcome_grace_s
        missing = [s for s in episode.sides if s not in episode.outcomes]
        if missing:
            self._log.info(f"episode {episode.episode_id!r} ended; waiting up to "
                           f"{self.outcome_grace_s:g} s for the {' and '.join(missing)} outcome")
        self._complete_if_ready(episode)

    def _abort(self, episode: _Episode, event: EpisodeEvent, when: float, what: str) -> None:
        _elapsed(episode, when, what)
        self._finish(episode)
        reason = event.reason or event.label or "no reason given in the ABORTED event"
        self.store.abort_episode(event.episode_id, reason, ended_at=when)
        self._log.warning(f"episode {event.episode_id!r} aborted: {reason}")

    def _complete_if_ready(self, episode: _Episode) -> None:
        if episode.ended_at is None or any(s not in episode.outcomes for s in episode.sides):
            return
        self._finish(episode)
        self.store.complete_episode(episode.episode_id, ended_at=episode.ended_at)
        outcomes = ", ".join(f"{s} {episode.outcomes[s]}" for s in episode.sides)
        if len(episode.sides) == len(SIDES):
            outcomes += f" ({VERDICTS[agreement(episode.outcomes['real'], episode.outcomes['world_model'])]})"
        self._log.info(
            f"episode {episode.episode_id!r} complete: {outcomes}; divergence at {episode.divergence_steps} "
            f"steps, image similarity at {episode.similarity_steps} samples"
            + ("" if episode.recording is None else
               f"; recorded to {', '.join(str(episode.recording.paths[s]) for s in episode.sides)}"))

    # ----- streams ------------------------------------------------------------------------------

    def record(self, side: str, topic: str, log_ns: int, cdr: bytes, command_stamp_s: float | None = None) -> None:
        """Write one raw message to the running episode's recording (between STARTED and ENDED). A command
        (``command_stamp_s``: its header stamp) that arrives after ENDED but is stamped before it goes to
        its ended episode's recording while that one awaits its outcomes: it was on its way through the
        switch, and the world model still steps it (end_grace_s), so a replay must send it too."""
        episode = self.running
        if episode is None and command_stamp_s is not None:
            episode = next((e for e in self._episodes.values() if e.ended_at is not None
                            and e.started_at <= command_stamp_s <= e.ended_at), None)
        if episode is not None and episode.recording is not None and side in episode.sides:
            episode.recording.write(side, topic, log_ns, cdr)

    def add_joint_state(self, side: str, stamp_s: float, names: Sequence[str],
                        positions: Sequence[float]) -> None:
        """One joint-state sample of ``side`` ('real' or 'world_model'), stamped ``stamp_s``."""
        episode = self.running
        t = None if episode is None else stamp_s - episode.started_at
        if t is None or t < 0:
            return
        index = {n: i for i, n in enumerate(names)}
        missing = [n for n in self.joint_names if n not in index]
        if missing:
            raise ComparisonError(f"{side} joint state lacks action joints {missing}; publish every "
                                  "joint of the contract's arm_joint_names")
        vector = np.array([positions[index[n]] for n in self.joint_names], np.float64)
        step = _period_index(t, self.horizon_step_s)
        pair = episode.joints.offer(step, side, vector)
        if pair is not None:
            real, world_model = pair
            episode.divergence.append((step, float(np.sqrt(np.mean((real - world_model) ** 2)))))
            episode.divergence_steps += 1

    def offer_image(self, side: str, view: str, stamp_s: float,
                    decode: Callable[[], np.ndarray]) -> None:
        """One camera frame of ``side``; ``decode()`` gives it as uint8 RGB, called only if it is used."""
        episode = self.running
        t = None if episode is None else stamp_s - episode.started_at
        if t is None or t < 0:
            return
        sample_start = _period_index(t, self.image_period_s) * self.image_period_s
        step = _period_index(sample_start, self.horizon_step_s)
        pair = episode.images[view].offer(step, side, decode)
        if pair is None:
            return
        real, world_model = match_resolution(pair[0](), pair[1]())
        episode.similarity[view].append(
            (step, min(psnr(real, world_model), PSNR_CAP_DB), ssim(real, world_model)))
        episode.similarity_steps += 1
        episode.filmstrips[view].offer(step, real, world_model)

    # ----- housekeeping -------------------------------------------------------------------------

    def tick(self, now: float) -> None:
        """Write the running episode's new rows; give up on ended episodes past their grace period."""
        if self.running is not None:
            self._flush(self.running)
        for episode in [e for e in self._episodes.values() if e.deadline is not None and e.deadline <= now]:
            missing = " or ".join(repr(side) for side in episode.sides if side not in episode.outcomes)
            self._give_up(episode, f"no OUTCOME event with side {missing} arrived within "
                          f"outcome_grace_s = {self.outcome_grace_s:g} s after ENDED. Fix: have that "
                          "side report its outcome, or raise outcome_grace_s")

    def close(self) -> None:
        """On shutdown: write what was measured and close recordings; open episodes stay incomplete."""
        for episode in list(self._episodes.values()):
            self._give_up(episode, "the comparator shut down before the episode finished")

    def _give_up(self, episode: _Episode, why: str) -> None:
        self._finish(episode)
        self._log.warning(f"episode {episode.episode_id!r} left incomplete: {why}")

    def _finish(self, episode: _Episode) -> None:
        """Write everything and close the recording, so a reader that sees the episode complete
        or aborted finds its rows and recording folders final; then stop tracking it."""
        self._flush(episode, final=True)
        if episode.recording is not None:
            episode.recording.close()
        if self.running is episode:
            self.running = None
        del self._episodes[episode.episode_id]

    def _flush(self, episode: _Episode, final: bool = False) -> None:
        """Write pending metric rows (and, when ``final``, the filmstrip) of an incomplete episode."""
        eid = episode.episode_id
        if episode.divergence:
            steps, rmse = zip(*episode.divergence)
            self.store.record_divergence(eid, steps, rmse)
            episode.divergence.clear()
        for view, rows in episode.similarity.items():
            if rows:
                steps, psnr_db, ssim_values = zip(*rows)
                self.store.record_image_similarity(eid, view, steps, psnr_db, ssim_values)
                rows.clear()
        if final:
            for view, strip in episode.filmstrips.items():
                for step, real_jpeg, world_model_jpeg in strip.kept:
                    for side, jpeg in (("real", real_jpeg), ("world_model", world_model_jpeg)):
                        self.store.add_filmstrip_frame(eid, view=view, horizon_step=step, side=side,
                                                       jpeg=jpeg)
                strip.kept.clear()
