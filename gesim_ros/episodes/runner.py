"""Node `episode_runner`: runs a schedule of episodes (task x seed x backend mode) and records outcomes.

Per episode it optionally asks the backend switch for the mode (SelectBackend), resets the backends
the mode involves (the robot's reset service where one is named in ``robot_reset``: ``twin_reset`` for
the MuJoCo twin, a lab's own for a physical robot, none by default since a physical robot has no such
service and the operator sets the scene up; the world model's ``world_model_sync``), publishes
EpisodeEvent STARTED, waits for the outcome or the timeout and publishes ENDED with the outcome. An
outcome comes from the side that knows it: the twin's ground truth (OUTCOME, side ``real``), the world
model's judge (side ``world_model``) in world_model mode, a lab's success checker, the policy node
reporting its own failure (side ``policy``), or an operator (EpisodeControl LABEL/STOP, or the
``gesim-ros run-episodes --label-outcomes`` prompt, whose answer follows ENDED as an OUTCOME with side
``operator`` so the policy stops while the operator decides). An episode that the switch or the world
model ABORTs is recorded as aborted and the run goes on; a missing service or a refused mode stops the
run with a RunnerError naming what to start or set. An episode whose mode needs the world model while
the world model's process is gone (DDS liveliness of its status, ``WorldModelPresence``) is ABORTED at
once with that reason, instead of waiting out a sync that nobody answers; the run goes on. A caller that
owns the graph (``gesim-ros lab-run``) passes ``interrupt``: once it gives a reason (a process of the
graph exited), the runner stops waiting, ABORTs the running episode with that reason and runs no more.
Before its first STARTED it waits for a policy on the policy namespace that follows the episode events,
and for every events reader to acknowledge its HELLO (:mod:`gesim_ros.ros.event_readers`).
"""

from __future__ import annotations

import math
import sys
import threading
import time
from contextlib import contextmanager
from typing import Callable

import rclpy
from rclpy.duration import Duration
from rclpy.exceptions import ParameterException, ParameterUninitializedException
from rclpy.node import Node
from rclpy.parameter import Parameter
from rclpy.signals import SignalHandlerOptions

from gesim_ros.contract.contract import ContractError, message_class, ros_qos
from gesim_ros.comparator.comparison import VERDICT_SIDES
from gesim_ros.contract.modes import SIDES, SIDES_BY_MODE
from gesim_ros.contract.messages import header
from gesim_ros.ros.node_setup import declare, declare_contract, interrupt_once, spinning_in_background
from gesim_ros.episodes.plan import (OUTCOME_NAMES, EpisodeResult, RunnerError, check_outcome_side, checked_resets,
                                     decisive_sides, format_progress, plan_from_parameters, reset_services_for)
from gesim_ros.policy.api import (EpisodeInfo, ObservationError, PolicyError, SuccessChecker, Verdict,
                                  load_success_checker)
from gesim_ros.plugins import PluginConfigError, UnknownPluginError, plugin_config
from gesim_ros.policy.observation_inputs import ObservationInputs
from gesim_ros.ros.event_readers import HELLO_ACK_S, confirm_event_readers, nodes_missing_from
from gesim_ros.ros.liveliness import WorldModelPresence

EpisodeEvent = message_class("gesim_ros_interfaces/msg/EpisodeEvent")
BackendStatus = message_class("gesim_ros_interfaces/msg/BackendStatus")
EpisodeControl = message_class("gesim_ros_interfaces/srv/EpisodeControl")
ResetEpisode = message_class("gesim_ros_interfaces/srv/ResetEpisode")
SelectBackend = message_class("gesim_ros_interfaces/srv/SelectBackend")

POLL_S = 0.1  # how often bounded waits look again (and ask the caller's interrupt)

