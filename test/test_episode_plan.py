"""The episode runner's plan logic, without ROS."""

import pytest

from gesim_ros.episodes.plan import RunnerError, plan_episodes


def test_episode_plan_and_its_errors():
    plan = plan_episodes(["push", "unplug"], [1, 2], ["real", "world_model"])
    assert [(p.task, p.seed, p.mode) for p in plan[:3]] == [("push", 1, "real"), ("push", 1, "world_model"),
                                                            ("unplug", 1, "real")]
    assert len(plan) == 8
    with pytest.raises(RunnerError, match="no tasks: set the tasks parameter"):
        plan_episodes([], [0], ["real"])
    with pytest.raises(RunnerError, match="backend_modes \\['robot'\\]: use one or more of real, world_model"):
        plan_episodes(["push"], [0], ["robot"])
