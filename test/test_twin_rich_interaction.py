"""Issue #17's data half: scene supervision in every twin record, the rich-interaction recipe (the
physics decides the label, not the plan) and the held-out probes' seed layout."""

import subprocess

import numpy as np
import pytest

from gesim_ros.episodes.data import SCENE_STATE_NAMES, EpisodeRecord
from gesim_ros.ros.process_harness import executable_path
from gesim_ros.twin import interaction
from gesim_ros.twin import tasks as tt
from gesim_ros.twin.physics import G2Twin
from gesim_ros.twin.records import record_twin_episode

COL = {n: i for i, n in enumerate(SCENE_STATE_NAMES)}


@pytest.fixture(scope="module")
def twin():
    with G2Twin(camera_width=16, camera_height=12) as t:
        yield t


def test_a_successful_push_moves_the_block_onto_its_goal_in_the_scene_state(twin):
    rec = record_twin_episode(twin, "push", 0, 0.0)
    assert rec.label == "success"
    s = rec.scene_state
    assert s.shape == (rec.steps + 1, len(SCENE_STATE_NAMES)) and s.dtype == np.float32
    start, end, goal = s[0, :3], s[-1, :3], s[0, [COL["goal_x"], COL["goal_y"], COL["goal_z"]]]
    assert np.linalg.norm(end[:2] - start[:2]) > 0.1                      # pushed 13-17 cm
    assert np.linalg.norm(end[:2] - goal[:2]) < tt.Push.TARGET_RADIUS     # onto the target
    assert np.ptp(s[:, COL["goal_x"]:COL["object_half_z"] + 1], axis=0).max() == 0   # goal and size constant
    np.testing.assert_allclose(s[0, COL["object_half_x"]:COL["object_half_z"] + 1],
                               tt.Push().half_extents(tt.make_episode("push", 0).params), atol=1e-6)
    assert np.allclose(np.linalg.norm(s[:, COL["object_qw"]:COL["object_qz"] + 1], axis=1), 1, atol=1e-5)
    assert not s[:, COL["table_contact"]].any()
    assert s[:, COL["press_force"]].max() < tt.PRESS_FORCE_N and s[:, COL["static_force"]].max() < tt.COLLISION_FORCE_N


def test_held_flips_to_one_while_a_successful_pick_carries_the_cube(twin):
    rec = record_twin_episode(twin, "pick_place", 1, 0.0)
    assert rec.label == "success"
    held, z = rec.scene_state[:, COL["held"]], rec.scene_state[:, COL["object_z"]]
    assert held[0] == 0 and held[-1] == 0 and set(np.unique(held)) == {0.0, 1.0}   # grasped, then released
    assert z[held == 1].max() > z[0] + 0.05                                       # lifted while held
    goal = rec.scene_state[-1, [COL["goal_x"], COL["goal_y"]]]
    assert np.linalg.norm(rec.scene_state[-1, :2] - goal) < tt.PickPlace.BIN_INNER_HALF   # in the bin


def test_table_contact_turns_on_when_a_too_low_approach_rams_the_table(twin):
    rec = record_twin_episode(twin, "pick_place", 1, 0.0,
                              controller_options={"failure_mode": "fast_approach", "severity": {"too_low_m": 0.06}})
    assert rec.label == "collision"
    contact = rec.scene_state[:, COL["table_contact"]]
    assert contact[0] == 0 and contact[-1] == 1 and (np.diff(contact) >= 0).all()
    # the force that decided it is recorded at the step the verdict turned (the peak since the step before)
    onset = int(np.argmax(contact))
    assert rec.scene_state[onset, COL["static_force"]] > tt.COLLISION_FORCE_N
    assert (rec.scene_state[:onset, COL["static_force"]] <= tt.COLLISION_FORCE_N).all()


def test_graded_severity_ends_both_ways_and_the_checker_decides(twin):
    """The same failure mode, offset 0 vs the scripted maximum: the physics labels, not the plan."""
    labels = [record_twin_episode(twin, "pick_place", 1, 0.0, controller_options={
        "failure_mode": "grasp_offset", "severity": {"offset_m": off}}).label for off in (0.0, 0.07)]
    assert labels == ["success", "missed_grasp"]


def test_rich_recipe_ends_the_same_family_both_ways_depending_on_the_scene(twin):
    """Failure-free plans of the rich recipe (dev set: pick_place indices 9 and 4), one in its own
    varied scene, one in a neighbour's."""
    draws = [interaction.draw("rich", "pick_place", k) for k in (9, 4)]
    assert [d.info["family"] for d in draws] == ["nominal", "nominal"]
    recs = [record_twin_episode(twin, "pick_place", d.plan_seed, d.failure_rate, scene_seed=d.scene_seed,
                                controller_options=d.options, interaction=d.info) for d in draws]
    assert recs[0].success and not recs[1].success, [r.label for r in recs]
    assert recs[1].extra["interaction"]["scene"] == "other_seed"


