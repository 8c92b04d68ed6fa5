"""The learned world model: backend outputs, training on synthetic episodes, resume, checkpoints, CLI.

Synthetic episodes: two coloured squares whose positions are joint positions that follow the
actions with a lag (a linear servo); the task says which square (the task's object, recorded as its
scene state) must end on the right of a goal, so success is decided by where the object ends
relative to the goal and the judge has to use the task. Tiny models keep every test at a few
seconds. What the model learns from the twin's episodes is tested in test_world_model_rich_training.
"""

import argparse
import importlib.metadata
import json
import logging
import math
import re

import numpy as np
import pytest
import torch

from gesim_ros.contract.contract import load_contract
from gesim_ros.episodes.data import SCENE_STATE_NAMES, VIEWS, EpisodeRecord
from gesim_ros.world_model.backends.learned import LearnedWorldModel
from gesim_ros.world_model.backends.learned_checkpoint import DEFAULT_CHECKPOINT, CheckpointError, load_checkpoint, read_checkpoint, save_checkpoint
from gesim_ros.world_model.backends.learned_dynamics import yaw_from_quat
from gesim_ros.world_model.backends.learned_kinematics import HandKinematics
from gesim_ros.world_model.backends.learned_network import ModelConfig
from gesim_ros.world_model.api import ENTRY_POINT_GROUP, WorldModelInputError, load_world_model, validate_step_result
from gesim_ros.world_model.layouts import ActionLayout
from gesim_ros.world_model import cli as world_model_cli
from gesim_ros.world_model.evaluation import _quarter_turn_degrees, evaluate
from gesim_ros.world_model import training
from gesim_ros.world_model.training import STAGES, YAW_RETRAIN_ATTEMPTS, TrainConfig, companion_paths, train

torch.set_num_threads(1)  # tiny models: a second thread only adds contention
CONTRACT = load_contract()
JOINTS = list(CONTRACT.arm_joint_names)
G = CONTRACT.joint_groups
POLICY = ActionLayout.policy(G["left_arm"], G["left_gripper"][0], G["right_arm"], G["right_gripper"][0])
GESIM = ActionLayout.gesim(G["left_arm"], G["left_gripper"][0], G["right_arm"], G["right_gripper"][0])
TASK_JOINT = {"left_square_right": 0, "right_square_right": 7}  # the joint whose sign decides success
TINY = ModelConfig(height=16, width=16, reader_height=16, reader_width=16, channels=(8, 16), reader_channels=(8, 8),
                   heatmaps=4, yaw_patch=8, yaw_channels=8, latent_dim=32, hidden_dim=32, edge_dim=16, task_dim=4)


def synthetic_record(index: int, steps: int = 12, size: int = 16) -> EpisodeRecord:
    rng = np.random.default_rng(index)
    task = list(TASK_JOINT)[index % 2]
    actions = np.zeros((steps, 16), np.float32)
    for j in (0, 1, 7, 8):
        actions[:, j] = np.linspace(0, rng.uniform(-0.6, 0.6), steps) + rng.normal(0, 0.05, steps)
    actions[:, 14:] = rng.choice([0.0, 0.08], 2)
    q = np.zeros((steps + 1, 16), np.float32)
    for t in range(steps):
        q[t + 1] = q[t] + 0.5 * (actions[t] - q[t])
    goal = rng.uniform(-0.3, 0.3)  # where the task's square must end right of, drawn in the head view
    frames = {v: np.full((steps + 1, size, size, 3), 60, np.uint8) for v in VIEWS}
    frames["head"][:, :, int(size / 2 * (1 + goal))] = (40, 230, 40)
    squares = (("head", (0, 1), (230, 40, 40)), ("head", (7, 8), (40, 40, 230)),
               ("left_wrist", (0, 1), (230, 40, 40)), ("right_wrist", (7, 8), (40, 40, 230)))
    for t in range(steps + 1):
        for view, joints, colour in squares:
            x, y = (size / 2 * (1 + q[t, list(joints)])).astype(int)
            frames[view][t, max(y - 2, 0):y + 2, max(x - 2, 0):x + 2] = colour
    scene = np.zeros((steps + 1, len(SCENE_STATE_NAMES)), np.float32)
    j = TASK_JOINT[task]  # the task's square is the object (0.1 m per joint unit)
    scene[:, 0], scene[:, 1], scene[:, 2], scene[:, 3] = 0.1 * q[:, j], 0.1 * q[:, j + 1], 0.05, 1.0
    scene[:, 7] = q[:, 14 if j == 0 else 15] > 0.04  # "held": its side's gripper closed on it
    scene[:, 9:12] = (0.1 * goal, 0.0, 0.05)
    scene[:, 12:15] = 0.02   # the object's half extents; no contact forces
    success = bool(q[-1, j] > goal)
    return EpisodeRecord(episode_id=f"syn{index:03d}", task=task, task_text=f"move the {task.split('_')[0]} square right",
                         seed=index, success=success, label="success" if success else "wrong_side",
                         control_period_s=1 / 30, joint_names=JOINTS, actions=actions, joint_positions=q,
                         frames=frames, scene_state=scene)


TRAIN = [synthetic_record(i) for i in range(64)]
HELDOUT = [synthetic_record(i) for i in range(100, 132)]


