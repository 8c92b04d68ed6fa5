"""Per-episode comparison without ROS: events and samples in, store rows out."""

import logging
import math
from pathlib import Path

import numpy as np
import pytest
from gesim_ros_interfaces.msg import EpisodeEvent as EV

from gesim_ros.contract.contract import load_contract
from gesim_ros.comparator.comparison import (
    FILMSTRIP_FRAMES, PSNR_CAP_DB, ComparisonError, EpisodeComparator, _StepPairs)
from gesim_ros.comparator.store import EpisodeStore
from gesim_ros.comparator.image_metrics import K1
from gesim_ros.contract.messages import time_msg

NAMES = list(load_contract().arm_joint_names)
VIEWS = ["head", "left_wrist", "right_wrist"]
T0 = 1_700_000_000.0  # STARTED stamp of the first episode


def event(kind, episode_id="ep-1", t=None, mode="shadow", **fields):
    msg = EV(event=kind, episode_id=episode_id, task="pick_cube", policy="act-v1", backend_mode=mode,
             seed=7, **fields)
    if t is not None:
        msg.header.stamp = time_msg(t)
    return msg


def outcome(side, result, t, episode_id="ep-1", prob=math.nan):
    return event(EV.OUTCOME, episode_id, t, side=side, outcome=result, success_probability=prob)


class FakeRecording:
    def __init__(self, episode_id, sides):
        self.paths = {side: Path("/rec") / episode_id / side for side in sides}
        self.writes, self.events, self.closed = [], [], False

    def write(self, side, topic, log_ns, cdr):
        assert not self.closed
        self.writes.append((side, topic))

    def write_event(self, msg, log_ns):
        assert not self.closed
        self.events.append(msg.event)

    def close(self):
        self.closed = True


@pytest.fixture
def store(tmp_path):
    with EpisodeStore(tmp_path / "campaign.sqlite") as s:
        yield s


@pytest.fixture
def recordings():
    return {}


@pytest.fixture
def comp(store, recordings):
    def open_recording(episode_id, sides):
        recordings[episode_id] = FakeRecording(episode_id, sides)
        return recordings[episode_id]

    return EpisodeComparator(store, joint_names=NAMES, views=VIEWS, horizon_step_s=0.1, image_sample_hz=2.0,
                             outcome_grace_s=5.0, open_recording=open_recording)


def handle(comp, msg, received_at=T0):
    comp.handle_event(msg, received_at, int(received_at * 1e9))


def feed_joints(comp, t0, seconds, offset, rate=100):
    for k in range(int(seconds * rate)):
        t = t0 + k / rate
        position = np.full(len(NAMES), 0.1 * math.sin(t - t0))
        comp.add_joint_state("real", t, NAMES, position)
        comp.add_joint_state("world_model", t, NAMES, position + offset)


def feed_images(comp, t0, seconds, real, model, rate=30, decoded=None):
    """Frames of every view; ``decoded`` counts the frames actually decoded."""
    def frame(image):
        def decode():
            if decoded is not None:
                decoded.append(1)
            return image
        return decode

    for k in range(int(seconds * rate)):
        for view in VIEWS:
            comp.offer_image("real", view, t0 + k / rate, frame(real))
            comp.offer_image("world_model", view, t0 + k / rate, frame(model))


def gray(value, size):
    return np.full((*size, 3), value, np.uint8)


