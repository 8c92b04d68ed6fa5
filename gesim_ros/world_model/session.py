"""Episode and stepping logic of the `world_model` node, without ROS: what makes a world model look
like the robot on a timeline.

A :class:`WorldModelSession` owns one :class:`~gesim_ros.world_model.api.WorldModel` and calls it
from ONE worker thread only (backends are not thread-safe and a GE-Sim step can take seconds), so
the node's publishing thread never waits on inference. Predicted frames go on to an encoder thread
(resize to the cameras' sizes, encode, add to the timeline, in order), so the CPU encodes one chunk
while the model infers the next: at full camera resolution encoding costs as much as a fast model. The node feeds it synced observations
(:meth:`~WorldModelSession.sync`), commands (:meth:`~WorldModelSession.submit`) and episode events,
and polls :meth:`~WorldModelSession.tick` from its publishing timer. Where each prediction sits in
time, and which stream slot shows it, is the :class:`~gesim_ros.world_model.timeline.Timeline`'s job
(its module doc); checking and mapping commands onto the backend's layout is
:class:`~gesim_ros.world_model.command_mapping.CommandMapper`'s.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import cv2
import numpy as np

from gesim_ros.contract.command_validation import CommandRejected
from gesim_ros.contract.contract import Contract
from gesim_ros.contract.modes import WORLD_MODEL_MODES
from gesim_ros.plugins import plugin_config
from gesim_ros.world_model.api import CHUNK_MODES, GESIM_ACTION_DIM, GESIM_IMAGE_SIZE, Judge, WorldModel, WorldModelBackendError, WorldModelInputError, check_array, load_judge, load_world_model, validate_step_result
from gesim_ros.world_model.gripper_units import GripperUnits
from gesim_ros.world_model.trajectory_band import render_band
from gesim_ros.world_model.layouts import ViewLayout, step_chunked
from gesim_ros.world_model.command_mapping import CommandMapper, gesim_layout
from gesim_ros.world_model.timeline import EPS, Due, Episode, EpisodeReport, Sample, Timeline

_LOG = logging.getLogger(__name__)

ENCODE_BACKLOG = 2  # predicted chunks waiting for the encoder before inference waits (bounds memory)


class SessionConfigError(ValueError):
    """A node parameter or input file is unusable; the message names it, the problem and the fix."""


# --------------------------------------------------------------------------- set-up


def load_backend(name: str, config_json: str, server_url: str = "") -> WorldModel:
    """The backend registered as ``name``, built from a JSON object string (``server_url``, when
    given, is the config's ``url``: the address of a world-model server for ``gesim_http``).

    Raises :class:`~gesim_ros.world_model.api.UnknownWorldModelError` (listing the available names)
    for an unknown name and :class:`SessionConfigError` for a bad config.
    """
    try:
        config = plugin_config("backend_config", config_json, example='{"url": "http://127.0.0.1:9000"}')
        if server_url:
            config["url"] = server_url
        return load_world_model(name, config)
    except (ValueError, ImportError, TypeError) as exc:
        raise SessionConfigError(f"backend '{name}': {exc}") from exc


def load_episode_judge(name: str, config_json: str, backend: WorldModel) -> Judge | None:
    """The judge registered as ``name`` (``backend``: ``backend``'s own, if it is one; ``none``: None),
    built from a JSON object string. Raises UnknownJudgeError (listing the available names) for an
    unknown name and :class:`SessionConfigError` for a bad config."""
    try:
        config = plugin_config("judge_config", config_json, example='{"url": "http://127.0.0.1:9000"}')
        return load_judge(name, config, backend=backend)
    except (ValueError, ImportError, TypeError) as exc:
        raise SessionConfigError(f"judge '{name}': {exc}") from exc


# --------------------------------------------------------------------------- data


@dataclass(frozen=True)
class Observation:
    """What an episode starts from: per-camera RGB images and joint positions, plus the task."""

    episode_id: str
    task: str
    task_text: str
    seed: int
    images: Mapping[str, np.ndarray]  # contract camera key -> (H, W, 3) uint8 RGB
    joints: Mapping[str, float]       # contract joint name -> position; absent joints are held at 0


@dataclass(frozen=True)
class Status:
    mode: str
    episode_active: bool
    episode_id: str
    commands: int           # commands accepted
    rejected: int           # commands refused
    predicted_frames: int   # frames predicted and encoded (a compressed chunk has fewer than its steps)
    last_error: str


@dataclass
class _Step:
    """A command waiting for the worker: backend-layout targets from ``start``, one row per ``period``."""

    epoch: int
    targets: np.ndarray  # (L, D) backend layout
    period: float
    start: float


# --------------------------------------------------------------------------- session


@dataclass
class SessionSettings:
    """Everything about a session that is not the backend; the node fills it from its parameters."""

    mode: str = "shadow"
    stream_rates: Mapping[str, float] = field(default_factory=dict)  # stream key -> Hz
    output_sizes: Mapping[str, tuple[int, int]] = field(default_factory=dict)  # camera key -> (W, H)
    # (H, W) for backends that accept any size; None: the backend's preferred size, else GE-Sim's
    model_image_size: tuple[int, int] | None = None
    chunk_mode: str = "compress"
    judge_threshold: float = 0.5
    max_steps: int = 0  # 0: no limit
    own_clock: bool = False
    # After the runner's ENDED, how long (wall s) commands stamped before it are still taken: the policy's
    # last commands reach the model through the switch, one hop more than ENDED. 0: judge at once.
    end_grace_s: float = 0.0

    def __post_init__(self):
        if self.mode not in WORLD_MODEL_MODES:
            raise SessionConfigError(f"mode: '{self.mode}' is unknown. Fix: use one of {', '.join(WORLD_MODEL_MODES)}")
        if self.chunk_mode not in CHUNK_MODES:
            raise SessionConfigError(f"chunk_mode: '{self.chunk_mode}' is unknown. Fix: use one of "
                                     f"{', '.join(CHUNK_MODES)}")
        if self.own_clock and self.mode != "world_model":
            raise SessionConfigError("publish_clock: only mode world_model can own /clock; in shadow mode the "
                                     "robot's time is the reference. Fix: set publish_clock false")
        if not 0.0 <= self.judge_threshold <= 1.0:
            raise SessionConfigError(f"judge_threshold: {self.judge_threshold} is not a probability. "
                                     "Fix: use a value in [0, 1]")
        if self.max_steps < 0:
            raise SessionConfigError(f"max_steps: {self.max_steps} < 0. Fix: use 0 (no limit) or a step count")
        if not self.end_grace_s >= 0.0:
            raise SessionConfigError(f"end_grace_s: {self.end_grace_s} is not a duration >= 0. Fix: use e.g. 1.0, "
                                     "or 0 to judge right at the runner's ENDED")


class EpisodeStart:
    """How an episode of ``backend`` starts from an :class:`Observation`, in one place for the
    world-model node and eval-wm: the first frame (the backend's views at its model size), then
    ``reset``, ``set_task``, camera params (band-conditioned backends), ``set_episode_data`` and, where
    the backend takes it, ``set_episode_state`` with the measured joints. Also the mappings a session
    needs afterwards (views, GE-Sim layout, gripper units, forward kinematics)."""

    def __init__(self, backend: WorldModel, contract: Contract, model_image_size: tuple[int, int] | None = None,
                 backend_name: str = ""):
        self.name = backend_name or type(backend).__name__
        if backend.action_dim != GESIM_ACTION_DIM:
            raise SessionConfigError(f"backend '{self.name}': action_dim {backend.action_dim}; the world-model "
                                     f"node drives GE-Sim's {GESIM_ACTION_DIM}-D layout. Fix: use a 16-D backend")
        cameras = {t.view: t.key for t in contract.cameras if t.view}
        missing = [v for v in backend.views if v not in cameras]
        if missing:
            raise SessionConfigError(f"backend '{self.name}': view(s) {missing} have no camera in contract "
                                     f"{contract.source}. Fix: add 'view:' to those camera topics")
        self.backend = backend
        self.views = ViewLayout({v: cameras[v] for v in backend.views}, backend.views)
        self.layout = gesim_layout(contract)
        self.model_size = tuple(backend.image_size or model_image_size or backend.preferred_image_size
                                or GESIM_IMAGE_SIZE)
        limits = [contract.joint_limits[self.layout.names[d]] for d in self.layout.gripper_dims]
        try:
            self.grippers = GripperUnits(self.layout.gripper_dims, limits, backend.gripper_command_units,
                                         backend.gripper_state_units)
            # to_command of this one is metres -> the backend's STATE units (for the measured joints)
            self._state_units = GripperUnits(self.layout.gripper_dims, limits, backend.gripper_state_units,
                                             backend.gripper_state_units)
        except WorldModelInputError as exc:
            raise SessionConfigError(f"backend '{self.name}': {exc}") from None
        self.kinematics = None  # only band-conditioned backends need forward kinematics (and MuJoCo)
        if backend.needs_trajectory_band:
            from gesim_ros.twin.kinematics import G2Kinematics
            try:
                self.kinematics = G2Kinematics(contract, backend.views)
            except ValueError as exc:
                raise SessionConfigError(f"backend '{self.name}' needs trajectory bands: {exc}") from None
        self.band_joints: np.ndarray | None = None  # the last started episode's joints, contract order

    def first_frame(self, obs: Observation) -> np.ndarray:
        """``(3, V, H, W)`` float32 in [0, 1]: the backend's views of ``obs`` at the model size;
        SessionConfigError when a camera is missing."""
        h, w = self.model_size
        resized = {}
        for key in self.views.camera_keys:
            if key not in obs.images:
                raise SessionConfigError(f"observation has no image for camera '{key}' (has {sorted(obs.images)})")
            image = np.asarray(obs.images[key])
            resized[key] = image if image.shape[:2] == (h, w) else cv2.resize(image, (w, h),
                                                                                interpolation=cv2.INTER_AREA)
        return self.views.stack(resized)

    def episode_state(self, joints: Mapping[str, float]) -> np.ndarray:
        """Measured joints (contract names, metres; absent ones 0) as the backend's ``(16,)`` episode
        state: GE-Sim's layout, grippers in its gripper_state_units."""
        rows = np.array([[joints.get(n, 0.0) for n in self.layout.names]], np.float32)
        return self._state_units.to_command(rows)[0]

    def start(self, obs: Observation, first_frame: np.ndarray) -> None:
        """Start the backend's episode at ``obs`` from ``first_frame`` (from :meth:`first_frame`); the
        backend's exceptions propagate."""
        self.backend.reset()
        self.backend.set_task(obs.task_text)
        if self.kinematics is not None:
            self.band_joints = self.kinematics.complete(obs.joints)
            cameras, _ = self.kinematics.poses(self.band_joints[None])
            self.backend.set_camera_params(self.kinematics.intrinsics(self.model_size), cameras[:, 0])
        self.backend.set_episode_data(first_frame)
        if self.backend.takes_episode_state:
            self.backend.set_episode_state(self.episode_state(obs.joints))


class WorldModelSession:
    """A world-model backend as a timeline of predicted robot observations (see the module doc).

    ``encode(camera_key, rgb)`` turns a (H, W, 3) uint8 RGB image at the camera's output size into
    whatever the node publishes (a ready message); it runs in the encoder thread, off publishing.
    ``wall`` is the wall clock in seconds (tests pass a fake one).
    """

    def __init__(self, backend: WorldModel, contract: Contract, settings: SessionSettings,
                 encode: Callable[[str, np.ndarray], Any], *, judge: Judge | None = None, backend_name: str = "",
                 wall: Callable[[], float] = time.time, logger=_LOG):
        self.episode_start = EpisodeStart(backend, contract, settings.model_image_size, backend_name)
        self.backend, self.contract, self.settings, self.judge = backend, contract, settings, judge
        self.name = self.episode_start.name
        self.encode, self.wall, self.log = encode, wall, logger
        start = self.episode_start
        self.views, self.layout, self.model_size = start.views, start.layout, start.model_size
        self.grippers, self.kinematics = start.grippers, start.kinematics
        self.mapper = CommandMapper(contract, self.layout)
        self.joint_names = contract.joint_names
        self._action_cols = [self.joint_names.index(n) for n in self.layout.names]
        # The judge's views, picked from the backend's frames (None: all of them, in the backend's order).
        self._judge_views = None
        if judge is not None and judge.judge_views is not None:
            missing = [v for v in judge.judge_views if v not in backend.views]
            if missing:
                raise SessionConfigError(f"judge {type(judge).__name__} reads view(s) {missing} that backend "
                                         f"'{self.name}' does not predict (it has {list(backend.views)}). Fix: use "
                                         "a judge of these views, or judge 'none'")
            self._judge_views = [backend.views.index(v) for v in judge.judge_views]
        self.timeline = Timeline(settings.stream_rates, settings.own_clock)
        self._lock = threading.RLock()  # re-entered where a locked path records an error
        self._work = threading.Condition(self._lock)
        self._jobs: deque = deque()
        self._epoch = 0
        self._episode: Episode | None = None
        self._ending: tuple[float, float] | None = None  # (the ENDED stamp, wall time its grace ends)
        self._counts = {"commands": 0, "rejected": 0, "predicted_frames": 0}
        self._last_error = ""
        self._status_changed = True
        self._stopping = False
        self._worker = threading.Thread(target=self._run, name="world_model_worker", daemon=True)
        self._encoder = ThreadPoolExecutor(1, thread_name_prefix="world_model_encoder")  # one: FIFO order
        self._encoding = threading.BoundedSemaphore(ENCODE_BACKLOG)

    # ----------------------------------------------------------------- lifecycle

    def start(self) -> None:
        """Start the worker; its first job probes the backend with reset() (an unreachable server is reported)."""
        self._worker.start()
        self._enqueue(self._probe)

    def close(self) -> None:
        with self._work:
            self._stopping = True
            self._work.notify()
        self._worker.join(timeout=30)
        self._encoder.shutdown(wait=True, cancel_futures=True)
        self.backend.close()
        if self.judge is not None and self.judge is not self.backend:
            self.judge.close()

    # ----------------------------------------------------------------- inputs (any thread)

    def begin_sync(self) -> None:
        """A sync was requested: refuse commands and publish nothing until :meth:`sync` has started the
        new episode. Held, the previous episode's last prediction would go out restamped while the sync
        waits for its observation, and a recording of the new episode would begin with it."""
        with self._lock:
            self._epoch += 1
            self._episode = None
            self._ending = None
            self.timeline.clear()

    def sync(self, obs: Observation) -> tuple[bool, str]:
        """Start an episode from ``obs`` (blocks until the worker has reset the backend)."""
        self.begin_sync()
        done = threading.Event()
        result: list[tuple[bool, str]] = []
        self._enqueue(lambda: result.append(self._sync(obs)) or done.set())
        done.wait()
        return result[0]

    def submit(self, episode_id: str, names, positions, horizon: int, period_s: float,
               stamp_s: float | None = None) -> float:
        """Queue a command (absolute targets, contract joint names); returns when its step 0 starts.
        ``stamp_s`` is its header stamp: within ``end_grace_s`` of the runner's ENDED, a command stamped
        before ENDED still belongs to the episode.

        Raises CommandRejected (counted, and kept as last_error) when it is malformed or has no episode.
        """
        with self._lock:
            try:
                ep = self._episode
                if ep is None:
                    raise CommandRejected("no episode is synced; call the world_model_sync service first")
                if ep.ended and not (self._ending is not None and stamp_s is not None and stamp_s <= self._ending[0]):
                    raise CommandRejected(f"episode '{ep.episode_id}' has ended; sync the next episode")
                if episode_id and ep.episode_id and episode_id != ep.episode_id:
                    raise CommandRejected(f"command for episode '{episode_id}' but the world model runs "
                                          f"'{ep.episode_id}'; it is stale or the sync was missed")
                targets, period = self.mapper.map(names, positions, horizon, period_s)
            except CommandRejected as exc:
                self._counts["rejected"] += 1
                self._set_error(f"command rejected: {exc.reason}")
                raise
            limit = self.settings.max_steps
            if limit:
                targets = targets[: limit - ep.scheduled]
            ep.scheduled += len(targets)
            start = self.timeline.schedule(len(targets), period, self.timeline.now(self.wall()))
            self._counts["commands"] += 1
            self._status_changed = True
            self._jobs.append(_Step(self._epoch, targets, period, start))
            if limit and ep.scheduled >= limit:
                ep.ended, self._ending = True, None
                self._jobs.append(self._finisher(self._epoch, f"max_steps={limit} reached"))
            self._work.notify()
            return start

    def episode_started(self, episode_id: str, task_text: str) -> None:
        """A runner's STARTED event: adopt its id if the sync named none, and its task text."""
        with self._lock:
            ep = self._episode
            if ep is None or (ep.episode_id and ep.episode_id != episode_id):
                if ep is not None:
                    self.log.warning(f"episode '{episode_id}' started but the world model is synced to "
                                     f"'{ep.episode_id}'; call world_model_sync for it")
                return
            ep.episode_id = episode_id
            ep.task_text = task_text or ep.task_text
            self._status_changed = True

    def end_episode(self, episode_id: str, aborted: bool, stamp_s: float | None = None) -> None:
        """The runner ended (predict what is queued and what arrives stamped before ``stamp_s`` within
        ``end_grace_s``, then judge) or aborted (judge what exists) the episode."""
        with self._lock:
            ep = self._episode
            if ep is None or ep.ended or (ep.episode_id and episode_id and episode_id != ep.episode_id):
                return
            ep.ended = True
            self._status_changed = True
            if aborted:
                self._epoch += 1
                self.timeline.drop_pending()
                self._enqueue(self._finisher(self._epoch, "the runner aborted the episode"))
            elif self.settings.end_grace_s > 0 and stamp_s is not None:
                self._ending = (stamp_s, self.wall() + self.settings.end_grace_s)  # tick() judges after it
            else:
                self._enqueue(self._finisher(self._epoch, "the runner ended the episode"))

    # ----------------------------------------------------------------- outputs (publishing thread)

    def tick(self) -> Due:
        with self._lock:
            if self._ending is not None and self.wall() >= self._ending[1]:
                self._ending = None
                self._enqueue(self._finisher(self._epoch, "the runner ended the episode"))
            horizon = self.timeline.advance(self.wall())
            publications, judged, reports = self.timeline.due(horizon)
            changed, self._status_changed = self._status_changed, False
            clock = self.timeline.sim_time if self.settings.own_clock else None
        return Due(publications, judged, reports, clock, changed)

    def status(self) -> Status:
        with self._lock:
            ep = self._episode
            return Status(mode=self.settings.mode, episode_active=ep is not None and not ep.ended,
                          episode_id=ep.episode_id if ep else "", commands=self._counts["commands"],
                          rejected=self._counts["rejected"], predicted_frames=self._counts["predicted_frames"],
                          last_error=self._last_error)

    # ----------------------------------------------------------------- worker

    def _enqueue(self, job) -> None:
        with self._work:
            self._jobs.append(job)
            self._work.notify()

    def _next_job(self):
        """The next job; consecutive steps of one episode that run back to back at one control period
        are merged into one backend call of up to chunk_size steps (single-step joint commands that
        queued up during a slow inference cost one call, not one each)."""
        with self._work:
            while not self._jobs and not self._stopping:
                self._work.wait()
            if self._stopping:
                return None
            job = self._jobs.popleft()
            if not isinstance(job, _Step):
                return job
            while self._jobs and isinstance(nxt := self._jobs[0], _Step) and nxt.epoch == job.epoch \
                    and nxt.period == job.period \
                    and abs(nxt.start - (job.start + len(job.targets) * job.period)) < EPS \
                    and len(job.targets) + len(nxt.targets) <= self.backend.chunk_size:
                self._jobs.popleft()
                job = _Step(job.epoch, np.concatenate([job.targets, nxt.targets]), job.period, job.start)
            return job

    def _run(self) -> None:
        while (job := self._next_job()) is not None:
            if isinstance(job, _Step):
                self._step(job)
            else:
                job()

    def _probe(self) -> None:
        try:
            self.backend.reset()
        except Exception as exc:  # noqa: BLE001 - any plugin failure is reported, the node keeps running
            self._set_error(f"backend '{self.name}' is not reachable or failed to reset: {exc}; the node keeps "
                            "running and retries at the next world_model_sync", level="error")
            return
        self.log.info(f"backend '{self.name}' ready")

    def _sync(self, obs: Observation) -> tuple[bool, str]:
        failed = f"world_model_sync of episode '{obs.episode_id}' failed"
        try:
            first_frame = self.episode_start.first_frame(obs)
        except ValueError as exc:
            return self._sync_failed(f"{failed}: {exc}")
        try:
            self.episode_start.start(obs, first_frame)
        except Exception as exc:  # noqa: BLE001 - a failed sync is answered, the node keeps running
            return self._sync_failed(f"{failed}: backend '{self.name}': {type(exc).__name__}: {exc}")
        joints = np.array([obs.joints.get(n, 0.0) for n in self.joint_names], np.float64)
        ep = Episode(obs.episode_id, obs.task, obs.task_text, obs.seed)
        images = self._encode_views(self.views.unstack(first_frame))
        with self._lock:
            origin = self.timeline.now(self.wall())
            self.timeline.start(origin, Sample(origin, 0, ep, joints, np.zeros_like(joints), images))
            self.mapper.reset(obs.joints)
            self._episode, self._last_error = ep, ""
            self._status_changed = True
        message = f"episode '{obs.episode_id}' synced ({self.settings.mode}, task '{obs.task}')"
        self.log.info(message)
        return True, message

    def _sync_failed(self, message: str) -> tuple[bool, str]:
        with self._lock:
            self.timeline.clear()
        self._set_error(message, level="error")
        return False, message

    def _encode_views(self, images: Mapping[str, np.ndarray]) -> dict[str, Any]:
        """Payloads for one frame's per-camera RGB images: each resized to its camera's output size, encoded.
        One view after another, in the calling thread: a pool of view threads saved little (a full-res frame
        13.6 ms instead of 15.6 on 2 loaded cores) and, twice in the shadow-mode test, left the encoder waiting
        forever on a view whose thread sat idle, freezing the predicted stream mid-episode."""
        return {key: self._encode_view(key, rgb) for key, rgb in images.items()}

    def _encode_view(self, key: str, rgb: np.ndarray) -> Any:
        w, h = self.settings.output_sizes.get(key, rgb.shape[1::-1])
        if rgb.shape[:2] != (h, w):
            shrink = w * h < rgb.shape[0] * rgb.shape[1]
            rgb = cv2.resize(rgb, (w, h), interpolation=cv2.INTER_AREA if shrink else cv2.INTER_LINEAR)
        return self.encode(key, rgb)

    def _step(self, job: _Step) -> None:
        """Infer one (merged) command, then hand the frames to the encoder; a failure aborts the episode."""
        with self._lock:
            ep = self._episode
            if job.epoch != self._epoch or ep is None:
                return  # the episode it belonged to was re-synced or aborted
        try:
            result = step_chunked(self._step_backend, job.targets, self.backend.chunk_size,
                                  self.settings.chunk_mode, self.layout.gripper_dims)
            frames, state = self._check_result(result, len(job.targets))
            judge = self._judge(frames, state, ep.task_text)
        except Exception as exc:  # noqa: BLE001 - any backend failure aborts the episode, not the node
            self._abort(job.epoch, ep, f"backend '{self.name}' failed at step {ep.steps} of episode "
                                       f"'{ep.episode_id}': {type(exc).__name__}: {exc}")
            return
        rows = (np.arange(len(job.targets)) if len(frames) == len(job.targets)
                else np.round(np.linspace(0, len(job.targets) - 1, len(frames))).astype(int))
        if state is None:  # a video-only backend: the joints are assumed to reach their targets
            state = job.targets[rows]
        self._encoding.acquire()  # released by _add_samples
        self._encoder.submit(self._add_samples, job, ep, self.views.unstack(frames), state, judge, rows)

    def _step_backend(self, targets: np.ndarray):
        """One backend step of ``targets (L <= chunk_size, D)`` in contract units: its band first where
        the backend needs one, the grippers in the backend's command units (_check_result converts the
        state back)."""
        if self.kinematics is not None:
            self.backend.set_episode_traj(*self._band(targets))
        return self.backend.step(self.grippers.to_command(targets))

    def _band(self, targets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """GE-Sim's trajectory band of these targets and its cameras: arms from the targets, head and waist
        held where the episode started (only the arms move in GE-Sim's episodes)."""
        rows = np.tile(self.episode_start.band_joints, (len(targets), 1))
        rows[:, self._action_cols] = targets
        cameras, tools = self.kinematics.poses(rows)
        grippers = np.clip(self.grippers.normalised(targets[:, self.layout.gripper_dims]), 0.0, 1.0)
        band = render_band(tools, grippers, cameras, self.kinematics.intrinsics(self.model_size), self.model_size)
        return band, cameras.astype(np.float32)

    def _add_samples(self, job: _Step, ep: Episode, images: dict[str, np.ndarray], state: np.ndarray,
                     judge, rows: np.ndarray) -> None:
        """Encoder thread: one sample per predicted frame, added as soon as it is encoded."""
        try:
            for i, row in enumerate(rows):
                payloads = self._encode_views({key: frames[i] for key, frames in images.items()})
                with self._lock:
                    if job.epoch != self._epoch:
                        return
                    prev = self.timeline.last
                    joints = prev.joints.copy()
                    joints[self._action_cols] = state[i]
                    t = job.start + (row + 1) * job.period
                    velocity = (joints - prev.joints) / max(t - max(prev.t, job.start), EPS)  # moving time only
                    step = ep.steps + int(row) + 1
                    self.timeline.add(Sample(t, step, ep, joints, velocity, payloads,
                                             None if judge is None else (float(judge[0][i]), float(judge[1][i]))))
                    self._counts["predicted_frames"] += 1
            with self._lock:
                if job.epoch == self._epoch:
                    ep.steps += len(job.targets)
                    ep.success_probability = None if judge is None else float(judge[0][-1])
                    self._status_changed = True  # progress shows in the next status, not only the 1 Hz one
        except Exception as exc:  # noqa: BLE001 - e.g. an encoder error: the episode cannot be shown
            self._abort(job.epoch, ep, f"publishing the predictions of episode '{ep.episode_id}' failed at step "
                                       f"{ep.steps}: {type(exc).__name__}: {exc}")
        finally:
            self._encoding.release()

    def _check_result(self, result, steps: int) -> tuple[np.ndarray, np.ndarray | None]:
        """Frames and state of a step, or WorldModelBackendError saying what is wrong with them."""
        result = validate_step_result(result, self.backend)
        expected = steps if steps <= self.backend.chunk_size or self.settings.chunk_mode == "split" \
            else self.backend.chunk_size
        if len(result.frames) != expected:
            raise WorldModelBackendError(f"returned {len(result.frames)} frames for {steps} action steps "
                                         f"(expected {expected})")
        if result.frames.shape[-2:] != self.model_size:
            raise WorldModelBackendError(f"returned frames of {result.frames.shape[-2:]} (H, W); the episode "
                                         f"was started at {self.model_size}")
        if result.state is not None and result.state.shape[1] != len(self.layout.names):
            raise WorldModelBackendError(f"returned state of {result.state.shape[1]} joints; expected "
                                         f"{len(self.layout.names)}")
        return result.frames, None if result.state is None else self.grippers.from_state(result.state)

    def _judge(self, frames, state, task_text: str) -> tuple[np.ndarray, np.ndarray] | None:
        if self.judge is None:
            return None
        views = frames if self._judge_views is None else frames[:, :, self._judge_views]
        verdict = self.judge.judge(views, state, task_text)
        spec = [("T", len(frames))]
        return (check_array("success_prob", verdict.success_prob, spec, unit_range=True),
                check_array("progress", verdict.progress, spec, unit_range=True))

    def _finisher(self, epoch: int, why: str):
        """A worker job that judges the episode after every sample before it is on the timeline."""
        return lambda: self._encoder.submit(self._finish, epoch, why)

    def _finish(self, epoch: int, why: str) -> None:
        """Encoder thread: report the outcome once the timeline shows the episode's last prediction: the
        judge's, or unknown without one (the comparison counts it unjudged)."""
        with self._lock:
            ep, last = self._episode, self.timeline.last
            if epoch != self._epoch or ep is None or last is None:
                return
            p, threshold = ep.success_probability, self.settings.judge_threshold
            if self.judge is None:
                outcome, prob = "unknown", math.nan
                verdict = (f"outcome unknown after {ep.steps} steps: no judge (judge 'none', or 'backend' with "
                           f"backend '{self.name}', which is no Judge)")
            elif p is None:
                outcome, prob = "unknown", math.nan
                verdict = f"judged unknown after {ep.steps} steps (nothing was predicted)"
            else:
                outcome, prob = ("success" if p >= threshold else "failure"), p
                verdict = (f"judged {outcome} after {ep.steps} steps (success probability {p:.3f}, "
                           f"threshold {threshold:g})")
            label = outcome if outcome != "unknown" else ""
            self.timeline.post(last.t, EpisodeReport("outcome", ep, outcome, prob, label, f"{why}; {verdict}"))

    def _abort(self, epoch: int, ep: Episode, reason: str) -> None:
        with self._lock:
            if epoch != self._epoch:
                return
            self._epoch += 1
            ep.ended = True
            self._episode, self._ending = None, None
            self.timeline.clear()
            self.timeline.post(-math.inf, EpisodeReport("aborted", ep, "unknown", math.nan, "backend_error", reason))
        self._set_error(f"{reason}; episode aborted, call world_model_sync to start the next one", level="error")

    def _set_error(self, message: str, level: str = "warning") -> None:
        """Keep ``message`` as last_error (published in the status) and log it."""
        with self._lock:
            self._last_error = message
            self._status_changed = True
        getattr(self.log, level)(message)
