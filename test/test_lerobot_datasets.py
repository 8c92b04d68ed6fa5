"""LeRobot datasets: export-lerobot of recorded episodes, the v2.1 / v3.0 readers (incl. AgiBot's g2a
layout through its preset mapping), and the refusals. Every dataset here is written by this
package's own writer (export-lerobot), a g2a one by re-shaping an exported v2.1 dataset the way
AgiBot's conversion lays it out."""

import dataclasses
import json

import av
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from gesim_ros.cli import main
from gesim_ros.contract import messages as m
from gesim_ros.contract.contract import load_contract, message_class
from gesim_ros.contract.image_codec import to_compressed_msg
from gesim_ros.episodes.data import VIEWS, EpisodeRecord
from gesim_ros.episodes.lerobot import (
    LeRobotError, LeRobotReader, load_episodes, load_mapping, write_lerobot)
from gesim_ros.episodes.recording import EpisodeBagWriter, RecordingError, episode_record, recorded_topics
from gesim_ros.episodes.replay import ReplayDataset, ReplayError, read_label_rows

C = load_contract()
NAMES = list(C.arm_joint_names)
EVENT = message_class("gesim_ros_interfaces/msg/EpisodeEvent")
SIZE = (40, 64)
PERIOD = 1 / 30


def _image(k, view_index):
    """A smooth moving pattern, as camera images are, so codec error and misalignment show in PSNR."""
    y, x = np.indices(SIZE) / 8.0
    phase = 0.4 * k + 2 * view_index
    rgb = [128 + 90 * np.sin(x + phase + c) * np.cos(0.7 * y - phase) for c in range(3)]
    return np.stack(rgb, -1).astype(np.uint8)


def _record_episode(path, episode, steps=12, outcome=EVENT.OUTCOME_SUCCESS, label="success", events=True):
    """A rosbag2/MCAP episode folder as `collect` writes one: events, one action chunk, joint states
    and the three view cameras; ``events=False``: a lab's own `ros2 bag record` of the contract topics
    (no episode_events topic)."""
    def ns(key):
        return C.topic(key).resolve("/")

    def event(kind, **kw):
        return EVENT(event=kind, episode_id=episode, task="pick", task_text="pick up the cube", seed=7, **kw)

    rng = np.random.default_rng(len(episode))
    topics = [t for t in recorded_topics(C, "/") if events or t[0] != ns("episode_events")]
    with EpisodeBagWriter(path, topics) as w:
        if events:
            w.write_message(ns("episode_events"), 0, event(EVENT.STARTED))
        targets = rng.uniform(-0.5, 0.5, (steps, 16))
        w.write_message(ns("action_chunk"), 1, m.action_chunk_msg(0.0, "base_link", episode, 0, NAMES, targets,
                                                                   PERIOD))
        for k in range(steps + 1):
            t = k * PERIOD
            stamp = int(t * 1e9) + 2
            w.write_message(ns("joint_states"), stamp,
                            m.joint_state_msg(t, "base_link", NAMES, rng.uniform(-1, 1, 16)))
            for i, view in enumerate(VIEWS):
                key = C.camera_for_view(view).key
                w.write_message(ns(key), stamp, to_compressed_msg(_image(k, i), "rgb8", "png", header=m.header(t, key)))
        if events:
            w.write_message(ns("episode_events"), int(9e9), event(EVENT.OUTCOME, side="real", outcome=outcome,
                                                                  label=label))


@pytest.fixture(scope="module")
def recordings(tmp_path_factory):
    folder = tmp_path_factory.mktemp("recordings")
    _record_episode(folder / "ep-0", "ep-0")
    _record_episode(folder / "ep-1", "ep-1", steps=9, outcome=EVENT.OUTCOME_FAILURE, label="missed_grasp")
    return folder


def _export(recordings, out, *extra):
    """`gesim-ros export-lerobot` as the command line runs it."""
    return main(["export-lerobot", str(recordings), "--out", str(out), "--image-size", f"{SIZE[0]}x{SIZE[1]}", *extra])


