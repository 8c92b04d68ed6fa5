"""Durable SQLite store of comparison episodes (shadow mode, and real or world-model-only runs).

One SQLite file holds a whole comparison campaign.  It runs in WAL mode so one
writer (the comparator node) and any number of readers (reports, notebooks) can
use it at once, with ``synchronous=FULL`` so a committed write survives power loss.
Every API call is its own committed transaction: a crash loses at most the call
in flight.  ``start_episode`` commits the episode as ``'incomplete'`` at once, so an
episode interrupted by a crash stays visible as ``'incomplete'`` after reopening
(list them with :meth:`EpisodeStore.incomplete_episodes`); nothing rewrites them.

The schema version lives in ``PRAGMA user_version``; :data:`~gesim_ros.comparator.store_schema.MIGRATIONS` is applied
in order when a writer opens the file.  A file written by a newer gesim_ros is refused
untouched; readers open any version from :data:`OLDEST_READABLE_VERSION` on without writing it,
and see an older file under the current column names.

Schema, version 3 (plain SQL works; timestamps are Unix seconds, e.g.
``SELECT datetime(started_at, 'unixepoch') FROM episodes``):

``episodes`` -- one row per comparison episode
    episode_id TEXT PRIMARY KEY, task TEXT, policy TEXT, seed INTEGER NULL,
    mode TEXT (the backend mode: 'shadow', 'real' or 'world_model'; it decides which
    outcomes complete the episode, :data:`SIDES_BY_MODE`),
    status TEXT 'incomplete' | 'complete' | 'aborted',
    started_at REAL, ended_at REAL NULL,
    real_outcome, world_model_outcome TEXT 'success' | 'failure' | 'unknown' | NULL (not yet
    reported, or the side the mode does not run); 'unknown' is a reported outcome that
    decides nothing (a world model without a judge): the episode completes unjudged, and
    agreement figures leave it out (``WHERE 'unknown' NOT IN (real_outcome, world_model_outcome)``),
    real_judge_success_prob, world_model_judge_success_prob REAL NULL
    (the success judge's P(success) for that side, when a judge decided it),
    real_time_to_outcome_s, world_model_time_to_outcome_s REAL NULL
    (seconds from episode start until that side's outcome was decided),
    real_mcap_path, world_model_mcap_path TEXT NULL (recordings of each side),
    abort_reason TEXT NULL.
    Outcome, judge and timing columns exist per side (the sides of
    :data:`gesim_ros.contract.modes.SIDES`) because the real and the world-model
    outcome are decided independently; the side a mode does not run stays NULL.
``divergence`` -- joint-space divergence of the model's prediction from reality
    episode_id, horizon_step INTEGER >= 0, joint_rmse REAL >= 0 (rad);
    primary key (episode_id, horizon_step).
``image_similarity`` -- predicted vs real camera frames
    episode_id, view TEXT, horizon_step, psnr REAL (dB), ssim REAL;
    primary key (episode_id, view, horizon_step).
``frames`` -- a few JPEG thumbnails per episode for the report's filmstrip
    episode_id, view, horizon_step, side 'real' | 'world_model', jpeg BLOB;
    primary key (episode_id, view, horizon_step, side).

Version 1 had the same tables; version 2 admits the outcome 'unknown'; version 3 names the world
model's side 'world_model' (it was 'model': the ``model_*`` columns and the frames' side), as the
rest of gesim_ros does.

Rows are never overwritten: recording the same thing twice is an error.
"""

from __future__ import annotations

import math
import numbers
import os
import sqlite3
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Iterator, Sequence

from gesim_ros.comparator.store_schema import (MIGRATIONS, OLDEST_READABLE_VERSION, SCHEMA_VERSION, V3_FRAME_SIDE,
                                              V3_RENAMED_COLUMNS, WORLD_MODEL_SIDE_VERSION)
from gesim_ros.contract.modes import EPISODE_MODES, SIDES, SIDES_BY_MODE

STATUSES = ("incomplete", "complete", "aborted")
UNKNOWN = "unknown"  # a reported outcome that decides nothing: the episode is unjudged
OUTCOMES = ("success", "failure", UNKNOWN)
MAX_FRAME_BYTES = 512 * 1024

class EpisodeStoreError(ValueError):
    """Bad input or an operation the episode's state forbids; nothing was written."""


