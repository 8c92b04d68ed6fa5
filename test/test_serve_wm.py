"""`gesim-ros serve-wm` (world_model/server.py) itself, over real loopback HTTP: accepted sockets,
its log line, empty /init bodies, stalled bodies, the dashboard endpoints, bad input. Nothing is timed
here (bench/bench_serve_wm.py times requests against GE-Sim's own server); GE-Sim-V2's own clients
against it are in test_serve_wm_peer.py."""

import contextlib
import http.client
import json
import re
import socket
import threading
import time

import cv2
import numpy as np
import pytest

from gesim_ros.world_model import gesim_wire as wire
from gesim_ros.world_model.api import WorldModelBackendError
from gesim_ros.world_model.backends.gesim_http import GeSimHttpWorldModel
from gesim_ros.world_model.backends.kinematic import KinematicWorldModel
from gesim_ros.world_model.server import main, make_server

H, W = 48, 64
# GE-Sim-V2's /api/status fields (gesim/server/status.py, ServerStatus.snapshot); the peer test
# compares them with their running server's.
GESIM_STATUS_FIELDS = {"model", "chunk_size", "phase", "uptime_s", "task", "step_count", "frames_generated",
                       "state", "action", "has_preview"}


class GatedKinematic(KinematicWorldModel):
    """The kinematic baseline, whose step waits while ``gate`` is clear (a model still at work)."""

    def __init__(self):
        super().__init__()
        self.gate, self.stepping = threading.Event(), threading.Event()
        self.gate.set()

    def step(self, actions):
        self.stepping.set()
        self.gate.wait(30)  # hang guard only
        return super().step(actions)


@contextlib.contextmanager
def serving(backend=None, **kwargs):
    server = make_server(backend or KinematicWorldModel(), "127.0.0.1", 0, **kwargs).start()
    try:
        yield server
    finally:
        server.stop()


def request(server, method, path, body=None, conn=None):
    """(status, headers, body bytes); a fresh connection unless ``conn`` is given."""
    own = conn is None
    conn = conn or http.client.HTTPConnection("127.0.0.1", server.server_address[1], timeout=10)
    try:
        conn.request(method, path, body)
        resp = conn.getresponse()
        return resp.status, dict(resp.getheaders()), resp.read()
    finally:
        if own:
            conn.close()


def post_json(server, path, obj, conn=None):
    status, _, body = request(server, "POST", path, wire.encode_json(obj), conn)
    return status, json.loads(body)


def raw_exchange(server, data: bytes, timeout=20.0) -> tuple[int, dict]:
    """Send ``data`` on a raw socket, read one reply until the server closes; (status, JSON body)."""
    with socket.create_connection(server.server_address[:2], timeout=timeout) as sock:
        sock.sendall(data)
        return read_reply(sock)


def read_reply(sock) -> tuple[int, dict]:
    reply = b""
    while b"\r\n\r\n" not in reply or len(reply.split(b"\r\n\r\n", 1)[1]) < content_length(reply):
        chunk = sock.recv(65536)
        if not chunk:
            break
        reply += chunk
    head, _, body = reply.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(body)


def content_length(reply: bytes) -> int:
    found = re.search(rb"(?i)content-length:\s*(\d+)", reply)
    return int(found.group(1)) if found else 0


def smooth_views(phase=0.0):
    """(3, V=3, H, W) in [0, 1], each view clearly different (so a head crop is told from a wrist one)."""
    y, x = np.mgrid[0:H, 0:W].astype(np.float32) / np.float32(W)
    views = [[0.5 + 0.4 * np.sin(2 * x + (2 * v + 1) * y + phase + c + 2 * v) for v in range(3)] for c in range(3)]
    return np.clip(np.array(views, dtype=np.float32), 0, 1)


def start_episode(server, conn):
    status, reply = post_json(server, "/init", {"user_name": "test"}, conn)
    assert status == 200, reply
    cid = reply["client_id"]
    assert post_json(server, "/set_task", {"client_id": cid, "task": "put the cup on the plate"}, conn)[0] == 200
    first = smooth_views()
    status, _, body = request(server, "POST", "/set_episode_data", wire.encode_episode_data(first, cid), conn)
    assert status == 200, body
    return cid, first