def _psnr(a, b):
    mse = np.mean((a.astype(float) - b.astype(float)) ** 2)
    return 10 * np.log10(255 ** 2 / max(mse, 1e-12))


@pytest.fixture(scope="module", params=["v3.0", "v2.1"])
def exported(request, recordings, tmp_path_factory):
    out = tmp_path_factory.mktemp("export") / f"dataset-{request.param}"
    assert _export(recordings, out, "--version", request.param) == 0
    return out


def test_export_then_read_gives_the_recorded_joints_frames_and_labels(recordings, exported):
    info = json.loads((exported / "meta" / "info.json").read_text())
    assert (info["total_episodes"], info["fps"]) == (2, 30)
    reader = LeRobotReader(exported, contract=C)
    assert reader.mapping.name == "gesim_ros"
    read = list(reader)
    assert [e.label for e in read] == ["success", "missed_grasp"] and [e.success for e in read] == [True, False]
    for episode, folder in zip(read, ["ep-0", "ep-1"]):
        recorded = episode_record(recordings / folder, C, image_size_hw=SIZE)
        got = episode.record
        assert (got.episode_id, got.task, got.task_text, got.seed) == (folder, "pick", "pick up the cube", 7)
        assert got.control_period_s == pytest.approx(PERIOD)
        np.testing.assert_allclose(got.joint_positions, recorded.joint_positions, atol=1e-6)
        np.testing.assert_allclose(got.actions, recorded.actions, atol=1e-6)
        np.testing.assert_allclose(episode.timestamps, np.arange(recorded.steps + 1) * PERIOD, atol=1e-6)
        for view in VIEWS:
            assert got.frames[view].shape == recorded.frames[view].shape
            assert _psnr(got.frames[view], recorded.frames[view]) > 30, view


def test_v30_packs_episodes_into_shared_files_and_v21_writes_one_file_each(exported):
    info = json.loads((exported / "meta" / "info.json").read_text())
    videos = sorted(p.relative_to(exported).as_posix() for p in exported.rglob("*.mp4"))
    if info["codebase_version"] == "v3.0":
        assert videos == [f"videos/observation.images.{v}/chunk-000/file-000.mp4" for v in sorted(VIEWS)]
        episodes = pq.read_table(exported / "meta/episodes/chunk-000/file-000.parquet").to_pylist()
        assert episodes[1]["videos/observation.images.head/from_timestamp"] == pytest.approx(13 / 30)
        assert [(e["dataset_from_index"], e["dataset_to_index"]) for e in episodes] == [(0, 13), (13, 23)]
    else:
        assert len(videos) == 6 and "videos/chunk-000/observation.images.head/episode_000001.mp4" in videos
        assert (exported / "meta" / "episodes.jsonl").is_file()
    with av.open(str(exported / videos[0])) as container:
        assert container.streams.video[0].codec_context.name in ("h264", "libx264")


def test_resampling_to_a_longer_control_period_holds_every_other_row(exported):
    episode = next(iter(LeRobotReader(exported, contract=C, control_period_s=2 * PERIOD)))
    full = next(iter(LeRobotReader(exported, contract=C)))
    np.testing.assert_allclose(episode.record.joint_positions, full.record.joint_positions[::2], atol=1e-6)
    assert episode.record.steps == 6 and episode.record.control_period_s == pytest.approx(2 * PERIOD)


def test_image_size_resizes_every_view(exported):
    episode = next(iter(LeRobotReader(exported, contract=C, image_size_hw=(20, 32))))
    assert all(f.shape[1:] == (20, 32, 3) for f in episode.record.frames.values())