def test_shadow_episode_is_measured_and_completed(comp, store, recordings):
    handle(comp, event(EV.STARTED, t=T0))
    decoded = []
    feed_joints(comp, T0, 1.0, offset=0.2)
    # The model renders at half the resolution: compared at the smaller size.
    feed_images(comp, T0, 1.0, gray(100, (48, 64)), gray(110, (24, 32)), decoded=decoded)
    comp.tick(T0 + 1.0)
    assert len(store.divergence("ep-1")) == 10  # written while running: survives a crash
    handle(comp, outcome("world_model", EV.OUTCOME_FAILURE, T0 + 0.8, prob=0.25))
    handle(comp, outcome("real", EV.OUTCOME_SUCCESS, T0 + 1.2))
    assert store.episode("ep-1").status == "incomplete"  # outcomes in, but not ENDED yet
    handle(comp, event(EV.ENDED, t=T0 + 1.5))

    ep = store.episode("ep-1")
    assert (ep.status, ep.task, ep.policy, ep.seed, ep.mode) == ("complete", "pick_cube", "act-v1", 7, "shadow")
    assert (ep.real_outcome, ep.world_model_outcome, ep.agrees) == ("success", "failure", False)
    assert ep.world_model_judge_success_prob == pytest.approx(0.25) and ep.real_judge_success_prob is None
    assert ep.world_model_time_to_outcome_s == pytest.approx(0.8, abs=1e-6)
    assert ep.real_time_to_outcome_s == pytest.approx(1.2, abs=1e-6)
    assert (ep.started_at, ep.ended_at) == (pytest.approx(T0), pytest.approx(T0 + 1.5))
    assert (ep.real_mcap_path, ep.world_model_mcap_path) == ("/rec/ep-1/real", "/rec/ep-1/world_model")

    divergence = store.divergence("ep-1")
    assert [r.horizon_step for r in divergence] == list(range(10))
    assert [r.joint_rmse for r in divergence] == pytest.approx([0.2] * 10, abs=1e-12)

    c1 = (K1 * 255) ** 2
    for view in VIEWS:
        rows = [r for r in store.image_similarity("ep-1") if r.view == view]
        assert [r.horizon_step for r in rows] == [0, 5]  # 2 Hz samples on a 0.1 s step
        assert [r.psnr for r in rows] == pytest.approx([20 * math.log10(25.5)] * 2)
        assert [r.ssim for r in rows] == pytest.approx([(2 * 100 * 110 + c1) / (100 ** 2 + 110 ** 2 + c1)] * 2)
    assert len(decoded) == 2 * 2 * len(VIEWS)  # only the paired frames of each sample were decoded
    frames = store.filmstrip_frames("ep-1")
    assert {(f.view, f.horizon_step, f.side) for f in frames} == {
        (v, s, side) for v in VIEWS for s in (0, 5) for side in ("real", "world_model")}
    assert all(f.jpeg.startswith(b"\xff\xd8\xff") for f in frames)

    rec = recordings["ep-1"]
    assert rec.closed and rec.events == [EV.STARTED, EV.OUTCOME, EV.OUTCOME, EV.ENDED]
    assert comp.running is None


def test_recording_holds_only_the_running_episode(comp, recordings):
    comp.record("real", "/gdk/joint_state", 1, b"before")
    handle(comp, event(EV.STARTED, t=T0))
    comp.record("real", "/gdk/joint_state", 2, b"during")
    comp.record("world_model", "/gesim/world_model/gdk/joint_state", 3, b"during")
    handle(comp, event(EV.ENDED, t=T0 + 1))
    comp.record("real", "/gdk/joint_state", 4, b"after")
    rec = recordings["ep-1"]
    assert rec.writes == [("real", "/gdk/joint_state"), ("world_model", "/gesim/world_model/gdk/joint_state")]
    assert not rec.closed  # still waiting for outcomes, whose events it will hold


def test_a_command_stamped_before_ended_that_arrives_after_it_goes_to_that_episodes_recording(comp, recordings):
    # On its way through the switch at ENDED: the world model still steps it, so a replay must send it too.
    wm = "/gesim/world_model/gdk"
    handle(comp, event(EV.STARTED, t=T0))
    handle(comp, event(EV.ENDED, t=T0 + 1))
    comp.record("world_model", f"{wm}/action_chunk", 2, b"in flight", command_stamp_s=T0 + 0.9)
    comp.record("world_model", f"{wm}/joint_control", 3, b"after ENDED", command_stamp_s=T0 + 1.1)
    comp.record("world_model", f"{wm}/joint_state", 4, b"not a command")
    rec = recordings["ep-1"]
    assert rec.writes == [("world_model", f"{wm}/action_chunk")]
    handle(comp, outcome("real", EV.OUTCOME_SUCCESS, T0 + 1))
    handle(comp, outcome("world_model", EV.OUTCOME_SUCCESS, T0 + 2))
    assert rec.closed
    comp.record("world_model", f"{wm}/action_chunk", 5, b"too late", command_stamp_s=T0 + 0.95)
    assert len(rec.writes) == 1  # the episode is complete: no longer tracked