def step(server, conn, cid, actions):
    status, _, body = request(server, "POST", "/step", wire.encode_step_request(actions, cid), conn)
    assert status == 200, body
    return wire.decode_step_response(body)


# ----------------------------------------------------------------------------- 1: TCP_NODELAY


def test_accepted_connections_send_without_nagle_delay():
    """A reply's segments leave as written: with Nagle on, a keep-alive client waited for its own
    delayed ACK (40 ms a request)."""
    server = make_server(KinematicWorldModel(), "127.0.0.1", 0)
    try:
        with socket.create_connection(server.server_address[:2], timeout=5):
            accepted, _ = server.get_request()
            with accepted:
                assert accepted.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
    finally:
        server.server_close()


# ----------------------------------------------------------------------------- 2: the log line


def test_listening_line_reaches_a_redirected_log_while_serving(procs):
    """`gesim-ros serve-wm` logs where it listens (the port it bound for --port 0) into a log file,
    while it runs; that port answers."""
    server = procs.start("gesim-ros", "serve-wm", "--backend", "kinematic", "--port", "0")
    found = None
    deadline = time.monotonic() + 60  # bounded wait for the line
    while found is None and server.running and time.monotonic() < deadline:
        found = re.search(r"listening on http://127\.0\.0\.1:(\d+) \(backend kinematic\); dashboard at /",
                          server.log())
        time.sleep(0.1)
    assert found, f"no 'listening on' line in the log of a running serve-wm:\n{server.log()}"
    assert server.running
    conn = http.client.HTTPConnection("127.0.0.1", int(found.group(1)), timeout=10)
    conn.request("GET", "/healthz")
    assert json.loads(conn.getresponse().read()) == {"status": "ok"}
    conn.close()


# ----------------------------------------------------------------------------- 3: empty /init


@pytest.mark.parametrize("headers", ["Content-Length: 0\r\n", ""], ids=["content-length-0", "no-body-headers"])
def test_an_empty_init_body_opens_an_anonymous_session(headers):
    with serving() as server:
        status, reply = raw_exchange(
            server, f"POST /init HTTP/1.1\r\nHost: x\r\n{headers}Connection: close\r\n\r\n".encode())
        assert status == 200 and reply["success"] is True, reply
        # the session is the server's: its id is accepted, and a stale one is not
        assert post_json(server, "/set_task", {"client_id": reply["client_id"], "task": "t"})[0] == 200
        assert post_json(server, "/set_task", {"client_id": "stale", "task": "t"})[0] == 403


def test_an_init_body_that_is_not_a_json_object_is_named():
    with serving() as server:
        status, reply = post_json(server, "/init", ["user_name", "x"])
        assert status == 400 and "/init body: expected a JSON object, got list" in reply["error"]


# ----------------------------------------------------------------------------- 4: stalled bodies


def stalled_post(length: int, sent: bytes) -> bytes:
    return f"POST /step HTTP/1.1\r\nHost: x\r\nContent-Length: {length}\r\n\r\n".encode() + sent


def test_a_body_that_stalls_gets_a_408_naming_the_stall():
    with serving(body_timeout_s=0.5) as server:
        status, reply = raw_exchange(server, stalled_post(1000, b"0123456789"))
    assert status == 408, reply
    assert "request body stalled: 10 of 1000 bytes" in reply["error"]
    assert "--body-timeout" in reply["error"]


def test_a_body_that_trickles_in_gets_a_408_too():
    """The bound is on the whole body, not on each read: a byte every 0.1 s does not keep it open."""
    with serving(body_timeout_s=0.5) as server:
        with socket.create_connection(server.server_address[:2], timeout=30) as sock:
            sock.sendall(stalled_post(1000, b""))
            stop = threading.Event()

            def trickle():
                for _ in range(300):  # 30 s at most
                    if stop.wait(0.1):
                        return
                    try:
                        sock.send(b"x")
                    except OSError:
                        return

            trickler = threading.Thread(target=trickle, daemon=True)
            trickler.start()
            try:
                status, reply = read_reply(sock)
            finally:
                stop.set()
                trickler.join(5)
    assert status == 408, reply
    assert re.search(r"request body stalled: \d+ of 1000 bytes", reply["error"])