def test_load_episodes_reads_each_kind_of_source(recordings, exported, tmp_path):
    from_dataset = list(load_episodes(exported, C))
    from_bags = list(load_episodes(recordings, C, image_size_hw=SIZE))
    from_bags[0].save_npz(tmp_path / "a.npz")
    from_npz = list(load_episodes(tmp_path))
    assert [r.episode_id for r in from_dataset] == [r.episode_id for r in from_bags] == ["ep-0", "ep-1"]
    assert [r.episode_id for r in from_npz] == ["ep-0"]
    shadow_run = tmp_path / "shadow_recordings"  # <episode>/{real,world_model}: the real side is the episode
    for episode in ("ep-0", "ep-1"):
        (shadow_run / episode).mkdir(parents=True)
        (shadow_run / episode / "real").symlink_to(recordings / episode)
    assert [r.episode_id for r in load_episodes(shadow_run, C, image_size_hw=SIZE)] == ["ep-0", "ep-1"]
    with pytest.raises(FileNotFoundError, match="no such directory"):
        load_episodes(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="not a LeRobot dataset"):
        load_episodes(tmp_path / "empty")


def _plain_bag(tmp_path):
    """A folder holding one lab's `ros2 bag record` of the contract topics and one `collect` episode."""
    folder = tmp_path / "bags"
    _record_episode(folder / "lab-run-3", "ep-1", steps=9, events=False)   # ep-1's stream, without its events
    _record_episode(folder / "ep-0", "ep-0")
    return folder


def test_a_bag_without_episode_events_takes_its_task_and_label_from_the_labels_csv(recordings, tmp_path):
    folder = _plain_bag(tmp_path)
    csv = tmp_path / "labels.csv"
    csv.write_text("episode_id,label,task,task_text\nlab-run-3,missed_grasp,pick,pick up the cube\n")
    read = {r.episode_id: r for r in load_episodes(folder, C, SIZE, labels_csv=csv)}
    plain, ref = read["lab-run-3"], episode_record(recordings / "ep-1", C, image_size_hw=SIZE)
    assert (plain.task, plain.task_text, plain.label, plain.success, plain.seed) == (
        "pick", "pick up the cube", "missed_grasp", False, 0)
    assert read["ep-0"].label == "success"   # an evented episode keeps its recorded outcome
    # The same stream as ep-1 (same generator seed, 9 steps), so the arrays must match it exactly.
    assert plain.steps == 9 and plain.control_period_s == pytest.approx(PERIOD)
    np.testing.assert_array_equal(plain.actions, ref.actions)
    np.testing.assert_array_equal(plain.joint_positions, ref.joint_positions)
    for view in VIEWS:
        np.testing.assert_array_equal(plain.frames[view], ref.frames[view])


def test_export_lerobot_takes_a_plain_bag_with_its_labels_csv(tmp_path):
    folder = _plain_bag(tmp_path)
    csv = tmp_path / "labels.csv"
    csv.write_text("episode_id,label,task\nlab-run-3,missed_grasp,pick\n")
    assert _export(folder, tmp_path / "refused") == 2 and not (tmp_path / "refused").exists()
    assert _export(folder, tmp_path / "dataset", "--labels", str(csv)) == 0
    read = {r.episode_id: (r.task, r.label) for r in load_episodes(tmp_path / "dataset", C)}
    assert read == {"ep-0": ("pick", "success"), "lab-run-3": ("pick", "missed_grasp")}


@pytest.mark.parametrize("rows, why", [(None, "no labels CSV was given"),
                                       ("episode_id,label\nep-0,success\n", "has no row for it"),
                                       ("episode_id,label\nlab-run-3,success\n", "gives no task for it")])
def test_a_bag_without_episode_events_or_its_csv_row_is_refused_with_the_row_to_add(tmp_path, rows, why):
    bag = _plain_bag(tmp_path) / "lab-run-3"
    csv = None
    if rows:
        csv = tmp_path / "labels.csv"
        csv.write_text(rows)
    labels = read_label_rows(csv)[1] if csv else None
    with pytest.raises(RecordingError) as refused:
        episode_record(bag, C, image_size_hw=SIZE, labels=labels, labels_csv=csv)
    message = str(refused.value)
    assert str(bag) in message and why in message
    assert "`episode_id,label,task`" in message and "`lab-run-3,success,pick`" in message