#: name -> (default or parameter type, description). The node declares these and
#: `gesim-ros run-episodes` offers each as a --flag, so both read the same definitions.
PARAMETERS = {
    "tasks": (Parameter.Type.STRING_ARRAY, "task names; the run is every task x seed x backend mode"),
    "seeds": (Parameter.Type.INTEGER_ARRAY, "explicit seeds (default: seed_start .. seed_start+seed_count-1)"),
    "seed_start": (0, "first seed when seeds is not set"),
    "seed_count": (1, "number of seeds per task when seeds is not set"),
    "max_episodes": (0, "run only the first this many episodes of the plan (0: all of them)"),
    "backend_modes": (["real"], "backend mode per episode: real, world_model, shadow or none"),
    "policy_name": ("", "the policy's name, reported in EpisodeEvents"),
    "episode_timeout_s": (60.0, "an episode without an outcome by then ends as a failure labelled 'timeout'"),
    "service_timeout_s": (30.0, "how long to wait for a service to appear and for each answer"),
    "policy_wait_s": (30.0, "how long to wait at start for a policy node on the policy namespace"),
    "reset_services": ("auto", "reset services to call: auto (by mode: real robot_reset, world_model "
                               "world_model_sync, shadow both), none, or comma-separated contract service keys"),
    "robot_reset": ("", "the robot's reset service in real and shadow modes under reset_services auto: a contract "
                        "ResetEpisode key (twin_reset for the MuJoCo twin, or the lab's own); empty: none, the "
                        "operator sets the scene up"),
    "select_backend": (False, "ask the backend switch for each episode's mode before resetting"),
    "outcome_side": ("auto", "whose OUTCOME ends an episode: auto (real; world_model in world_model mode; "
                             "operator in none mode), real, world_model, operator or checker; "
                             "operator labels and policy failures always do"),
    "success_checker": ("", "success checker plugin (entry-point group gesim_ros.success_checkers); empty: none"),
    "success_checker_config": ("{}", "the success checker's config as a JSON object"),
    "run_id": ("", "prefix of episode ids; empty: the start time (YYYYmmdd-HHMMSS)"),
    "outcome_wait_s": (120.0, "after an episode ends, how long the next one waits for every side's OUTCOME (the "
                              "world model may finish imagining well after the robot; the comparator waits as long)"),
    "event_readers": (0, "wait for at least this many other nodes to subscribe to the episode events before "
                         "the first STARTED (0: those the graph shows when the runner starts)"),
}


class _Interrupted(Exception):
    """The caller's interrupt gave a reason to stop while the runner waited for its peers."""


