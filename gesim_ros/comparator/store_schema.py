"""The comparator store's SQLite schema and its migrations, version by version (the schema itself is
described in :mod:`gesim_ros.comparator.store`). Append only: a released migration is never edited,
files in the field were built with it."""

_EPISODES_V1 = """
CREATE TABLE episodes (
    episode_id TEXT PRIMARY KEY NOT NULL,
    task TEXT NOT NULL,
    policy TEXT NOT NULL,
    seed INTEGER,
    mode TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('incomplete', 'complete', 'aborted')),
    started_at REAL NOT NULL,
    ended_at REAL,
    real_outcome TEXT CHECK (real_outcome IN ('success', 'failure')),
    model_outcome TEXT CHECK (model_outcome IN ('success', 'failure')),
    real_judge_success_prob REAL CHECK (real_judge_success_prob BETWEEN 0 AND 1),
    model_judge_success_prob REAL CHECK (model_judge_success_prob BETWEEN 0 AND 1),
    real_time_to_outcome_s REAL CHECK (real_time_to_outcome_s >= 0),
    model_time_to_outcome_s REAL CHECK (model_time_to_outcome_s >= 0),
    real_mcap_path TEXT,
    model_mcap_path TEXT,
    abort_reason TEXT
)"""

_DIVERGENCE_V1 = """
CREATE TABLE divergence (
    episode_id TEXT NOT NULL REFERENCES episodes (episode_id),
    horizon_step INTEGER NOT NULL CHECK (horizon_step >= 0),
    joint_rmse REAL NOT NULL CHECK (joint_rmse >= 0),
    PRIMARY KEY (episode_id, horizon_step)
)"""

_IMAGE_SIMILARITY_V1 = """
CREATE TABLE image_similarity (
    episode_id TEXT NOT NULL REFERENCES episodes (episode_id),
    view TEXT NOT NULL,
    horizon_step INTEGER NOT NULL CHECK (horizon_step >= 0),
    psnr REAL NOT NULL,
    ssim REAL NOT NULL CHECK (ssim BETWEEN -1 AND 1),
    PRIMARY KEY (episode_id, view, horizon_step)
)"""

_FRAMES_V1 = """
CREATE TABLE frames (
    episode_id TEXT NOT NULL REFERENCES episodes (episode_id),
    view TEXT NOT NULL,
    horizon_step INTEGER NOT NULL CHECK (horizon_step >= 0),
    side TEXT NOT NULL CHECK (side IN ('real', 'model')),
    jpeg BLOB NOT NULL,
    PRIMARY KEY (episode_id, view, horizon_step, side)
)"""

_EPISODE_INDEXES = (
    "CREATE INDEX episodes_by_task ON episodes (task)",
    "CREATE INDEX episodes_by_policy ON episodes (policy)",
    "CREATE INDEX episodes_by_status ON episodes (status)",
)

# SQLite cannot alter a CHECK constraint: version 2 rebuilds the table (its indexes go with it),
# with foreign keys off (the child tables keep referring to 'episodes' by name).
_ADMIT_UNKNOWN_OUTCOMES = (
    _EPISODES_V1.replace("CREATE TABLE episodes", "CREATE TABLE episodes_v2")
    .replace("IN ('success', 'failure')", "IN ('success', 'failure', 'unknown')"),
    "INSERT INTO episodes_v2 SELECT * FROM episodes",
    "DROP TABLE episodes",
    "ALTER TABLE episodes_v2 RENAME TO episodes",
    *_EPISODE_INDEXES,
)

# Version 3 renames the world model's side from 'model' to 'world_model'. RENAME COLUMN also
# rewrites the CHECK constraints; the frames' side is a value under a CHECK, so that table is rebuilt.
V3_RENAMED_COLUMNS = tuple((f"model_{name}", f"world_model_{name}")
                            for name in ("outcome", "judge_success_prob", "time_to_outcome_s", "mcap_path"))
V3_FRAME_SIDE = "CASE side WHEN 'model' THEN 'world_model' ELSE side END"
_NAME_THE_WORLD_MODEL_SIDE = (
    *(f"ALTER TABLE episodes RENAME COLUMN {old} TO {new}" for old, new in V3_RENAMED_COLUMNS),
    _FRAMES_V1.replace("CREATE TABLE frames", "CREATE TABLE frames_v3").replace("'model'", "'world_model'"),
    f"INSERT INTO frames_v3 SELECT episode_id, view, horizon_step, {V3_FRAME_SIDE}, jpeg FROM frames",
    "DROP TABLE frames",
    "ALTER TABLE frames_v3 RENAME TO frames",
)

# MIGRATIONS[i] takes the schema from version i to version i + 1.  Append only:
# never edit a released migration, files in the field were built with it.
MIGRATIONS: tuple[tuple[str, ...], ...] = (
    (
        _EPISODES_V1,
        _DIVERGENCE_V1,
        _IMAGE_SIMILARITY_V1,
        _FRAMES_V1,
        *_EPISODE_INDEXES,
    ),
    _ADMIT_UNKNOWN_OUTCOMES,
    _NAME_THE_WORLD_MODEL_SIDE,
)
SCHEMA_VERSION = len(MIGRATIONS)
WORLD_MODEL_SIDE_VERSION = MIGRATIONS.index(_NAME_THE_WORLD_MODEL_SIDE) + 1
# Readers take files from this version on without migrating them (a reader must not write): version 2
# only widened a CHECK, and a file older than version 3 is read through views that show it as version 3
# (EpisodeStore._show_as_version_3). Raise it when a migration changes what a reader sees in another way.
OLDEST_READABLE_VERSION = 1