def test_replay_of_a_bag_without_episode_events_starts_at_its_first_message(tmp_path):
    folder = _plain_bag(tmp_path)
    csv = tmp_path / "labels.csv"
    csv.write_text("episode_id,label,task\nlab-run-3,missed_grasp,pick\n")
    with pytest.raises(ReplayError, match="lab-run-3: no EpisodeEvents recorded.*`episode_id,label,task`"):
        ReplayDataset(folder, C)
    # An operator labels the outcomes, but the task still comes from the CSV.
    with pytest.raises(ReplayError, match="lab-run-3: no EpisodeEvents recorded.*no labels CSV was given"):
        ReplayDataset(folder, C, operator_labels=True)
    episodes = {e.episode_id: e for e in ReplayDataset(folder, C, labels_csv=str(csv))}
    plain = episodes["lab-run-3"]
    assert (plain.task, plain.task_text, plain.seed, plain.policy) == ("pick", "", 0, "")
    assert (plain.outcome.label, plain.outcome.outcome) == ("missed_grasp", EVENT.OUTCOME_FAILURE)
    assert episodes["ep-0"].outcome.label == "success"
    # STARTED is the first recorded message (the action chunk at log time 1 ns, header stamp 0), the end the last.
    assert plain.messages[0][:2] == (0.0, "action_chunk") and plain.started_stamp_s == 0.0
    assert plain.end_s == pytest.approx(9 * PERIOD + 1e-9) and plain.messages[-1][0] == pytest.approx(plain.end_s)
    assert sum(key == "joint_states" for _, key, _ in plain.messages) == 10
    assert set(plain.start) == {"joint_states", *(C.camera_for_view(v).key for v in VIEWS)}


def test_replay_sends_after_ended_only_the_recorded_commands_stamped_before_it(tmp_path):
    # The comparator records a command that was on its way through the switch at ENDED with its episode:
    # the world model stepped it live, so the replay sends it too.
    def ns(key):
        return C.topic(key).resolve("/")

    def event(kind, t, **kw):
        return EVENT(header=m.header(t, ""), event=kind, episode_id="ep-0", task="pick", seed=7, **kw)

    def chunk(t):
        return m.action_chunk_msg(t, "base_link", "ep-0", 0, NAMES, np.zeros((3, len(NAMES))), PERIOD)

    with EpisodeBagWriter(tmp_path / "ep-0", recorded_topics(C, "/")) as w:
        w.write_message(ns("episode_events"), 0, event(EVENT.STARTED, 0.0))
        w.write_message(ns("joint_states"), 1, m.joint_state_msg(0.0, "base_link", NAMES, np.zeros(len(NAMES))))
        w.write_message(ns("action_chunk"), 2, chunk(0.0))
        w.write_message(ns("episode_events"), int(0.9e9), event(EVENT.OUTCOME, 0.9, side="real",
                                                                outcome=EVENT.OUTCOME_SUCCESS, label="success"))
        w.write_message(ns("episode_events"), int(1.0e9), event(EVENT.ENDED, 1.0))
        w.write_message(ns("action_chunk"), int(1.05e9), chunk(0.95))   # in flight at ENDED
        w.write_message(ns("action_chunk"), int(1.1e9), chunk(1.05))    # sent after ENDED
        w.write_message(ns("joint_states"), int(1.1e9), m.joint_state_msg(0.95, "base_link", NAMES,
                                                                          np.zeros(len(NAMES))))
    (ep,) = ReplayDataset(tmp_path, C)
    assert [key for _, key, _ in ep.messages] == ["joint_states", "action_chunk", "action_chunk"]
    assert [m.header_stamp(raw) for _, _, raw in ep.messages] == pytest.approx([0.0, 0.0, 0.95])
    assert ep.messages[-1][0] == pytest.approx(1.05) and ep.end_s == pytest.approx(1.0)
    assert ep.ended_stamp_s == pytest.approx(1.0)


