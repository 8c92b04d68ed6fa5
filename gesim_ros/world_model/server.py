"""Serve any :class:`~gesim_ros.world_model.api.WorldModel` over GE-Sim 2.0's HTTP protocol.

This lets a lab put its own model (or the ``kinematic`` baseline) on a GPU host
and reach it with the ``gesim_http`` client, which speaks GE-Sim's protocol.
One episode session at a time: ``/init`` hands out a ``client_id`` and evicts
the previous session; requests carrying any other id get 403. Backend calls are serialised
because world models keep per-episode state. Errors are JSON ``{"error": ...}``:
400 malformed input, 403 unknown client, 408 a body that does not arrive within
``body_timeout_s``, 411/413 a body without a length or too large, 500 backend failure.
As GE-Sim's own server does, ``GET /`` is a live dashboard of the session, polling
``GET /api/status`` (the same fields as GE-Sim's) and ``GET /api/preview.jpg`` (the latest
predicted head frame).

Units on the wire are GE-Sim's (GE-Sim-V2's server and clients): gripper commands normalised to
[0, 1] (0 closed, 1 open), the returned state's grippers an aperture in mm. The server converts them
to and from the units its backend declares (``gripper_command_units``, ``gripper_state_units``)
through the contract's metres, whose gripper joint limits give ``normalised`` its range, so a
``gesim_http`` client with its GE-Sim defaults drives this package's metre backends correctly.
``/set_camera_params`` and ``/set_episode_traj`` are accepted as GE-Sim's server accepts them and
handed to the backend, which ignores them unless it ``needs_trajectory_band``.

With ``--judge NAME`` (entry-point group gesim_ros.judges, ``--judge-config`` JSON) it also serves
``POST /evaluate``: GE-Sim-V2's reward interface (head-camera frames and a task in, per-frame success
and progress out; the wire format is in gesim_wire's doc), the peer of the ``gesim_reward_http``
judge, so a lab can put any judge behind HTTP. ``POST /set_episode_state`` (serve-wm's own; GE-Sim-V2's
server has none) hands the measured joints at the first frame, in the wire's units, to a backend that
``takes_episode_state``; a ``gesim_http`` client sends it only when configured ``episode_state: true``.

There is no authentication: bind to 127.0.0.1 (the default) or a trusted network.
"""

from __future__ import annotations

import argparse
import ipaddress
import logging
import socket
import sys
import threading
import time
import uuid
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from gesim_ros.contract.contract import DEFAULT_PROFILE, Contract, load_contract
from gesim_ros.world_model import gesim_wire as wire
from gesim_ros.plugins import plugin_config
from gesim_ros.world_model.command_mapping import gesim_layout
from gesim_ros.world_model.gripper_units import GripperUnits
from gesim_ros.world_model.judges.reward_client import JudgeRewardClient
from gesim_ros.world_model.api import (
    GESIM_ACTION_DIM,
    Judge,
    StepResult,
    check_array,
    load_judge,
    UnknownWorldModelError,
    WorldModel,
    WorldModelInputError,
    load_world_model,
    validate_actions,
    validate_camera_params,
    validate_episode_traj,
    validate_first_frame,
    validate_step_result,
)

_LOG = logging.getLogger(__name__)

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 9000
DEFAULT_BODY_TIMEOUT_S = 30.0
# GE-Sim's gripper units on the wire (api.GRIPPER_UNITS): what its clients send and expect back.
WIRE_GRIPPER_COMMAND_UNITS = "normalised"
WIRE_GRIPPER_STATE_UNITS = "mm"


class _HttpError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def _row(values: Any) -> list[float] | None:
    return None if values is None else [round(float(x), 4) for x in values]