def tiny_config(**overrides) -> TrainConfig:
    base = dict(model=TINY, epochs=10, batch_size=8, learning_rate=3e-3, warmup_steps=5, log_every=5,
                checkpoint_every=1000, num_threads=1, window=8, window_start=4, reader_frames=2)
    return TrainConfig(**{**base, **overrides})


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    path = tmp_path_factory.mktemp("wm") / "tiny.pt"
    result = train(TRAIN, path, tiny_config(), resume=False, progress=None)
    return path, result


def _first_frame(rec: EpisodeRecord) -> np.ndarray:
    return np.stack([rec.frames[v][0] for v in VIEWS]).transpose(3, 0, 1, 2).astype(np.float32) / 255


def _played(ckpt, rec: EpisodeRecord, task: str | None = None) -> LearnedWorldModel:
    """The learned backend of ``ckpt`` after ``rec``'s actions, started from its first frame and joints,
    told ``task`` (default ``rec``'s)."""
    model = LearnedWorldModel(checkpoint=str(ckpt))
    model.set_episode_data(_first_frame(rec))
    model.set_episode_state(POLICY.convert(rec.joint_positions[0], GESIM))
    model.set_task(task or rec.task)
    model.step(POLICY.convert(rec.actions, GESIM))
    return model


# --------------------------------------------------------------------------- backend


def test_step_outputs_shapes_ranges_and_state_in_gesim_layout(trained):
    path, _ = trained
    rec = HELDOUT[0]
    entry = importlib.metadata.EntryPoint("learned", "gesim_ros.world_model.backends.learned:LearnedWorldModel", ENTRY_POINT_GROUP)
    model = load_world_model("learned", {"checkpoint": str(path)}, entry_points=[entry])
    model.set_episode_data(np.ascontiguousarray(np.repeat(np.repeat(_first_frame(rec), 2, 2), 3, 3)))  # 32x48
    model.set_episode_state(POLICY.convert(rec.joint_positions[0], GESIM))
    model.set_task(rec.task)
    out = model.step(POLICY.convert(rec.actions, GESIM))
    validate_step_result(out, model)  # what the world-model server checks
    assert out.frames.shape == (12, 3, 3, 32, 48) and out.frames.dtype == np.float32
    assert 0.0 <= out.frames.min() and out.frames.max() <= 1.0
    assert out.state.shape == (12, 16) and np.isfinite(out.state).all()
    scene = model.scene_state()  # the imagined scene, per step: what the judge reads
    assert scene.shape == (12, len(SCENE_STATE_NAMES)) and np.isfinite(scene).all()
    np.testing.assert_allclose(np.linalg.norm(scene[:, 3:7], axis=1), 1.0, atol=1e-5)
    assert ((scene[:, 7:9] >= 0) & (scene[:, 7:9] <= 1)).all() and (scene[:, 15:] >= 0).all()
    # state comes back in GE-Sim's layout and tracks the truth (a column mix-up would not): the servo
    # prior alone fits the episodes' linear servo
    truth = POLICY.convert(rec.joint_positions[1:], GESIM)
    assert np.sqrt(np.mean((out.state - truth) ** 2)) < 0.02
    judged = model.judge(out.frames, out.state, rec.task)
    assert judged.success_prob.shape == judged.progress.shape == (12,)
    assert ((judged.success_prob >= 0) & (judged.success_prob <= 1)).all()
    np.testing.assert_allclose(model.judgement().success_prob, judged.success_prob)
    with pytest.raises(WorldModelInputError, match="latest frames"):
        model.judge(out.frames * 0.5, None, rec.task)


def test_streamed_chunks_match_one_rollout_but_for_frames_blended_towards_a_chunk_end(trained):
    path, _ = trained
    rec = HELDOUT[1]
    actions = POLICY.convert(rec.actions, GESIM)
    whole, parts = LearnedWorldModel(checkpoint=str(path)), LearnedWorldModel(checkpoint=str(path))
    for m in (whole, parts):
        m.set_episode_data(_first_frame(rec))
        m.set_episode_state(POLICY.convert(rec.joint_positions[0], GESIM))
        m.set_task(rec.task)
    one = whole.step(actions)
    a, b = parts.step(actions[:5]), parts.step(actions[5:])
    frames, state = np.concatenate([a.frames, b.frames]), np.concatenate([a.state, b.state])
    np.testing.assert_allclose(state, one.state, atol=1e-5)   # the state steps once per action, however chunked
    np.testing.assert_allclose(parts.scene_state(), whole.scene_state(), atol=1e-5)
    # keyframes every 3 steps (3, 6, ...) and at a chunk's end (5): steps 4 and 5 blend towards that one
    exact = [i for i in range(12) if i not in (3, 4)]
    np.testing.assert_allclose(frames[exact], one.frames[exact], atol=1e-5)
    # the judge scores the latest frames, also those of several calls (split chunks)
    both = parts.judge(frames, state, rec.task)
    np.testing.assert_allclose(both.success_prob[-7:], parts.judge(b.frames, b.state, rec.task).success_prob,
                               atol=1e-6)   # float32 rounding: the same scenes judged in batches of another size
    np.testing.assert_allclose(both.success_prob, parts.judgement().success_prob)
    np.testing.assert_allclose(both.success_prob, whole.judgement().success_prob, atol=1e-5)


