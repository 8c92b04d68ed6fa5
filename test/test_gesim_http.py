"""gesim_http client against world_model_server over real loopback HTTP. Nothing is timed here: what
the server saw tells whether the client gave up, retried or replayed (bench/bench_gesim_http.py times it)."""

import contextlib
import http.client
import json
import socket
import threading

import numpy as np
import pytest
from test_gesim_wire import AWKWARD_STATE, psnr, smooth_frame
from test_world_model_session import make_session, observation, ramp, submit, until

from gesim_ros.world_model import gesim_wire as wire
from gesim_ros.world_model.backends.gesim_http import GeSimHttpWorldModel
from gesim_ros.world_model.api import StepResult, WorldModel, WorldModelBackendError, WorldModelInputError, WorldModelSessionLostError
from gesim_ros.world_model.layouts import compress_chunk, split_chunk
from gesim_ros.world_model.server import main, make_server

H, W = 48, 64


class RecordingWorldModel(WorldModel):
    """Test backend: records every call, returns smooth frames and bit-awkward float32 state. A step
    waits until ``step_gate`` is set (a model still at work)."""

    image_size = (H, W)
    # GE-Sim's own units, so serve-wm passes the grippers through and these tests see the transport
    # alone, bit for bit (its unit conversion is test_serve_wm's)
    gripper_command_units = "normalised"
    gripper_state_units = "mm"

    def __init__(self, step_error: Exception | None = None) -> None:
        self.step_gate = threading.Event()
        self.step_gate.set()
        self.step_error = step_error
        self.calls: list[str] = []
        self.steps: list[np.ndarray] = []
        self.returned: list[StepResult] = []
        self.first_frame = self.intrinsic = self.task = None

    def reset(self):
        self.calls.append("reset")

    def set_camera_params(self, intrinsic, extrinsic=None):
        self.calls.append("set_camera_params")
        self.intrinsic = intrinsic

    def set_episode_data(self, first_frame):
        self.calls.append("set_episode_data")
        self.first_frame = first_frame

    def set_episode_traj(self, traj, c2w):
        self.calls.append("set_episode_traj")

    def set_task(self, task):
        self.calls.append("set_task")
        self.task = task

    def step(self, actions):
        self.calls.append("step")
        self.steps.append(actions.copy())
        self.step_gate.wait(30)   # hang guard only
        if self.step_error is not None:
            raise self.step_error
        frames = np.stack([smooth_frame(height=H, width=W, phase=0.1 * t) for t in range(len(actions))])
        state = np.roll(np.resize(AWKWARD_STATE.ravel(), (len(actions), 16)), len(self.steps))
        self.returned.append(StepResult(frames, state))
        return self.returned[-1]


@contextlib.contextmanager
def running_server(backend, port=0):
    server = make_server(backend, "127.0.0.1", port)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def client_for(server, **config):
    config = {"timeout_s": 5.0, "connect_timeout_s": 1.0, "connect_retries": 0, "image_size": [H, W], **config}
    return GeSimHttpWorldModel.from_config({"url": f"http://127.0.0.1:{server.server_address[1]}", **config})


INTRINSIC = np.tile(np.array([[300, 0, 32], [0, 300, 24], [0, 0, 1]], dtype=np.float32), (3, 1, 1))
FIRST_FRAME = smooth_frame(height=H, width=W)


def start_episode(client):
    client.reset()
    client.set_camera_params(INTRINSIC)
    client.set_episode_data(FIRST_FRAME)
    client.set_task("put the cup on the plate")


def raw_post(server, path, body: bytes):
    conn = http.client.HTTPConnection("127.0.0.1", server.server_address[1], timeout=5)
    try:
        conn.request("POST", path, body)
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read())
    finally:
        conn.close()


def actions(steps, seed=0):
    return np.random.default_rng(seed).uniform(-1, 1, (steps, 16)).astype(np.float32)


def test_episode_round_trip_frames_and_state():
    backend = RecordingWorldModel()
    with running_server(backend) as server, client_for(server) as client:
        start_episode(client)
        traj = np.stack([smooth_frame(height=H, width=W, phase=t) for t in range(4)], axis=2)
        client.set_episode_traj(traj, np.tile(np.eye(4, dtype=np.float32), (3, 4, 1, 1)))
        result = client.step(actions(25))
    # /init resets, then the episode; leaving the block closes the session (another reset).
    assert backend.calls == [
        "reset", "reset", "set_camera_params", "set_episode_data", "set_task", "set_episode_traj", "step", "reset"
    ]
    assert backend.task == "put the cup on the plate" and backend.intrinsic.tobytes() == INTRINSIC.tobytes()
    assert psnr(backend.first_frame, FIRST_FRAME) >= 40.0
    assert backend.steps[0].tobytes() == actions(25).tobytes()
    sent = backend.returned[0]
    assert result.frames.shape == (25, 3, 3, H, W)
    assert psnr(result.frames, sent.frames) >= 40.0
    assert result.state.dtype == np.float32 and result.state.tobytes() == sent.state.tobytes()


