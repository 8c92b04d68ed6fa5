"""``gesim_http`` backend: client of a GE-Sim 2.0 style world-model HTTP server.

The server is GE-Sim itself on a GPU host, or any backend behind
``gesim-ros serve-wm``. Every request opens a fresh connection with bounded
connect and socket timeouts, so a dead or wedged server surfaces as a
:class:`WorldModelBackendError` instead of a hang; only connection attempts are
retried, because a request that reached the server may already have run.

The client remembers the episode's setup (camera params, first frame,
trajectory bands, task). If the server forgets the session (403 after a
restart, or a connection dropped mid-request) it re-runs ``/init`` and re-sends
that setup: setup calls then continue transparently, while ``step`` raises
:class:`WorldModelSessionLostError`, because the generated history is gone and
the episode restarts from its first frame. Not thread-safe: call from one thread.
"""

from __future__ import annotations

import http.client
import logging
import time
import urllib.parse
from collections.abc import Callable, Sequence

import numpy as np

from gesim_ros.world_model import gesim_wire as wire
from gesim_ros.world_model.api import CHUNK_MODES, GESIM_ACTION_DIM, GESIM_CHUNK_SIZE, GESIM_IMAGE_SIZE, StepResult, WorldModel, WorldModelBackendError, WorldModelInputError, WorldModelSessionLostError, check_array, check_gripper_units, validate_camera_params, validate_episode_traj, validate_first_frame, validate_step_result
from gesim_ros.world_model.layouts import step_chunked

_LOG = logging.getLogger(__name__)

# Setup endpoints in the order the protocol expects them, for replay after re-init.
_REPLAY_ORDER = ("/set_camera_params", "/set_episode_data", "/set_episode_state", "/set_episode_traj", "/set_task")
_JSON_ENDPOINTS = {"/init", "/reset", "/close", "/set_task", "/set_camera_params", "/set_episode_state"}
_READ_CHUNK = 1 << 20

BodyBuilder = Callable[[str], bytes]  # client_id -> request body


class _SessionGone(WorldModelBackendError):
    """403: the server no longer knows our client_id."""


class _Dropped(WorldModelBackendError):
    """The connection broke after the request was sent; the server may or may not have acted."""


class _TimedOut(WorldModelBackendError):
    """No reply within ``timeout_s``; the server may still be working on the request."""


