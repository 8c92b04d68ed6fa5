"""The names labs import (as the README shows them) keep working after the package layout changed."""

import importlib


def test_policy_api_and_world_model_api_are_the_subpackages_modules():
    assert importlib.import_module("gesim_ros.policy_api") is importlib.import_module("gesim_ros.policy.api")
    assert (importlib.import_module("gesim_ros.world_model_api")
            is importlib.import_module("gesim_ros.world_model.api"))


def test_the_readme_imports_resolve():
    from gesim_ros.policy_api import Policy, lerobot_batch
    from gesim_ros.world_model.judges.reward_client import JudgeRewardClient
    from gesim_ros.world_model_api import Judge, WorldModel, available_judges, load_judge

    assert callable(lerobot_batch) and callable(load_judge) and callable(available_judges)
    assert isinstance(JudgeRewardClient, type)
    assert all(isinstance(cls, type) for cls in (Policy, Judge, WorldModel))