def test_streams_align_by_time_since_started(comp, store):
    handle(comp, event(EV.STARTED, t=T0))
    zeros, ones = np.zeros(len(NAMES)), np.ones(len(NAMES))
    comp.add_joint_state("real", T0 - 0.05, NAMES, ones * 9)  # before STARTED: ignored
    comp.add_joint_state("real", T0 + 0.01, NAMES, zeros)  # first real sample of step 0 ...
    comp.add_joint_state("real", T0 + 0.02, NAMES, ones * 5)  # ... later ones in the step are not used
    comp.add_joint_state("world_model", T0 + 0.09, NAMES, ones)
    comp.add_joint_state("world_model", T0 + 0.3, NAMES, ones)  # exactly on a step boundary: step 3
    comp.add_joint_state("real", T0 + 0.35, NAMES, ones * 3)
    comp.add_joint_state("real", T0 + 0.15, NAMES, zeros)  # step 1: the model never sends one
    comp.tick(T0 + 1)
    assert [(r.horizon_step, r.joint_rmse) for r in store.divergence("ep-1")] == [(0, 1.0), (3, 2.0)]


def test_joint_order_comes_from_the_names(comp, store):
    handle(comp, event(EV.STARTED, t=T0))
    values = np.arange(len(NAMES), dtype=float)
    comp.add_joint_state("real", T0, NAMES, values)
    comp.add_joint_state("world_model", T0, ["extra_joint", *reversed(NAMES)], [99.0, *values[::-1]])
    comp.tick(T0 + 1)
    assert store.divergence("ep-1")[0].joint_rmse == 0.0
    with pytest.raises(ComparisonError, match="lacks action joints"):
        comp.add_joint_state("world_model", T0 + 0.2, NAMES[1:], values[1:])


def test_late_outcome_within_grace_completes(comp, store):
    handle(comp, event(EV.STARTED, t=T0))
    handle(comp, outcome("real", EV.OUTCOME_SUCCESS, T0 + 1))
    handle(comp, event(EV.ENDED, t=T0 + 2), received_at=T0 + 2)
    comp.tick(T0 + 6.9)  # grace is 5 s from receiving ENDED
    handle(comp, outcome("world_model", EV.OUTCOME_SUCCESS, T0 + 6.9, prob=0.9))
    ep = store.episode("ep-1")
    assert (ep.status, ep.ended_at, ep.world_model_time_to_outcome_s) == ("complete", pytest.approx(T0 + 2),
                                                                     pytest.approx(6.9, abs=1e-6))


def test_missing_outcome_leaves_the_episode_incomplete_and_says_why(comp, store, recordings, caplog):
    handle(comp, event(EV.STARTED, t=T0))
    feed_joints(comp, T0, 0.5, offset=0.1)
    handle(comp, outcome("real", EV.OUTCOME_FAILURE, T0 + 1))
    handle(comp, event(EV.ENDED, t=T0 + 2), received_at=T0 + 2)
    with caplog.at_level(logging.WARNING):
        comp.tick(T0 + 7)
    assert "episode 'ep-1' left incomplete: no OUTCOME event with side 'world_model'" in caplog.text
    assert "raise outcome_grace_s" in caplog.text
    ep = store.episode("ep-1")
    assert (ep.status, ep.real_outcome, ep.world_model_outcome) == ("incomplete", "failure", None)
    assert len(store.divergence("ep-1")) == 5 and recordings["ep-1"].closed
    with pytest.raises(ComparisonError, match="not tracking that episode"):
        handle(comp, outcome("world_model", EV.OUTCOME_SUCCESS, T0 + 8))
    assert store.episode("ep-1") == ep