class WireGrippers:
    """The gripper columns of GE-Sim's 16-D layout between the wire's units (commands normalised,
    state in mm) and the backend's declared ones, through the contract's metres. A backend whose
    layout is not GE-Sim's 16-D one (``action_dim``) is passed through unchanged."""

    def __init__(self, backend: WorldModel, contract: Contract) -> None:
        layout = gesim_layout(contract)
        dims = layout.gripper_dims
        limits = [contract.joint_limits[layout.names[d]] for d in dims]
        self.dims = dims
        self.command_units, self.state_units = backend.gripper_command_units, backend.gripper_state_units
        self.active = backend.action_dim == GESIM_ACTION_DIM
        # GripperUnits(..., command_units, state_units): to_command is metres -> command_units,
        # from_state is state_units -> metres; each direction here is one of each.
        self._backend = GripperUnits(dims, limits, self.command_units, self.state_units)
        self._wire_in = GripperUnits(dims, limits, "m", WIRE_GRIPPER_COMMAND_UNITS)  # from_state: wire -> m
        self._wire_out = GripperUnits(dims, limits, WIRE_GRIPPER_STATE_UNITS, "m")  # to_command: m -> wire
        # from_state: wire state (mm) -> m; to_command: m -> the backend's state units
        self._state_in = GripperUnits(dims, limits, self.state_units, WIRE_GRIPPER_STATE_UNITS)

    def command(self, actions: Any) -> Any:
        """Wire action rows (grippers normalised) -> the backend's command units."""
        if not self.active or self.command_units == WIRE_GRIPPER_COMMAND_UNITS:
            return actions
        return self._backend.to_command(self._wire_in.from_state(actions))

    def episode_state(self, state: Any) -> Any:
        """A wire episode state row (grippers in mm) -> the backend's state units."""
        if not self.active or self.state_units == WIRE_GRIPPER_STATE_UNITS:
            return state
        return self._state_in.to_command(self._state_in.from_state(state[None]))[0]

    def state(self, state: Any) -> Any:
        """Backend state rows (its state units) -> the wire's (grippers in mm); None stays None."""
        if (state is None or not self.active or state.shape[-1] != GESIM_ACTION_DIM
                or self.state_units == WIRE_GRIPPER_STATE_UNITS):
            return state
        return self._wire_out.to_command(self._backend.from_state(state))


class SessionStatus:
    """What the dashboard shows: the session's phase, task, counts, last action and state, and the
    latest predicted head frame. Its own lock, so it answers while a step holds the backend."""

    def __init__(self, model_name: str, chunk_size: int, head_view: int) -> None:
        self._lock = threading.Lock()
        self._model_name, self._chunk_size, self._head_view = model_name, chunk_size, head_view
        self._started = time.monotonic()
        self._phase = "idle"  # idle -> ready (/init) -> running (in /step) -> ready; /close: idle
        self._clear()

    def _clear(self) -> None:
        self._task = ""
        self._step_count = self._frames_generated = 0
        self._state = self._action = None
        self._head: Any = None  # (3, H, W) float [0, 1] of the latest step's last frame
        self._preview: tuple[int, bytes] | None = None  # (step_count, JPEG) encoded on demand

    def on_init(self) -> None:
        with self._lock:
            self._phase = "ready"
            self._clear()

    def on_close(self) -> None:
        with self._lock:
            self._phase = "idle"

    def on_task(self, task: str) -> None:
        with self._lock:
            self._task = task

    def on_step_started(self) -> None:
        with self._lock:
            self._phase = "running"

    def on_step_ended(self, actions: Any, result: Any) -> None:
        """``result`` None: the step failed (the phase goes back to ready, nothing else changes)."""
        with self._lock:
            if self._phase == "running":
                self._phase = "ready"
            if result is None:
                return
            frames = result.frames
            self._step_count += 1
            self._frames_generated += int(frames.shape[0])
            self._action = _row(actions[-1]) if len(actions) else None
            state = result.state
            self._state = _row(state[-1]) if state is not None and len(state) else None
            if frames.shape[0]:
                self._head = frames[-1][:, self._head_view]

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            return {
                "model": self._model_name,
                "chunk_size": self._chunk_size,
                "phase": self._phase,
                "uptime_s": round(time.monotonic() - self._started, 1),
                "task": self._task,
                "step_count": self._step_count,
                "frames_generated": self._frames_generated,
                "state": self._state,
                "action": self._action,
                "has_preview": self._head is not None,
            }

    def preview_jpeg(self) -> bytes | None:
        """The latest predicted head frame as JPEG (encoded once per step, on first request)."""
        with self._lock:
            if self._head is None:
                return None
            if self._preview is None or self._preview[0] != self._step_count:
                self._preview = (self._step_count, wire.encode_frame_jpeg(self._head[:, None]))
            return self._preview[1]


