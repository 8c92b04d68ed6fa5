"""Episode store: schema, durability, crash recovery and refusal of bad input."""

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import cv2
import numpy as np
import pytest

from gesim_ros.comparator.store import EpisodeStore, EpisodeStoreError
from gesim_ros.comparator.store_schema import MIGRATIONS, SCHEMA_VERSION

REPO_ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def db(tmp_path):
    return tmp_path / "episodes.db"


@pytest.fixture
def store(db):
    with EpisodeStore(db) as s:
        yield s


def _jpeg(value: int) -> bytes:
    ok, data = cv2.imencode(".jpg", np.full((8, 8, 3), value, np.uint8))
    assert ok
    return data.tobytes()


def _finished(store, episode_id, real="success", world_model="success", **start):
    store.start_episode(episode_id, task=start.get("task", "pick"),
                        policy=start.get("policy", "p1"))
    store.record_outcome(episode_id, "real", real)
    store.record_outcome(episode_id, "world_model", world_model)
    store.complete_episode(episode_id)


def test_schema_version_tables_and_wal(store, db):
    raw = sqlite3.connect(db)
    assert raw.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    assert raw.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    tables = {r[0] for r in raw.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert tables == {"episodes", "divergence", "image_similarity", "frames"}
    columns = {r[1] for r in raw.execute("PRAGMA table_info(episodes)")}
    assert {"episode_id", "task", "policy", "seed", "mode", "status", "started_at", "ended_at",
            "real_outcome", "world_model_outcome", "world_model_judge_success_prob",
            "world_model_time_to_outcome_s", "real_mcap_path", "world_model_mcap_path",
            "abort_reason"} <= columns
    raw.close()


def test_start_is_committed_as_incomplete_then_completes(store, db):
    store.start_episode("e1", task="pick", policy="p1", seed=7, started_at=100.0)
    # A second connection sees the row at once: it is committed, not pending.
    raw = sqlite3.connect(db)
    assert raw.execute("SELECT status FROM episodes WHERE episode_id='e1'").fetchone() == \
        ("incomplete",)
    store.record_outcome("e1", "real", "success", time_to_outcome_s=3.5,
                         mcap_path=Path("/data/real.mcap"))
    store.record_outcome("e1", "world_model", "failure", judge_success_prob=0.2)
    store.complete_episode("e1", ended_at=110.0)
    episode = store.episode("e1")
    assert (episode.status, episode.seed, episode.started_at, episode.ended_at) == \
        ("complete", 7, 100.0, 110.0)
    assert (episode.real_outcome, episode.world_model_outcome) == ("success", "failure")
    assert episode.real_time_to_outcome_s == 3.5 and episode.real_mcap_path == "/data/real.mcap"
    assert episode.world_model_judge_success_prob == 0.2 and episode.agrees is False
    assert raw.execute("SELECT status FROM episodes WHERE episode_id='e1'").fetchone() == \
        ("complete",)
    raw.close()


def test_crash_keeps_completed_and_leaves_interrupted_incomplete(db):
    script = textwrap.dedent(f"""
        import os, signal
        from gesim_ros.comparator.store import EpisodeStore
        store = EpisodeStore({str(db)!r})
        store.start_episode("done", task="pick", policy="p1")
        store.record_outcome("done", "real", "success")
        store.record_outcome("done", "world_model", "failure")
        store.complete_episode("done")
        store.start_episode("interrupted", task="pick", policy="p1")
        store.record_outcome("interrupted", "real", "failure")
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                          timeout=60)
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()
    with EpisodeStore(db) as store:
        assert store.episode("done").status == "complete"
        assert store.episode("done").world_model_outcome == "failure"
        interrupted = store.incomplete_episodes()
        assert [e.episode_id for e in interrupted] == ["interrupted"]
        assert interrupted[0].real_outcome == "failure" and interrupted[0].ended_at is None
        store.abort_episode("interrupted", "comparator crashed")
        assert store.episode("interrupted").status == "aborted"


def test_newer_schema_is_refused_without_touching_the_file(tmp_path):
    db = tmp_path / "future.db"
    raw = sqlite3.connect(db)
    raw.execute("CREATE TABLE episodes (episode_id TEXT)")
    raw.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    raw.commit()
    raw.close()
    before = (db.read_bytes(), db.stat().st_mtime_ns, sorted(os.listdir(tmp_path)))
    for readonly in (False, True):
        with pytest.raises(EpisodeStoreError) as err:
            EpisodeStore(db, readonly=readonly)
        message = str(err.value)
        assert str(db) in message
        assert f"schema version {SCHEMA_VERSION + 1}" in message
        assert f"up to {SCHEMA_VERSION}" in message and "Upgrade gesim_ros" in message
    assert (db.read_bytes(), db.stat().st_mtime_ns, sorted(os.listdir(tmp_path))) == before


def test_foreign_sqlite_file_and_non_database_are_refused(tmp_path):
    foreign = tmp_path / "other.db"
    raw = sqlite3.connect(foreign)
    raw.execute("CREATE TABLE notes (x)")
    raw.commit()
    raw.close()
    with pytest.raises(EpisodeStoreError, match="not a gesim_ros episode store"):
        EpisodeStore(foreign)
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(EpisodeStoreError, match="junk.db is not a readable SQLite database"):
        EpisodeStore(junk)


def test_duplicate_episode_id_is_refused_and_not_overwritten(store):
    store.start_episode("e1", task="pick", policy="p1")
    with pytest.raises(EpisodeStoreError, match="episode 'e1' already exists"):
        store.start_episode("e1", task="place", policy="p2")
    assert (store.episode("e1").task, store.episode("e1").policy) == ("pick", "p1")


def test_ending_an_episode_never_started_is_refused(store):
    with pytest.raises(EpisodeStoreError, match="episode 'ghost' was never started"):
        store.complete_episode("ghost")
    with pytest.raises(EpisodeStoreError, match="episode 'ghost' was never started"):
        store.abort_episode("ghost", "operator stop")
    assert store.episodes() == []


def test_outcome_for_unknown_episode_is_refused(store):
    with pytest.raises(EpisodeStoreError, match="record the real outcome: episode 'ghost'"):
        store.record_outcome("ghost", "real", "success")
    with pytest.raises(EpisodeStoreError, match="never started"):
        store.record_divergence("ghost", [0], [0.1])
    assert store.episodes() == []


def test_invalid_outcome_side_and_numbers_are_refused(store):
    store.start_episode("e1", task="pick", policy="p1")
    with pytest.raises(EpisodeStoreError, match="outcome must be one of 'success', 'failure', "
                                                "'unknown', got 'Success'"):
        store.record_outcome("e1", "real", "Success")
    with pytest.raises(EpisodeStoreError, match="side must be one of 'real', 'world_model'"):
        store.record_outcome("e1", "sim", "success")
    with pytest.raises(EpisodeStoreError,
                       match=r"judge_success_prob = 1.5 is outside \[0.0, 1.0\]"):
        store.record_outcome("e1", "world_model", "success", judge_success_prob=1.5)
    with pytest.raises(EpisodeStoreError, match="psnr.* must be finite"):
        store.record_image_similarity("e1", "wrist", [0], [float("inf")], [1.0])
    episode = store.episode("e1")
    assert (episode.real_outcome, episode.world_model_outcome) == (None, None)
    assert store.image_similarity("e1") == []


def test_outcome_is_recorded_once(store):
    store.start_episode("e1", task="pick", policy="p1")
    store.record_outcome("e1", "real", "success")
    with pytest.raises(EpisodeStoreError, match="already has real outcome 'success'"):
        store.record_outcome("e1", "real", "failure")
    assert store.episode("e1").real_outcome == "success"


def test_complete_needs_both_outcomes(store):
    store.start_episode("e1", task="pick", policy="p1")
    store.record_outcome("e1", "real", "success")
    with pytest.raises(EpisodeStoreError, match="no world_model outcome recorded"):
        store.complete_episode("e1")
    assert store.episode("e1").status == "incomplete"


@pytest.mark.parametrize("mode, side, other", [("real", "real", "world_model"), ("world_model", "world_model", "real")])
def test_a_single_side_mode_completes_on_its_own_outcome(store, mode, side, other):
    store.start_episode("e1", task="pick", policy="p1", mode=mode)
    with pytest.raises(EpisodeStoreError, match=f"cannot complete {mode} episode 'e1': no {side} outcome"):
        store.complete_episode("e1")
    with pytest.raises(EpisodeStoreError, match=f"mode '{mode}', which has no {other} side; record only {side}"):
        store.record_outcome("e1", other, "success")
    store.record_outcome("e1", side, "failure")
    store.complete_episode("e1")
    episode = store.episode("e1")
    assert (episode.status, episode.mode, episode.agrees) == ("complete", mode, None)
    assert (getattr(episode, f"{side}_outcome"), getattr(episode, f"{other}_outcome")) == ("failure", None)


@pytest.mark.parametrize("real, world_model", [("success", "unknown"), ("unknown", "failure")])
def test_an_unknown_outcome_completes_the_episode_unjudged(store, real, world_model):
    store.start_episode("e1", task="pick", policy="p1")
    store.record_outcome("e1", "real", real)
    store.record_outcome("e1", "world_model", world_model)
    store.complete_episode("e1")
    episode = store.episode("e1")
    assert (episode.status, episode.real_outcome, episode.world_model_outcome) == ("complete", real, world_model)
    assert episode.agrees is None  # neither an agreement nor a disagreement


def _old_store(path, version):
    """A store as an older gesim_ros wrote it (version 1: before 'unknown' outcomes; version 2: before the
    world model's side was named 'world_model'), with one finished episode, its divergence and a frame."""
    with sqlite3.connect(path) as raw:
        for migration in MIGRATIONS[:version]:
            for statement in migration:
                raw.execute(statement)
        raw.execute("INSERT INTO episodes (episode_id, task, policy, mode, status, started_at, ended_at, "
                    "real_outcome, model_outcome, model_judge_success_prob, model_mcap_path) VALUES "
                    "('old', 'pick', 'p1', 'shadow', 'complete', 1, 2, 'success', 'failure', 0.25, '/rec/old/model')")
        raw.execute("INSERT INTO divergence VALUES ('old', 0, 0.25)")
        raw.execute("INSERT INTO frames VALUES ('old', 'wrist', 0, 'model', ?)", (_jpeg(7),))
        raw.execute(f"PRAGMA user_version = {version}")
    raw.close()


def _old_episode_as_now(episode):
    return (episode.world_model_outcome, episode.world_model_judge_success_prob, episode.world_model_mcap_path,
            episode.agrees)


@pytest.mark.parametrize("version", [1, 2])
def test_an_older_store_opens_keeps_its_rows_and_takes_unknown_outcomes(db, version):
    _old_store(db, version)
    before = db.read_bytes()
    with EpisodeStore(db, readonly=True) as reader:  # a report on an old store needs no migration
        assert _old_episode_as_now(reader.episode("old")) == ("failure", 0.25, "/rec/old/model", False)
        assert [(f.side, f.jpeg) for f in reader.filmstrip_frames("old")] == [("world_model", _jpeg(7))]
    assert db.read_bytes() == before
    with EpisodeStore(db) as store:
        assert _old_episode_as_now(store.episode("old")) == ("failure", 0.25, "/rec/old/model", False)
        assert [(f.side, f.jpeg) for f in store.filmstrip_frames("old")] == [("world_model", _jpeg(7))]
        assert [(r.horizon_step, r.joint_rmse) for r in store.divergence("old")] == [(0, 0.25)]
        store.start_episode("new", task="pick", policy="p1")
        store.record_outcome("new", "real", "success")
        store.record_outcome("new", "world_model", "unknown")
        store.complete_episode("new")
        assert store.episode("new").world_model_outcome == "unknown"
    with sqlite3.connect(db) as raw:
        assert raw.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert raw.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        raw.execute("PRAGMA foreign_keys = ON")
        assert raw.execute("PRAGMA foreign_key_check").fetchall() == []
        with pytest.raises(sqlite3.IntegrityError, match="FOREIGN KEY"):  # the rebuilt table is still the parent
            raw.execute("INSERT INTO divergence VALUES ('ghost', 0, 0.1)")
        indexes = {r[0] for r in raw.execute("SELECT name FROM sqlite_master WHERE type = 'index' "
                                             "AND tbl_name = 'episodes' AND sql IS NOT NULL")}
        assert indexes == {"episodes_by_task", "episodes_by_policy", "episodes_by_status"}
        with pytest.raises(sqlite3.IntegrityError, match="CHECK"):  # the old side name is gone
            raw.execute("INSERT INTO frames VALUES ('old', 'wrist', 1, 'model', x'ffd8ff')")
        with pytest.raises(sqlite3.IntegrityError, match="CHECK"):  # and the renamed column keeps its CHECK
            raw.execute("UPDATE episodes SET world_model_judge_success_prob = 2 WHERE episode_id = 'old'")
    raw.close()


def test_unknown_mode_is_refused_but_older_mode_names_complete_as_shadow(store, db):
    with pytest.raises(EpisodeStoreError, match="mode must be one of 'real', 'world_model', 'shadow', got 'none'"):
        store.start_episode("e1", task="pick", policy="p1", mode="none")
    assert store.episodes() == []
    # Before modes decided completion any mode name was stored; such episodes need both outcomes.
    with sqlite3.connect(db) as raw:
        raw.execute("INSERT INTO episodes (episode_id, task, policy, mode, status, started_at) "
                    "VALUES ('old', 'pick', 'p1', 'lab_shadow', 'incomplete', 0)")
    store.record_outcome("old", "real", "success")
    with pytest.raises(EpisodeStoreError, match="no world_model outcome recorded"):
        store.complete_episode("old")
    store.record_outcome("old", "world_model", "success")
    store.complete_episode("old")
    assert store.episode("old").status == "complete"


def test_finished_episode_is_never_modified(store):
    _finished(store, "e1")
    with pytest.raises(EpisodeStoreError, match="episode 'e1' is already complete"):
        store.record_divergence("e1", [0], [0.1])
    with pytest.raises(EpisodeStoreError, match="already complete"):
        store.abort_episode("e1", "late")
    assert store.episode("e1").status == "complete" and store.divergence("e1") == []


def test_abort_records_reason(store):
    store.start_episode("e1", task="pick", policy="p1", started_at=50.0)
    with pytest.raises(EpisodeStoreError, match="ended_at 40.0 is before"):
        store.abort_episode("e1", "e-stop", ended_at=40.0)
    store.abort_episode("e1", "e-stop pressed", ended_at=60.0)
    episode = store.episode("e1")
    assert (episode.status, episode.abort_reason, episode.ended_at) == \
        ("aborted", "e-stop pressed", 60.0)


def test_divergence_steps_are_never_overwritten(store):
    store.start_episode("e1", task="pick", policy="p1")
    store.record_divergence("e1", [0, 1], [0.1, 0.2])
    with pytest.raises(EpisodeStoreError, match=r"already has horizon steps \[1\]"):
        store.record_divergence("e1", [1, 2], [0.9, 0.3])
    with pytest.raises(EpisodeStoreError, match="horizon_step 3 appears twice"):
        store.record_divergence("e1", [3, 3], [0.1, 0.1])
    # The refused calls wrote nothing, not even their valid steps.
    assert [(r.horizon_step, r.joint_rmse) for r in store.divergence("e1")] == \
        [(0, 0.1), (1, 0.2)]


def test_numpy_inputs_are_accepted_as_plain_numbers(store):
    store.start_episode("e1", task="pick", policy="p1", seed=np.int64(3))
    store.record_divergence("e1", np.arange(2), np.array([0.25, 0.5], dtype=np.float32))
    rows = store.divergence("e1")
    assert [(r.horizon_step, r.joint_rmse) for r in rows] == [(0, 0.25), (1, 0.5)]
    assert type(rows[0].horizon_step) is int and store.episode("e1").seed == 3
    with pytest.raises(EpisodeStoreError, match=r"horizon_steps\[0\] must be >= 0, got -1"):
        store.record_divergence("e1", [-1], [0.1])


def test_image_similarity_and_filmstrip_frames(store):
    store.start_episode("e1", task="pick", policy="p1")
    store.record_image_similarity("e1", "wrist", [0, 5], [31.5, 24.0], [0.95, 0.8])
    store.add_filmstrip_frame("e1", view="wrist", horizon_step=5, side="real", jpeg=_jpeg(10))
    store.add_filmstrip_frame("e1", view="wrist", horizon_step=5, side="world_model", jpeg=_jpeg(200))
    with pytest.raises(EpisodeStoreError, match="does not start with the JPEG marker"):
        store.add_filmstrip_frame("e1", view="wrist", horizon_step=6, side="real",
                                  jpeg=b"\x89PNG....")
    with pytest.raises(EpisodeStoreError, match="already has a real frame"):
        store.add_filmstrip_frame("e1", view="wrist", horizon_step=5, side="real",
                                  jpeg=_jpeg(99))
    assert [(r.horizon_step, r.psnr, r.ssim) for r in store.image_similarity("e1")] == \
        [(0, 31.5, 0.95), (5, 24.0, 0.8)]
    frames = store.filmstrip_frames("e1")
    assert [(f.side, f.jpeg) for f in frames] == [("real", _jpeg(10)), ("world_model", _jpeg(200))]
    assert store.frame_counts() == {"e1": 2}


def test_reader_sees_writer_commits_and_cannot_write(store, db):
    with EpisodeStore(db, readonly=True) as reader:
        assert reader.episodes() == []
        store.start_episode("e1", task="pick", policy="p1")
        assert [e.episode_id for e in reader.episodes(status="incomplete")] == ["e1"]
        with pytest.raises(EpisodeStoreError, match="readonly=True"):
            reader.start_episode("e2", task="pick", policy="p1")


def test_query_filters(store):
    _finished(store, "a", task="pick", policy="p1")
    _finished(store, "b", task="place", policy="p1")
    store.start_episode("c", task="pick", policy="p2")
    assert [e.episode_id for e in store.episodes(task="pick")] == ["a", "c"]
    assert [e.episode_id for e in store.episodes(policy="p1", status="complete")] == ["a", "b"]
    with pytest.raises(EpisodeStoreError, match="status must be one of"):
        store.episodes(status="done")


def test_readonly_open_of_missing_file_creates_nothing(tmp_path):
    missing = tmp_path / "missing.db"
    with pytest.raises(EpisodeStoreError, match="no such episode store"):
        EpisodeStore(missing, readonly=True)
    assert not missing.exists()