def test_an_unknown_model_outcome_completes_the_episode_at_its_end_unjudged(comp, store, caplog):
    """A world model without a judge reports OUTCOME unknown: no grace period, no agreement."""
    handle(comp, event(EV.STARTED, t=T0))
    handle(comp, outcome("real", EV.OUTCOME_FAILURE, T0 + 1))
    handle(comp, outcome("world_model", EV.OUTCOME_UNKNOWN, T0 + 1.5))
    with caplog.at_level(logging.INFO):
        handle(comp, event(EV.ENDED, t=T0 + 2), received_at=T0 + 2)
    ep = store.episode("ep-1")
    assert (ep.status, ep.real_outcome, ep.world_model_outcome, ep.agrees) == ("complete", "failure", "unknown", None)
    assert ep.world_model_judge_success_prob is None and ep.world_model_time_to_outcome_s == pytest.approx(1.5, abs=1e-6)
    assert "real failure, world_model unknown (unjudged)" in caplog.text and "DISAGREE" not in caplog.text


def test_bad_events_are_refused_and_change_nothing(comp, store):
    handle(comp, event(EV.STARTED, t=T0))
    handle(comp, outcome("real", EV.OUTCOME_SUCCESS, T0 + 1))
    handle(comp, outcome("world_model", EV.OUTCOME_SUCCESS, T0 + 1))
    handle(comp, event(EV.ENDED, t=T0 + 2))
    handle(comp, event(EV.STARTED, "ep-2", t=T0 + 3))
    handle(comp, outcome("real", EV.OUTCOME_FAILURE, T0 + 4, "ep-2"))
    before = store.episodes()

    refused = [
        (event(EV.ENDED, "ghost", t=T0 + 5), "ENDED event for episode 'ghost' ignored: .*not tracking"),
        (outcome("real", EV.OUTCOME_SUCCESS, T0 + 5, "ghost"), "OUTCOME event for episode 'ghost' ignored"),
        (event(EV.ABORTED, "ep-1", t=T0 + 5), "ABORTED event for episode 'ep-1' ignored"),
        (event(EV.STARTED, "ep-1", t=T0 + 5), "STARTED event for episode 'ep-1' refused: .*already exists"),
        (event(EV.STARTED, "ep-2", t=T0 + 5), "STARTED event for episode 'ep-2' refused: .*already exists"),
        (outcome("real", EV.OUTCOME_SUCCESS, T0 + 5, "ep-2"), "already has real outcome 'failure'"),
        (outcome("world_model", 7, T0 + 5, "ep-2"), "outcome code 7, which is not UNKNOWN, SUCCESS or FAILURE"),
        (outcome("world_model", EV.OUTCOME_SUCCESS, T0 + 2, "ep-2"), "1.000 s before the episode's STARTED"),
        (event(EV.ENDED, "ep-2", t=T0 + 2), "ENDED event for episode 'ep-2' is stamped 1.000 s before"),
        (event(EV.ABORTED, "ep-2", t=T0 + 2), "ABORTED event for episode 'ep-2' is stamped 1.000 s before"),
        (outcome("world_model", EV.OUTCOME_SUCCESS, T0 + 5, "ep-2", prob=1.5), "judge_success_prob"),
        (event(99, "ep-2"), "unknown event code 99"),
    ]
    for msg, message in refused:
        with pytest.raises(ComparisonError, match=message):
            handle(comp, msg)
    assert store.episodes() == before
    assert comp.running.episode_id == "ep-2"  # a refused duplicate STARTED leaves the running one alone

    handle(comp, event(EV.ENDED, "ep-2", t=T0 + 6))
    with pytest.raises(ComparisonError, match="already ENDED"):
        handle(comp, event(EV.ENDED, "ep-2", t=T0 + 7))


def test_a_runners_hello_records_nothing_even_mid_episode(comp, store):
    handle(comp, event(EV.HELLO, ""))
    assert store.episodes() == [] and comp.running is None
    handle(comp, event(EV.STARTED, t=T0))
    handle(comp, event(EV.HELLO, "", t=T0 + 1))  # a second runner's: the running episode is left alone
    assert comp.running.episode_id == "ep-1"
    handle(comp, event(EV.ENDED, t=T0 + 2))
    assert [e.episode_id for e in store.episodes()] == ["ep-1"]


def test_other_sides_outcomes_are_not_recorded(comp, store, caplog):
    handle(comp, event(EV.STARTED, t=T0))
    with caplog.at_level(logging.INFO):
        handle(comp, outcome("policy", EV.OUTCOME_SUCCESS, T0 + 1))
    assert "from side 'policy' not recorded" in caplog.text
    assert store.episode("ep-1").real_outcome is None