def test_the_connection_serves_on_after_a_whole_body():
    """Bodies that arrive whole leave the keep-alive connection usable (the read bound is undone)."""
    with serving(body_timeout_s=0.5) as server:
        conn = http.client.HTTPConnection("127.0.0.1", server.server_address[1], timeout=10)
        cid, _ = start_episode(server, conn)
        time.sleep(0.7)  # idle past body_timeout_s between requests: the idle bound is request_timeout_s
        result = step(server, conn, cid, np.zeros((3, 16), np.float32))
        assert result.frames.shape == (3, 3, 3, H, W)
        conn.close()


# ----------------------------------------------------------------------------- 5: dashboard


def test_dashboard_page_polls_status_and_preview():
    with serving() as server:
        status, headers, body = request(server, "GET", "/")
    assert status == 200 and headers["Content-Type"].startswith("text/html")
    assert b"/api/status" in body and b"/api/preview.jpg" in body


def test_status_has_gesims_fields_and_follows_the_session():
    backend = GatedKinematic()
    with serving(backend, model_name="kinematic") as server:
        status, headers, body = request(server, "GET", "/api/status")
        idle = json.loads(body)
        assert status == 200 and set(idle) == GESIM_STATUS_FIELDS and headers["Cache-Control"] == "no-store"
        assert idle["model"] == "kinematic" and idle["chunk_size"] == backend.chunk_size
        assert (idle["phase"], idle["step_count"], idle["has_preview"]) == ("idle", 0, False)

        conn = http.client.HTTPConnection("127.0.0.1", server.server_address[1], timeout=10)
        cid, _ = start_episode(server, conn)
        ready = json.loads(request(server, "GET", "/api/status")[2])
        assert (ready["phase"], ready["task"]) == ("ready", "put the cup on the plate")

        # while a step is under way, the status answers (it does not wait for the backend) and says so
        backend.gate.clear()
        actions = np.linspace(-0.5, 0.5, 5 * 16, dtype=np.float32).reshape(5, 16)
        stepper = threading.Thread(target=step, args=(server, conn, cid, actions), daemon=True)
        stepper.start()
        assert backend.stepping.wait(10)
        assert json.loads(request(server, "GET", "/api/status")[2])["phase"] == "running"
        backend.gate.set()
        stepper.join(10)

        after = json.loads(request(server, "GET", "/api/status")[2])
        assert (after["phase"], after["step_count"], after["frames_generated"]) == ("ready", 1, 5)
        assert after["action"] == [round(float(x), 4) for x in actions[-1]]
        assert after["state"] is not None and len(after["state"]) == 16 and after["has_preview"]

        assert post_json(server, "/close", {"client_id": cid}, conn)[0] == 200
        assert json.loads(request(server, "GET", "/api/status")[2])["phase"] == "idle"
        # a new session starts counting afresh, as GE-Sim's does
        start_episode(server, conn)
        fresh = json.loads(request(server, "GET", "/api/status")[2])
        assert (fresh["phase"], fresh["step_count"], fresh["has_preview"]) == ("ready", 0, False)
        conn.close()


def test_preview_is_the_latest_head_frame_as_jpeg():
    with serving() as server:
        status, _, body = request(server, "GET", "/api/preview.jpg")
        assert status == 404 and "run a /step first" in json.loads(body)["error"]

        conn = http.client.HTTPConnection("127.0.0.1", server.server_address[1], timeout=10)
        cid, _ = start_episode(server, conn)
        result = step(server, conn, cid, np.full((4, 16), 0.3, np.float32))
        status, headers, body = request(server, "GET", "/api/preview.jpg?t=1")  # the dashboard's query
        conn.close()
    assert status == 200 and headers["Content-Type"] == "image/jpeg" and headers["Cache-Control"] == "no-store"
    rgb = cv2.cvtColor(cv2.imdecode(np.frombuffer(body, np.uint8), cv2.IMREAD_COLOR), cv2.COLOR_BGR2RGB)
    assert rgb.shape == (H, W, 3)  # one view, not the three tiled
    last = result.frames[-1]  # (3, V, H, W); view 0 is the head

    def error(view):
        return float(np.abs(rgb / 255.0 - last[:, view].transpose(1, 2, 0)).mean())

    assert error(0) < 0.03 and error(0) < min(error(1), error(2)) / 3