def _positive(name: str, value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise WorldModelInputError(f"{name}: expected a positive number, got {value!r}")
    return float(value)


def _image_size(value: Sequence[int] | None) -> tuple[int, int] | None:
    if value is None:
        return None
    try:
        height, width = (int(v) for v in value)
    except (TypeError, ValueError):
        height = width = 0
    if height <= 0 or width <= 0:
        raise WorldModelInputError(f"image_size: expected [H, W] positive ints or null, got {value!r}")
    return height, width


class GeSimHttpWorldModel(WorldModel):
    """World model served over GE-Sim 2.0's HTTP protocol.

    ``timeout_s`` bounds each socket operation (a step waits at most that long
    for the server's reply); a refused or timed-out connect is retried
    ``connect_retries`` times with exponential backoff from ``retry_backoff_s``.
    Chunks longer than ``chunk_size`` are compressed or split per ``chunk_mode``.
    ``gripper_command_units`` and ``gripper_state_units`` (see api.GRIPPER_UNITS) default to
    GE-Sim-V2's: commands normalised to [0, 1], state in mm, which ``gesim-ros serve-wm`` speaks too
    (it converts to and from its own backend's units). ``episode_state`` true sends the measured joints
    at the first frame (``/set_episode_state``, grippers in ``gripper_state_units``): only serve-wm has
    that endpoint, GE-Sim-V2's own server answers it with 404, so it is off by default.
    """

    needs_trajectory_band = True  # GE-Sim answers a step without one with HTTP 500

    def __init__(
        self,
        url: str,
        *,
        timeout_s: float = 120.0,
        connect_timeout_s: float = 5.0,
        connect_retries: int = 3,
        retry_backoff_s: float = 0.5,
        user_name: str = "gesim_ros",
        chunk_mode: str = "compress",
        chunk_size: int = GESIM_CHUNK_SIZE,
        image_size: Sequence[int] | None = GESIM_IMAGE_SIZE,
        state_dim: int | None = GESIM_ACTION_DIM,
        gripper_command_units: str = "normalised",
        gripper_state_units: str = "mm",
        episode_state: bool = False,
    ) -> None:
        try:
            parts = urllib.parse.urlsplit(url)
            port = parts.port
        except (TypeError, ValueError, AttributeError):
            parts = port = None
        if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
            raise WorldModelInputError(f"url: {url!r} is not an http(s)://host[:port][/path] URL")
        self.url = url
        self._host = parts.hostname
        self._port = port or (443 if parts.scheme == "https" else 80)
        self._base_path = parts.path.rstrip("/")
        self._connection_cls = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
        self.timeout_s = _positive("timeout_s", timeout_s)
        self.connect_timeout_s = _positive("connect_timeout_s", connect_timeout_s)
        if isinstance(connect_retries, bool) or not isinstance(connect_retries, int) or connect_retries < 0:
            raise WorldModelInputError(f"connect_retries: expected an int >= 0, got {connect_retries!r}")
        self.connect_retries = connect_retries
        self.retry_backoff_s = _positive("retry_backoff_s", retry_backoff_s)
        self.user_name = str(user_name)
        if chunk_mode not in CHUNK_MODES:
            raise WorldModelInputError(f"chunk_mode: {chunk_mode!r} is not one of {list(CHUNK_MODES)}")
        self.chunk_mode = chunk_mode
        self.chunk_size = int(_positive("chunk_size", chunk_size))
        self.image_size = _image_size(image_size)
        self.state_dim = state_dim
        self.gripper_command_units = check_gripper_units("gripper_command_units", gripper_command_units)
        self.gripper_state_units = check_gripper_units("gripper_state_units", gripper_state_units)
        if not isinstance(episode_state, bool):
            raise WorldModelInputError(f"episode_state: expected true or false, got {episode_state!r}")
        self.takes_episode_state = episode_state
        self._client_id: str | None = None
        self._episode: dict[str, BodyBuilder] = {}

    # ----------------------------------------------------------------- WorldModel

    def reset(self) -> None:
        self._episode.clear()
        self._session_call("/reset", lambda cid: wire.encode_json({"client_id": cid}))

    def set_camera_params(self, intrinsic: np.ndarray, extrinsic: np.ndarray | None = None) -> None:
        k, e = validate_camera_params(intrinsic, extrinsic, self)
        self._setup("/set_camera_params", lambda cid: wire.encode_camera_params(k, e, cid))

    def set_episode_data(self, first_frame: np.ndarray) -> None:
        frame = validate_first_frame(first_frame, self)
        self._setup("/set_episode_data", lambda cid: wire.encode_episode_data(frame, cid))

    def set_episode_state(self, state: np.ndarray) -> None:
        if not self.takes_episode_state:
            super().set_episode_state(state)  # refused: GE-Sim-V2's server has no such endpoint
        row = check_array("state", state, [("D", self.action_dim)])
        self._setup("/set_episode_state", lambda cid: wire.encode_episode_state(row, cid))

    def set_episode_traj(self, traj: np.ndarray, c2w: np.ndarray) -> None:
        traj, c2w = validate_episode_traj(traj, c2w, self)
        self._setup("/set_episode_traj", lambda cid: wire.encode_episode_traj(traj, c2w, cid))

    def set_task(self, task: str) -> None:
        if not isinstance(task, str):
            raise WorldModelInputError(f"task: expected a string, got {type(task).__name__}")
        self._setup("/set_task", lambda cid: wire.encode_json({"task": task, "client_id": cid}))

    def step(self, actions: np.ndarray) -> StepResult:
        """Step with ``(L, 16)`` actions of any length; ``L > chunk_size`` is adapted per ``chunk_mode``."""
        actions = check_array("actions", actions, ["L", ("D", self.action_dim)])
        return step_chunked(self._step_chunk, actions, self.chunk_size, self.chunk_mode)

    def close(self) -> None:
        """End the server session (best effort, bounded by the timeouts)."""
        if self._client_id is None:
            return
        client_id, self._client_id = self._client_id, None
        try:
            self._post("/close", wire.encode_json({"client_id": client_id}))
        except WorldModelBackendError as exc:
            _LOG.warning("closing the world-model session failed: %s", exc)

    # ----------------------------------------------------------------- session

    def _step_chunk(self, actions: np.ndarray) -> StepResult:
        body = self._session_call("/step", lambda cid: wire.encode_step_request(actions, cid), replayable=False)
        try:
            return validate_step_result(wire.decode_step_response(body), self)
        except ValueError as exc:
            raise WorldModelBackendError(f"/step: malformed response from {self.url}: {exc}", endpoint="/step") from exc

    def _setup(self, endpoint: str, build: BodyBuilder) -> None:
        self._session_call(endpoint, build)
        self._episode[endpoint] = build  # only what the server accepted is replayed

    def _session_call(self, endpoint: str, build: BodyBuilder, replayable: bool = True) -> bytes:
        """POST within the session, re-opening it if the server lost it.

        ``replayable`` calls are re-sent after the session is re-opened; a step
        is not, since re-running it from the episode start would silently
        return frames for a different history.
        """
        if self._client_id is None:
            self._open_session()
        try:
            return self._post(endpoint, build(self._client_id))
        except _TimedOut as exc:
            if replayable:
                raise
            self._client_id = None  # the server may still run it; start a clean session next call
            raise WorldModelBackendError(
                f"{exc}; the episode restarts from its first frame on the next call", endpoint=endpoint
            ) from exc
        except (_SessionGone, _Dropped) as exc:
            lost = exc
        _LOG.warning("world-model session lost (%s); re-opening it", lost)
        try:
            self._open_session()
        except WorldModelBackendError as exc:
            raise WorldModelSessionLostError(
                f"{lost}; re-opening the session failed ({exc}), the next call retries from the episode's first frame",
                status=exc.status, server_error=exc.server_error, endpoint=endpoint,
            ) from exc
        if not replayable:
            raise WorldModelSessionLostError(
                f"{lost}; session re-opened from the episode's first frame: generated history is gone "
                "and this step did not run",
                status=lost.status, server_error=lost.server_error, endpoint=endpoint,
            ) from lost
        return self._post(endpoint, build(self._client_id))

    def _open_session(self) -> None:
        """``/init`` then replay the remembered episode setup in protocol order."""
        self._client_id = None
        reply = wire.decode_json(self._post("/init", wire.encode_json({"user_name": self.user_name})), "/init reply")
        if not reply.get("success") or not isinstance(reply.get("client_id"), str):
            raise WorldModelBackendError(f"/init: server refused the session: {reply}", endpoint="/init")
        client_id = reply["client_id"]
        for endpoint in _REPLAY_ORDER:
            if endpoint in self._episode:
                self._post(endpoint, self._episode[endpoint](client_id))
        self._client_id = client_id

    # ----------------------------------------------------------------- transport

    def _connect(self, endpoint: str) -> http.client.HTTPConnection:
        last: OSError | None = None
        for attempt in range(self.connect_retries + 1):
            if attempt:
                time.sleep(self.retry_backoff_s * 2 ** (attempt - 1))
            conn = self._connection_cls(self._host, self._port, timeout=self.connect_timeout_s)
            try:
                conn.connect()
            except OSError as exc:
                conn.close()
                last = exc
                continue
            conn.sock.settimeout(self.timeout_s)
            return conn
        raise WorldModelBackendError(
            f"{endpoint}: cannot connect to {self.url} after {self.connect_retries + 1} attempt(s): {last}",
            endpoint=endpoint,
        )

    def _post(self, endpoint: str, body: bytes) -> bytes:
        """One POST on a fresh connection; every socket operation is bounded by the timeouts."""
        conn = self._connect(endpoint)
        ctype = "application/json" if endpoint in _JSON_ENDPOINTS else "application/octet-stream"
        try:
            conn.request("POST", self._base_path + endpoint, body, {"Content-Type": ctype, "Connection": "close"})
            resp = conn.getresponse()
            data = _read_bounded(resp, endpoint)
        except TimeoutError:
            raise _TimedOut(
                f"{endpoint}: no response from {self.url} within timeout_s={self.timeout_s:g}", endpoint=endpoint
            ) from None
        except (OSError, http.client.HTTPException) as exc:
            raise _Dropped(
                f"{endpoint}: connection to {self.url} dropped: {type(exc).__name__}: {exc}", endpoint=endpoint
            ) from exc
        finally:
            conn.close()
        if resp.status == 200:
            return data
        error = error_text(data)
        if resp.status == 403:
            raise _SessionGone(
                f"{endpoint}: HTTP 403 from {self.url}: {error}", status=403, server_error=error, endpoint=endpoint
            )
        raise WorldModelBackendError(
            f"{endpoint}: HTTP {resp.status} from {self.url}: {error}",
            status=resp.status, server_error=error, endpoint=endpoint,
        )


def _read_bounded(resp: http.client.HTTPResponse, endpoint: str) -> bytes:
    chunks: list[bytes] = []
    total = 0
    while chunk := resp.read(_READ_CHUNK):
        total += len(chunk)
        if total > wire.MAX_BODY_BYTES:
            raise WorldModelBackendError(
                f"{endpoint}: response exceeds MAX_BODY_BYTES={wire.MAX_BODY_BYTES}", endpoint=endpoint
            )
        chunks.append(chunk)
    return b"".join(chunks)


def error_text(data: bytes) -> str:
    """The server's ``{"error": ...}`` text, or the raw body (truncated) from foreign servers."""
    try:
        return str(wire.decode_json(data, "error body")["error"])
    except (ValueError, KeyError):
        return data[:500].decode("utf-8", errors="replace") or "(empty body)"
