"""The backend switch's decisions, without ROS: routes, refusals, holds, episodes, watchdog, counters."""

import pytest

from gesim_ros.contract.modes import MODES
from gesim_ros.switch.logic import PATHS, HoldUnavailable, SwitchLogic, hold_targets


def logic(mode="real", armed=True, timeout=0.5, now=0.0):
    return SwitchLogic(mode, armed, timeout, now)


@pytest.mark.parametrize("mode, observations, validated_for, sent_armed", [
    ("real", "real", "real", ("real",)),
    ("world_model", "world_model", "world_model", ("world_model",)),
    ("shadow", "real", "real", ("real", "world_model")),
    ("none", None, None, ()),
])
def test_routes(mode, observations, validated_for, sent_armed):
    s = logic(mode)
    assert (s.observations_from, s.validation_side) == (observations, validated_for)
    assert s.command_accepted(1.0) == sent_armed


def test_unarmed_switch_sends_nothing_to_the_robot_and_counts_it_withheld():
    s = logic("shadow", armed=False)
    assert s.command_accepted(1.0) == ("world_model",)
    assert (s.counters["real.commands"].forwarded, s.counters["real.commands"].dropped) == (0, 1)
    assert s.counters["world_model.commands"].forwarded == 1
    assert not s.robot_commanded


@pytest.mark.parametrize("bad", ["reel", "", "REAL"])
def test_unknown_mode_is_refused_and_changes_nothing(bad):
    s = logic("real", now=3.0)
    t = s.select(bad, force=True, now=5.0)
    assert not t.accepted and t.previous == "real"
    assert f"unknown mode '{bad}'" in t.reason and all(m in t.reason for m in MODES)
    assert (s.mode, s.since, t.hold) == ("real", 3.0, False)
    assert "refused" in s.last_error


def test_unknown_start_mode_names_the_parameter():
    with pytest.raises(ValueError, match="parameter mode: unknown mode 'sim'"):
        logic("sim")


def test_non_positive_policy_timeout_names_the_parameter():
    with pytest.raises(ValueError, match="policy_timeout_s is 0"):
        logic(timeout=0)


def test_select_during_episode_needs_force():
    s = logic("real", now=1.0)
    s.episode_started("ep1")
    t = s.select("world_model", force=False, now=2.0)
    assert not t.accepted and "episode 'ep1' is running" in t.reason and "force" in t.reason
    assert (s.mode, s.since, s.episode_id, s.holds_sent) == ("real", 1.0, "ep1", 0)


def test_forced_switch_mid_episode_holds_the_robot_and_aborts_the_episode():
    s = logic("real")
    s.episode_started("ep1")
    t = s.select("shadow", force=True, now=2.0)
    assert t.accepted and t.hold and t.aborted_episode == "ep1"
    assert "aborted (forced switch)" in t.reason
    assert (s.mode, s.since, s.episode_id) == ("shadow", 2.0, "")


def test_forced_switch_from_an_uncommanded_robot_sends_no_hold():
    s = logic("world_model")
    s.episode_started("ep1")
    t = s.select("real", force=True, now=2.0)
    assert t.accepted and not t.hold and t.aborted_episode == "ep1"


@pytest.mark.parametrize("start, target, armed, hold", [
    ("real", "world_model", True, True),
    ("shadow", "none", True, True),
    ("real", "shadow", True, False),   # the robot keeps receiving commands
    ("world_model", "real", True, False),
    ("real", "none", False, False),    # not armed: nothing goes to the robot, holds included
])
def test_hold_when_the_robot_stops_being_commanded(start, target, armed, hold):
    t = logic(start, armed=armed).select(target, force=False, now=1.0)
    assert t.accepted and t.hold is hold and t.aborted_episode == ""


def test_selecting_the_current_mode_changes_nothing_even_mid_episode():
    s = logic("real", now=1.0)
    s.episode_started("ep1")
    t = s.select("real", force=False, now=2.0)
    assert t.accepted and "already in mode 'real'" in t.reason
    assert (s.since, s.episode_id, t.hold) == (1.0, "ep1", False)


def test_episode_follows_its_own_id_only():
    s = logic()
    s.episode_started("ep1")
    assert not s.episode_finished("ep0") and s.episode_id == "ep1"
    assert s.episode_finished("ep1") and s.episode_id == ""
    assert not s.episode_finished("ep1")
    assert s.select("none", force=False, now=1.0).accepted


def test_disarming_a_commanded_robot_needs_a_hold_first():
    s = logic("real")
    assert s.set_armed(False) is True and not s.armed
    assert s.set_armed(True) is False
    assert logic("world_model").set_armed(False) is False


def test_watchdog_fires_once_per_silence():
    s = logic("real", timeout=0.5)
    assert not s.watchdog_due(10.0)  # no command yet: nothing is flowing
    s.command_accepted(1.0)
    assert not s.watchdog_due(1.4)
    assert s.watchdog_due(1.6)
    assert not s.watchdog_due(5.0)
    s.command_accepted(6.0)
    assert s.watchdog_due(6.6)