def test_a_labels_csv_overrides_the_episode_labels(exported, tmp_path):
    (tmp_path / "labels.csv").write_text("episode_index,label\n0,knocked_over\n1,success\n")
    read = list(LeRobotReader(exported, contract=C, labels_csv=tmp_path / "labels.csv"))
    assert [(e.label, e.success) for e in read] == [("knocked_over", False), ("success", True)]
    (tmp_path / "bad.csv").write_text("episode_index,label\n5,success\n")
    with pytest.raises(LeRobotError, match=r"episode\(s\) \[5\]"):
        LeRobotReader(exported, contract=C, labels_csv=tmp_path / "bad.csv")


# --------------------------------------------------------------------------------------------- g2a

G2A_VIDEO = {"head": "observation.images.top_head", "left_wrist": "observation.images.hand_left",
             "right_wrist": "observation.images.hand_right"}


def _as_g2a(src, dst, joints_at=16, grippers_at=0, describe=True, state_dim=159):
    """Re-shape an exported v2.1 dataset into AgiBot's g2a layout: 159-D state and 40-D action with
    the 14 arm joints and 2 grippers at the given offsets, the g2a camera keys, no outcome fields."""
    info = json.loads((src / "meta" / "info.json").read_text())
    features = info["features"]
    for view, key in G2A_VIDEO.items():
        features[key] = features.pop(f"observation.images.{view}")
        for old in sorted(src.glob(f"videos/chunk-*/observation.images.{view}")):
            target = dst / old.relative_to(src).parent / key
            target.mkdir(parents=True)
            for f in old.iterdir():
                (target / f.name).write_bytes(f.read_bytes())
    fields = {}
    for name, dim in (("state", state_dim), ("action", 40)):
        arm = list(range(joints_at, joints_at + 14))
        grip = list(range(grippers_at, grippers_at + 2))
        fields[name] = (arm, grip, dim)
        feature = "observation.state" if name == "state" else "action"
        features[feature] = {"dtype": "float32", "shape": [dim], "names": None}
        if describe:
            features[feature]["field_descriptions"] = {f"{name}/joint/position": {"indices": arm},
                                                       f"{name}/effector/position": {"indices": grip}}
    for path in sorted(src.glob("data/chunk-*/*.parquet")):
        table = pq.read_table(path)
        columns = {}
        for name, feature in (("state", "observation.state"), ("action", "action")):
            arm, grip, dim = fields[name]
            small = np.stack(table.column(feature).to_numpy(zero_copy_only=False))
            wide = np.full((len(small), dim), -9.0, np.float32)   # a value no contract joint has here
            wide[:, arm], wide[:, grip] = small[:, :14], small[:, 14:]
            columns[feature] = pa.FixedSizeListArray.from_arrays(pa.array(wide.ravel()), dim)
        for feature, column in columns.items():
            table = table.set_column(table.column_names.index(feature), feature, column)
        target = dst / path.relative_to(src)
        target.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(table, target)
    (dst / "meta").mkdir(parents=True)
    episodes = [json.loads(line) for line in (src / "meta" / "episodes.jsonl").read_text().splitlines()]
    keep = ("episode_index", "tasks", "length")
    (dst / "meta" / "episodes.jsonl").write_text("".join(json.dumps({k: e[k] for k in keep}) + "\n" for e in episodes))
    (dst / "meta" / "tasks.jsonl").write_text((src / "meta" / "tasks.jsonl").read_text())
    info["robot_type"] = "g2a"
    (dst / "meta" / "info.json").write_text(json.dumps(info))
    return dst


@pytest.fixture(scope="module")
def v21(recordings, tmp_path_factory):
    out = tmp_path_factory.mktemp("v21") / "dataset"
    assert _export(recordings, out, "--version", "v2.1") == 0
    return out


def _small_g2a_mapping():
    """The g2a preset without its declared full-resolution camera shapes (the test frames are small)."""
    return dataclasses.replace(load_mapping("g2a"), camera_shapes={})


@pytest.mark.parametrize("describe,joints_at,grippers_at", [(True, 20, 36), (False, 16, 0)],
                         ids=["field_descriptions", "documented_offsets"])