class WorldModelServer(ThreadingHTTPServer):
    """HTTP server owning one backend and at most one client session."""

    daemon_threads = True
    block_on_close = False

    def __init__(self, backend: WorldModel, host: str, port: int, request_timeout_s: float = 60.0,
                 body_timeout_s: float = DEFAULT_BODY_TIMEOUT_S, model_name: str | None = None,
                 contract: Contract | None = None, judge: Judge | None = None) -> None:
        self.backend = backend
        self.reward = None if judge is None else JudgeRewardClient(judge)  # /evaluate
        self.grippers = WireGrippers(backend, contract or load_contract(DEFAULT_PROFILE))
        self.request_timeout_s = request_timeout_s  # idle keep-alive connections, slow headers
        self.body_timeout_s = body_timeout_s  # the whole body of one request
        self.lock = threading.Lock()  # serialises backend calls and session changes
        self.client_id: str | None = None
        views = tuple(backend.views)
        self.status = SessionStatus(model_name or type(backend).__name__, backend.chunk_size,
                                    views.index("head") if "head" in views else 0)
        super().__init__((host, port), _Handler)

    def get_request(self) -> tuple[socket.socket, Any]:
        """Accept with TCP_NODELAY: a reply is written as it is ready, not held by Nagle's algorithm
        until the client's delayed ACK (40 ms a request on keep-alive connections)."""
        sock, address = super().get_request()
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return sock, address

    def start(self) -> WorldModelServer:
        """Serve in a daemon thread (tests, benches, embedding callers); :meth:`stop` ends it."""
        self._thread = threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="serve-wm", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving, close the listening socket, and wait (boundedly) for the serving thread."""
        self.shutdown()
        self.server_close()
        self._thread.join(timeout=5)

    def call(self, client_id: str | None, fn: Callable[[], Any]) -> Any:
        """Run ``fn`` on the backend under the lock, after checking the session (None: no check)."""
        with self.lock:
            if client_id is not None and client_id != self.client_id:
                raise _HttpError(
                    403, f"unknown client_id {client_id!r}; the session ended or the server restarted, call /init"
                )
            try:
                return fn()
            except (WorldModelInputError, _HttpError):
                raise
            except Exception as exc:
                _LOG.exception("backend %s failed", type(self.backend).__name__)
                name = type(self.backend).__name__
                raise _HttpError(500, f"backend {name} failed: {type(exc).__name__}: {exc}") from exc

    def open_session(self, user_name: str) -> str:
        def reset_and_open() -> str:
            self.backend.reset()
            if self.client_id is not None:
                _LOG.warning("/init by %r evicts the previous session", user_name)
            self.client_id = uuid.uuid4().hex
            self.status.on_init()
            return self.client_id

        return self.call(None, reset_and_open)

    def close_session(self, client_id: str) -> None:
        def reset_and_close() -> None:
            self.backend.reset()
            self.client_id = None
            self.status.on_close()

        self.call(client_id, reset_and_close)


_OK = wire.encode_json({"success": True})


def _json_request(body: bytes, what: str) -> tuple[str, dict[str, Any]]:
    obj = wire.decode_json(body, what)
    return wire.get_str(obj, "client_id", what), obj


def _init(server: WorldModelServer, body: bytes) -> bytes:
    # An empty body is {} (GE-Sim's server accepts it too): an anonymous session.
    request = wire.decode_json(body, "/init body") if body.strip() else {}
    user_name = request.get("user_name") or "anonymous"
    return wire.encode_json({"success": True, "client_id": server.open_session(str(user_name))})


def _reset(server: WorldModelServer, body: bytes) -> bytes:
    client_id, _ = _json_request(body, "/reset body")
    server.call(client_id, server.backend.reset)
    return _OK


def _close(server: WorldModelServer, body: bytes) -> bytes:
    client_id, _ = _json_request(body, "/close body")
    server.close_session(client_id)
    return _OK


def _set_task(server: WorldModelServer, body: bytes) -> bytes:
    client_id, obj = _json_request(body, "/set_task body")
    task = obj.get("task")
    if not isinstance(task, str):
        raise WorldModelInputError(f"task: expected a string, got {type(task).__name__}")

    def set_task() -> None:
        server.backend.set_task(task)
        server.status.on_task(task)

    server.call(client_id, set_task)
    return _OK


def _set_camera_params(server: WorldModelServer, body: bytes) -> bytes:
    client_id, intrinsic, extrinsic = wire.decode_camera_params(body)
    k, e = validate_camera_params(intrinsic, extrinsic, server.backend)
    server.call(client_id, lambda: server.backend.set_camera_params(k, e))
    return _OK


def _set_episode_data(server: WorldModelServer, body: bytes) -> bytes:
    client_id, frame = wire.decode_episode_data(body)
    frame = validate_first_frame(frame, server.backend)
    server.call(client_id, lambda: server.backend.set_episode_data(frame))
    return _OK


def _set_episode_traj(server: WorldModelServer, body: bytes) -> bytes:
    client_id, traj, c2w = wire.decode_episode_traj(body)
    traj, c2w = validate_episode_traj(traj, c2w, server.backend)
    server.call(client_id, lambda: server.backend.set_episode_traj(traj, c2w))
    return _OK


def _set_episode_state(server: WorldModelServer, body: bytes) -> bytes:
    client_id, state = wire.decode_episode_state(body)
    backend = server.backend
    if not backend.takes_episode_state:
        raise WorldModelInputError(f"/set_episode_state: backend {type(backend).__name__} takes no episode state; "
                                   "start its episodes from the first frame only (gesim_http: episode_state false)")
    state = server.grippers.episode_state(check_array("state", state, [("D", backend.action_dim)]))
    server.call(client_id, lambda: backend.set_episode_state(state))
    return _OK


def _evaluate(server: WorldModelServer, body: bytes) -> bytes:
    if server.reward is None:
        raise _HttpError(404, "this serve-wm has no judge; start it with --judge NAME (entry-point group "
                              "gesim_ros.judges) to serve /evaluate")
    task, head_frames = wire.decode_evaluate_request(body)
    result = server.call(None, lambda: server.reward.evaluate(head_frames, task))  # a backend's judge shares its state
    return wire.encode_evaluate_response(result.success, result.progress)


def _step(server: WorldModelServer, body: bytes) -> bytes:
    client_id, actions = wire.decode_step_request(body)
    actions = validate_actions(actions, server.backend)

    def step() -> Any:
        server.status.on_step_started()
        result = None
        try:
            try:
                result = validate_step_result(server.backend.step(server.grippers.command(actions)), server.backend)
            except WorldModelInputError as exc:
                name = type(server.backend).__name__
                raise _HttpError(500, f"backend {name} returned an invalid step result: {exc}") from exc
            result = StepResult(result.frames, server.grippers.state(result.state))  # the wire's units
            return result
        finally:
            server.status.on_step_ended(actions, result)

    return wire.encode_step_response(server.call(client_id, step))


_ROUTES: dict[str, Callable[[WorldModelServer, bytes], bytes]] = {
    "/init": _init,
    "/reset": _reset,
    "/close": _close,
    "/set_task": _set_task,
    "/set_camera_params": _set_camera_params,
    "/set_episode_data": _set_episode_data,
    "/set_episode_traj": _set_episode_traj,
    "/set_episode_state": _set_episode_state,
    "/step": _step,
    "/evaluate": _evaluate,
}
_BINARY_RESPONSES = {"/step"}

_DASHBOARD_HTML = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>gesim-ros serve-wm</title>
<style>
body { font: 14px system-ui, sans-serif; margin: 2em auto; max-width: 60em; color: #222; }
dl { display: grid; grid-template-columns: 10em 1fr; gap: .3em 1em; }
dt { color: #666; } dd { margin: 0; font-family: monospace; overflow-wrap: anywhere; }
img { max-width: 100%; border: 1px solid #ccc; } #none { color: #666; }
</style></head><body>
<h1>gesim-ros serve-wm: <span id="model">?</span></h1>
<dl>
<dt>phase</dt><dd id="phase">?</dd><dt>task</dt><dd id="task"></dd>
<dt>steps</dt><dd id="step_count"></dd><dt>frames</dt><dd id="frames_generated"></dd>
<dt>chunk size</dt><dd id="chunk_size"></dd><dt>up</dt><dd id="uptime_s"></dd>
<dt>last action</dt><dd id="action"></dd><dt>predicted state</dt><dd id="state"></dd>
</dl>
<h2>Latest predicted head frame</h2>
<p id="none">none yet: the first /step shows it here</p><img id="preview" alt="latest head frame" hidden>
<p>Polls <code>/api/status</code> every second; <code>/healthz</code> for liveness.</p>
<script>
let shown = -1;
async function tick() {
  let s;
  try { s = await (await fetch("/api/status", {cache: "no-store"})).json(); }
  catch (e) { document.getElementById("phase").textContent = "unreachable"; return; }
  for (const k of ["model", "phase", "task", "step_count", "frames_generated", "chunk_size"])
    document.getElementById(k).textContent = s[k];
  document.getElementById("uptime_s").textContent = s.uptime_s + " s";
  for (const k of ["action", "state"])
    document.getElementById(k).textContent = s[k] ? s[k].map(x => x.toFixed(3)).join(" ") : "-";
  const img = document.getElementById("preview");
  if (s.has_preview && s.step_count !== shown) {
    shown = s.step_count;
    img.src = "/api/preview.jpg?t=" + s.step_count;
    img.hidden = false;
    document.getElementById("none").hidden = true;
  } else if (!s.has_preview) {
    img.hidden = true;
    document.getElementById("none").hidden = false;
    shown = -1;
  }
}
tick();
setInterval(tick, 1000);
</script></body></html>
""".encode()


