"""The comparator node end to end: two synthetic G2s (the robot, and the world model with its joints
offset), the comparator in its own process, and this test as the episode runner."""

import hashlib
import signal
import sqlite3

import pytest
from gesim_ros_interfaces.msg import EpisodeEvent as EV

from gesim_ros.contract.contract import load_contract, ros_qos
from gesim_ros.episodes.recording import bag_message_counts
from gesim_ros.comparator.store import EpisodeStore, EpisodeStoreError
from gesim_ros.ros.process_harness import ProcessGroup, spin_until

pytestmark = pytest.mark.slow

C = load_contract()
OFFSET = 1.0  # the world model's joint_offset: the divergence the comparator must measure
# Each publisher process starts its joint sine wave at its own start, so the two sides also differ
# by up to 0.1 * |sin a - sin b| <= 0.2 rad on top of the offset.
PHASE_SLACK = 0.2
VIEWS = {"head", "left_wrist", "right_wrist"}
WAIT_S = 90.0  # generous: two cores shared with three other ROS processes


@pytest.fixture(scope="module")
def publishers(tmp_path_factory):
    group = ProcessGroup(tmp_path_factory.mktemp("publisher-logs"))
    group.start("contract_publisher", "--ros-args", "-p", "camera_scale:=0.25")
    group.start("contract_publisher", "--ros-args", "-r", "__node:=world_model_publisher",
                "-p", "side:=world_model", "-p", f"joint_offset:={OFFSET}", "-p", "camera_scale:=0.25")
    yield group
    group.stop_all()


class Runner:
    """Publishes EpisodeEvents as an episode runner would."""

    def __init__(self, node):
        self.node = node
        spec = C.topic("episode_events")
        self.topic = spec.resolve("/")
        self.pub = node.create_publisher(EV, self.topic, ros_qos(spec.qos))

    def wait_for_comparator(self, comparator) -> None:
        """Until ``comparator`` (a harness process) has received an event from this runner.

        A matched publisher is not enough: DDS matches the writer's side first, and a reliable volatile
        reader that has not yet matched this writer drops what it is sent (seen in CI: ep-a's events were
        all lost). So the runner sends a harmless probe, an ENDED for an episode nobody tracks, once a
        second until the comparator logs that it ignored it.
        """
        for attempt in range(int(WAIT_S)):
            probe = f"probe-{id(self)}-{attempt}"
            self.send(EV.ENDED, probe)
            if spin_until(self.node, lambda: f"episode '{probe}' ignored" in comparator.log(), 1.0):
                return
            assert comparator.process.poll() is None, "the comparator exited:\n" + comparator.log()
        raise AssertionError(f"the comparator received no episode event in {WAIT_S:g} s")

    def send(self, kind, episode_id, **fields):
        fields = {"success_probability": float("nan"), **fields}  # NaN: no judge, as EpisodeEvent says
        msg = EV(event=kind, episode_id=episode_id, task="pick_cube", policy="act-v1", backend_mode="shadow",
                 seed=3, **fields)
        msg.header.stamp = self.node.get_clock().now().to_msg()
        self.pub.publish(msg)

    def finish(self, episode_id, real=EV.OUTCOME_SUCCESS, world_model=EV.OUTCOME_FAILURE):
        self.send(EV.OUTCOME, episode_id, side="real", outcome=real)
        self.send(EV.OUTCOME, episode_id, side="world_model", outcome=world_model, success_probability=0.3)
        self.send(EV.ENDED, episode_id)


def rows(db, episode_id):
    """(episode or None, divergence rows, image-similarity rows) as a reader sees them now."""
    with EpisodeStore(db, readonly=True) as store:
        try:
            episode = store.episode(episode_id)
        except EpisodeStoreError:
            return None, [], []
        return episode, store.divergence(episode_id), store.image_similarity(episode_id)


def status(db, episode_id):
    episode = rows(db, episode_id)[0]
    return None if episode is None else episode.status


def wait_until(node, condition, what):
    assert spin_until(node, condition, WAIT_S), f"timed out waiting until {what}"


def measured(db, episode_id, steps):
    _, divergence, similarity = rows(db, episode_id)
    return len(divergence) >= steps and {r.view for r in similarity} == VIEWS


def start_comparator(procs, db, *params):
    args = ["--ros-args", "-p", f"database:={db}"]
    for p in params:
        args += ["-p", p]
    return procs.start("comparator", *args)


