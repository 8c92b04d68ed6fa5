"""Node `episode_replay`: recorded episodes as the robot and the policy of a shadow episode.

For each episode of ``dataset`` (see :mod:`gesim_ros.episodes.replay`) it does what the robot, the
policy and the episode runner do live, so that the backend switch (shadow mode, NOT armed: nothing
reaches a robot; the replay serves no command topic) forwards the recorded commands to the world
model exactly as it forwarded the policy's:

1. publishes the episode's first sensor messages (its start state) on the robot namespace and
   calls ``world_model_sync``, which takes them as the first frame and measured state, as it takes
   the twin's after a reset;
2. publishes STARTED, then every recorded message at its recorded time since STARTED: sensors on the
   robot namespace, commands on the policy namespace (where the switch takes the policy's), header
   stamps shifted by the same amount, so the comparator aligns both sides as live;
3. publishes the real side's OUTCOME from the recording's label (the recorded OUTCOME, a LeRobot
   episode's metadata, a labels CSV) at its recorded time, and ENDED at its recorded time and stamp
   (where one was recorded; the commands recorded after it, stamped before it, follow it);
   with ``label_outcomes`` it publishes ENDED when the recording ends and waits for an operator's
   EpisodeControl LABEL (``gesim-ros replay-shadow --label-outcomes`` asks y/n at the terminal), as
   the episode runner does for run-episodes;
4. waits for the world model's OUTCOME before the next episode (the comparator needs both).

An ABORTED from the switch or the world model (e.g. the world model is gone) ends the running episode
and the replay goes on. When every episode has run the node exits (status 0), so under `ros2 launch`
(launch/replay_shadow.launch.yaml) the graph ends with it.
"""

from __future__ import annotations

import math
import sys
import threading
import time
from pathlib import Path

import rclpy
from rclpy.duration import Duration
from rclpy.node import Node
from rclpy.signals import SignalHandlerOptions

from gesim_ros.comparator.store import VERDICTS, agreement
from gesim_ros.contract.contract import ContractError, message_class, relay_qos, ros_qos
from gesim_ros.contract.messages import header, header_stamp, restamped
from gesim_ros.episodes.lerobot import LeRobotError
from gesim_ros.episodes.plan import OUTCOME_NAMES
from gesim_ros.episodes.replay import COMMAND_KEYS, LeftOut, Outcome, ReplayDataset, ReplayEpisode, ReplayError
from gesim_ros.episodes.recording import RecordingError
from gesim_ros.ros.event_readers import HELLO_ACK_S, confirm_event_readers
from gesim_ros.ros.liveliness import WorldModelPresence
from gesim_ros.ros.node_setup import declare, declare_contract, interrupt_once, spinning_in_background

EpisodeEvent = message_class("gesim_ros_interfaces/msg/EpisodeEvent")
EpisodeControl = message_class("gesim_ros_interfaces/srv/EpisodeControl")
ResetEpisode = message_class("gesim_ros_interfaces/srv/ResetEpisode")

POLL_S = 0.05
START_PERIOD_S = 0.05   # the start state is republished at 20 Hz while the world model syncs
#: What stops the replay before its first episode with one line and exit status 2.
STOPPING_ERRORS = (ReplayError, LeRobotError, RecordingError, ContractError, FileNotFoundError)


class ReplayStopped(RuntimeError):
    """A peer the replay needs is missing; names what to start."""