def test_step_requires_episode_data(trained):
    model = LearnedWorldModel(checkpoint=str(trained[0]))
    with pytest.raises(WorldModelInputError, match="set_episode_data"):
        model.step(np.zeros((3, 16), np.float32))


@pytest.mark.parametrize("task", [HELDOUT[0].task, "wave at the camera"])
def test_judgement_past_the_tasks_training_horizon_keeps_the_verdict_at_the_horizon(trained, task):
    """Episodes are judged at their task's time limit; steps past it (never trained) keep that verdict.
    An unknown task's limit is the longest task's: the judge reads the time and never read a later one."""
    path, _ = trained
    assert load_checkpoint(path).task_horizons == {task: 12 for task in TASK_JOINT}
    rec = HELDOUT[0]
    model = _played(path, rec, task)
    within = model.judgement()
    model.step(POLICY.convert(np.tile(-rec.actions[-1:], (6, 1)), GESIM))  # drive the other way after the horizon
    after = model.judgement()
    assert len(after.success_prob) == 18
    # Within one judgement the verdict past the horizon is the value computed at it, bit for bit.
    np.testing.assert_array_equal(after.success_prob[12:], np.full(6, after.success_prob[11]))
    np.testing.assert_array_equal(after.progress[12:], np.full(6, after.progress[11]))
    # Across calls the same steps are judged again, in a batch of another size: float32 rounding may
    # differ in the last bits (1.2e-7 seen), a changed verdict by far more.
    np.testing.assert_allclose(after.success_prob[:12], within.success_prob, rtol=0, atol=1e-5)


def test_the_judge_reads_the_time_since_the_episodes_start(trained):
    """The same scene is judged by how much time is left: the judge's verdict at step k is the one for
    k + 1 control periods (after that step's action), and 10 s later gives another verdict."""
    rec = HELDOUT[0]
    model = _played(trained[0], rec)
    net, loaded = model.model.net, model.model
    scene, hands = torch.cat(model._scenes)[None], torch.cat(model._hands)[None]
    task = torch.tensor([loaded.task_id(rec.task)])
    elapsed = torch.arange(1, rec.steps + 1).float()[None] * loaded.control_period_s
    with torch.no_grad():
        at_its_time = torch.sigmoid(net.judge_scene(scene, hands, task, elapsed))[0, :, 0].numpy()
        later = torch.sigmoid(net.judge_scene(scene, hands, task, elapsed + 10.0))[0, :, 0].numpy()
    np.testing.assert_allclose(model.judgement().success_prob, at_its_time, rtol=0, atol=1e-6)
    assert np.abs(at_its_time - later).max() > 1e-3


def test_the_object_refiner_moves_the_first_pass_reading_by_what_it_reads(trained):
    """The scene the node starts from takes the object's horizontal position and size from the second
    look: the first pass's reading moved by the refiner's offset (its patch is not turned) and its
    horizontal half sizes shifted to the refiner's mean, their difference and the height kept."""
    net = load_checkpoint(trained[0]).net
    cfg = net.config
    rec = HELDOUT[0]
    images = torch.rand(1, cfg.num_views, 3, cfg.reader_height, cfg.reader_width)
    intrinsics = torch.tensor([[cfg.reader_width, 0.0, cfg.reader_width / 2], [0.0, cfg.reader_width, cfg.reader_height / 2],
                               [0.0, 0.0, 1.0]]).expand(1, cfg.num_views, 3, 3)
    c2w = torch.diag(torch.tensor([1.0, -1.0, -1.0, 1.0]))   # looking straight down from 1 m
    c2w[2, 3] = 1.0
    c2w = c2w.expand(1, cfg.num_views, 4, 4)
    q, task = torch.from_numpy(rec.joint_positions[:1]), torch.tensor([1])
    last = net.object_refiner.head[-1]
    with torch.no_grad():
        last.weight.zero_()
        last.bias.copy_(torch.tensor([0.5, -0.3, 1.0]))   # 5 mm along x, -3 mm along y, half size 24 mm
        first = net.scene_from_reading(net.read_scene(images, net.planes(intrinsics, c2w), q, task)[0])
        read = net.read_first_frame(images, intrinsics, c2w, q, task)
    torch.testing.assert_close(read["pos"], first["pos"] + torch.tensor([[0.005, -0.003, 0.0]]))
    torch.testing.assert_close(read["half"][:, :2].mean(1), torch.tensor([0.024]))
    torch.testing.assert_close(read["half"][:, 0] - read["half"][:, 1], first["half"][:, 0] - first["half"][:, 1])
    torch.testing.assert_close(read["half"][:, 2], first["half"][:, 2])
    torch.testing.assert_close(read["goal"], first["goal"])


def test_only_the_reader_stage_trains_the_task_embedding_the_reader_and_renderer_read(trained):
    """The judge, trained last, has a task embedding of its own: training it must not move the one the
    reader (and, through it, the renderer) was trained with."""
    net = load_checkpoint(trained[0]).net
    judge = {id(p) for m in (net.judge_head, net.judge_task_embedding) for p in m.parameters()}
    for stage in STAGES:
        trained_here = {id(p) for group in training._stage_parameters(net, stage) for p in group}
        assert (id(net.task_embedding.weight) in trained_here) == (stage == "reader"), stage
        assert (trained_here == judge) == (stage == "judge"), stage
    second_look = {id(p) for m in (net.yaw_reader, net.object_refiner) for p in m.parameters()}
    assert second_look <= {id(p) for group in training._stage_parameters(net, "reader") for p in group}