def test_shadow_episodes_are_compared_recorded_and_survive_kill_9(publishers, procs, ros_node, tmp_path):
    db = tmp_path / "campaign.sqlite"
    comparator = start_comparator(procs, db)
    runner = Runner(ros_node)
    runner.wait_for_comparator(comparator)

    runner.send(EV.STARTED, "ep-1")
    wait_until(ros_node, lambda: measured(db, "ep-1", 10), "ep-1 has divergence and all views' similarity")
    runner.finish("ep-1")
    wait_until(ros_node, lambda: status(db, "ep-1") == "complete", "ep-1 is complete")

    ep1, divergence, similarity = rows(db, "ep-1")
    assert (ep1.real_outcome, ep1.world_model_outcome, ep1.task, ep1.seed) == ("success", "failure", "pick_cube", 3)
    assert ep1.world_model_judge_success_prob == pytest.approx(0.3) and ep1.real_judge_success_prob is None
    assert ep1.world_model_time_to_outcome_s >= 0 and ep1.ended_at >= ep1.started_at
    assert all(abs(r.joint_rmse - OFFSET) <= PHASE_SLACK + 0.01 for r in divergence), divergence
    # The world model's frames are tinted by its joint_offset: similar, but never identical.
    assert all(5 < r.psnr < 30 and -1 <= r.ssim < 1 for r in similarity), similarity
    with EpisodeStore(db, readonly=True) as store:
        assert {f.side for f in store.filmstrip_frames("ep-1")} == {"real", "world_model"}
    for path, namespace in ((ep1.real_mcap_path, "robot"), (ep1.world_model_mcap_path, "world_model")):
        counts = bag_message_counts(path)
        ns = C.namespace(namespace)
        for key in ("joint_states", "head_color", "hand_left_color", "imu"):
            assert counts[C.topic(key).resolve(ns)] > 0, (path, key, counts)
        assert counts[runner.topic] == 4  # STARTED, two OUTCOMEs, ENDED

    runner.send(EV.STARTED, "ep-2")
    wait_until(ros_node, lambda: measured(db, "ep-2", 5), "ep-2 has rows")
    procs.processes[-1].signal(signal.SIGKILL)
    procs.processes[-1].process.wait(timeout=30)

    restarted = start_comparator(procs, db)
    runner.wait_for_comparator(restarted)
    wait_until(ros_node, lambda: "incomplete from an earlier run" in restarted.log(), "the restart reports ep-2")
    assert "ep-2" in restarted.log()
    assert rows(db, "ep-1")[0] == ep1  # the completed episode is untouched
    ep2, divergence2, _ = rows(db, "ep-2")
    assert ep2.status == "incomplete" and len(divergence2) >= 5

    runner.send(EV.STARTED, "ep-3")
    wait_until(ros_node, lambda: measured(db, "ep-3", 10), "ep-3 has rows")
    runner.finish("ep-3", world_model=EV.OUTCOME_SUCCESS)
    wait_until(ros_node, lambda: status(db, "ep-3") == "complete", "ep-3 is complete")
    assert rows(db, "ep-3")[0].agrees is True
    assert rows(db, "ep-2")[0] == ep2


def test_bad_events_are_logged_and_change_nothing(procs, ros_node, tmp_path):
    db = tmp_path / "campaign.sqlite"
    comparator = start_comparator(procs, db, "outcome_grace_s:=1.0", "record:=false")
    runner = Runner(ros_node)
    runner.wait_for_comparator(comparator)
    runner.send(EV.STARTED, "ep-a")
    runner.finish("ep-a")
    wait_until(ros_node, lambda: status(db, "ep-a") == "complete", "ep-a is complete")
    ep_a = rows(db, "ep-a")[0]
    assert ep_a.real_mcap_path is None  # record:=false

    runner.send(EV.ENDED, "ghost")
    runner.send(EV.OUTCOME, "ghost", side="real", outcome=EV.OUTCOME_SUCCESS)
    runner.send(EV.STARTED, "ep-a")
    expected = ["ENDED event for episode 'ghost' ignored: this comparator is not tracking that episode",
                "OUTCOME event for episode 'ghost' ignored",
                "STARTED event for episode 'ep-a' refused: episode 'ep-a' already exists"]
    wait_until(ros_node, lambda: all(e in comparator.log() for e in expected), "the bad events are logged")
    assert rows(db, "ep-a")[0] == ep_a and rows(db, "ghost")[0] is None

    runner.send(EV.STARTED, "ep-b")
    runner.send(EV.OUTCOME, "ep-b", side="real", outcome=EV.OUTCOME_FAILURE)
    runner.send(EV.ENDED, "ep-b")
    wait_until(ros_node, lambda: "episode 'ep-b' left incomplete: no OUTCOME event with side 'world_model'"
               in comparator.log(), "ep-b is given up after the grace period")
    runner.send(EV.OUTCOME, "ep-b", side="world_model", outcome=EV.OUTCOME_SUCCESS)
    wait_until(ros_node, lambda: "OUTCOME event for episode 'ep-b' ignored" in comparator.log(),
               "the late outcome is refused")
    ep_b = rows(db, "ep-b")[0]
    assert (ep_b.status, ep_b.real_outcome, ep_b.world_model_outcome) == ("incomplete", "failure", None)


def test_a_newer_schema_database_stops_the_node_untouched(procs, tmp_path):
    db = tmp_path / "future.sqlite"
    with sqlite3.connect(db) as conn:
        conn.execute("PRAGMA user_version = 99")
    digest = hashlib.sha256(db.read_bytes()).hexdigest()
    comparator = start_comparator(procs, db)
    assert comparator.process.wait(timeout=WAIT_S) == 2
    assert "has episode-store schema version 99" in comparator.log()
    assert "Upgrade gesim_ros to open it" in comparator.log()
    assert hashlib.sha256(db.read_bytes()).hexdigest() == digest