def _get_status(server: WorldModelServer) -> tuple[int, bytes, str]:
    return 200, wire.encode_json(server.status.snapshot()), "application/json"


def _get_preview(server: WorldModelServer) -> tuple[int, bytes, str]:
    jpeg = server.status.preview_jpeg()
    if jpeg is None:
        message = "no predicted frame yet: the preview is the latest /step's last head frame; run a /step first"
        return 404, wire.encode_json({"error": message}), "application/json"
    return 200, jpeg, "image/jpeg"


_GET_ROUTES: dict[str, Callable[[WorldModelServer], tuple[int, bytes, str]]] = {
    "/": lambda server: (200, _DASHBOARD_HTML, "text/html; charset=utf-8"),
    "/healthz": lambda server: (200, wire.encode_json({"status": "ok"}), "application/json"),
    "/api/status": _get_status,
    "/api/preview.jpg": _get_preview,
}


class _Handler(BaseHTTPRequestHandler):
    server: WorldModelServer
    protocol_version = "HTTP/1.1"
    wbufsize = -1  # buffered: the status line, headers and a small body leave in one segment

    def setup(self) -> None:
        self.timeout = self.server.request_timeout_s  # bounds idle connections and slow headers
        super().setup()

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        _LOG.debug("%s %s", self.address_string(), format % args)

    def do_GET(self) -> None:
        route = _GET_ROUTES.get(self.path.split("?", 1)[0])  # the dashboard adds ?t=<step> to the preview
        if route is None:
            self._send_error(404, f"no GET endpoint {self.path!r}; expected one of {sorted(_GET_ROUTES)}")
            return
        status, payload, ctype = route(self.server)
        self._send(status, payload, ctype, no_store=True)  # a live view: never a cached one

    def do_POST(self) -> None:
        route = _ROUTES.get(self.path)
        if route is None:
            self._send_error(404, f"no POST endpoint {self.path!r}; expected one of {sorted(_ROUTES)}")
            return
        try:
            payload = route(self.server, self._read_body())
        except _HttpError as exc:
            self._send_error(exc.status, str(exc))
        except ValueError as exc:  # WireFormatError, WorldModelInputError
            self._send_error(400, str(exc))
        except Exception as exc:
            _LOG.exception("%s failed", self.path)
            self._send_error(500, f"{self.path} failed: {type(exc).__name__}: {exc}")
        else:
            ctype = "application/octet-stream" if self.path in _BINARY_RESPONSES else "application/json"
            self._send(200, payload, ctype)

    def _read_body(self) -> bytes:
        """The request body, whole within ``body_timeout_s`` (408 otherwise); no Content-Length: empty."""
        if self.headers.get("Transfer-Encoding"):
            raise _HttpError(411, f"Transfer-Encoding {self.headers['Transfer-Encoding']!r} is not supported; "
                                  "send the body with a Content-Length header")
        text = self.headers.get("Content-Length", "0").strip()
        if not text.isdigit():
            raise _HttpError(400, f"Content-Length header {text!r} is not a byte count; send the body's length")
        length = int(text)
        if length > wire.MAX_BODY_BYTES:
            raise _HttpError(413, f"body of {length} bytes exceeds MAX_BODY_BYTES={wire.MAX_BODY_BYTES}; "
                                  "send fewer or smaller frames per request")
        limit = self.server.body_timeout_s
        deadline = time.monotonic() + limit
        parts, received = [], 0
        try:
            while received < length:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError
                self.connection.settimeout(remaining)
                part = self.rfile.read1(length - received)
                if not part:
                    raise _HttpError(400, f"body truncated: the client closed the connection after {received} "
                                          f"of {length} bytes (Content-Length); send the whole body")
                parts.append(part)
                received += len(part)
        except TimeoutError:
            raise _HttpError(408, f"request body stalled: {received} of {length} bytes (Content-Length) arrived "
                                  f"within body_timeout_s={limit:g} s; send the whole body promptly (or raise "
                                  "serve-wm --body-timeout for a slow link)") from None
        finally:
            if length:
                self.connection.settimeout(self.timeout)
        return b"".join(parts)

    def _send_error(self, status: int, message: str) -> None:
        if status >= 500:
            _LOG.error("%s -> %d: %s", self.path, status, message)
        else:
            _LOG.info("%s -> %d: %s", self.path, status, message)
        self.close_connection = True  # the request body may be unread
        self._send(status, wire.encode_json({"error": message}), "application/json")

    def _send(self, status: int, payload: bytes, content_type: str, no_store: bool = False) -> None:
        try:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(payload)))
            if no_store:
                self.send_header("Cache-Control", "no-store")
            if self.close_connection:
                self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(payload)
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):  # e.g. the client timed out first
            _LOG.info("%s: client disconnected before the %d reply", self.path, status)
            self.close_connection = True