@pytest.mark.parametrize("mode, judged", [("shadow", "real"), ("real", "real"), ("world_model", "world_model")])
@pytest.mark.parametrize("verdict", ["checker", "operator"])
def test_a_checker_or_operator_verdict_is_the_outcome_of_the_side_that_acted(comp, store, mode, judged, verdict):
    """A physical robot reports no outcome itself: the runner's success checker or the operator does."""
    handle(comp, event(EV.STARTED, t=T0, mode=mode))
    handle(comp, outcome(verdict, EV.OUTCOME_FAILURE, T0 + 1))
    if mode == "shadow":
        handle(comp, outcome("world_model", EV.OUTCOME_SUCCESS, T0 + 1.5, prob=0.8))
    handle(comp, event(EV.ENDED, t=T0 + 2, mode=mode))
    ep = store.episode("ep-1")
    assert ep.status == "complete" and getattr(ep, f"{judged}_outcome") == "failure"


@pytest.mark.parametrize("mode, side, other", [("real", "real", "world_model"), ("world_model", "world_model", "real")])
def test_a_single_side_mode_completes_on_its_own_outcome(comp, store, recordings, caplog, mode, side, other):
    handle(comp, event(EV.STARTED, t=T0, mode=mode))
    with caplog.at_level(logging.INFO):
        handle(comp, outcome(other, EV.OUTCOME_SUCCESS, T0 + 1))  # a side this mode does not run
    assert f"from side '{other}' not recorded: the episode's mode runs only" in caplog.text
    handle(comp, outcome(side, EV.OUTCOME_FAILURE, T0 + 1.5))
    for any_side in ("real", "world_model"):
        comp.record(any_side, "/joint_states", 0, b"cdr")
    handle(comp, event(EV.ENDED, t=T0 + 2, mode=mode))
    ep = store.episode("ep-1")
    assert (ep.status, ep.mode, getattr(ep, f"{side}_outcome"), getattr(ep, f"{other}_outcome")) == \
        ("complete", mode, "failure", None)
    assert ep.agrees is None and recordings["ep-1"].closed
    assert list(recordings["ep-1"].paths) == [side]  # no empty folder for the side not run
    assert recordings["ep-1"].writes == [(side, "/joint_states")]


def test_a_single_side_mode_waits_for_its_side_only(comp, store, caplog):
    handle(comp, event(EV.STARTED, t=T0, mode="world_model"))
    handle(comp, event(EV.ENDED, t=T0 + 2, mode="world_model"), received_at=T0 + 2)
    with caplog.at_level(logging.WARNING):
        comp.tick(T0 + 7)
    assert "no OUTCOME event with side 'world_model' arrived" in caplog.text and "'real'" not in caplog.text
    assert store.episode("ep-1").status == "incomplete"


def test_an_unknown_mode_is_refused(comp, store):
    with pytest.raises(ComparisonError, match="refused: mode must be one of 'real', 'world_model', 'shadow', "
                                              "got 'none'"):
        handle(comp, event(EV.STARTED, t=T0, mode="none"))
    assert store.episodes() == [] and comp.running is None


def test_unset_stamps_fall_back_to_the_receive_time(comp, store):
    handle(comp, event(EV.STARTED), received_at=T0)
    handle(comp, outcome("real", EV.OUTCOME_SUCCESS, None), received_at=T0 + 3)
    ep = store.episode("ep-1")
    assert (ep.started_at, ep.real_time_to_outcome_s) == (pytest.approx(T0), pytest.approx(3.0))


def test_abort_writes_the_rows_and_the_reason(comp, store, recordings):
    handle(comp, event(EV.STARTED, t=T0))
    feed_joints(comp, T0, 0.3, offset=0.0)
    handle(comp, event(EV.ABORTED, t=T0 + 1, reason="operator stopped the robot"))
    ep = store.episode("ep-1")
    assert (ep.status, ep.abort_reason) == ("aborted", "operator stopped the robot")
    assert ep.ended_at == pytest.approx(T0 + 1)
    assert [r.joint_rmse for r in store.divergence("ep-1")] == [0.0, 0.0, 0.0]
    assert recordings["ep-1"].closed and comp.running is None
    handle(comp, event(EV.STARTED, "ep-2", t=T0 + 2))
    handle(comp, event(EV.ABORTED, "ep-2", t=T0 + 3))
    assert store.episode("ep-2").abort_reason == "no reason given in the ABORTED event"