class EpisodeRunner(Node):
    def __init__(self, **node_kwargs):
        super().__init__("episode_runner", **node_kwargs)
        self.contract = declare_contract(self)
        self.params = p = {name: self._declare(name, default, text) for name, (default, text) in PARAMETERS.items()}
        self.plan = plan_from_parameters(p)
        self.run_id = p["run_id"] or time.strftime("%Y%m%d-%H%M%S")
        modes = sorted({e.mode for e in self.plan})
        self.resets = {m: checked_resets(self.contract, reset_services_for(p["reset_services"], p["robot_reset"], m))
                       for m in modes}
        check_outcome_side(p["outcome_side"], p["success_checker"])

        self.checker: SuccessChecker | None = None
        self.checker_inputs: dict[str, ObservationInputs] = {}
        if p["success_checker"]:
            config = plugin_config("success_checker_config", p["success_checker_config"])
            self.checker = load_success_checker(p["success_checker"], config)
            for mode in modes:
                ns = self._checker_namespace(mode)
                self.checker_inputs.setdefault(ns, ObservationInputs(self, self.contract, ns,
                                                                     self.checker.observation_keys))

        events = self.contract.topic("episode_events")
        self.events = self.create_publisher(EpisodeEvent, events.resolve("/"), ros_qos(events.qos))
        self.create_subscription(EpisodeEvent, events.resolve("/"), self._on_event, ros_qos(events.qos))
        self.create_service(EpisodeControl, self.contract.service("episode_control").resolve("/"), self._on_control)
        self.service_clients = {key: self.create_client(ResetEpisode, self.contract.service(key).resolve("/"))
                                for key in sorted({k for keys in self.resets.values() for k in keys})}
        self._switch_status = None  # the switch's latest BackendStatus, when it selects backends
        if p["select_backend"]:
            self.service_clients["select_backend"] = self.create_client(
                SelectBackend, self.contract.service("select_backend").resolve("/"))
            status = self.contract.topic("backend_status")
            self.create_subscription(BackendStatus, status.resolve("/"), self._on_switch_status, ros_qos(status.qos))
        needs_world_model = any("world_model_sync" in keys for keys in self.resets.values())
        self.world_model = WorldModelPresence(self, self.contract) if needs_world_model else None
        self._lock = threading.Lock()
        self.current: EpisodeResult | None = None
        self._done = threading.Event()
        self._reported: tuple[str, set[str]] = ("", set())  # (episode id, sides whose OUTCOME was seen)
        self._reported_mode = "real"
        self._interrupt: Callable[[], str] | None = None

    def _declare(self, name, default, description):
        if isinstance(default, Parameter.Type):  # an optional array: no usable empty default in ROS 2
            try:
                return list(declare(self, name, default, description))
            except ParameterUninitializedException:
                return []
        value = declare(self, name, default, description)
        return list(value) if isinstance(default, list) else value

    def _checker_namespace(self, mode: str) -> str:
        return self.contract.namespace("world_model" if mode == "world_model" else "robot")

    # ------------------------------------------------------------------ callbacks (executor thread)

    def _finish(self, result: EpisodeResult, status: str, outcome: int, side: str, label: str, reason: str) -> bool:
        """Record how ``result`` ended; the first report wins, later ones return False."""
        with self._lock:
            if self.current is not result or result.status:
                return False
            result.status, result.outcome, result.side, result.label, result.reason = (
                status, outcome, side, label, reason)
            self._done.set()
            return True

    def _on_event(self, event) -> None:
        if event.event == EpisodeEvent.OUTCOME:
            self._note_outcome(event)
        result = self.current
        if result is None or event.episode_id != result.episode_id:
            return
        if event.event == EpisodeEvent.ABORTED:
            self._finish(result, "aborted", event.outcome, event.side, event.label, event.reason or "aborted")
        elif event.event == EpisodeEvent.OUTCOME and event.side in decisive_sides(self.params["outcome_side"], result.mode):
            self._finish(result, "ended", event.outcome, event.side, event.label, event.reason)

    def _note_outcome(self, event) -> None:
        with self._lock:
            episode_id, sides = self._reported
            if event.episode_id != episode_id:
                return
            if event.side in SIDES:
                sides.add(event.side)
            elif event.side in VERDICT_SIDES and SIDES_BY_MODE[self._reported_mode]:
                sides.add(SIDES_BY_MODE[self._reported_mode][0])  # a checker's or operator's verdict: the acting side's

    def _on_control(self, request, response):
        result = self.current
        response.episode_id = result.episode_id if result else ""
        if request.command == EpisodeControl.Request.START:
            response.reason = ("the runner schedules episodes from its parameters (tasks, seeds, backend_modes); "
                               "use STOP or LABEL for the running episode")
        elif result is None or (request.episode_id and request.episode_id != result.episode_id):
            response.reason = (f"episode '{request.episode_id}' is not running (running: "
                               f"{result.episode_id if result else 'none'}); STOP and LABEL apply to the running one")
        elif request.command == EpisodeControl.Request.LABEL and request.outcome not in (
                EpisodeEvent.OUTCOME_SUCCESS, EpisodeEvent.OUTCOME_FAILURE):
            response.reason = (f"LABEL outcome {request.outcome}: use EpisodeEvent.OUTCOME_SUCCESS (1) "
                               "or OUTCOME_FAILURE (2)")
        elif request.command in (EpisodeControl.Request.LABEL, EpisodeControl.Request.STOP):
            labelled = request.command == EpisodeControl.Request.LABEL
            outcome = request.outcome if labelled else EpisodeEvent.OUTCOME_UNKNOWN
            response.accepted = self._finish(
                result, "ended", outcome, "operator", OUTCOME_NAMES[outcome] if labelled else "stopped",
                request.note or ("" if labelled else "stopped by the operator"))
            if not response.accepted:
                response.reason = f"episode {result.episode_id} already ended ({result.outcome_name}, {result.side})"
        else:
            response.reason = f"unknown command {request.command}; use START (0), STOP (1) or LABEL (2)"
        return response

    # ------------------------------------------------------------------ the run (caller's thread)

    def run(self, progress: Callable[[int, int, EpisodeResult, list], None] | None = None,
            ask_operator: Callable[[EpisodeResult], Verdict] | None = None,
            interrupt: Callable[[], str] | None = None) -> list[EpisodeResult]:
        """Run every planned episode; ``ask_operator`` (the CLI prompt) labels each ended episode.
        ``interrupt`` returns why the run must stop now, or '': the running episode is then ABORTED
        with that reason and the episodes run so far are returned."""
        self._interrupt = interrupt
        try:
            self._wait_for_peers()
        except _Interrupted as exc:
            self.get_logger().error(f"run stopped before its first episode: {exc}")
            return []
        results: list[EpisodeResult] = []
        for index, planned in enumerate(self.plan, 1):
            result = self.run_episode(EpisodeResult(f"{self.run_id}-{index:03d}", planned.task, planned.seed,
                                                    planned.mode))
            labelled = result.side == "operator" and result.outcome != EpisodeEvent.OUTCOME_UNKNOWN
            if ask_operator is not None and result.status == "ended" and not labelled:
                verdict = ask_operator(result)
                outcome = EpisodeEvent.OUTCOME_SUCCESS if verdict.success else EpisodeEvent.OUTCOME_FAILURE
                result.outcome, result.side, result.label, result.reason = (
                    outcome, "operator", verdict.label or OUTCOME_NAMES[outcome], verdict.reason)
                self._publish(EpisodeEvent.OUTCOME, result)
            results.append(result)
            if result.status == "ended":
                self._wait_for_every_side(result)
            if progress is not None:
                progress(index, len(self.plan), result, results)
            if self._interrupted():
                break
        return results

    def _interrupted(self) -> str:
        return self._interrupt() if self._interrupt is not None else ""

    def _wait_for_every_side(self, result: EpisodeResult) -> None:
        """Pace the run as the comparator needs it: the next episode's reset would cut short a side
        still imagining this one (seen: a world_model_sync 30 ms after ENDED, before the model's
        OUTCOME, left the episode incomplete)."""
        sides = SIDES_BY_MODE[result.mode]
        if result.side == "runner":  # the runner ended it (timeout): the acting side has not decided
            sides = sides[1:]
        wait_s = self.params["outcome_wait_s"]
        try:
            if self._wait_until(lambda: self._reported[1] >= set(sides), wait_s):
                return
        except _Interrupted:
            return
        missing = sorted(set(sides) - self._reported[1])
        self.get_logger().warning(f"episode {result.episode_id}: no OUTCOME from side(s) {missing} within "
                                  f"outcome_wait_s={wait_s:g} s; going on with the next episode")

    def run_episode(self, result: EpisodeResult) -> EpisodeResult:
        if self.params["select_backend"]:
            self._select(result.mode)
        problem = self._reset(result)
        if problem:
            result.status, result.side, result.label, result.reason = "aborted", "runner", "reset_failed", problem
            self._publish(EpisodeEvent.ABORTED, result)
            return result
        info = EpisodeInfo(result.episode_id, result.task, result.task_text, result.seed)
        for inputs in self.checker_inputs.values():
            inputs.clear()
        if self.checker is not None:
            self.checker.reset(info)
        self._done.clear()
        with self._lock:
            self._reported, self._reported_mode = (result.episode_id, set()), result.mode
        self.current = result
        self._publish(EpisodeEvent.STARTED, result)
        try:
            self._wait_for_outcome(result, info)
        except KeyboardInterrupt:
            self.current = None
            result.status, result.side, result.reason = "aborted", "runner", "run interrupted (Ctrl-C)"
            self._publish(EpisodeEvent.ABORTED, result)
            raise
        self.current = None
        if result.status == "aborted" and result.side == "runner":
            self._publish(EpisodeEvent.ABORTED, result)  # interrupted: the graph must stop following it
        decided = result.outcome in (EpisodeEvent.OUTCOME_SUCCESS, EpisodeEvent.OUTCOME_FAILURE)
        if result.status == "ended" and result.side in VERDICT_SIDES and decided:
            self._publish(EpisodeEvent.OUTCOME, result)  # a verdict only the runner saw: the comparator needs it
        if result.status == "ended":
            self._publish(EpisodeEvent.ENDED, result)
        return result

    def _wait_for_outcome(self, result: EpisodeResult, info: EpisodeInfo) -> None:
        timeout = self.params["episode_timeout_s"]
        start = time.monotonic()
        period = self.checker.check_period_s if self.checker is not None else timeout
        next_check = start + period
        while True:
            wake = min(next_check, start + timeout, time.monotonic() + POLL_S if self._interrupt else math.inf)
            if self._done.wait(max(0.0, wake - time.monotonic())):
                return
            now = time.monotonic()
            if reason := self._interrupted():
                self._finish(result, "aborted", EpisodeEvent.OUTCOME_UNKNOWN, "runner", "interrupted", reason)
            elif now - start >= timeout:
                self._finish(result, "ended", EpisodeEvent.OUTCOME_FAILURE, "runner", "timeout",
                             f"timeout: no outcome within {timeout:g} s")
            elif self.checker is not None and now >= next_check:
                next_check = now + period
                self._check(result, info, now - start)

    def _check(self, result: EpisodeResult, info: EpisodeInfo, elapsed: float) -> None:
        inputs = self.checker_inputs[self._checker_namespace(result.mode)]
        if inputs.missing():
            return
        try:
            verdict = self.checker.check(inputs.observation(result.task_text, {
                "episode_id": info.episode_id, "task": info.task, "seed": info.seed, "time_s": elapsed}))
        except ObservationError as exc:
            self.get_logger().warning(f"success checker skipped an invalid observation: {exc.reason}")
            return
        if verdict is not None:
            outcome = EpisodeEvent.OUTCOME_SUCCESS if verdict.success else EpisodeEvent.OUTCOME_FAILURE
            self._finish(result, "ended", outcome, "checker", verdict.label or OUTCOME_NAMES[outcome],
                         verdict.reason)

    # ------------------------------------------------------------------ services and peers

    def _wait_until(self, condition: Callable[[], bool], timeout_s: float) -> bool:
        """Whether ``condition`` held within ``timeout_s``; raises _Interrupted when the caller stops the run."""
        deadline = time.monotonic() + timeout_s
        while not condition():
            if reason := self._interrupted():
                raise _Interrupted(reason)
            if time.monotonic() > deadline:
                return False
            time.sleep(POLL_S)
        return True

    def _wait_for_peers(self) -> None:
        """Bounded waits for the services the plan needs and for a policy on the policy namespace."""
        service_timeout = self.params["service_timeout_s"]
        for key, client in self.service_clients.items():
            if not self._wait_until(client.service_is_ready, service_timeout):
                raise RunnerError(f"service {client.srv_name} ({key}) is not available after "
                                  f"{service_timeout:g} s; start the node that serves it "
                                  "(twin, world model or backend switch) or change reset_services/robot_reset/"
                                  "select_backend")
        if self.world_model is not None and not self._wait_until(lambda: self.world_model.alive, service_timeout):
            raise RunnerError(f"no live world model publishes {self.world_model.topic} after "
                              f"{service_timeout:g} s; start the world_model node")
        ns = self.contract.namespace("policy")
        commands = [self.contract.topic(k).resolve(ns) for k in ("action_chunk", "joint_command")]
        deadline = time.monotonic() + self.params["policy_wait_s"]
        # The runner's own events subscription matches its publisher too, so a policy makes it two.
        if not self._wait_until(lambda: any(self.count_publishers(t) for t in commands)
                                and self.events.get_subscription_count() > 1, self.params["policy_wait_s"]):
            raise RunnerError(f"no policy publishes on {' or '.join(commands)} (or none subscribes to the "
                              f"episode events) after {self.params['policy_wait_s']:g} s; start the policy node")
        # Every reader the graph knows of (comparator, twin, switch, world model, and the policy itself)
        # must have matched this publisher before the HELLO that proves they know it.
        topic = self.events.topic_name
        readers = self.params["event_readers"] + 1  # + the runner's own subscription
        if not self._wait_until(lambda: self.events.get_subscription_count() >= max(readers,
                                                                                   self.count_subscribers(topic))
                                and not nodes_missing_from(self, topic, commands),
                                deadline - time.monotonic()):
            missing = nodes_missing_from(self, topic, commands)
            self.get_logger().warning(
                f"after {self.params['policy_wait_s']:g} s, "
                + (f"{', '.join(missing)} publishing commands on the policy namespace do not subscribe to "
                   f"{topic}: a policy that never sees STARTED never acts" if missing
                   else f"not every subscriber of {topic} matched the runner; some may miss events"))
        if not confirm_event_readers(self, self.events, self._wait_until, deadline - time.monotonic(),
                                     side="runner"):
            self.get_logger().warning(f"not every reader of {topic} acknowledged the runner's HELLO within "
                                      f"policy_wait_s={self.params['policy_wait_s']:g} s (or {HELLO_ACK_S:g} s); "
                                      "a slow one may miss the first STARTED")

    def _call(self, key: str, request):
        """The service's response, or None when it does not answer within service_timeout_s or the
        world model it needs is gone (a killed server never answers)."""
        future = self.service_clients[key].call_async(request)
        answered = threading.Event()
        future.add_done_callback(lambda _: answered.set())
        deadline = time.monotonic() + self.params["service_timeout_s"]
        while not answered.wait(POLL_S):
            if time.monotonic() > deadline or self._world_model_gone(key) or self._interrupted():
                future.cancel()
                return None
        return future.result()

    def _world_model_gone(self, key: str) -> str:
        """Why ``key`` cannot be answered because the world model behind it is gone, or ''."""
        if key != "world_model_sync" or self.world_model.alive:
            return ""
        return (f"the world model is gone ({self.world_model.topic} lost DDS liveliness: process killed, "
                "crashed or exited); restart the world_model node and the next episode syncs it")

    def _on_switch_status(self, msg) -> None:
        self._switch_status = msg

    def _select(self, mode: str) -> None:
        # The previous episode's ENDED (a topic) and this request (a service) may reach the switch in
        # either order: ask once its status shows it is no longer following an episode (bounded).
        deadline = time.monotonic() + self.params["service_timeout_s"]
        while self._switch_status is not None and self._switch_status.episode_active \
                and time.monotonic() < deadline:
            time.sleep(0.02)
        response = self._call("select_backend", SelectBackend.Request(mode=mode, force=False))
        if response is None or not response.accepted:
            why = response.reason if response else f"no answer within {self.params['service_timeout_s']:g} s"
            raise RunnerError(f"backend switch refused mode '{mode}': {why}")

    def _reset(self, result: EpisodeResult) -> str:
        """Reset the mode's backends; returns why the episode cannot start, or '' when all succeeded."""
        for key in self.resets[result.mode]:
            response = self._call(key, ResetEpisode.Request(episode_id=result.episode_id, task=result.task,
                                                            seed=result.seed))
            if response is None:
                return (self._world_model_gone(key) or self._interrupted()
                        or f"{key} did not answer within {self.params['service_timeout_s']:g} s")
            if not response.success:
                return f"{key} refused task '{result.task}' seed {result.seed}: {response.message}"
            result.task_text = result.task_text or response.task_text
        result.task_text = result.task_text or result.task  # no reset told it (a physical robot): the task's name
        return ""

    def _publish(self, kind: int, result: EpisodeResult) -> None:
        self.events.publish(EpisodeEvent(
            header=header(self.get_clock().now().nanoseconds * 1e-9, ""), event=kind,
            episode_id=result.episode_id, task=result.task, task_text=result.task_text,
            policy=self.params["policy_name"], backend_mode=result.mode, seed=result.seed,
            side=result.side or "runner", outcome=result.outcome, success_probability=float("nan"),
            label=result.label, reason=result.reason))