class EpisodeReplay(Node):
    def __init__(self, **node_kwargs):
        super().__init__("episode_replay", **node_kwargs)
        c = self.contract = declare_contract(self)
        dataset = declare(self, "dataset", "", "what to replay: a LeRobot dataset, a folder of *.npz EpisodeRecords, "
                          "or of recorded episode folders (a shadow or real run folder, its *_recordings, collect's)",
                          read_only=True)
        labels = declare(self, "labels_csv", "", "labels CSV overriding the recorded outcome labels: episode_id,label "
                         "(episode_index,label for a LeRobot dataset); empty: the recordings' own", read_only=True)
        mapping = declare(self, "lerobot_mapping", "", "LeRobot feature mapping preset or YAML (empty: the "
                          "dataset's own default)", read_only=True)
        self.label_outcomes = declare(self, "label_outcomes", False, "the real outcome is an operator's "
                                      "EpisodeControl LABEL after each episode instead of the recording's",
                                      read_only=True)
        chunk_horizon = declare(self, "chunk_horizon", 10, "EpisodeRecords (LeRobot, npz): actions per ActionChunk "
                                "(10: the scripted policy's)", read_only=True)
        self.params = {
            "event_readers": declare(self, "event_readers", 3, "wait for this many other subscribers of the episode "
                                     "events (switch, world model, comparator) before the first STARTED"),
            "peer_wait_s": declare(self, "peer_wait_s", 60.0, "how long to wait at start for the switch, the world "
                                   "model and the comparator"),
            "service_timeout_s": declare(self, "service_timeout_s", 30.0, "how long world_model_sync may take"),
            "outcome_wait_s": declare(self, "outcome_wait_s", 120.0, "after ENDED, how long to wait for the world "
                                      "model's OUTCOME before the next episode"),
            "label_wait_s": declare(self, "label_wait_s", 600.0, "label_outcomes: how long to wait for the "
                                    "operator's LABEL before the episode's real outcome stays unknown"),
        }
        if not dataset:
            raise ReplayError("parameter dataset is empty; give the dataset to replay, e.g. "
                              "-p dataset:=runs/shadow-1/shadow_recordings")
        self.dataset = ReplayDataset(dataset, c, labels, mapping, self.label_outcomes, chunk_horizon)
        if self.dataset.skipped:
            self.get_logger().warning(f"left out {len(self.dataset.skipped)} recording(s) of aborted episodes: "
                                      f"{', '.join(map(str, self.dataset.skipped))}")

        robot, policy = c.namespace("robot"), c.namespace("policy")
        self.pubs = {}
        for spec in c.topics_with_role("sensor"):  # relay QoS: what the switch, world model and comparator take
            self.pubs[spec.key] = self.create_publisher(message_class(spec.type), spec.resolve(robot), relay_qos(spec))
        for key in COMMAND_KEYS:  # the policy's commands, to the switch as the policy sends them
            spec = c.topic(key)
            self.pubs[key] = self.create_publisher(message_class(spec.type), spec.resolve(policy), ros_qos(spec.qos))
        events = c.topic("episode_events")
        self.events = self.create_publisher(EpisodeEvent, events.resolve("/"), ros_qos(events.qos))
        self.create_subscription(EpisodeEvent, events.resolve("/"), self._on_event, ros_qos(events.qos))
        self.sync = self.create_client(ResetEpisode, c.service("world_model_sync").resolve("/"))
        if self.label_outcomes:
            self.create_service(EpisodeControl, c.service("episode_control").resolve("/"), self._on_control)
        self.world_model = WorldModelPresence(self, c)
        self._lock = threading.Lock()
        self._current: ReplayEpisode | None = None
        self._aborted = ""                 # why the running episode was aborted by a peer
        self._world_model_outcome = None   # the world model's OUTCOME event of the running episode
        self._awaiting_label = False
        self._label: Outcome | None = None

    # ------------------------------------------------------------------ callbacks (executor thread)

    def _on_event(self, event) -> None:
        ep = self._current
        if ep is None or event.episode_id != ep.episode_id:
            return
        if event.event == EpisodeEvent.ABORTED and event.side != "runner":
            self._aborted = f"{event.side}: {event.reason}"
        elif event.event == EpisodeEvent.OUTCOME and event.side == "world_model":
            self._world_model_outcome = event

    def _on_control(self, request, response):
        ep = self._current
        response.episode_id = ep.episode_id if ep else ""
        if request.command != EpisodeControl.Request.LABEL:
            response.reason = "the replay takes LABEL (2) only: the recording decides when an episode ends"
        elif not self._awaiting_label or (request.episode_id and request.episode_id != response.episode_id):
            response.reason = (f"no replayed episode awaits a label{' under that id' if request.episode_id else ''} "
                               f"(running: {response.episode_id or 'none'}); LABEL once its replay has ENDED")
        elif request.outcome not in (EpisodeEvent.OUTCOME_SUCCESS, EpisodeEvent.OUTCOME_FAILURE):
            response.reason = f"LABEL outcome {request.outcome}: use OUTCOME_SUCCESS (1) or OUTCOME_FAILURE (2)"
        else:
            with self._lock:
                self._label = Outcome("operator", request.outcome, OUTCOME_NAMES[request.outcome],
                                      request.note or "labelled by the operator", 0.0)
                self._awaiting_label = False
            response.accepted = True
        return response

    # ------------------------------------------------------------------ the replay (caller's thread)

    def _wait_until(self, condition, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while not condition():
            if time.monotonic() >= deadline:
                return False
            time.sleep(POLL_S)
        return True

    def _wait_for_peers(self) -> None:
        wait = self.params["peer_wait_s"]
        if not self._wait_until(lambda: self.world_model.alive and self.sync.service_is_ready(), wait):
            raise ReplayStopped(f"no live world model with {self.sync.srv_name} after {wait:g} s; start the "
                                "world_model node (mode shadow)")
        command = self.pubs["action_chunk"]
        if not self._wait_until(lambda: command.get_subscription_count() > 0, wait):
            raise ReplayStopped(f"nothing subscribes to {command.topic_name} after {wait:g} s; start the "
                                "backend_switch in mode shadow")
        readers = self.params["event_readers"] + 1  # + this node's own subscription
        if not self._wait_until(lambda: self.events.get_subscription_count() >= readers, wait):
            self.get_logger().warning(f"fewer than {readers - 1} other subscribers of {self.events.topic_name} "
                                      f"after {wait:g} s; some may miss events")
        if not confirm_event_readers(self, self.events, self._wait_until, wait, side="runner"):
            self.get_logger().warning(f"not every reader of {self.events.topic_name} acknowledged the replay's "
                                      f"HELLO within peer_wait_s={wait:g} s (or {HELLO_ACK_S:g} s); "
                                      "a slow one may miss the first STARTED")

    def run(self) -> list[dict]:
        self._wait_for_peers()
        results, total = [], len(self.dataset)
        for index, ep in enumerate(self.dataset, 1):
            if isinstance(ep, LeftOut):
                self.get_logger().warning(f"left out {ep.source}: {ep.reason}")
                result = {"episode_id": ep.episode_id, "task": "-", "seed": "-", "source": ep.source,
                          "status": "left out", "real": None, "real_label": "", "world_model": None,
                          "reason": ep.reason}
            else:
                result = self.replay(ep)
            results.append(result)
            print(_progress(index, total, result, results), flush=True)
        return results

    def _publish_event(self, kind: int, ep: ReplayEpisode, outcome: Outcome | None = None, side="runner",
                       reason="", stamp_s: float | None = None) -> float:
        now = self.get_clock().now().nanoseconds * 1e-9 if stamp_s is None else stamp_s
        self.events.publish(EpisodeEvent(
            header=header(now, ""), event=kind, episode_id=ep.episode_id, task=ep.task, task_text=ep.task_text,
            policy=ep.policy or "replay", backend_mode="shadow", seed=ep.seed,
            side=outcome.side if outcome else side,
            outcome=outcome.outcome if outcome else EpisodeEvent.OUTCOME_UNKNOWN, success_probability=math.nan,
            label=outcome.label if outcome else "", reason=outcome.reason if outcome else reason))
        return now

    def replay(self, ep: ReplayEpisode) -> dict:
        result = {"episode_id": ep.episode_id, "task": ep.task, "seed": ep.seed, "source": ep.source,
                  "status": "ended", "real": None, "real_label": "", "world_model": None, "reason": ""}
        with self._lock:
            self._current, self._aborted, self._world_model_outcome = ep, "", None
            self._label, self._awaiting_label = None, False
        try:
            problem = self._sync(ep)
            if problem:
                self._publish_event(EpisodeEvent.ABORTED, ep, reason=problem)
                return {**result, "status": "aborted", "reason": problem}
            started = self._publish_event(EpisodeEvent.STARTED, ep)
            outcome = self._play(ep, started)
            if self._aborted:
                return {**result, "status": "aborted", "reason": self._aborted}
            if outcome is None:  # an operator labels it, after ENDED as in run-episodes --label-outcomes
                self._publish_event(EpisodeEvent.ENDED, ep, side="runner")
                outcome = self._operator_label(ep)
                if outcome is not None:
                    self._publish_event(EpisodeEvent.OUTCOME, ep, outcome)
            if outcome is not None:
                result.update(real=OUTCOME_NAMES[outcome.outcome], real_label=outcome.label)
            if not self._wait_until(lambda: self._world_model_outcome is not None or self._aborted,
                                    self.params["outcome_wait_s"]):
                self.get_logger().warning(f"episode {ep.episode_id}: no world-model OUTCOME within "
                                          f"outcome_wait_s={self.params['outcome_wait_s']:g} s; going on")
            if self._world_model_outcome is not None:
                result["world_model"] = OUTCOME_NAMES[self._world_model_outcome.outcome]
            return result
        except KeyboardInterrupt:
            self._publish_event(EpisodeEvent.ABORTED, ep, reason="replay interrupted (Ctrl-C)")
            raise
        finally:
            self._current = None

    def _sync(self, ep: ReplayEpisode) -> str:
        """Sync the world model from the episode's start state, published until it answers."""
        future = self.sync.call_async(ResetEpisode.Request(episode_id=ep.episode_id, task=ep.task, seed=ep.seed))
        deadline = time.monotonic() + self.params["service_timeout_s"]
        while not future.done():
            if time.monotonic() >= deadline or not self.world_model.alive:
                self.sync.remove_pending_request(future)
                return (f"world_model_sync did not answer within {self.params['service_timeout_s']:g} s" if
                        self.world_model.alive else "the world model is gone (its status lost liveliness)")
            now = self.get_clock().now().nanoseconds * 1e-9
            for key, raw in ep.start.items():
                self.pubs[key].publish(restamped(raw, now))
            time.sleep(START_PERIOD_S)
        response = future.result()
        return "" if response.success else f"world_model_sync refused episode {ep.episode_id}: {response.message}"

    def _play(self, ep: ReplayEpisode, started: float) -> Outcome | None:
        """Every message at its time since STARTED, and the real OUTCOME and ENDED at theirs."""
        t0 = time.monotonic()
        shift = started - ep.started_stamp_s
        pending = ep.outcome
        # ENDED at its recorded time and stamp, where one was recorded: the world model then takes the same
        # late commands (stamped before ENDED, sent after it) as it did live; else right on the outcome.
        end = None if pending is None else ((ep.end_s, ep.ended_stamp_s + shift) if ep.ended_stamp_s is not None
                                            else (pending.offset_s, None))
        for offset, key, raw in ep.messages:
            if pending is not None and pending.offset_s <= offset:
                self._report(ep, pending, pending.offset_s, t0)
                pending = None
            if end is not None and end[0] < offset:
                self._report(ep, ep.outcome, end[0], t0, EpisodeEvent.ENDED, end[1])
                end = None
            while (delay := t0 + offset - time.monotonic()) > 0 and not self._aborted:
                time.sleep(min(delay, POLL_S))
            if self._aborted:
                return None
            self.pubs[key].publish(restamped(raw, header_stamp(raw) + shift))
        if pending is not None:
            self._report(ep, pending, pending.offset_s, t0)
        if end is not None:
            self._report(ep, ep.outcome, end[0], t0, EpisodeEvent.ENDED, end[1])
        return ep.outcome

    def _report(self, ep: ReplayEpisode, outcome: Outcome, offset_s: float, t0: float,
                kind: int = EpisodeEvent.OUTCOME, stamp_s: float | None = None) -> None:
        time.sleep(max(0.0, t0 + offset_s - time.monotonic()))
        self._publish_event(kind, ep, outcome, stamp_s=stamp_s)

    def _operator_label(self, ep: ReplayEpisode) -> Outcome | None:
        with self._lock:
            self._awaiting_label = True
        self.get_logger().info(f"episode {ep.episode_id} replayed: waiting for the operator's LABEL on "
                               f"{self.contract.service('episode_control').resolve('/')}")
        if self._wait_until(lambda: self._label is not None or self._aborted, self.params["label_wait_s"]):
            return self._label
        self.get_logger().warning(f"episode {ep.episode_id}: no LABEL within label_wait_s="
                                  f"{self.params['label_wait_s']:g} s; its real outcome stays unknown")
        return None


def _progress(index: int, total: int, result: dict, results: list[dict]) -> str:
    """One line per replayed episode: both outcomes, their agreement, the running tally."""
    head = f"replay {index}/{total} {result['episode_id']} {result['task']} seed {result['seed']}:"
    judged = [a for a in (agreement(r["real"], r["world_model"]) for r in results) if a is not None]
    tally = f"agreement {sum(judged)}/{len(judged)}"
    if result["status"] in ("aborted", "left out"):
        return f"{head} {result['status']} ({result['reason']}) | {tally}"
    verdict = VERDICTS[agreement(result["real"], result["world_model"])]
    return (f"{head} real {result['real'] or 'unknown'} ({result['real_label'] or '-'}), world_model "
            f"{result['world_model'] or 'none'} ({verdict}) | {tally}")


def run_in_process(args=None) -> list[dict]:
    """Build the node, spin its callbacks in a background thread and replay every episode here."""
    rclpy.init(args=args, signal_handler_options=SignalHandlerOptions.NO)
    try:
        with interrupt_once(), spinning_in_background(EpisodeReplay()) as node:
            try:
                return node.run()
            finally:
                node.events.wait_for_all_acked(Duration(seconds=2))  # the last ENDED must reach its readers
    finally:
        rclpy.try_shutdown()


def main(args=None):
    try:
        run_in_process(args if args is not None else sys.argv)
    except (*STOPPING_ERRORS, ReplayStopped, ValueError) as exc:
        print(f"{Path(sys.argv[0]).name}: {' '.join(str(exc).split())}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        print("episode_replay: interrupted; the episode in progress was published as ABORTED", file=sys.stderr)