def test_g2a_layout_reads_through_the_preset(v21, tmp_path, describe, joints_at, grippers_at):
    g2a = _as_g2a(v21, tmp_path / "g2a", joints_at, grippers_at, describe)
    own = list(LeRobotReader(v21, contract=C))
    read = list(LeRobotReader(g2a, mapping=_small_g2a_mapping(), contract=C))
    assert len(read) == 2
    for a, b in zip(read, own):
        np.testing.assert_array_equal(a.record.joint_positions, b.record.joint_positions)
        np.testing.assert_array_equal(a.record.actions, b.record.actions)
        assert all(np.array_equal(a.record.frames[v], b.record.frames[v]) for v in VIEWS)
        assert a.label is None and a.record.label == "unlabelled" and a.record.extra["labelled"] is False
        assert a.record.task_text == "pick up the cube" and a.record.episode_id.endswith(f"episode_{a.index:06d}")


def test_g2a_preset_is_chosen_by_robot_type_and_checks_the_declared_camera_shapes(v21, tmp_path):
    g2a = _as_g2a(v21, tmp_path / "g2a")
    preset = load_mapping("g2a")
    assert preset.camera_shapes == {"head": (400, 640), "left_wrist": (1056, 1280), "right_wrist": (1056, 1280)}
    with pytest.raises(LeRobotError, match=r"is 40x64, mapping g2a declares 400x640"):
        LeRobotReader(g2a, contract=C)


# --------------------------------------------------------------------------------------------- refusals

def test_a_dataset_without_the_mapped_feature_is_refused_listing_what_it_has(v21, tmp_path):
    g2a = _as_g2a(v21, tmp_path / "g2a")
    info = json.loads((g2a / "meta" / "info.json").read_text())
    info["features"]["observation.states.joint"] = info["features"].pop("observation.state")
    (g2a / "meta" / "info.json").write_text(json.dumps(info))
    with pytest.raises(LeRobotError) as e:
        LeRobotReader(g2a, mapping=_small_g2a_mapping(), contract=C)
    text = str(e.value)
    assert "has no feature 'observation.state'" in text and "observation.states.joint [159]" in text
    assert "state:\n    feature: <one of them>" in text and "--mapping FILE" in text


def test_a_missing_camera_is_refused_naming_the_view_and_the_mapping_entry(v21, tmp_path):
    mapping = dataclasses.replace(_small_g2a_mapping(), cameras={**G2A_VIDEO, "left_wrist": "observation.images.wrist"})
    with pytest.raises(LeRobotError, match=r"no camera feature 'observation.images.wrist' \(view left_wrist\)"):
        LeRobotReader(_as_g2a(v21, tmp_path / "g2a"), mapping=mapping, contract=C)


def test_joint_counts_that_do_not_match_are_refused(v21, tmp_path):
    g2a = _as_g2a(v21, tmp_path / "g2a")
    info = json.loads((g2a / "meta" / "info.json").read_text())
    info["features"]["observation.state"]["field_descriptions"]["state/joint/position"]["indices"] = list(range(16, 28))
    (g2a / "meta" / "info.json").write_text(json.dumps(info))
    with pytest.raises(LeRobotError, match=r"gives 12 dimensions for \['left_arm', 'right_arm'\], the contract has 14"):
        LeRobotReader(g2a, mapping=_small_g2a_mapping(), contract=C)
    narrow = _as_g2a(v21, tmp_path / "narrow", state_dim=150)
    with pytest.raises(LeRobotError, match=r"'observation.state' is \[150\]-D, mapping g2a expects 159"):
        LeRobotReader(narrow, mapping=_small_g2a_mapping(), contract=C)