@dataclass(frozen=True)
class Episode:
    """One row of the ``episodes`` table."""

    episode_id: str
    task: str
    policy: str
    seed: int | None
    mode: str
    status: str
    started_at: float
    ended_at: float | None
    real_outcome: str | None
    world_model_outcome: str | None
    real_judge_success_prob: float | None
    world_model_judge_success_prob: float | None
    real_time_to_outcome_s: float | None
    world_model_time_to_outcome_s: float | None
    real_mcap_path: str | None
    world_model_mcap_path: str | None
    abort_reason: str | None

    @property
    def agrees(self) -> bool | None:
        """Whether both sides reached the same outcome; None while either is missing or 'unknown'."""
        return agreement(self.real_outcome, self.world_model_outcome)


def agreement(real_outcome: str | None, world_model_outcome: str | None) -> bool | None:
    """Whether two outcomes agree; None (unjudged) where either is missing or 'unknown'."""
    if real_outcome in (None, UNKNOWN) or world_model_outcome in (None, UNKNOWN):
        return None
    return real_outcome == world_model_outcome


#: how progress lines and logs name an :func:`agreement`
VERDICTS = {True: "agree", False: "DISAGREE", None: "unjudged"}


_EPISODE_COLUMNS = ", ".join(f.name for f in fields(Episode))


@dataclass(frozen=True)
class DivergenceRow:
    episode_id: str
    horizon_step: int
    joint_rmse: float


@dataclass(frozen=True)
class ImageSimilarityRow:
    episode_id: str
    view: str
    horizon_step: int
    psnr: float
    ssim: float


@dataclass(frozen=True)
class FilmstripFrame:
    episode_id: str
    view: str
    horizon_step: int
    side: str
    jpeg: bytes


