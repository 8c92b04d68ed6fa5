"""The one plugin loader and plugin-config parser, through every group's public loader."""

import importlib.metadata
import logging

import pytest

from gesim_ros.plugins import PluginConfigError, UnknownPluginError, available, plugin_config
from gesim_ros.policy.api import CHECKER_GROUP, POLICY_GROUP, load_policy, load_success_checker
from gesim_ros.world_model.api import (ENTRY_POINT_GROUP, JUDGE_GROUP, UnknownJudgeError, UnknownWorldModelError,
                                      load_judge, load_world_model)

# (public loader, entry-point group, what its errors call a plugin, a target of the right kind)
GROUPS = [
    (load_policy, POLICY_GROUP, "policy", "gesim_ros.policy.builtin:ScriptedPolicy.from_config"),
    (load_success_checker, CHECKER_GROUP, "success checker", "policy_fixtures:GripperClosed.from_config"),
    (load_world_model, ENTRY_POINT_GROUP, "world model", "gesim_ros.world_model.backends.kinematic:KinematicWorldModel"),
    (load_judge, JUDGE_GROUP, "judge", "gesim_ros.world_model.judges.none:no_judge"),
]
IDS = [g[2] for g in GROUPS]


def _eps(group, *pairs):
    return [importlib.metadata.EntryPoint(name, value, group) for name, value in pairs]


def test_shipped_plugins_are_found_among_the_installed_entry_points():
    assert {"scripted", "torchscript", "module"} <= set(available(POLICY_GROUP))
    assert {"learned", "kinematic", "gesim_http"} <= set(available(ENTRY_POINT_GROUP))
    assert {"backend", "none", "gesim_reward_http"} <= set(available(JUDGE_GROUP))
    assert available("gesim_ros.no_such_group") == {}


@pytest.mark.parametrize("load, group, what, target", GROUPS, ids=IDS)
def test_an_unknown_name_lists_the_available_ones_in_every_group(load, group, what, target):
    eps = _eps(group, ("b_plugin", target), ("a_plugin", target))
    with pytest.raises(UnknownPluginError, match=f"^unknown {what} 'nope'; available in entry-point group "
                                                 f"'{group}': a_plugin, b_plugin$"):
        load("nope", entry_points=eps)
    with pytest.raises(UnknownPluginError, match="available in entry-point group .*: none \\(is gesim_ros"):
        load("nope", entry_points=[])


def test_an_unknown_world_model_or_judge_keeps_its_own_error_type():
    with pytest.raises(UnknownWorldModelError):
        load_world_model("nope", entry_points=[])
    with pytest.raises(UnknownJudgeError):
        load_judge("nope", entry_points=[])


@pytest.mark.parametrize("load, group, what, target", GROUPS, ids=IDS)
def test_a_name_registered_twice_uses_the_first_and_says_so_in_every_group(load, group, what, target, caplog):
    eps = _eps(group, ("dup", target), ("dup", "no_such_module:thing"))
    with caplog.at_level(logging.WARNING, logger="gesim_ros.plugins"):
        load("dup", entry_points=eps)  # the second would fail to import
    assert f"{group} plugin 'dup' registered twice ({target}, no_such_module:thing); using the first" in caplog.text


@pytest.mark.parametrize("load, group, what, target", GROUPS, ids=IDS)
def test_an_unimportable_plugin_names_itself_and_its_target_in_every_group(load, group, what, target):
    with pytest.raises(ImportError, match=f"^{what} 'broken' \\(no_such_module:thing\\) failed to import: "
                                          "No module named 'no_such_module'"):
        load("broken", entry_points=_eps(group, ("broken", "no_such_module:thing")))


def test_plugin_config_is_a_json_object_and_empty_means_none():
    assert plugin_config("policy_config", '{"path": "/p.pt", "chunk_horizon": 4}') == {"path": "/p.pt",
                                                                                         "chunk_horizon": 4}
    assert plugin_config("policy_config", "") == {} and plugin_config("policy_config", "  ") == {}


def test_plugin_config_that_is_not_json_names_the_parameter_and_the_fix():
    with pytest.raises(PluginConfigError, match=r"^backend_config: not valid JSON \(Expecting .*\): '\{bad'\. "
                                                r"Fix: pass a JSON object, e\.g\. '\{\"url\": 1\}'$"):
        plugin_config("backend_config", "{bad", example='{"url": 1}')


@pytest.mark.parametrize("text, kind", [("[1]", "list"), ('"x"', "str"), ("3", "int"), ("null", "NoneType")])
def test_plugin_config_that_is_not_an_object_names_the_parameter_and_the_fix(text, kind):
    with pytest.raises(PluginConfigError, match=f"^policy_config: expected a JSON object, got {kind} '.*'\\. "
                                                "Fix: wrap the settings in \\{...\\}"):
        plugin_config("policy_config", text)