def test_a_new_start_leaves_an_unended_episode_incomplete(comp, store, recordings, caplog):
    handle(comp, event(EV.STARTED, t=T0))
    feed_joints(comp, T0, 0.2, offset=0.0)
    with caplog.at_level(logging.WARNING):
        handle(comp, event(EV.STARTED, "ep-2", t=T0 + 1))
    assert "episode 'ep-1' left incomplete: episode 'ep-2' started before it ENDED" in caplog.text
    assert store.episode("ep-1").status == "incomplete" and len(store.divergence("ep-1")) == 2
    assert recordings["ep-1"].closed and comp.running.episode_id == "ep-2"


def test_shutdown_writes_what_was_measured(comp, store, recordings, caplog):
    handle(comp, event(EV.STARTED, t=T0))
    feed_joints(comp, T0, 0.2, offset=0.0)
    feed_images(comp, T0, 0.2, gray(10, (24, 32)), gray(10, (24, 32)))
    with caplog.at_level(logging.WARNING):
        comp.close()
    assert "left incomplete: the comparator shut down" in caplog.text
    assert store.episode("ep-1").status == "incomplete" and len(store.divergence("ep-1")) == 2
    assert [r.psnr for r in store.image_similarity("ep-1")] == [PSNR_CAP_DB] * 3  # identical frames
    assert len(store.filmstrip_frames("ep-1")) == 2 * len(VIEWS)
    assert recordings["ep-1"].closed


def test_filmstrip_spreads_a_few_frames_over_a_long_episode(comp, store):
    handle(comp, event(EV.STARTED, t=T0))
    feed_images(comp, T0, 60.0, gray(50, (24, 32)), gray(60, (24, 32)), rate=2)
    comp.close()
    steps = sorted({f.horizon_step for f in store.filmstrip_frames("ep-1") if f.view == "head"})
    assert FILMSTRIP_FRAMES // 2 <= len(steps) <= FILMSTRIP_FRAMES
    assert steps[0] == 0 and steps[-1] >= 300  # covers the second half of the 600-step episode too
    gaps = np.diff(steps)
    assert (gaps == gaps[0]).all()


def test_recording_failure_keeps_comparing(store, caplog):
    def broken(episode_id, sides):
        raise OSError("disk full")

    comp = EpisodeComparator(store, joint_names=NAMES, views=VIEWS, open_recording=broken)
    with caplog.at_level(logging.ERROR):
        handle(comp, event(EV.STARTED, t=T0))
    assert "episode 'ep-1' is compared but not recorded: disk full" in caplog.text
    handle(comp, outcome("real", EV.OUTCOME_SUCCESS, T0 + 1))
    assert store.episode("ep-1").real_mcap_path is None


@pytest.mark.parametrize("settings, message", [
    ({"horizon_step_s": 0.0}, "horizon_step_s = 0.0 must be a positive number of seconds"),
    ({"image_sample_hz": 20.0}, "set image_sample_hz to at most 10"),
    ({"outcome_grace_s": -1.0}, "outcome_grace_s = -1.0 must be >= 0"),
])
def test_bad_settings_name_the_parameter(store, settings, message):
    with pytest.raises(ComparisonError, match=message):
        EpisodeComparator(store, joint_names=NAMES, views=VIEWS, **settings)


def test_step_pairs_wait_a_bounded_time_for_the_other_side():
    pairs = _StepPairs(max_waiting=3)
    assert pairs.offer(0, "world_model", "m0") is None
    assert pairs.offer(0, "real", "r0") == ("r0", "m0")
    assert pairs.offer(0, "real", "again") is None  # a step is paired once
    for step in range(1, 6):
        assert pairs.offer(step, "real", step) is None
    assert pairs.offer(1, "world_model", "late") is None  # steps 1 and 2 waited longest and were dropped
    assert pairs.offer(2, "world_model", "late") is None
    assert pairs.offer(3, "world_model", "m3") == (3, "m3")
    assert pairs.offer(5, "world_model", "m5") == (5, "m5")