# --------------------------------------------------------------------------- training


def test_a_yaw_reader_that_did_not_learn_is_trained_again_then_reported(tmp_path, caplog):
    """The synthetic frames show no yaw (their squares never turn), so the yaw reader cannot leave its
    untrained loss: after the reader stage it is trained again alone, from fresh starts, then training
    says it failed, and what to do."""
    with caplog.at_level(logging.WARNING, logger="gesim_ros.world_model.training"):
        train(TRAIN[:16], tmp_path / "unread.pt", tiny_config(epochs=1), resume=False, progress=None)
    messages = [r.getMessage() for r in caplog.records]
    assert sum("training it again alone from a fresh start" in m for m in messages) == YAW_RETRAIN_ATTEMPTS
    assert any("will not read the object's yaw" in m and "--seed" in m for m in messages)
    log = [json.loads(line) for line in companion_paths(tmp_path / "unread.pt")[1].read_text().splitlines()]
    stages = [line["stage"] for line in log]
    retrained = [line for line in log if line["stage"] == "yaw_retrain"]
    assert [line["attempt"] for line in retrained] == list(range(1, YAW_RETRAIN_ATTEMPTS + 1))  # 4 steps: a line each
    assert stages.index("yaw_retrain") > max(i for i, s in enumerate(stages) if s == "reader")
    assert max(i for i, s in enumerate(stages) if s == "yaw_retrain") < stages.index("dynamics")


def test_the_yaw_retrain_touches_only_the_yaw_reader(tmp_path, monkeypatch):
    """Trained again, or not (with a bar the untrained yaw reader clears), the first pass and the
    dynamics come out the same to the bit: the fresh starts draw from their own random stream. The yaw
    reader does not."""
    retrained = train(TRAIN[:16], tmp_path / "retrained.pt", tiny_config(epochs=1), resume=False, progress=None)
    monkeypatch.setattr(training, "YAW_UNREAD_LOSS", 10.0)
    kept = train(TRAIN[:16], tmp_path / "kept.pt", tiny_config(epochs=1), resume=False, progress=None)
    assert not any(json.loads(line)["stage"] == "yaw_retrain"
                   for line in companion_paths(kept.checkpoint)[1].read_text().splitlines())
    a, b = (read_checkpoint(r.checkpoint)["state_dict"] for r in (retrained, kept))
    for name in a:
        if name.startswith(("reader.", "dynamics.")):
            assert torch.equal(a[name], b[name]), name
    assert not all(torch.equal(a[n], b[n]) for n in a if n.startswith("yaw_reader."))


def test_an_interrupted_yaw_retrain_runs_again_on_resume(tmp_path):
    """Ctrl-C while the yaw reader trains again saves at the reader stage's end; resuming there checks
    the yaw reader again (still unlearned here) and goes on to the other stages."""
    cfg = tiny_config(epochs=1)

    def interrupt_in_retrain(p):
        if p.stage.startswith("yaw_retrain"):
            raise KeyboardInterrupt

    out = tmp_path / "interrupted.pt"
    with pytest.raises(KeyboardInterrupt):
        train(TRAIN[:16], out, cfg, resume=False, progress=interrupt_in_retrain)
    assert read_checkpoint(companion_paths(out)[0])["training"]["step"] == cfg.stage_steps(16)["reader"]
    seen = []
    train(TRAIN[:16], out, cfg, resume=True, progress=lambda p: seen.append(p.stage))
    assert seen[0].startswith(f"yaw_retrain 1/{YAW_RETRAIN_ATTEMPTS}") and seen[-1] == "judge"


def test_each_training_stage_reduces_its_loss(trained):
    path, result = trained
    log = [json.loads(line) for line in companion_paths(path)[1].read_text().splitlines()]
    log = [e for e in log if e["stage"] != "yaw_retrain"]   # the synthetic frames show no yaw (see above)
    assert [e["step"] for e in log] == list(range(5, result.steps + 1, 5))
    assert [s for s in STAGES if any(e["stage"] == s for e in log)] == list(STAGES)
    # (the dynamics' windows grow over its stage, so its losses are not compared; what it learns from
    # the twin's physics is tested on twin episodes in test_world_model_rich_training)
    for stage, key, factor in (("reader", "goal", 0.6), ("frames", "image", 0.6), ("judge", "judge_recorded", 0.8)):
        entries = [e[key] for e in log if e["stage"] == stage]
        first, last = np.mean(entries[:3]), np.mean(entries[-3:])
        assert last < factor * first, (stage, key, first, last)
    report = evaluate(HELDOUT, path)
    assert report["episodes"] == len(HELDOUT) and report["horizon_steps"] == 12
    assert set(report["judge"]["per_task"]) == set(TASK_JOINT)
    for view in VIEWS:
        assert len(report["image"][view]["psnr"]) == 12 and report["image"][view]["psnr_mean"] > 15
        assert 0 < report["image"][view]["ssim_mean"] <= 1
    assert report["joint_rmse"]["arm_overall"] < 0.02   # the servo prior fits the synthetic servo