def run_in_process(parameter_overrides=(), progress=None, ask_operator=None, args=None,
                   interrupt=None) -> list[EpisodeResult]:
    """Create the runner in this process, spin it in a background thread and run the schedule
    (``args``: ROS arguments such as a launch file's ``--params-file``; the overrides win over them)."""
    with runner_context(args):
        return run_schedule(parameter_overrides, progress, ask_operator, interrupt)


@contextmanager
def runner_context(args=None):
    """ROS initialised in this process for the runners created within (``args`` as for run_in_process):
    they share its one DDS participant. A caller that runs one runner per episode (lab-run) keeps it for
    the whole plan, so the graph discovers the runner once. With a participant made anew per episode, a
    loaded host (CI, 2026-12) left the graph's answers to the new one (HELLO acknowledgements, a
    sync's response) undelivered for over 120 s while its own messages arrived."""
    rclpy.init(args=args, signal_handler_options=SignalHandlerOptions.NO)
    try:
        with interrupt_once():
            yield
    finally:
        rclpy.try_shutdown()


def run_schedule(parameter_overrides=(), progress=None, ask_operator=None, interrupt=None) -> list[EpisodeResult]:
    """One runner's schedule within :func:`runner_context`: the node made, spun, run and destroyed."""
    with spinning_in_background(EpisodeRunner(parameter_overrides=list(parameter_overrides))) as node:
        try:
            return node.run(progress, ask_operator, interrupt)
        finally:
            node.events.wait_for_all_acked(Duration(seconds=2))  # the last ENDED must reach its readers


#: What stops a run with one line and exit status 2: bad input, named with its fix.
STOPPING_ERRORS = (RunnerError, PolicyError, UnknownPluginError, PluginConfigError, ContractError, ImportError,
                   ParameterException)


def main(args=None):
    def progress(index, total, result, results):
        print(format_progress(index, total, result, results), flush=True)

    try:
        run_in_process(progress=progress, args=args)
    except STOPPING_ERRORS as exc:
        print(f"episode_runner: {exc}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM: a clean stop (exit 0), as every node's
        print("episode_runner: interrupted; an episode in progress was recorded as aborted", file=sys.stderr)
