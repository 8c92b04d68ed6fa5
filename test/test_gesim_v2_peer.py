"""The world-model session (the code the world_model node runs) driving AgiBot's OWN GE-Sim-V2 server
(../shared/gesim-v2, their example model) through the gesim_http backend: several chunks of a real twin
episode, each with its trajectory band, the grippers in GE-Sim's units. Their example model refuses to
step without a band (HTTP 500) and echoes the actions as state."""

import json

import numpy as np
import pytest
from test_world_model_session import FakeWall, until

from gesim_ros.contract.contract import load_contract
from gesim_ros.tools.gesim_v2_peer import GesimV2Unavailable, get_json, prepare
from gesim_ros.twin.physics import G2Twin
from gesim_ros.twin.records import record_twin_episode
from gesim_ros.world_model import gesim_wire as wire
from gesim_ros.world_model.api import GESIM_IMAGE_SIZE
from gesim_ros.world_model.initial_observation import observation_from_record
from gesim_ros.world_model.session import SessionSettings, WorldModelSession, load_backend
from shared_peers import peer_missing

pytestmark = pytest.mark.slow

CONTRACT = load_contract()
CHUNK, CHUNKS = 30, 4  # policy chunks of the twin episode; each is compressed to one 25-step model chunk


@pytest.fixture(scope="module")
def gesim_v2_server(tmp_path_factory):
    try:
        peer = prepare()
    except GesimV2Unavailable as exc:
        peer_missing(str(exc))
    with peer.server(tmp_path_factory.mktemp("gesim_v2")) as server:
        yield server.url
        assert server.running, f"their server exited:\n{server.log()[-3000:]}"


@pytest.fixture(scope="module")
def episode():
    twin = G2Twin(camera_width=64, camera_height=48)
    try:
        return record_twin_episode(twin, "pick_place", 0, 0.0)
    finally:
        twin.close()


def test_a_twin_episode_runs_through_gesim_v2s_own_server(gesim_v2_server, episode):
    """No step fails; their server stepped each chunk after its band; on the wire and on their side the
    band is (3, V, T, H, W) and the gripper commands are normalised; their state (mm) comes back as m."""
    backend = load_backend("gesim_http", json.dumps({"timeout_s": 60.0}), gesim_v2_server)
    rates = {"joint_states": 30.0, "head_color": 30.0, "hand_left_color": 30.0, "hand_right_color": 30.0}
    wall = FakeWall()
    session = WorldModelSession(backend, CONTRACT, SessionSettings(mode="world_model", stream_rates=rates),
                                lambda key, rgb: rgb, backend_name="gesim_http", wall=wall)
    sent, post = [], backend._post

    def keep_body(endpoint, body):  # the client's real requests, kept to read what went on the wire
        sent.append((endpoint, body))
        return post(endpoint, body)

    backend._post = keep_body
    server_status = []
    session.start()
    try:
        ok, message = session.sync(observation_from_record(episode, CONTRACT, "ep-peer", 0))
        assert ok, message
        names = list(episode.joint_names)
        for chunk in range(CHUNKS):
            targets = episode.actions[chunk * CHUNK:(chunk + 1) * CHUNK]
            session.submit("ep-peer", names, targets.ravel(), CHUNK, episode.control_period_s)
            assert until(lambda: session.status().predicted_frames >= 25 * (chunk + 1) or session.status().last_error)
            assert session.status().last_error == "", session.status().last_error
            server_status.append(get_json(gesim_v2_server, "/api/status"))
        wall.t += CHUNKS * CHUNK * episode.control_period_s + 1.0
        published = [s for key, _, s in session.tick().publications if key == "joint_states"]
        status = session.status()
    finally:
        session.close()
    assert status.episode_active and status.predicted_frames == 25 * CHUNKS
    # Their model stepped every chunk (it refuses a step without a band), each right after its own band.
    assert [row["step_count"] for row in server_status] == list(range(1, CHUNKS + 1))
    steps = [e for e, _ in sent if e in ("/set_episode_traj", "/step")]
    assert steps == ["/set_episode_traj", "/step"] * CHUNKS
    assert [e for e, _ in sent].count("/set_camera_params") == 1
    height, width = GESIM_IMAGE_SIZE
    for body in (b for e, b in sent if e == "/set_episode_traj"):
        _, traj, c2w = wire.decode_episode_traj(body)
        assert traj.shape == (3, 3, 25, height, width) and c2w.shape == (3, 25, 4, 4)
        head = traj[:, 0]
        assert (np.abs(head - 50 / 255).max(axis=0) > 0.2).any(axis=(1, 2)).all()  # both tools drawn in each frame
    _, intrinsic, extrinsic = wire.decode_camera_params(next(b for e, b in sent if e == "/set_camera_params"))
    assert intrinsic.shape == (3, 3, 3) and extrinsic.shape == (3, 4, 4)
    # Grippers: normalised commands on the wire and on their side ...
    grip_cols = [names.index(CONTRACT.joint_groups[g][0]) for g in ("left_gripper", "right_gripper")]
    commands = np.concatenate([wire.decode_step_request(b)[1] for e, b in sent if e == "/step"])
    assert commands[:, [7, 15]].min() >= 0.0 and commands[:, [7, 15]].max() <= 1.0
    assert commands[:, [7, 15]].max() > 0.5  # open grippers (0.08 m) are near 1, not 0.08
    for chunk, row in enumerate(server_status):
        last = episode.actions[(chunk + 1) * CHUNK - 1, grip_cols]
        assert np.array(row["action"])[[7, 15]] == pytest.approx(last / 0.08, abs=1e-3)
    # ... and their state is read in mm: their example model echoes the commands as its state, so the
    # published opening is the normalised command / 1000 m.
    joints = published[-1].joints[[CONTRACT.joint_names.index(CONTRACT.joint_groups[g][0])
                                   for g in ("left_gripper", "right_gripper")]]
    assert joints == pytest.approx(np.array(server_status[-1]["state"])[[7, 15]] / 1000.0, abs=1e-6)