# ----------------------------------------------------------------------------- 6: GE-Sim's units


class RecordingKinematic(KinematicWorldModel):
    """The kinematic baseline, keeping the actions it was handed and the state it returned."""

    def __init__(self, command_units="m", state_units="m"):
        super().__init__()
        self.gripper_command_units, self.gripper_state_units = command_units, state_units
        self.received, self.returned = [], []

    def step(self, actions):
        self.received.append(np.array(actions))
        result = super().step(actions)
        self.returned.append(np.array(result.state))
        return result


def gesim_chunk(grippers=(0.0, 0.5, 1.0, 0.25)):
    """Wire actions in GE-Sim's units: arm joints in rad, grippers [L7, L_grip, R7, R_grip] normalised."""
    actions = np.tile(np.linspace(-0.3, 0.3, 16, dtype=np.float32), (len(grippers), 1))
    actions[:, 7], actions[:, 15] = grippers, grippers[::-1]
    return actions


def one_step(backend, actions):
    """One episode of one /step on serve-wm over ``backend``: the decoded step response."""
    with serving(backend) as server:
        conn = http.client.HTTPConnection("127.0.0.1", server.server_address[1], timeout=10)
        cid, _ = start_episode(server, conn)
        result = step(server, conn, cid, actions)
        conn.close()
    return result


def test_gripper_commands_reach_the_backend_in_its_units_and_state_returns_in_mm():
    """GE-Sim's clients send normalised grippers and read mm back: a metre backend gets the contract's
    openings (limits 0..0.08 m) and its metre state leaves as mm; the arm joints pass unchanged."""
    backend = RecordingKinematic("m", "m")
    sent = gesim_chunk()
    result = one_step(backend, sent)
    received, returned = backend.received[0], backend.returned[0]
    np.testing.assert_allclose(received[:, [7, 15]], 0.08 * sent[:, [7, 15]], atol=1e-6)
    arms = [d for d in range(16) if d not in (7, 15)]
    np.testing.assert_array_equal(received[:, arms], sent[:, arms])
    assert 0.02 < returned[-1, 7] < 0.08  # the baseline's state: metres, lagging the commands
    np.testing.assert_allclose(result.state[:, [7, 15]], 1000.0 * returned[:, [7, 15]], rtol=1e-5)
    np.testing.assert_array_equal(result.state[:, arms], returned[:, arms])


@pytest.mark.parametrize("units, scale_in, scale_out", [
    (("normalised", "mm"), 1.0, 1.0),  # GE-Sim's own units: nothing to convert
    (("mm", "normalised"), 80.0, 80.0),  # commands 0..80 mm; a normalised state is 80 mm at 1
])
def test_backends_in_other_units_are_converted_too(units, scale_in, scale_out):
    backend = RecordingKinematic(*units)
    sent = gesim_chunk()
    result = one_step(backend, sent)
    np.testing.assert_allclose(backend.received[0][:, [7, 15]], scale_in * sent[:, [7, 15]], rtol=1e-5)
    np.testing.assert_allclose(result.state[:, [7, 15]], scale_out * backend.returned[0][:, [7, 15]], rtol=1e-5)