def test_rich_boundary_pushes_at_one_height_end_both_ways_depending_on_the_block(twin):
    """rich-boundary's fast approaches 6.35 cm up (dev set: indices 50035, 50057), each in a varied
    scene its plan knows: one block tips, the other slides to its goal."""
    draws = [interaction.draw("rich-boundary", "push", k) for k in (50035, 50057)]
    assert [(d.info["family"], d.info["scene"]) for d in draws] == [("fast_approach", "varied_known")] * 2
    assert [round(d.options["severity"]["push_height_m"], 3) for d in draws] == [0.064, 0.064]
    recs = [record_twin_episode(twin, "push", d.plan_seed, d.failure_rate, scene_seed=d.scene_seed,
                                controller_options=d.options, interaction=d.info) for d in draws]
    assert [r.label for r in recs] == ["knocked_over", "success"]


@pytest.mark.parametrize("task", ["pick_place", "push", "unplug"])
def test_rich_boundary_draws_only_its_ranges_without_arm_noise_on_seeds_of_its_own(task):
    ranges = interaction.BOUNDARY[task]
    draws = [interaction.draw("rich-boundary", task, k) for k in interaction.BOUNDARY_SEEDS[:300]]
    assert {d.info["family"] for d in draws} == set(ranges)
    for d in draws:
        assert "arm_noise_rad" not in d.options and d.info["arm_noise_rad"] == 0.0
        for key, (lo, hi) in ranges[d.info["family"]].items():
            assert lo <= d.options["severity"][key] <= hi
    rich = [interaction.draw("rich", task, k) for k in range(300)]
    assert not {(d.plan_seed, d.scene_seed) for d in draws} & {(d.plan_seed, d.scene_seed) for d in rich}


def test_rich_boundary_refuses_a_task_it_has_no_severities_for():
    with pytest.raises(ValueError, match="recipe rich-boundary has no severities for task 'fold'; it plays push, "
                                         "pick_place, unplug"):
        interaction.draw("rich-boundary", "fold", 50000)


def test_varied_scenes_perturb_their_base_scene_and_leave_standard_seeds_alone():
    base, varied = tt.make_episode("pick_place", 7), tt.make_episode("pick_place", tt.SCENE_VARIATION_BASE + 7)
    assert varied.side == base.side and varied.randomisation["scene"] == base.randomisation["scene"]
    assert varied.params["bin_pos"] == base.params["bin_pos"] and varied.params != base.params
    assert np.abs(np.subtract(varied.params["cube_pos"], base.params["cube_pos"])).max() <= 0.02
    assert tt.make_episode("pick_place", 7) == base                      # deterministic


def test_npz_round_trip_keeps_scene_state_and_old_records_still_load(tmp_path):
    steps, joints = 3, ["a", "b"]
    common = dict(episode_id="e", task="push", task_text="t", seed=0, success=True, label="success",
                  control_period_s=0.1, joint_names=joints, actions=np.zeros((steps, 2), np.float32),
                  joint_positions=np.zeros((steps + 1, 2), np.float32),
                  frames={"head": np.zeros((steps + 1, 4, 4, 3), np.uint8)})
    state = np.arange((steps + 1) * len(SCENE_STATE_NAMES), dtype=np.float32).reshape(steps + 1, -1)
    EpisodeRecord(**common, scene_state=state).save_npz(tmp_path / "new.npz")
    assert np.array_equal(EpisodeRecord.load_npz(tmp_path / "new.npz").scene_state, state)
    EpisodeRecord(**common).save_npz(tmp_path / "old.npz")       # what records without scene_state hold
    with np.load(tmp_path / "old.npz") as data:
        assert "scene_state" not in data.files and "scene_state" not in str(data["meta"])
    assert EpisodeRecord.load_npz(tmp_path / "old.npz").scene_state is None
    with pytest.raises(ValueError, match=rf"scene_state must be \(4, {len(SCENE_STATE_NAMES)}\)"):
        EpisodeRecord(**common, scene_state=state[1:])
    with pytest.raises(ValueError, match=r"got \(4, 12\) \(a record made before the object size and contact forces "
                                         r"were recorded: record it again with 'gesim-ros record-training'\)"):
        EpisodeRecord(**common, scene_state=state[:, :12])


@pytest.mark.parametrize("options, expected", [
    (["--recipe", "probe-graded", "--seed-start", "0"], "--seed-start 0 with 5 episodes per task: probe seeds"),
    (["--recipe", "probe-noise", "--seed-start", "499998"], "--seed-start 499998 with 5 episodes per task: probe"),
    (["--recipe", "rich", "--seed-start", "49996"], "--seed-start 49996 with 5 episodes per task: recipe rich's seeds "
                                                     "lie in 0..49999"),
    (["--recipe", "rich-boundary", "--tasks", "push", "--seed-start", "0"], "--seed-start 0 with 5 episodes per "
                                                     "task: recipe rich-boundary's seeds lie in 50000..99999"),
    (["--seed-start", "99990", "--scene-shift", "10"], "--seed-start 99990 with 5 episodes per task (scene shift 10)"),
    (["--recipe", "probe-scene", "--scene-shift", "3"], "--scene-shift 3: only the scripted recipe"),
])
def test_seed_ranges_that_break_the_layout_are_refused(options, expected, tmp_path):
    out = tmp_path / "records"
    run = subprocess.run([executable_path("gesim-ros"), "record-training", *options, "--episodes-per-task", "5",
                          "--out", str(out)], capture_output=True, text=True, timeout=120)
    assert run.returncode == 2 and "Traceback" not in run.stderr, run.stderr
    assert run.stderr.startswith(f"gesim-ros record-training: {expected}"), run.stderr
    assert not out.exists()