def make_server(backend: WorldModel, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT, *,
                body_timeout_s: float = DEFAULT_BODY_TIMEOUT_S, model_name: str | None = None,
                contract: Contract | None = None, judge: Judge | None = None) -> WorldModelServer:
    """Bind (port 0 picks a free port, see ``server.server_address``) without serving yet.
    ``contract`` (default: the default profile) gives the gripper limits of the unit conversion;
    ``judge`` (None: no /evaluate) is served at /evaluate."""
    return WorldModelServer(backend, host, port, body_timeout_s=body_timeout_s, model_name=model_name,
                            contract=contract, judge=judge)


def serve(backend: WorldModel, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT, *,
          body_timeout_s: float = DEFAULT_BODY_TIMEOUT_S, model_name: str | None = None,
          contract: Contract | None = None, judge: Judge | None = None, judge_name: str = "") -> None:
    """Serve ``backend`` (and ``judge``) until interrupted; the caller owns (and closes) both."""
    server = make_server(backend, host, port, body_timeout_s=body_timeout_s, model_name=model_name,
                         contract=contract, judge=judge)
    bound_host, bound_port = server.server_address[:2]
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = host == "localhost"
    if not loopback:
        _LOG.warning("serving on %s: the world-model API has no authentication; use a trusted network", host)
    # The port actually bound (--port 0 picks one); scripts and tests wait for this line.
    _LOG.info("listening on http://%s:%d (backend %s); dashboard at /", bound_host, bound_port,
              model_name or type(backend).__name__)
    if judge is not None:
        _LOG.info("judge %s at /evaluate (GE-Sim's reward interface)", judge_name or type(judge).__name__)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        _LOG.info("interrupted, shutting down")
    finally:
        server.server_close()