def test_resume_after_interruption_continues_from_saved_step(tmp_path):
    episodes = TRAIN[:24]  # 3 steps per epoch
    cfg = tiny_config(epochs=2, checkpoint_every=4, log_every=1)  # reader 12, dynamics 18, frames 6, judge 6: 42 steps
    straight = train(episodes, tmp_path / "straight.pt", cfg, resume=False, progress=None)

    def interrupt_at_23(p):   # in the dynamics stage
        if p.step == 23:
            raise KeyboardInterrupt

    out = tmp_path / "resumed.pt"
    with pytest.raises(KeyboardInterrupt):
        train(episodes, out, cfg, resume=False, progress=interrupt_at_23)
    state_path, log_path = companion_paths(out)
    assert read_checkpoint(state_path)["training"]["step"] == 23
    assert read_checkpoint(out)["training"]["step"] == 20  # the last periodic model checkpoint
    seen = []
    resumed = train(episodes, out, cfg, resume=True, progress=lambda p: seen.append(p.step))
    assert resumed.resumed_from == 23 and seen[0] == 24 and seen[-1] == 42
    assert [json.loads(line)["step"] for line in log_path.read_text().splitlines()
            if json.loads(line)["stage"] != "yaw_retrain"] == list(range(1, 43))
    a, b = load_checkpoint(straight.checkpoint).net.state_dict(), load_checkpoint(out).net.state_dict()
    for key in a:
        torch.testing.assert_close(a[key], b[key], msg=key)  # same result as without interruption


def test_training_without_scene_states_is_refused(tmp_path):
    """The reader, the dynamics and the judge learn from recorded scene states; records without any are refused."""
    from dataclasses import replace

    with pytest.raises(ValueError, match="none of the 4 episodes records scene_state"):
        train([replace(r, scene_state=None) for r in TRAIN[:4]], tmp_path / "m.pt", tiny_config(epochs=1),
              resume=False, progress=None)


def test_resume_with_another_model_config_is_refused(tmp_path):
    out = tmp_path / "m.pt"
    train(TRAIN[:8], out, tiny_config(epochs=1), resume=False, progress=None)
    # another stage length or seed would shift the rest of the run: refused before any step
    with pytest.raises(CheckpointError, match=r"other training settings .*'judge_passes': \(3\.0, 1\.0\)"):
        train(TRAIN[:8], out, tiny_config(epochs=1, judge_passes=3.0), resume=True, progress=None)
    other = tiny_config(model=ModelConfig(**{**TINY.to_dict(), "latent_dim": 48, "channels": (8, 16),
                                             "reader_channels": (8, 8)}))
    with pytest.raises(CheckpointError, match=r"model config differs.*'latent_dim': \(48, 32\)"):
        train(TRAIN[:8], out, other, resume=True, progress=None)


def test_a_judge_trained_from_a_checkpoint_keeps_its_reader_dynamics_and_frames(trained, tmp_path):
    """--judge-from runs the judge stage alone: the reader, dynamics and renderer come out bit-identical;
    with the full run's seed the judge is the one that run trained (the same stage, the same start),
    with another seed another one; the loss log holds judge lines only."""
    path, _ = trained
    out = tmp_path / "rejudged.pt"
    result = train(TRAIN, out, tiny_config(), resume=False, progress=None, judge_from=path)
    train(TRAIN, tmp_path / "seed1.pt", tiny_config(seed=1), resume=False, progress=None, judge_from=path)
    before = read_checkpoint(path)["state_dict"]
    same_seed, other_seed = load_checkpoint(out).net.state_dict(), load_checkpoint(tmp_path / "seed1.pt").net.state_dict()
    assert before.keys() == same_seed.keys() == other_seed.keys()
    for name, tensor in before.items():
        assert torch.equal(tensor, same_seed[name]), name
        assert torch.equal(tensor, other_seed[name]) != name.startswith("judge_"), name
    steps = tiny_config().stage_steps(len(TRAIN))
    assert result.resumed_from == sum(steps[s] for s in STAGES[:-1]) and result.steps == sum(steps.values())
    logged = [json.loads(line) for line in companion_paths(out)[1].read_text().splitlines()]
    assert logged and {line["stage"] for line in logged} == {"judge"}
    model = _played(out, HELDOUT[0])
    assert np.all((model.judgement().success_prob >= 0) & (model.judgement().success_prob <= 1))


