import math

import numpy as np
import pytest

from gesim_ros.contract.command_validation import CommandRejected, CommandValidator
from gesim_ros.contract.contract import load_contract

C = load_contract()
ARM = list(C.arm_joint_names)


def _mid(names):
    return np.array([np.mean(C.joint_limits[n]) for n in names])


def _validator():
    v = CommandValidator(C)
    v.observe(ARM, _mid(ARM))
    return v


def test_accepts_a_smooth_chunk_and_remembers_its_end():
    v = _validator()
    chunk = _mid(ARM) + np.linspace(0, 0.03, 10)[:, None]
    cmd = v.validate(ARM, chunk, control_period_s=0.1, horizon=10)
    assert cmd.targets.shape == (10, 16)
    assert v.last_targets[ARM[0]] == pytest.approx(chunk[-1, 0])


@pytest.mark.parametrize("names, values, horizon, match", [
    (ARM, np.full(16, np.nan), 1, "must be finite"),
    (ARM, np.full(16, np.inf), 1, "must be finite"),
    (ARM[:-1] + ["no_such_joint"], None, 1, "unknown joint"),
    (ARM[:-1] + [ARM[0]], None, 1, "more than once"),
    (ARM, np.zeros(15), 1, "15 target values"),
    (ARM, np.zeros(16 * 3), 2, "48 target values"),
    ([], np.zeros(0), 1, "names no joints"),
])
def test_rejects_malformed(names, values, horizon, match):
    v = _validator()
    before = dict(v.last_targets)
    if values is None:
        values = np.zeros(len(names))
    with pytest.raises(CommandRejected, match=match):
        v.validate(names, values, 0.1, horizon)
    assert v.last_targets == before  # a rejected command changes nothing


def test_rejects_out_of_limit_and_too_fast():
    v = _validator()
    target = _mid(ARM)
    target[14] = 0.5  # gripper limit is 0.08
    with pytest.raises(CommandRejected, match="outside its limits"):
        v.validate(ARM, target, 0.1)
    jump = _mid(ARM)
    jump[0] += 1.0  # 2 rad/s * 0.1 s = 0.2 rad allowed
    with pytest.raises(CommandRejected, match="velocity limit"):
        v.validate(ARM, jump, 0.1)
    with pytest.raises(CommandRejected, match="control period"):
        v.validate(ARM, _mid(ARM), 0.0)


def test_a_streaming_command_may_lead_the_lagging_measured_state_but_not_by_much():
    v = _validator()
    start = _mid(ARM)
    arms = np.array([1.0] * 14 + [0.0, 0.0])  # move the arms, hold the grippers
    v.validate(ARM, start + np.linspace(0, 0.25, 6)[:, None] * arms, 1 / 30, horizon=6)
    v.observe(ARM, start)  # the servo lags: the robot has not moved yet
    v.validate(ARM, start + np.linspace(0.3, 0.55, 6)[:, None] * arms, 1 / 30, horizon=6)
    v.forget_commands()  # a new command stream starts from where the robot is
    with pytest.raises(CommandRejected, match="velocity limit"):
        v.validate(ARM, start + 0.3 * arms, 1 / 30)
    far = CommandValidator(C)
    far.observe(ARM, start)
    far.last_targets.update(zip(ARM, start + 0.9 * arms))  # a stream that ran far ahead of the robot
    with pytest.raises(CommandRejected, match="from its measured position"):
        far.validate(ARM, start + 0.9 * arms, 1 / 30)


def test_a_command_without_a_measured_state_of_every_joint_it_moves_is_refused():
    v = CommandValidator(C, state_source="/gdk/joint_state")
    with pytest.raises(CommandRejected, match=r"no measured position yet for 16 of the 16 .*/gdk/joint_state arrive"):
        v.validate(ARM, np.zeros(16), 0.1)  # all zeros: what nan_to_num once let through
    left = [n for n in ARM if n in C.joint_groups["left_arm"]]
    v.observe(left, _mid(left))
    with pytest.raises(CommandRejected, match=f"no measured position yet for {16 - len(left)} of the 16"):
        v.validate(ARM, _mid(ARM), 0.1)
    assert v.validate(left, _mid(left), 0.1).joint_names == tuple(left)


def test_a_command_is_refused_while_the_measured_state_is_older_than_the_bound():
    v = CommandValidator(C, max_state_age_s=0.2)
    v.observe(ARM, _mid(ARM), at=10.0)
    v.validate(ARM, _mid(ARM), 0.1, now=10.2)
    with pytest.raises(CommandRejected, match=r"is 0\.250 s old, more than max_state_age_s 0\.2 s"):
        v.validate(ARM, _mid(ARM), 0.1, now=10.25)
    v.observe(ARM[:7], _mid(ARM[:7]), at=10.3)  # one arm's state resumes: the other's is still old
    with pytest.raises(CommandRejected, match=f"'{ARM[7]}' is 0.300 s old"):
        v.validate(ARM, _mid(ARM), 0.1, now=10.3)
    v.observe(ARM, _mid(ARM), at=10.4)
    assert v.validate(ARM, _mid(ARM), 0.1, now=10.45).targets.shape == (1, 16)


@pytest.mark.parametrize("bound", [0.0, -1.0, math.nan])
def test_a_state_age_bound_that_is_not_a_positive_duration_is_refused(bound):
    with pytest.raises(ValueError, match=f"max_state_age_s is {bound}; set a positive number of seconds"):
        CommandValidator(C, max_state_age_s=bound)


def test_without_a_velocity_limit_no_measured_state_is_needed():
    """The world model's command mapper checks names, shapes and limits only, and observes nothing."""
    v = CommandValidator(C, velocity_scale=math.inf)
    assert v.validate(ARM, _mid(ARM), 0.1).targets.shape == (1, 16)


def test_a_world_models_state_may_lag_the_commands_but_a_robots_may_not():
    start = _mid(ARM)
    arms = np.array([1.0] * 14 + [0.0, 0.0])
    ahead = start + 0.9 * arms   # more than 10 periods at 2 rad/s of 1/30 s (0.667 rad) from the state
    robot, world_model = CommandValidator(C), CommandValidator(C, check_lead=False)
    for v in robot, world_model:
        v.observe(ARM, start)   # where the model's timeline stands after a stall
        v.last_targets.update(zip(ARM, ahead))   # the stream of commands it has accepted so far
    with pytest.raises(CommandRejected, match="from its measured position"):
        robot.validate(ARM, ahead, 1 / 30)
    assert world_model.validate(ARM, ahead, 1 / 30).joint_names == tuple(ARM)
    with pytest.raises(CommandRejected, match="velocity limit"):   # a jump in the stream is still one
        world_model.validate(ARM, ahead + 0.1 * arms, 1 / 30)