# --------------------------------------------------------------------------- CLI


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``gesim-ros serve-wm``."""
    parser.add_argument(
        "--backend", required=True, help="world-model plugin name (entry-point group gesim_ros.world_models)"
    )
    parser.add_argument(
        "--host", default=DEFAULT_HOST, help=f"bind address (default {DEFAULT_HOST}; no auth, keep it private)"
    )
    parser.add_argument("--port", type=int, default=DEFAULT_PORT,
                        help=f"TCP port (default {DEFAULT_PORT}; 0 picks a free one, named in the 'listening on' line)")
    parser.add_argument("--config", default="{}", help="backend config: inline JSON object, or path to a JSON file")
    parser.add_argument("--judge", default="none",
                        help="judge plugin (entry-point group gesim_ros.judges) served at /evaluate, GE-Sim's reward "
                             "interface; 'backend': the served backend's own judge (default: none, no /evaluate)")
    parser.add_argument("--judge-config", default="{}", help="judge config: inline JSON object, or path to a JSON file")
    parser.add_argument("--body-timeout", type=float, default=DEFAULT_BODY_TIMEOUT_S, metavar="SECONDS",
                        help="a request body must arrive whole within this time, else 408 "
                             f"(default {DEFAULT_BODY_TIMEOUT_S:g})")
    parser.add_argument("--contract", default=DEFAULT_PROFILE,
                        help="contract profile or YAML path: its gripper limits map GE-Sim's normalised gripper "
                             f"commands to the backend's units (default {DEFAULT_PROFILE})")


def _load_config(text: str, source: str = "--config") -> dict[str, Any]:
    if not text.lstrip().startswith("{"):
        source = f"{source} file {text!r}"
        try:
            text = Path(text).read_text(encoding="utf-8")
        except OSError as exc:
            raise ValueError(f"{source}: cannot read ({exc})") from None
    return plugin_config(source, text)


def run(args: argparse.Namespace) -> int:
    """Load the backend named by ``args`` and serve it; returns a process exit code."""
    # `gesim-ros serve-wm` reaches here without main(): without a handler the INFO lines (the
    # "listening on" one) were dropped. StreamHandler writes stderr and flushes each record.
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    body_timeout = getattr(args, "body_timeout", DEFAULT_BODY_TIMEOUT_S)
    problem = None
    if not 0 <= args.port <= 65535:
        problem = f"--port {args.port}: not a TCP port; use 1-65535, or 0 for a free one"
    elif not 0 < body_timeout < float("inf"):
        problem = f"--body-timeout {body_timeout:g}: expected a positive number of seconds, e.g. 30"
    if problem:
        print(f"gesim-ros serve-wm: error: {problem}", file=sys.stderr)
        return 2
    try:
        contract = load_contract(getattr(args, "contract", DEFAULT_PROFILE))
        backend = load_world_model(args.backend, _load_config(args.config))
        WireGrippers(backend, contract)  # a backend declaring unknown gripper units is named here
    except (UnknownWorldModelError, ValueError, ImportError, TypeError) as exc:
        print(f"gesim-ros serve-wm: error: {exc}", file=sys.stderr)
        return 2
    judge_name = getattr(args, "judge", "none")
    try:
        judge = load_judge(judge_name, _load_config(getattr(args, "judge_config", "{}"), "--judge-config"),
                           backend=backend)
        if judge is not None:
            JudgeRewardClient(judge)  # a judge of other views than the head is named here
    except (LookupError, ValueError, ImportError, TypeError) as exc:
        backend.close()
        print(f"gesim-ros serve-wm: error: --judge {judge_name}: {exc}", file=sys.stderr)
        return 2
    try:
        with backend:
            serve(backend, args.host, args.port, body_timeout_s=body_timeout, model_name=args.backend,
                  contract=contract, judge=judge, judge_name=judge_name)
    except OSError as exc:  # e.g. port in use
        print(f"gesim-ros serve-wm: error: cannot serve on {args.host}:{args.port}: {exc}", file=sys.stderr)
        return 1
    finally:
        if judge is not None and judge is not backend:
            judge.close()
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="gesim-ros serve-wm", description=__doc__.splitlines()[0])
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