def test_new_dynamics_trained_from_a_checkpoint_keep_its_reader_and_renderer(trained, tmp_path):
    """--dynamics-from runs the dynamics and judge stages (the renderer's steps count as done: it
    learns from recorded scenes): with the full run's seed the checkpoint comes out as that run's, to
    the bit; from a format 6 checkpoint with another seed, the reader and renderer are the
    checkpoint's, the refiner (trained alone first), the dynamics and the judge new."""
    path, full_run = trained
    out = tmp_path / "same_seed.pt"
    result = train(TRAIN, out, tiny_config(), resume=False, progress=None, dynamics_from=path)
    steps = tiny_config().stage_steps(len(TRAIN))
    assert result.resumed_from == steps["reader"] and result.steps == full_run.steps
    before, same_seed = read_checkpoint(path), read_checkpoint(out)
    assert same_seed["training"]["retrained_from"] == {"checkpoint": str(path), "stage": "dynamics"}
    # the run's own time apart from the total, which adds the checkpoint's
    assert 0 < result.run_time_s < result.wall_time_s
    assert result.wall_time_s == pytest.approx(before["training"]["wall_time_s"] + result.run_time_s)
    for name, tensor in before["state_dict"].items():
        assert torch.equal(tensor, same_seed["state_dict"][name]), name
    logged = [json.loads(line)["stage"] for line in companion_paths(out)[1].read_text().splitlines()]
    assert logged == ["dynamics"] * logged.count("dynamics") + ["judge"] * logged.count("judge") and logged

    def interrupt_in_dynamics(p):
        if p.step == steps["reader"] + 40:
            raise KeyboardInterrupt

    interrupted = tmp_path / "interrupted.pt"   # resumed without the flag: the checkpoint knows
    with pytest.raises(KeyboardInterrupt):
        train(TRAIN, interrupted, tiny_config(), resume=False, progress=interrupt_in_dynamics, dynamics_from=path)
    assert train(TRAIN, interrupted, tiny_config(), resume=True, progress=None).resumed_from == steps["reader"] + 40
    resumed = read_checkpoint(interrupted)
    assert resumed["training"]["retrained_from"] == same_seed["training"]["retrained_from"]
    for name, tensor in same_seed["state_dict"].items():
        torch.testing.assert_close(tensor, resumed["state_dict"][name], msg=name)

    v6 = {**before, "format_version": 6,
          "state_dict": {k: v for k, v in before["state_dict"].items() if not k.startswith("object_refiner.")}}
    save_checkpoint(tmp_path / "v6.pt", v6)
    train(TRAIN, tmp_path / "seed1.pt", tiny_config(seed=1), resume=False, progress=None, dynamics_from=tmp_path / "v6.pt")
    other_seed = read_checkpoint(tmp_path / "seed1.pt")
    assert other_seed["format_version"] == 7
    for name, tensor in before["state_dict"].items():
        retrained = name.startswith(("object_refiner.", "dynamics.", "judge_")) and "kinematics" not in name
        assert torch.equal(tensor, other_seed["state_dict"][name]) != retrained, name
    logged = [json.loads(line)["stage"] for line in companion_paths(tmp_path / "seed1.pt")[1].read_text().splitlines()]
    assert logged == [stage for stage in ("refiner", "dynamics", "judge") for _ in range(logged.count(stage))]
    assert logged.count("dynamics") == -(-steps["dynamics"] // tiny_config().log_every)


def test_a_checkpoint_without_the_object_refiner_gets_the_one_a_full_run_trains(trained, tmp_path):
    """--judge-from a format 6 checkpoint trains its object refiner alone, then the judge: with the
    full run's seed both are the ones that run trained (the refiner reads only its patches, drawn as
    the reader stage draws them), and every other tensor is the checkpoint's."""
    path, _ = trained
    full = read_checkpoint(path)
    refiner = {k for k in full["state_dict"] if k.startswith("object_refiner.")}
    assert refiner
    v6 = {**full, "format_version": 6,
          "state_dict": {k: v for k, v in full["state_dict"].items() if k not in refiner}}
    save_checkpoint(tmp_path / "v6.pt", v6)
    out = tmp_path / "refined.pt"
    train(TRAIN, out, tiny_config(), resume=False, progress=None, judge_from=tmp_path / "v6.pt")
    refined = read_checkpoint(out)
    assert refined["format_version"] == 7 and refined["state_dict"].keys() == full["state_dict"].keys()
    for name, tensor in full["state_dict"].items():
        assert torch.equal(tensor, refined["state_dict"][name]), name
    logged = [json.loads(line)["stage"] for line in companion_paths(out)[1].read_text().splitlines()]
    steps = tiny_config().stage_steps(len(TRAIN))
    assert logged == ["refiner"] * logged.count("refiner") + ["judge"] * logged.count("judge")
    assert logged.count("refiner") == -(-steps["reader"] // tiny_config().log_every)


def test_a_judge_is_trained_only_for_a_checkpoint_this_model_runs(trained, tmp_path):
    path, _ = trained
    with pytest.raises(CheckpointError, match="no such file"):
        train(TRAIN, tmp_path / "a.pt", tiny_config(), resume=False, progress=None, judge_from=tmp_path / "missing.pt")
    v4 = _tampered(path, tmp_path / "v4.pt", format_version=4)
    for retrain in ("judge_from", "dynamics_from"):
        with pytest.raises(CheckpointError, match=r"expected 5 or 6 or 7, found 4 \(an object-centric model without "
                                                  r"the yaw reader.*retrain it with 'gesim-ros train-wm'\)"):
            train(TRAIN, tmp_path / "b.pt", tiny_config(), resume=False, progress=None, **{retrain: v4})
    with pytest.raises(ValueError, match="not both"):
        train(TRAIN, tmp_path / "b.pt", tiny_config(), resume=False, progress=None, judge_from=path, dynamics_from=path)
    other = tiny_config(model=ModelConfig(**{**TINY.to_dict(), "latent_dim": 48}))
    with pytest.raises(CheckpointError, match=r"model config differs.*'latent_dim': \(48, 32\)"):
        train(TRAIN, tmp_path / "c.pt", other, resume=False, progress=None, judge_from=path)
    state = read_checkpoint(path)
    state["state_dict"]["dynamics.edge.0.weight"] = state["state_dict"]["dynamics.edge.0.weight"][:, 1:]
    save_checkpoint(tmp_path / "edge.pt", state)
    with pytest.raises(CheckpointError, match=r"differ from this model's .*dynamics.edge.0.weight"):
        train(TRAIN, tmp_path / "d.pt", tiny_config(), resume=False, progress=None, judge_from=tmp_path / "edge.pt")
    assert not any((tmp_path / f"{n}.pt").exists() for n in "abcd")


def test_success_only_learns_the_world_from_successes_and_the_judge_from_all(tmp_path):
    from gesim_ros.world_model.training import _fit_normalisation, _prepare

    failed = [r for r in TRAIN if not r.success][:4]
    with pytest.raises(ValueError, match="success_only: none of the 4 episodes succeeded"):
        train(failed, tmp_path / "m.pt", tiny_config(success_only=True, epochs=1), resume=False, progress=None)
    mix = TRAIN[:16]
    out = tmp_path / "mix.pt"
    train(mix, out, tiny_config(success_only=True, epochs=1), resume=False, progress=None)
    # the world's statistics (servo prior, scene normalisation) are the successes' alone
    saved = load_checkpoint(out).net.normalisation
    episodes = _prepare(mix, tiny_config()).episodes
    hands = HandKinematics.from_g2(load_contract())
    ours = _fit_normalisation([e for e in episodes if e.success], hands)
    np.testing.assert_allclose(saved.scene_mean, ours.scene_mean)
    assert saved.surface_z == pytest.approx(ours.surface_z)
    assert not np.allclose(_fit_normalisation(episodes, hands).scene_mean, ours.scene_mean)


# --------------------------------------------------------------------------- checkpoints


def test_checkpoint_round_trip(trained, tmp_path):
    path, _ = trained
    data = read_checkpoint(path)
    assert data["task_vocabulary"] == ["<unknown>", "left_square_right", "right_square_right"]
    assert data["joint_names"] == JOINTS and data["views"] == list(VIEWS)
    assert data["training"]["data"]["episodes"] == len(TRAIN)
    assert data["training"]["data"]["tasks"]["left_square_right"]["episodes"] == len(TRAIN) // 2
    assert "optimizer" not in data  # the shipped checkpoint carries weights only
    copy = tmp_path / "copy.pt"
    save_checkpoint(copy, data)
    a, b = load_checkpoint(path), load_checkpoint(copy)
    for key, value in a.net.state_dict().items():
        assert torch.equal(value, b.net.state_dict()[key]), key
    np.testing.assert_array_equal(a.net.normalisation.state_std, b.net.normalisation.state_std)
    assert b.task_id("move the left square right") == b.task_id("left_square_right") == 1
    assert b.task_id("fold the laundry") == 0


def _tampered(src, dst, **changes):
    data = read_checkpoint(src)
    data.update(changes)
    save_checkpoint(dst, data)
    return dst


def test_corrupt_and_mismatched_checkpoints_name_the_difference(trained, tmp_path):
    path, _ = trained
    with pytest.raises(CheckpointError, match="no such file"):
        load_checkpoint(tmp_path / "missing.pt")
    truncated = tmp_path / "truncated.pt"
    truncated.write_bytes(path.read_bytes()[:5000])
    with pytest.raises(CheckpointError, match="corrupt"):
        load_checkpoint(truncated)
    with pytest.raises(CheckpointError, match=r"format version expected 7, found 99"):
        load_checkpoint(_tampered(path, tmp_path / "v99.pt", format_version=99))
    with pytest.raises(CheckpointError, match=r"found 2 \(a video-latent model .* retrain it with 'gesim-ros train-wm'"):
        load_checkpoint(_tampered(path, tmp_path / "v2.pt", format_version=2))
    with pytest.raises(CheckpointError, match=r"found 3 \(an object-centric model without the millimetre contact"):
        load_checkpoint(_tampered(path, tmp_path / "v3.pt", format_version=3))
    with pytest.raises(CheckpointError, match=r"found 4 \(an object-centric model without the yaw reader"):
        load_checkpoint(_tampered(path, tmp_path / "v4.pt", format_version=4))
    with pytest.raises(CheckpointError, match=r"found 5 \(an object-centric model whose judge does not read the time"):
        load_checkpoint(_tampered(path, tmp_path / "v5.pt", format_version=5))
    with pytest.raises(CheckpointError, match=r"found 6 \(an object-centric model without the object refiner.*"
                                              r"give it an object refiner and a new judge with 'gesim-ros train-wm "
                                              r"--judge-from "):
        load_checkpoint(_tampered(path, tmp_path / "v6.pt", format_version=6))
    renamed = JOINTS[:3] + ["idx24_arm_l_elbow"] + JOINTS[4:]
    with pytest.raises(CheckpointError, match="joint names differ at index 3: expected 'idx24_arm_l_joint4', "
                                              "found 'idx24_arm_l_elbow'"):
        LearnedWorldModel(checkpoint=str(_tampered(path, tmp_path / "joints.pt", joint_names=renamed)))
    views = ["head", "left_wrist", "chest"]
    with pytest.raises(CheckpointError, match="views differ at index 2: expected 'right_wrist', found 'chest'"):
        LearnedWorldModel(checkpoint=str(_tampered(path, tmp_path / "views.pt", views=views)))
    config = {**read_checkpoint(path)["model_config"], "latent_dim": 64}
    with pytest.raises(CheckpointError, match="(?s)corrupt:.*size mismatch"):
        load_checkpoint(_tampered(path, tmp_path / "config.pt", model_config=config))
    with pytest.raises(CheckpointError, match="format expected 'gesim_ros.learned_world_model', found 'other'"):
        load_checkpoint(_tampered(path, tmp_path / "other.pt", format="other"))


# --------------------------------------------------------------------------- CLI


def _parse(add, argv):
    parser = argparse.ArgumentParser()
    add(parser)
    return parser.parse_args(argv)


def test_cli_train_then_eval(tmp_path, capsys):
    data = tmp_path / "episodes"
    data.mkdir()
    for rec in TRAIN[:16]:
        rec.save_npz(data / f"{rec.episode_id}.npz")
    out = tmp_path / "wm.pt"
    argv = ["--data", str(data), "--out", str(out), "--epochs", "1", "--heldout-fraction", "0.25", "--judge-passes", "3"]
    assert world_model_cli.run_train(_parse(world_model_cli.add_train_arguments, argv + ["--judge-passes", "0"])) == 2
    assert "--judge-passes must be a positive number of passes, got 0.0" in capsys.readouterr().err and not out.exists()
    assert world_model_cli.run_train(_parse(world_model_cli.add_train_arguments, argv)) == 0
    training_record = read_checkpoint(out)["training"]
    trained_on = training_record["data"]["episode_ids"]
    steps = TrainConfig(epochs=1, judge_passes=3.0).stage_steps(len(trained_on))
    assert training_record["config"]["judge_passes"] == 3.0 and training_record["total_steps"] == sum(steps.values())
    assert steps["judge"] == 3 * TrainConfig(epochs=1).stage_steps(len(trained_on))["judge"]
    heldout = [r.episode_id for r in TRAIN[:16] if world_model_cli.is_heldout(r.episode_id, 0.25)]
    assert heldout and not set(heldout) & set(trained_on) and len(trained_on) + len(heldout) == 16
    printed = capsys.readouterr().out
    assert "judge vs recorded outcome" in printed
    assert re.search(r"\(\d+\.\d MB\): \d+ steps, \d+\.\d min; losses logged to ", printed), printed
    rejudged = ["--data", str(data), "--out", str(tmp_path / "rejudged.pt"), "--epochs", "1", "--heldout-fraction", "0.25",
                "--judge-from", str(out)]
    assert world_model_cli.run_train(_parse(world_model_cli.add_train_arguments, rejudged)) == 0
    assert re.search(r"\d+ steps, \d+\.\d min \(\d+\.\d min with " + re.escape(str(out)) + "'s training, whose scene "
                     r"reader, dynamics and frame renderer it keeps\); losses", capsys.readouterr().out)
    assert world_model_cli.run_train(_parse(world_model_cli.add_train_arguments, argv)) == 2  # exists, no --resume
    resumed = argv[:-1] + ["1", "--resume"]   # the run started with 3 judge passes
    assert world_model_cli.run_train(_parse(world_model_cli.add_train_arguments, resumed)) == 2
    assert "resume it with the flags it started with" in capsys.readouterr().err
    with pytest.raises(SystemExit) as refused:   # argparse: one line on stderr, exit 2
        _parse(world_model_cli.add_train_arguments, argv + ["--judge-from", str(out), "--dynamics-from", str(out)])
    assert refused.value.code == 2 and "not allowed with argument --judge-from" in capsys.readouterr().err

    report = tmp_path / "eval.json"
    argv = ["--data", str(data), "--ckpt", str(out), "--json", str(report)]
    assert world_model_cli.run_eval(_parse(world_model_cli.add_eval_arguments, argv)) == 0
    printed = capsys.readouterr().out
    assert f"{len(trained_on)} training episodes skipped" in printed and "PSNR/SSIM head" in printed
    figures = json.loads(report.read_text())
    assert figures["episodes"] == len(heldout)
    assert figures["judge"]["overall"]["n"] == len(heldout)


def test_load_records_and_split(tmp_path):
    with pytest.raises(FileNotFoundError, match="no episodes"):
        world_model_cli.load_records(tmp_path)
    ids = [f"pick_place-{i:05d}" for i in range(2000)]
    held = [world_model_cli.is_heldout(i) for i in ids]
    assert 0.17 < np.mean(held) < 0.23
    assert held == [world_model_cli.is_heldout(i) for i in ids]


def test_the_shipped_checkpoint_loads_as_the_default():
    """The checkpoint in the package is the learned backend's default and loads with the G2's joints."""
    model = load_checkpoint(DEFAULT_CHECKPOINT)
    assert set(model.task_horizons) == {"pick_place", "push", "unplug"}
    assert set(load_contract("g2_gdk").joint_names) >= set(model.joint_names)


def test_eval_wm_compares_yaws_modulo_a_quarter_turn():
    """The yaw error eval-wm reports is what the model can tell: 80 degrees off is 10, 135 is 45."""
    turned = [math.cos(math.radians(100) / 2), 0.0, 0.0, math.sin(math.radians(100) / 2)]
    assert float(yaw_from_quat(torch.tensor(turned))) == pytest.approx(math.radians(100))
    assert [round(_quarter_turn_degrees(math.radians(a)), 6) for a in (0, 10, -10, 80, 95, -135, 180)] == \
        [0, 10, 10, 10, 5, 45, 0]
