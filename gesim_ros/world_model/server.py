"""Serve any :class:`~gesim_ros.world_model.api.WorldModel` over GE-Sim 2.0's HTTP protocol.

This lets a lab put its own model (or the ``kinematic`` baseline) on a GPU host
and reach it with the ``gesim_http`` client, which speaks GE-Sim's protocol.
One episode session at a time: ``/init`` hands out a ``client_id`` and evicts
the previous session; requests carrying any other id get 403. Backend calls are serialised
because world models keep per-episode state. Errors are JSON ``{"error": ...}``:
400 malformed input, 403 unknown client, 500 backend failure.

There is no authentication: bind to 127.0.0.1 (the default) or a trusted network.
"""

from __future__ import annotations

import argparse
import ipaddress
import logging
import sys
import threading
import uuid
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from gesim_ros.world_model import gesim_wire as wire
from gesim_ros.plugins import plugin_config
from gesim_ros.world_model.api import (
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


class _HttpError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class WorldModelServer(ThreadingHTTPServer):
    """HTTP server owning one backend and at most one client session."""

    daemon_threads = True
    block_on_close = False

    def __init__(self, backend: WorldModel, host: str, port: int, request_timeout_s: float = 60.0) -> None:
        self.backend = backend
        self.request_timeout_s = request_timeout_s
        self.lock = threading.Lock()  # serialises backend calls and session changes
        self.client_id: str | None = None
        super().__init__((host, port), _Handler)

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
            return self.client_id

        return self.call(None, reset_and_open)

    def close_session(self, client_id: str) -> None:
        def reset_and_close() -> None:
            self.backend.reset()
            self.client_id = None

        self.call(client_id, reset_and_close)


_OK = wire.encode_json({"success": True})


def _json_request(body: bytes, what: str) -> tuple[str, dict[str, Any]]:
    obj = wire.decode_json(body, what)
    return wire.get_str(obj, "client_id", what), obj


def _init(server: WorldModelServer, body: bytes) -> bytes:
    user_name = wire.decode_json(body, "/init body").get("user_name") or "anonymous"
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
    server.call(client_id, lambda: server.backend.set_task(task))
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


def _step(server: WorldModelServer, body: bytes) -> bytes:
    client_id, actions = wire.decode_step_request(body)
    actions = validate_actions(actions, server.backend)
    result = server.call(client_id, lambda: server.backend.step(actions))
    try:
        result = validate_step_result(result, server.backend)
    except WorldModelInputError as exc:
        name = type(server.backend).__name__
        raise _HttpError(500, f"backend {name} returned an invalid step result: {exc}") from exc
    return wire.encode_step_response(result)


_ROUTES: dict[str, Callable[[WorldModelServer, bytes], bytes]] = {
    "/init": _init,
    "/reset": _reset,
    "/close": _close,
    "/set_task": _set_task,
    "/set_camera_params": _set_camera_params,
    "/set_episode_data": _set_episode_data,
    "/set_episode_traj": _set_episode_traj,
    "/step": _step,
}
_BINARY_RESPONSES = {"/step"}


class _Handler(BaseHTTPRequestHandler):
    server: WorldModelServer
    protocol_version = "HTTP/1.1"

    def setup(self) -> None:
        self.timeout = self.server.request_timeout_s  # bounds reads from a stalled client
        super().setup()

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        _LOG.debug("%s %s", self.address_string(), format % args)

    def do_GET(self) -> None:
        if self.path == "/healthz":
            self._send(200, wire.encode_json({"status": "ok"}), "application/json")
        else:
            self._send_error(404, f"no GET endpoint {self.path!r}; try /healthz")

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
        length = self.headers.get("Content-Length")
        if length is None or not length.isdigit():
            raise _HttpError(400, f"Content-Length header missing or invalid ({length!r})")
        if int(length) > wire.MAX_BODY_BYTES:
            raise _HttpError(400, f"body of {length} bytes exceeds MAX_BODY_BYTES={wire.MAX_BODY_BYTES}")
        body = self.rfile.read(int(length))
        if len(body) != int(length):
            raise _HttpError(400, f"body truncated: got {len(body)} of {length} bytes")
        return body

    def _send_error(self, status: int, message: str) -> None:
        if status >= 500:
            _LOG.error("%s -> %d: %s", self.path, status, message)
        else:
            _LOG.info("%s -> %d: %s", self.path, status, message)
        self.close_connection = True  # the request body may be unread
        self._send(status, wire.encode_json({"error": message}), "application/json")

    def _send(self, status: int, payload: bytes, content_type: str) -> None:
        try:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(payload)))
            if self.close_connection:
                self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(payload)
        except (BrokenPipeError, ConnectionResetError):  # e.g. the client timed out first
            _LOG.info("%s: client disconnected before the %d reply", self.path, status)
            self.close_connection = True


def make_server(backend: WorldModel, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT) -> WorldModelServer:
    """Bind (port 0 picks a free port, see ``server.server_address``) without serving yet."""
    return WorldModelServer(backend, host, port)


def serve(backend: WorldModel, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT) -> None:
    """Serve ``backend`` until interrupted; the caller owns (and closes) the backend."""
    server = make_server(backend, host, port)
    bound_host, bound_port = server.server_address[:2]
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = host == "localhost"
    if not loopback:
        _LOG.warning("serving on %s: the world-model API has no authentication; use a trusted network", host)
    _LOG.info("serving %s on http://%s:%d", type(backend).__name__, bound_host, bound_port)
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
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"TCP port (default {DEFAULT_PORT})")
    parser.add_argument("--config", default="{}", help="backend config: inline JSON object, or path to a JSON file")


def _load_config(text: str) -> dict[str, Any]:
    source = "--config"
    if not text.lstrip().startswith("{"):
        source = f"--config file {text!r}"
        try:
            text = Path(text).read_text(encoding="utf-8")
        except OSError as exc:
            raise ValueError(f"{source}: cannot read ({exc})") from None
    return plugin_config(source, text)


def run(args: argparse.Namespace) -> int:
    """Load the backend named by ``args`` and serve it; returns a process exit code."""
    try:
        backend = load_world_model(args.backend, _load_config(args.config))
    except (UnknownWorldModelError, ValueError, ImportError, TypeError) as exc:
        print(f"gesim-ros serve-wm: error: {exc}", file=sys.stderr)
        return 2
    try:
        with backend:
            serve(backend, args.host, args.port)
    except OSError as exc:  # e.g. port in use
        print(f"gesim-ros serve-wm: error: cannot serve on {args.host}:{args.port}: {exc}", file=sys.stderr)
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="gesim-ros serve-wm", description=__doc__.splitlines()[0])
    add_arguments(parser)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