def test_camera_params_and_trajectory_bands_are_accepted_as_gesims_server_does():
    """GE-Sim's clients send camera params once and a band before each step; a backend that needs no
    band takes them (extrinsic may be omitted) and steps as before."""
    with serving() as server:
        conn = http.client.HTTPConnection("127.0.0.1", server.server_address[1], timeout=10)
        cid, first = start_episode(server, conn)
        intrinsic = np.tile(np.array([[50.0, 0, W / 2], [0, 50.0, H / 2], [0, 0, 1]]), (3, 1, 1)).tolist()
        assert post_json(server, "/set_camera_params", {"client_id": cid, "intrinsic": intrinsic}, conn)[0] == 200
        extrinsic = np.tile(np.eye(4), (3, 1, 1)).tolist()
        assert post_json(server, "/set_camera_params",
                         {"client_id": cid, "intrinsic": intrinsic, "extrinsic": extrinsic}, conn)[0] == 200
        band = np.repeat(first[:, :, None], 4, axis=2)  # (3, V, T, H, W)
        c2w = np.tile(np.eye(4, dtype=np.float32), (3, 4, 1, 1))
        status, _, body = request(server, "POST", "/set_episode_traj", wire.encode_episode_traj(band, c2w, cid), conn)
        assert status == 200, body
        assert step(server, conn, cid, gesim_chunk()).frames.shape == (4, 3, 3, H, W)
        conn.close()


# ----------------------------------------------------------------------------- the measured joints at the start


class StateTaking(KinematicWorldModel):
    """The kinematic baseline taking the measured joints at the first frame, kept as given (grippers in m)."""

    takes_episode_state = True

    def __init__(self):
        super().__init__()
        self.states = []

    def set_episode_state(self, state):
        self.states.append(np.array(state))


def start_through_gesim_http(backend, **config):
    """A gesim_http client's episode start on serve-wm over ``backend``, with the episode state
    (GE-Sim layout, grippers 40 and 60 mm, the client's default state units) where it sends one."""
    state = np.linspace(-0.5, 0.5, 16).astype(np.float32)
    state[7], state[15] = 40.0, 60.0
    with serving(backend) as server:
        client = GeSimHttpWorldModel(f"http://127.0.0.1:{server.server_address[1]}", image_size=(H, W), **config)
        client.reset()
        client.set_episode_data(np.full((3, 3, H, W), 0.5, np.float32))
        if client.takes_episode_state:
            client.set_episode_state(state)
        client.close()
    return state


def test_gesim_http_sends_the_episode_state_only_when_configured_and_serve_wm_converts_it():
    """Off by default (GE-Sim-V2's server has no /set_episode_state); with episode_state true the
    backend gets the state in its own units (mm on the wire -> metres)."""
    backend = StateTaking()
    start_through_gesim_http(backend)
    assert backend.states == []
    state = start_through_gesim_http(backend, episode_state=True)
    received, = backend.states
    expected = state.copy()
    expected[[7, 15]] /= 1000.0
    np.testing.assert_allclose(received, expected, rtol=1e-6)


def test_an_episode_state_for_a_backend_that_takes_none_is_refused_naming_it():
    with pytest.raises(WorldModelBackendError, match=r"/set_episode_state: HTTP 400 .*backend KinematicWorldModel "
                                                     "takes no episode state"):
        start_through_gesim_http(KinematicWorldModel(), episode_state=True)


# ----------------------------------------------------------------------------- bad input


def test_bad_requests_are_named_with_the_fix():
    with serving() as server:
        status, _, body = request(server, "GET", "/nope")
        assert status == 404 and "/api/status" in json.loads(body)["error"]
        status, reply = raw_exchange(
            server, b"POST /init HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n")
        assert status == 411 and "send the body with a Content-Length header" in reply["error"]
        status, reply = raw_exchange(server, b"POST /init HTTP/1.1\r\nHost: x\r\nContent-Length: ten\r\n\r\n")
        assert status == 400 and "Content-Length header 'ten' is not a byte count" in reply["error"]
        status, reply = raw_exchange(
            server, f"POST /step HTTP/1.1\r\nHost: x\r\nContent-Length: {wire.MAX_BODY_BYTES + 1}\r\n\r\n".encode())
        assert status == 413 and "MAX_BODY_BYTES" in reply["error"]


@pytest.mark.parametrize("args, message", [
    (["--port", "70000"], "--port 70000: not a TCP port; use 1-65535, or 0 for a free one"),
    (["--body-timeout", "0"], "--body-timeout 0: expected a positive number of seconds"),
])
def test_cli_refuses_bad_options_before_loading(capsys, args, message):
    assert main(["--backend", "kinematic", *args]) == 2
    assert message in capsys.readouterr().err