@pytest.mark.parametrize("mode, armed", [("world_model", True), ("real", False)])
def test_watchdog_ignores_commands_that_do_not_reach_the_robot(mode, armed):
    s = logic(mode, armed=armed)
    s.command_accepted(1.0)
    assert not s.watchdog_due(10.0)


def test_switch_resets_the_watchdog():
    s = logic("real")
    s.command_accepted(1.0)
    s.select("shadow", force=False, now=1.1)
    assert not s.watchdog_due(5.0)


def test_rejection_counts_on_the_validated_path():
    s = logic("shadow")
    s.command_rejected("NaN target")
    assert s.counters["real.commands"].rejected == 1 and s.last_error == "NaN target"
    s.select("world_model", force=False, now=1.0)
    s.command_rejected("unknown joint")
    assert s.counters["world_model.commands"].rejected == 1


def test_sequence_gaps_count_drops_per_stream():
    c = SwitchLogic("real", True, 0.5, 0.0).counters["real.observations"]
    for n in (1, 2, 5, 6):
        c.receive("imu", n)
    c.receive("lidar", 40)   # first message seen on a stream: joined late, not a drop
    c.receive("imu", 1)      # publisher restarted
    c.receive("imu", 2)
    c.receive("imu", None)   # middleware without sequence numbers
    assert c.dropped == 2 and c.received == {"imu": 7, "lidar": 1}


def test_rates_cover_the_window_since_the_previous_call():
    s = logic("real", now=0.0)
    s.counters["real.observations"].forwarded = 50
    s.counters["real.observations"].dropped = 2
    first = {r.path: r for r in s.rates(2.0)}
    assert set(first) == set(PATHS)
    assert first["real.observations"].rate_hz == 25.0 and first["real.observations"].new_drops == 2
    s.counters["real.observations"].forwarded = 80
    again = {r.path: r for r in s.rates(3.0)}["real.observations"]
    assert (again.rate_hz, again.forwarded, again.new_drops, again.dropped) == (30.0, 80, 0, 2)


def test_silent_observation_streams_are_named_per_window():
    s = SwitchLogic("real", True, 0.5, 0.0, observation_streams=("imu", "lidar"))
    s.counters["real.observations"].receive("imu", 1)
    rates = {r.path: r for r in s.rates(1.0)}
    assert rates["real.observations"].silent == ("lidar",)
    assert rates["world_model.observations"].silent == ("imu", "lidar")
    assert rates["real.commands"].silent == ()
    s.counters["real.observations"].receive("lidar", 1)
    assert {r.path: r for r in s.rates(2.0)}["real.observations"].silent == ("imu",)


def test_hold_targets_need_every_joint():
    assert hold_targets(["a", "b"], {"b": 2.0, "a": 1.0, "c": 0.0}) == [1.0, 2.0]
    with pytest.raises(HoldUnavailable, match="1 of 2 joints .*'b'"):
        hold_targets(["a", "b"], {"a": 1.0})


@pytest.mark.parametrize("armed", [True, False])
def test_losing_the_world_model_in_shadow_holds_aborts_and_stops_every_command(armed):
    s = logic("shadow", armed=armed)
    s.world_model_present(True)
    s.episode_started("ep-1")
    s.command_accepted(1.0)
    loss = s.world_model_present(False)
    assert loss.hold == armed and loss.aborted_episode == "ep-1"
    assert loss.reason == s.last_error and "restart the world_model node" in loss.reason and "'ep-1'" in loss.reason
    assert s.episode_id == "" and not s.robot_commanded
    before = {side: s.counters[f"{side}.commands"].forwarded for side in ("real", "world_model")}
    assert s.command_accepted(2.0) == ()   # neither the lost model nor, in shadow, the robot
    assert {side: s.counters[f"{side}.commands"].forwarded for side in before} == before
    assert s.counters["world_model.commands"].dropped == 1
    assert not s.watchdog_due(10.0)         # the loss's hold stands; no second one


def test_an_episode_needing_the_lost_world_model_is_aborted_at_its_start_until_it_is_back():
    s = logic("world_model")
    s.world_model_present(True)
    loss = s.world_model_present(False)
    assert (loss.hold, loss.aborted_episode) == (False, "")  # the robot was not being commanded
    refusal = s.episode_started("ep-2")
    assert "'ep-2' aborted at its start" in refusal and "restart the world_model node" in refusal
    assert s.episode_id == ""
    assert s.world_model_present(True) is None
    assert s.episode_started("ep-3") == "" and s.episode_id == "ep-3"
    assert s.command_accepted(1.0) == ("world_model",)


def test_a_lost_world_model_does_not_touch_real_mode_nor_a_switch_that_never_saw_one():
    s = logic("real")
    s.episode_started("ep-1")
    assert s.world_model_present(False) is None
    assert s.episode_id == "ep-1" and s.command_accepted(1.0) == ("real",) and s.last_error == ""
    fresh = logic("shadow")  # no liveliness report yet: a stand-in model without a status topic still works
    assert fresh.episode_started("ep-1") == "" and fresh.command_accepted(1.0) == ("real", "world_model")