def test_video_that_cannot_be_decoded_is_refused_naming_the_file_and_episode(exported, tmp_path):
    broken = tmp_path / "broken"
    for f in exported.rglob("*"):
        if f.is_file():
            (broken / f.relative_to(exported)).parent.mkdir(parents=True, exist_ok=True)
            (broken / f.relative_to(exported)).write_bytes(f.read_bytes())
    video = sorted(broken.rglob("*left_wrist*/*.mp4") if (broken / "meta/episodes.jsonl").is_file()
                   else broken.rglob("videos/observation.images.left_wrist/*/*.mp4"))[-1]
    video.write_bytes(b"\0" * 4096)
    with pytest.raises(LeRobotError, match=rf"{video.name}: cannot be decoded \(episode \d, camera "
                                           r"observation.images.left_wrist\)"):
        LeRobotReader(broken, contract=C)
    data = video.read_bytes()
    good = sorted(exported.rglob(video.name))
    full = [p for p in good if p.parent.name == video.parent.name][0].read_bytes()
    video.write_bytes(full[: len(full) // 3])   # a truncated file: its header may open, its frames run out
    with pytest.raises(LeRobotError, match=rf"{video.name}.*(cannot be decoded|decoded \d+ of|no frame near)"):
        list(LeRobotReader(broken, contract=C))
    assert data


def _record(i, size=SIZE, period=PERIOD):
    rng = np.random.default_rng(i)
    return EpisodeRecord(episode_id=f"npz-{i}", task="push", task_text="push it", seed=i, success=True,
                         label="success", control_period_s=period, joint_names=NAMES,
                         actions=rng.normal(size=(5, 16)).astype(np.float32),
                         joint_positions=rng.normal(size=(6, 16)).astype(np.float32),
                         frames={v: np.zeros((6, *size, 3), np.uint8) for v in VIEWS})


@pytest.mark.parametrize("second,match", [
    (_record(1, period=1 / 10), "differs from the first episode's 1/30 s"),
    (_record(1, size=(20, 32)), "export at one --image-size"),
], ids=["fps", "image_size"])
def test_a_failed_export_leaves_nothing_behind(tmp_path, second, match):
    out = tmp_path / "out"
    with pytest.raises(LeRobotError, match=match):
        write_lerobot(iter([_record(0), second]), out, C, progress=lambda line: None)
    assert not out.exists() and list(tmp_path.iterdir()) == []


def test_export_from_npz_and_refusals_on_the_command_line(tmp_path, capsys):
    (tmp_path / "npz").mkdir()
    _record(0).save_npz(tmp_path / "npz" / "a.npz")
    assert _export(tmp_path / "npz", tmp_path / "out") == 0
    assert "export-lerobot: episode 1 npz-0 push 6 frames, success (success)" in capsys.readouterr().err
    assert [e.record.episode_id for e in LeRobotReader(tmp_path / "out", contract=C)] == ["npz-0"]
    assert _export(tmp_path / "npz", tmp_path / "out") == 2
    assert "already exists; choose a new --out folder" in capsys.readouterr().err
    (tmp_path / "odd_npz").mkdir()
    _record(1, size=(21, 32)).save_npz(tmp_path / "odd_npz" / "b.npz")
    assert _export(tmp_path / "odd_npz", tmp_path / "odd") == 2
    assert "H.264 needs even sizes" in capsys.readouterr().err and not (tmp_path / "odd").exists()


def test_lerobots_own_reader_loads_the_export(exported):
    lerobot_dataset = pytest.importorskip(
        "lerobot.datasets.lerobot_dataset",
        reason="lerobot is not installed: lerobot 0.6.1 requires torch<2.12 and Python>=3.12, so it cannot "
               "live beside this package's torch 2.13 (see README 'LeRobot datasets')")
    info = json.loads((exported / "meta" / "info.json").read_text())
    if info["codebase_version"] != "v3.0":
        pytest.skip("lerobot >= 0.4 reads v3.0 only")
    ds = lerobot_dataset.LeRobotDataset("local/gesim_ros", root=exported, video_backend="pyav")
    ours = list(LeRobotReader(exported, contract=C))
    assert (ds.num_episodes, ds.num_frames) == (2, sum(e.record.steps + 1 for e in ours))
    item = ds[ours[0].record.steps + 1]   # the second episode's first frame
    np.testing.assert_allclose(item["observation.state"].numpy(), ours[1].record.joint_positions[0], atol=1e-6)