def _text(value: object, name: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise EpisodeStoreError(f"{name} must be a non-empty string, got {value!r}")
    return value


def _choice(value: object, name: str, allowed: tuple[str, ...]) -> str:
    if value not in allowed:
        raise EpisodeStoreError(
            f"{name} must be one of {', '.join(map(repr, allowed))}, got {value!r}")
    return value


def _number(value: object, name: str, *, low: float | None = None,
            high: float | None = None) -> float:
    # numbers.Real also admits numpy scalars, which a node computing metrics will pass.
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise EpisodeStoreError(f"{name} must be a number, got {value!r}")
    number = float(value)
    if not math.isfinite(number):
        raise EpisodeStoreError(f"{name} must be finite, got {value!r}")
    if (low is not None and number < low) or (high is not None and number > high):
        raise EpisodeStoreError(
            f"{name} = {number!r} is outside [{'-inf' if low is None else low}, "
            f"{'inf' if high is None else high}]")
    return number


def _optional_number(value: object, name: str, **bounds: float) -> float | None:
    return None if value is None else _number(value, name, **bounds)


def _sides(mode: str) -> tuple[str, ...]:
    # Stores written before modes decided completion may hold other mode names: those were shadow runs.
    return SIDES_BY_MODE[mode] if mode in EPISODE_MODES else SIDES


def _integer(value: object, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise EpisodeStoreError(f"{name} must be an integer, got {value!r}")
    return int(value)


def _step(value: object, name: str) -> int:
    step = _integer(value, name)
    if step < 0:
        raise EpisodeStoreError(f"{name} must be >= 0, got {step}")
    return step


def _steps(horizon_steps: Sequence[int], n_values: int, values_name: str) -> list[int]:
    steps = [_step(s, f"horizon_steps[{i}]") for i, s in enumerate(horizon_steps)]
    if len(steps) != n_values:
        raise EpisodeStoreError(
            f"horizon_steps has {len(steps)} entries but {values_name} has {n_values}; "
            "pass one value per horizon step")
    if not steps:
        raise EpisodeStoreError("horizon_steps is empty; pass at least one step")
    if len(set(steps)) != len(steps):
        duplicate = next(s for s in steps if steps.count(s) > 1)
        raise EpisodeStoreError(f"horizon_step {duplicate} appears twice in one call")
    return steps


class EpisodeStore:
    """Append-only record of comparison episodes in one SQLite file.

    Safe to share between threads of one process (calls are serialised); use one
    writing process per file and open readers with ``readonly=True``.
    """

    def __init__(self, path: str | os.PathLike, *, readonly: bool = False,
                 busy_timeout_s: float = 10.0) -> None:
        self._path = Path(path)
        self._readonly = readonly
        self._lock = threading.Lock()
        if readonly and not self._path.is_file():
            raise EpisodeStoreError(
                f"{self._path}: no such episode store; check the path (a writer creates it "
                "with EpisodeStore(path))")
        self._conn = self._connect(busy_timeout_s)
        try:
            self._prepare()
        except BaseException:
            self._conn.close()
            raise

    def _connect(self, busy_timeout_s: float) -> sqlite3.Connection:
        target = str(self._path)
        if self._readonly:
            target = self._path.resolve().as_uri() + "?mode=ro"
        try:
            conn = sqlite3.connect(target, uri=self._readonly, isolation_level=None,
                                   check_same_thread=False)
        except sqlite3.OperationalError as exc:
            raise EpisodeStoreError(
                f"{self._path}: cannot open episode store ({exc}); check that the directory "
                "exists and is writable") from exc
        conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_s * 1000)}")
        return conn

    def _prepare(self) -> None:
        # Read the version before anything that writes (journal_mode, migrations),
        # so a file we must refuse is left byte-for-byte as it was.
        try:
            version = self._conn.execute("PRAGMA user_version").fetchone()[0]
            tables = [row[0] for row in self._conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")]
        except sqlite3.DatabaseError as exc:
            raise EpisodeStoreError(
                f"{self._path} is not a readable SQLite database ({exc}); pass the path of "
                "a gesim_ros episode store or a new file name") from exc
        if version > SCHEMA_VERSION:
            raise EpisodeStoreError(
                f"{self._path} has episode-store schema version {version}, but this gesim_ros "
                f"only knows versions up to {SCHEMA_VERSION}; it was written by a newer "
                "gesim_ros. Upgrade gesim_ros to open it. The file was not modified.")
        if version == 0 and tables:
            raise EpisodeStoreError(
                f"{self._path} is an SQLite database with tables {tables} but no episode-store "
                "schema version; it is not a gesim_ros episode store. Pass a new file name.")
        if self._readonly:
            if version < OLDEST_READABLE_VERSION:
                raise EpisodeStoreError(
                    f"{self._path} has schema version {version}, older than {OLDEST_READABLE_VERSION}; "
                    "open it once with EpisodeStore(path) (writable) to migrate it")
            if version < WORLD_MODEL_SIDE_VERSION:
                self._show_as_version_3()
            return
        journal = self._conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        if journal.lower() != "wal":
            raise EpisodeStoreError(
                f"{self._path}: SQLite refused WAL mode (journal_mode is {journal!r}); "
                "put the store on a local file system")
        self._conn.execute("PRAGMA synchronous = FULL")
        # Off while migrating (a rebuilt parent table would trip them); the pragma is a no-op inside
        # a transaction, so it is switched between them.
        self._conn.execute("PRAGMA foreign_keys = OFF")
        for target in range(version + 1, SCHEMA_VERSION + 1):
            with self._write() as conn:
                for statement in MIGRATIONS[target - 1]:
                    conn.execute(statement)
                conn.execute(f"PRAGMA user_version = {target}")
        self._conn.execute("PRAGMA foreign_keys = ON")

    def _show_as_version_3(self) -> None:
        """Read an older file under version 3's names: TEMP views of this connection shadow its
        ``episodes`` and ``frames`` tables, so the file itself is not written."""
        renamed = dict(V3_RENAMED_COLUMNS)
        columns = [row[1] for row in self._conn.execute("PRAGMA main.table_info(episodes)")]
        self._conn.execute(
            "CREATE TEMP VIEW episodes AS SELECT "
            + ", ".join(f"{c} AS {renamed[c]}" if c in renamed else c for c in columns)
            + " FROM main.episodes")
        self._conn.execute(f"CREATE TEMP VIEW frames AS SELECT episode_id, view, horizon_step, "
                           f"{V3_FRAME_SIDE} AS side, jpeg FROM main.frames")

    @property
    def path(self) -> Path:
        return self._path

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def __enter__(self) -> EpisodeStore:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One committed transaction; any exception rolls the whole call back."""
        if self._readonly:
            raise EpisodeStoreError(f"{self._path} was opened readonly=True; cannot write")
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                yield self._conn
                self._conn.execute("COMMIT")
            except BaseException:
                # Also covers a failed COMMIT (e.g. disk full), which leaves the transaction open.
                if self._conn.in_transaction:
                    self._conn.execute("ROLLBACK")
                raise

    def _open_episode(self, conn: sqlite3.Connection, episode_id: object,
                      action: str) -> tuple[dict[str, str | None], str]:
        """Check the episode exists and is still incomplete; return its outcomes by side and its mode."""
        row = conn.execute(
            f"SELECT status, mode, {', '.join(f'{side}_outcome' for side in SIDES)} FROM episodes "
            "WHERE episode_id = ?", (episode_id,)).fetchone()
        if row is None:
            raise EpisodeStoreError(
                f"cannot {action}: episode {episode_id!r} was never started in {self._path}; "
                "call start_episode() first")
        status, mode, *outcomes = row
        if status != "incomplete":
            raise EpisodeStoreError(
                f"cannot {action}: episode {episode_id!r} is already {status}; a finished "
                "episode is never modified, so record everything before ending it")
        return dict(zip(SIDES, outcomes)), mode

    def start_episode(self, episode_id: str, *, task: str, policy: str,
                      seed: int | None = None, mode: str = "shadow",
                      started_at: float | None = None) -> None:
        """Commit a new episode as 'incomplete' so that a crash still leaves a trace of it."""
        _text(episode_id, "episode_id")
        _text(task, "task")
        _text(policy, "policy")
        _choice(mode, "mode", EPISODE_MODES)
        seed = None if seed is None else _integer(seed, "seed")
        started = time.time() if started_at is None else _number(started_at, "started_at")
        with self._write() as conn:
            existing = conn.execute("SELECT status FROM episodes WHERE episode_id = ?",
                                    (episode_id,)).fetchone()
            if existing is not None:
                raise EpisodeStoreError(
                    f"episode {episode_id!r} already exists in {self._path} (status "
                    f"{existing[0]}); episode ids must be unique, e.g. include a timestamp "
                    "or UUID")
            conn.execute(
                "INSERT INTO episodes (episode_id, task, policy, seed, mode, status, started_at)"
                " VALUES (?, ?, ?, ?, ?, 'incomplete', ?)",
                (episode_id, task, policy, seed, mode, started))

    def record_outcome(self, episode_id: str, side: str, outcome: str, *,
                       judge_success_prob: float | None = None,
                       time_to_outcome_s: float | None = None,
                       mcap_path: str | os.PathLike | None = None) -> None:
        """Record one side's outcome ('real' robot or 'world_model'), once per side."""
        _choice(side, "side", SIDES)
        _choice(outcome, "outcome", OUTCOMES)
        prob = _optional_number(judge_success_prob, "judge_success_prob", low=0.0, high=1.0)
        seconds = _optional_number(time_to_outcome_s, "time_to_outcome_s", low=0.0)
        path = None if mcap_path is None else os.fspath(mcap_path)
        with self._write() as conn:
            outcomes, mode = self._open_episode(conn, episode_id, f"record the {side} outcome")
            if side not in _sides(mode):
                raise EpisodeStoreError(
                    f"episode {episode_id!r} runs in mode {mode!r}, which has no {side} side; record "
                    f"only {' and '.join(_sides(mode))} outcomes for it")
            previous = outcomes[side]
            if previous is not None:
                raise EpisodeStoreError(
                    f"episode {episode_id!r} already has {side} outcome {previous!r}; "
                    "outcomes are recorded once and never overwritten")
            # Column names come from the validated `side`, never from caller text.
            conn.execute(
                f"UPDATE episodes SET {side}_outcome = ?, {side}_judge_success_prob = ?, "
                f"{side}_time_to_outcome_s = ?, {side}_mcap_path = ? WHERE episode_id = ?",
                (outcome, prob, seconds, path, episode_id))

    def record_divergence(self, episode_id: str, horizon_steps: Sequence[int],
                          joint_rmse: Sequence[float]) -> None:
        """Record joint RMSE (rad) between predicted and real joints at each horizon step."""
        steps = _steps(horizon_steps, len(joint_rmse), "joint_rmse")
        values = [_number(v, f"joint_rmse[{i}]", low=0.0) for i, v in enumerate(joint_rmse)]
        with self._write() as conn:
            self._open_episode(conn, episode_id, "record divergence")
            self._refuse_existing_steps(
                conn, "SELECT horizon_step FROM divergence WHERE episode_id = ?",
                (episode_id,), steps, f"episode {episode_id!r} divergence")
            conn.executemany(
                "INSERT INTO divergence (episode_id, horizon_step, joint_rmse) VALUES (?, ?, ?)",
                [(episode_id, s, v) for s, v in zip(steps, values)])

    def record_image_similarity(self, episode_id: str, view: str,
                                horizon_steps: Sequence[int], psnr: Sequence[float],
                                ssim: Sequence[float]) -> None:
        """Record PSNR (dB) and SSIM of predicted vs real frames of one camera view.

        PSNR must be finite: identical frames give infinite PSNR, so cap it (e.g. at
        100 dB) before recording.
        """
        _text(view, "view")
        steps = _steps(horizon_steps, len(psnr), "psnr")
        if len(ssim) != len(steps):
            raise EpisodeStoreError(
                f"horizon_steps has {len(steps)} entries but ssim has {len(ssim)}; "
                "pass one value per horizon step")
        psnr_values = [_number(v, f"psnr[{i}]") for i, v in enumerate(psnr)]
        ssim_values = [_number(v, f"ssim[{i}]", low=-1.0, high=1.0) for i, v in enumerate(ssim)]
        with self._write() as conn:
            self._open_episode(conn, episode_id, "record image similarity")
            self._refuse_existing_steps(
                conn,
                "SELECT horizon_step FROM image_similarity WHERE episode_id = ? AND view = ?",
                (episode_id, view), steps, f"episode {episode_id!r} view {view!r} similarity")
            conn.executemany(
                "INSERT INTO image_similarity (episode_id, view, horizon_step, psnr, ssim) "
                "VALUES (?, ?, ?, ?, ?)",
                [(episode_id, view, s, p, q) for s, p, q in zip(steps, psnr_values, ssim_values)])

    @staticmethod
    def _refuse_existing_steps(conn: sqlite3.Connection, query: str, params: tuple,
                               steps: list[int], what: str) -> None:
        existing = {row[0] for row in conn.execute(query, params)}
        clash = sorted(existing.intersection(steps))
        if clash:
            raise EpisodeStoreError(
                f"{what} already has horizon steps {clash}; rows are never overwritten")

    def add_filmstrip_frame(self, episode_id: str, *, view: str, horizon_step: int, side: str,
                            jpeg: bytes) -> None:
        """Store one small JPEG thumbnail (real or world-model frame) for the report's filmstrip."""
        _text(view, "view")
        horizon_step = _step(horizon_step, "horizon_step")
        _choice(side, "side", SIDES)
        if not isinstance(jpeg, (bytes, bytearray, memoryview)):
            raise EpisodeStoreError(f"jpeg must be bytes, got {type(jpeg).__name__}")
        data = bytes(jpeg)
        if not data.startswith(b"\xff\xd8\xff"):
            raise EpisodeStoreError(
                "jpeg does not start with the JPEG marker FF D8 FF; encode the frame as JPEG "
                "(e.g. cv2.imencode('.jpg', image)[1].tobytes())")
        if len(data) > MAX_FRAME_BYTES:
            raise EpisodeStoreError(
                f"jpeg is {len(data)} bytes, over the {MAX_FRAME_BYTES}-byte limit for "
                "filmstrip thumbnails; downscale the frame first")
        with self._write() as conn:
            self._open_episode(conn, episode_id, "add a filmstrip frame")
            clash = conn.execute(
                "SELECT 1 FROM frames WHERE episode_id = ? AND view = ? AND horizon_step = ? "
                "AND side = ?", (episode_id, view, horizon_step, side)).fetchone()
            if clash is not None:
                raise EpisodeStoreError(
                    f"episode {episode_id!r} already has a {side} frame for view {view!r} at "
                    f"horizon step {horizon_step}; frames are never overwritten")
            conn.execute(
                "INSERT INTO frames (episode_id, view, horizon_step, side, jpeg) "
                "VALUES (?, ?, ?, ?, ?)", (episode_id, view, horizon_step, side, data))

    def _end(self, conn: sqlite3.Connection, episode_id: str, ended_at: float | None) -> float:
        started = conn.execute("SELECT started_at FROM episodes WHERE episode_id = ?",
                               (episode_id,)).fetchone()[0]
        ended = time.time() if ended_at is None else _number(ended_at, "ended_at")
        if ended < started:
            raise EpisodeStoreError(
                f"ended_at {ended!r} is before episode {episode_id!r} started_at {started!r}; "
                "pass timestamps from the same clock")
        return ended

    def complete_episode(self, episode_id: str, *, ended_at: float | None = None) -> None:
        """Mark a finished episode complete; the outcomes its mode needs must have been recorded."""
        with self._write() as conn:
            outcomes, mode = self._open_episode(conn, episode_id, "complete the episode")
            missing = [side for side in _sides(mode) if outcomes[side] is None]
            if missing:
                raise EpisodeStoreError(
                    f"cannot complete {mode} episode {episode_id!r}: no {' or '.join(missing)} outcome "
                    "recorded; call record_outcome() for each side its mode runs, or abort_episode()")
            ended = self._end(conn, episode_id, ended_at)
            conn.execute(
                "UPDATE episodes SET status = 'complete', ended_at = ? WHERE episode_id = ?",
                (ended, episode_id))

    def abort_episode(self, episode_id: str, reason: str, *,
                      ended_at: float | None = None) -> None:
        """Mark an episode aborted (excluded from agreement figures), with the reason why."""
        _text(reason, "reason")
        with self._write() as conn:
            self._open_episode(conn, episode_id, "abort the episode")
            ended = self._end(conn, episode_id, ended_at)
            conn.execute(
                "UPDATE episodes SET status = 'aborted', ended_at = ?, abort_reason = ? "
                "WHERE episode_id = ?", (ended, reason, episode_id))

    def _read(self, query: str, params: tuple = ()) -> list[tuple]:
        with self._lock:
            return self._conn.execute(query, params).fetchall()

    def episode(self, episode_id: str) -> Episode:
        rows = self._read(f"SELECT {_EPISODE_COLUMNS} FROM episodes WHERE episode_id = ?",
                          (episode_id,))
        if not rows:
            raise EpisodeStoreError(f"no episode {episode_id!r} in {self._path}")
        return Episode(*rows[0])

    def episodes(self, *, status: str | None = None, task: str | None = None,
                 policy: str | None = None) -> list[Episode]:
        """Episodes matching all given filters, oldest first."""
        clauses, params = [], []
        if status is not None:
            _choice(status, "status", STATUSES)
        for column, value in (("status", status), ("task", task), ("policy", policy)):
            if value is not None:
                clauses.append(f"{column} = ?")
                params.append(value)
        where = f" WHERE {' AND '.join(clauses)}" if clauses else ""
        rows = self._read(f"SELECT {_EPISODE_COLUMNS} FROM episodes{where} "
                          "ORDER BY started_at, episode_id", tuple(params))
        return [Episode(*row) for row in rows]

    def incomplete_episodes(self) -> list[Episode]:
        """Episodes still 'incomplete': running now, or interrupted by a crash."""
        return self.episodes(status="incomplete")

    def divergence(self, episode_id: str | None = None) -> list[DivergenceRow]:
        """Divergence rows of one episode, or of all episodes."""
        query = "SELECT episode_id, horizon_step, joint_rmse FROM divergence"
        if episode_id is None:
            rows = self._read(query + " ORDER BY episode_id, horizon_step")
        else:
            rows = self._read(query + " WHERE episode_id = ? ORDER BY horizon_step",
                              (episode_id,))
        return [DivergenceRow(*row) for row in rows]

    def image_similarity(self, episode_id: str | None = None) -> list[ImageSimilarityRow]:
        """Image-similarity rows of one episode, or of all episodes."""
        query = "SELECT episode_id, view, horizon_step, psnr, ssim FROM image_similarity"
        if episode_id is None:
            rows = self._read(query + " ORDER BY episode_id, view, horizon_step")
        else:
            rows = self._read(query + " WHERE episode_id = ? ORDER BY view, horizon_step",
                              (episode_id,))
        return [ImageSimilarityRow(*row) for row in rows]

    def frame_counts(self) -> dict[str, int]:
        """Number of filmstrip frames per episode that has any."""
        return dict(self._read("SELECT episode_id, count(*) FROM frames GROUP BY episode_id"))

    def filmstrip_frames(self, episode_id: str) -> list[FilmstripFrame]:
        """Thumbnails of one episode ordered by view, step, then side."""
        rows = self._read(
            "SELECT episode_id, view, horizon_step, side, jpeg FROM frames WHERE episode_id = ? "
            "ORDER BY view, horizon_step, side", (episode_id,))
        return [FilmstripFrame(*row) for row in rows]