def test_long_chunk_is_compressed_into_one_model_chunk():
    backend = RecordingWorldModel()
    policy_chunk = actions(50)
    with running_server(backend) as server, client_for(server, chunk_mode="compress") as client:
        start_episode(client)
        result = client.step(policy_chunk)
    assert len(backend.steps) == 1
    assert backend.steps[0].tobytes() == compress_chunk(policy_chunk, 25).tobytes()
    assert result.frames.shape[0] == 25 and result.state.shape == (25, 16)


def test_long_chunk_is_split_into_sub_chunks():
    backend = RecordingWorldModel()
    policy_chunk = actions(60)
    with running_server(backend) as server, client_for(server, chunk_mode="split") as client:
        start_episode(client)
        result = client.step(policy_chunk)
    expected = split_chunk(policy_chunk, 25)
    assert [s.tobytes() for s in backend.steps] == [e.tobytes() for e in expected]
    assert result.frames.shape[0] == 60
    assert result.state.tobytes() == np.concatenate([r.state for r in backend.returned]).tobytes()


def test_bad_input_is_a_400_with_the_servers_reason():
    backend = RecordingWorldModel()
    with running_server(backend) as server, client_for(server, image_size=None) as client:
        client.reset()
        with pytest.raises(WorldModelBackendError) as info:
            client.set_episode_data(smooth_frame(height=40, width=W))
        assert info.value.status == 400 and info.value.endpoint == "/set_episode_data"
        assert "first_frame: wrong shape (3, 3, 40, 64); expected (3, V=3, H=48, W=64)" in info.value.server_error
        status, reply = raw_post(server, "/step", b"\x00\x00\x00\x09garbage")
        assert status == 400 and "declares 9 bytes" in reply["error"]
    assert "set_episode_data" not in backend.calls


def test_backend_exception_is_a_500():
    backend = RecordingWorldModel(step_error=RuntimeError("CUDA out of memory (simulated)"))
    with running_server(backend) as server, client_for(server) as client:
        start_episode(client)
        with pytest.raises(WorldModelBackendError) as info:
            client.step(actions(5))
    assert type(info.value) is WorldModelBackendError and info.value.status == 500
    assert "RuntimeError: CUDA out of memory (simulated)" in info.value.server_error


def test_unknown_client_is_a_403_and_the_client_reopens_its_session():
    backend = RecordingWorldModel()
    with running_server(backend) as server, client_for(server) as first, client_for(server) as second:
        status, reply = raw_post(server, "/set_task", wire.encode_json({"client_id": "nope", "task": "x"}))
        assert status == 403 and "unknown client_id 'nope'" in reply["error"]
        start_episode(first)
        second.reset()  # /init by another client evicts the first session
        with pytest.raises(WorldModelSessionLostError) as info:
            first.step(actions(3))
        assert info.value.status == 403 and "did not run" in str(info.value)
        assert backend.calls[-3:] == ["set_camera_params", "set_episode_data", "set_task"]  # replayed
        assert first.step(actions(3)).frames.shape[0] == 3


def test_a_step_timeout_gives_up_before_the_server_answers_and_the_next_step_starts_a_new_session():
    backend = RecordingWorldModel()
    backend.step_gate.clear()   # the model is still working on the step when the client's timeout passes
    with running_server(backend) as server, client_for(server, timeout_s=0.3) as client:
        start_episode(client)
        with pytest.raises(WorldModelBackendError, match=r"/step: no response .* within timeout_s=0.3; the "
                                                         "episode restarts from its first frame on the next call"):
            client.step(actions(2))
        assert backend.calls[-1] == "step" and backend.returned == []   # the server had not answered yet
        backend.step_gate.set()
        assert until(lambda: backend.returned), "the server never finished the abandoned step"
        assert client.step(actions(3, seed=4)).frames.shape[0] == 3
    # A fresh session from the episode's first frame, then the new step; the abandoned one is not re-sent.
    assert backend.calls[-7:-1] == ["step", "reset", "set_camera_params", "set_episode_data", "set_task", "step"]
    assert len(backend.steps) == 2 and backend.steps[1].tobytes() == actions(3, seed=4).tobytes()


def test_a_step_timeout_aborts_the_world_model_episode_and_names_the_timeout():
    backend = RecordingWorldModel()
    with running_server(backend) as server, client_for(server, timeout_s=0.3) as client:
        session = make_session(client, model_image_size=(H, W))
        try:
            assert session.sync(observation())[0]
            backend.step_gate.clear()
            submit(session, ramp(3))
            assert until(lambda: not session.status().episode_active), session.status()
            (report,) = session.tick().reports
            assert backend.calls[-1] == "step" and backend.returned == []   # aborted before the server answered
        finally:
            backend.step_gate.set()
            session.close()
    assert (report.event, report.episode.episode_id, report.outcome) == ("aborted", "ep1", "unknown")
    assert "backend 'test' failed at step 0 of episode 'ep1'" in report.reason
    assert "/step: no response from http://127.0.0.1:" in report.reason and "within timeout_s=0.3" in report.reason


def test_server_restart_mid_episode():
    first_backend, second_backend = RecordingWorldModel(), RecordingWorldModel()
    with running_server(first_backend) as server:
        port = server.server_address[1]
        client = client_for(server, connect_retries=1, retry_backoff_s=0.05)
        start_episode(client)
        client.step(actions(4))
    with pytest.raises(WorldModelBackendError, match="cannot connect .* after 2 attempt"):
        client.step(actions(4))  # server down
    with running_server(second_backend, port=port):
        with pytest.raises(WorldModelSessionLostError, match="HTTP 403"):
            client.step(actions(4))
        # The new server saw a new session and the episode's setup replayed, and not the step that failed.
        assert second_backend.calls == ["reset", "set_camera_params", "set_episode_data", "set_task"]
        assert second_backend.task == "put the cup on the plate"
        assert psnr(second_backend.first_frame, FIRST_FRAME) >= 40.0
        assert client.step(actions(4, seed=9)).frames.shape[0] == 4
        assert second_backend.steps[-1].tobytes() == actions(4, seed=9).tobytes()
        client.close()


def test_unreachable_server_is_a_clear_error():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed again: nothing listens here
    client = GeSimHttpWorldModel(f"http://127.0.0.1:{port}", connect_retries=2, retry_backoff_s=0.05)
    with pytest.raises(WorldModelBackendError, match=rf"/init: cannot connect to http://127.0.0.1:{port} after 3 "
                                                     r"attempt\(s\): \[Errno 111\] Connection refused"):
        client.reset()


def test_dropped_connection_is_a_clear_error():
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(5)

    def accept_and_drop():
        with contextlib.suppress(OSError), listener:
            conn, _ = listener.accept()
            conn.recv(65536)
            conn.close()

    thread = threading.Thread(target=accept_and_drop, daemon=True)
    thread.start()
    client = GeSimHttpWorldModel(f"http://127.0.0.1:{listener.getsockname()[1]}", connect_retries=0, timeout_s=5)
    with pytest.raises(WorldModelBackendError, match="/init: connection to .* dropped"):
        client.reset()
    thread.join(timeout=5)


def test_healthz_and_unknown_paths():
    with running_server(RecordingWorldModel()) as server:
        conn = http.client.HTTPConnection("127.0.0.1", server.server_address[1], timeout=5)
        conn.request("GET", "/healthz")
        resp = conn.getresponse()
        assert resp.status == 200 and json.loads(resp.read()) == {"status": "ok"}
        conn.close()
        status, reply = raw_post(server, "/nope", b"{}")
        assert status == 404 and "/step" in reply["error"]


def test_cli_reports_bad_backend_and_config(capsys):
    assert main(["--backend", "no_such_model", "--port", "0"]) == 2
    assert "unknown world model 'no_such_model'" in capsys.readouterr().err
    assert main(["--backend", "kinematic", "--config", "{oops"]) == 2
    assert "--config: not valid JSON" in capsys.readouterr().err


def test_gripper_units_default_to_gesim_v2s_and_a_bad_value_names_the_key():
    client = GeSimHttpWorldModel.from_config({"url": "http://127.0.0.1:9"})
    assert client.needs_trajectory_band
    assert (client.gripper_command_units, client.gripper_state_units) == ("normalised", "mm")
    own_server = GeSimHttpWorldModel.from_config({"url": "http://127.0.0.1:9", "gripper_command_units": "m",
                                                  "gripper_state_units": "m"})
    assert (own_server.gripper_command_units, own_server.gripper_state_units) == ("m", "m")
    with pytest.raises(WorldModelInputError, match=r"gripper_command_units: 'metre' is not one of \['m', 'mm', "
                                                   r"'normalised'\] \(GE-Sim-V2 takes 'normalised'"):
        GeSimHttpWorldModel.from_config({"url": "http://127.0.0.1:9", "gripper_command_units": "metre"})
