"""GE-Sim wire codec: sections, tiled JPEG frames, endpoint bodies in both directions."""

import cv2
import numpy as np
import pytest

from gesim_ros.world_model import gesim_wire as wire
from gesim_ros.world_model.api import StepResult


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    """PSNR in dB of two [0, 1] arrays."""
    mse = float(np.mean((np.asarray(a, np.float64) - np.asarray(b, np.float64)) ** 2))
    return float("inf") if mse == 0 else 10.0 * np.log10(1.0 / mse)


def smooth_frame(views: int = 3, height: int = 384, width: int = 512, phase: float = 0.0) -> np.ndarray:
    """A (3, V, H, W) camera-like image: low-frequency colour gradients, different per view."""
    y, x = np.mgrid[0:height, 0:width].astype(np.float32)
    y, x = y / height, x / width
    channels = [
        [0.5 + 0.3 * np.sin(2.0 * x + 1.3 * y + phase + v + c) + 0.1 * np.cos(3.0 * y - c) for v in range(views)]
        for c in range(3)
    ]
    return np.clip(np.array(channels, dtype=np.float32), 0.0, 1.0)


# Float32 values that JSON text or a lossy path would not carry bit-exactly.
AWKWARD_STATE = np.array(
    [[1 / 3, -0.0, 1e-45, 3.4e38, np.nextafter(np.float32(1), np.float32(2)), -2.5e-39, 0.1, 7.0]] * 2,
    dtype=np.float32,
)


# --------------------------------------------------------------------------- sections


def test_sections_round_trip():
    sections = [b"", b"abc", bytes(range(256)) * 10, b"\x00\x00\x00\x04"]
    body = wire.pack_sections(sections)
    assert body[:4] == b"\x00\x00\x00\x00" and body[4:8] == b"\x00\x00\x00\x03"  # big-endian lengths
    assert wire.unpack_sections(body) == sections
    assert wire.unpack_sections(b"") == []


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"\x00\x00", "cannot hold a 4-byte length prefix"),
        (b"\x00\x00\x00\x05abc", "section 0 declares 5 bytes but only 3 remain"),
        (b"\xff\xff\xff\xffGET / HTTP/1.1", "declares 4294967295 bytes"),
        (wire.pack_sections([b"ok"]) + b"\x00", "1 trailing byte"),
    ],
)
def test_truncated_or_garbage_sections_raise(body, message):
    with pytest.raises(wire.WireFormatError, match=message):
        wire.unpack_sections(body)


def test_every_truncation_of_a_step_response_is_a_wire_error():
    body = wire.encode_step_response(StepResult(smooth_frame(height=8, width=8)[None], AWKWARD_STATE[:1]))
    for cut in range(len(body)):
        with pytest.raises(wire.WireFormatError):
            wire.decode_step_response(body[:cut])


# --------------------------------------------------------------------------- frames


def test_tiled_jpeg_round_trip_psnr_at_gesim_size():
    frame = smooth_frame()
    jpeg = wire.encode_frame_jpeg(frame)
    assert jpeg[:2] == b"\xff\xd8"
    decoded = wire.decode_frame_jpeg(jpeg, frame.shape)
    assert decoded.shape == (3, 3, 384, 512) and decoded.dtype == np.float32
    assert psnr(decoded, frame) >= 40.0
    for view in range(3):  # each view lands in its own tile, not just on average
        assert psnr(decoded[:, view], frame[:, view]) >= 40.0


def test_tiles_keep_view_order_and_rgb_channel_order():
    frame = np.zeros((3, 3, 16, 16), dtype=np.float32)
    for view in range(3):
        frame[view, view] = 1.0  # view 0 red, view 1 green, view 2 blue
    jpeg = wire.encode_frame_jpeg(frame)
    tiled_bgr = cv2.imdecode(np.frombuffer(jpeg, np.uint8), cv2.IMREAD_COLOR)
    assert tiled_bgr.shape == (16, 48, 3)
    assert tiled_bgr[8, 8, 2] > 240 and tiled_bgr[8, 8, :2].max() < 15  # leftmost tile is red
    decoded = wire.decode_frame_jpeg(jpeg, frame.shape)
    for view in range(3):
        means = decoded[:, view].mean(axis=(1, 2))
        assert int(np.argmax(means)) == view and means[view] > 0.9


def test_frame_decode_errors():
    jpeg = wire.encode_frame_jpeg(smooth_frame(height=8, width=8))
    with pytest.raises(wire.WireFormatError, match="expected 16x8"):
        wire.decode_frame_jpeg(jpeg, (3, 2, 8, 8))
    with pytest.raises(wire.WireFormatError, match="not a decodable JPEG"):
        wire.decode_frame_jpeg(b"\xff\xd8garbage", (3, 3, 8, 8))
    with pytest.raises(wire.WireFormatError, match=r"expected \(3, V, H, W\)"):
        wire.encode_frame_jpeg(np.zeros((3, 8, 8)))


# --------------------------------------------------------------------------- endpoint bodies


def test_step_request_round_trip_is_bit_exact():
    actions = np.random.default_rng(0).standard_normal((25, 16)).astype(np.float32)
    client_id, decoded = wire.decode_step_request(wire.encode_step_request(actions, "cid"))
    assert client_id == "cid" and decoded.tobytes() == actions.tobytes()


def test_step_response_round_trip():
    frames = np.stack([smooth_frame(height=48, width=64, phase=t) for t in range(2)])
    result = wire.decode_step_response(wire.encode_step_response(StepResult(frames, AWKWARD_STATE)))
    assert result.frames.shape == frames.shape and psnr(result.frames, frames) >= 40.0
    assert result.state.dtype == np.float32 and result.state.tobytes() == AWKWARD_STATE.tobytes()
    no_state = wire.decode_step_response(wire.encode_step_response(StepResult(frames, None)))
    assert no_state.state is None and no_state.frames.shape == frames.shape


def test_step_response_meta_must_match_sections():
    frame_jpeg = wire.encode_frame_jpeg(smooth_frame(height=8, width=8))
    meta = {"frame_shape": [2, 3, 3, 8, 8], "state_shape": None}
    with pytest.raises(wire.WireFormatError, match="does not fit 1 frame JPEG"):
        wire.decode_step_response(wire.pack_sections([wire.encode_json(meta), frame_jpeg, b""]))
    meta = {"frame_shape": [1, 3, 3, 8, 8], "state_shape": [1, 16]}
    with pytest.raises(wire.WireFormatError, match="state: 12 bytes; expected 64"):
        wire.decode_step_response(wire.pack_sections([wire.encode_json(meta), frame_jpeg, b"\x00" * 12]))
    meta = {"frame_shape": [1, 3, 3, 8, 8], "state_shape": None}
    with pytest.raises(wire.WireFormatError, match="state_shape is null"):
        wire.decode_step_response(wire.pack_sections([wire.encode_json(meta), frame_jpeg, b"\x00" * 4]))
    with pytest.raises(wire.WireFormatError, match="not valid JSON"):
        wire.decode_step_response(wire.pack_sections([b"{not json", frame_jpeg, b""]))


def test_episode_data_round_trip():
    frame = smooth_frame(height=48, width=64)
    client_id, decoded = wire.decode_episode_data(wire.encode_episode_data(frame, "cid"))
    assert client_id == "cid" and psnr(decoded, frame) >= 40.0
    body = wire.pack_sections([wire.encode_frame_jpeg(frame), wire.encode_json({"frame_shape": [3, 3, 48, 64]})])
    with pytest.raises(wire.WireFormatError, match="'client_id' is None"):
        wire.decode_episode_data(body)


def test_episode_traj_round_trip():
    traj = np.stack([smooth_frame(height=48, width=64, phase=t) for t in range(3)], axis=2)  # (3, V, T, H, W)
    c2w = np.random.default_rng(1).standard_normal((3, 3, 4, 4)).astype(np.float32)
    client_id, traj_back, c2w_back = wire.decode_episode_traj(wire.encode_episode_traj(traj, c2w, "cid"))
    assert client_id == "cid" and traj_back.shape == traj.shape
    assert psnr(traj_back, traj) >= 40.0 and c2w_back.tobytes() == c2w.tobytes()


def test_camera_params_round_trip_is_exact():
    intrinsic = np.random.default_rng(2).uniform(100, 600, (3, 3, 3)).astype(np.float32)
    client_id, k, e = wire.decode_camera_params(wire.encode_camera_params(intrinsic, None, "cid"))
    assert client_id == "cid" and e is None and k.tobytes() == intrinsic.tobytes()
    with pytest.raises(wire.WireFormatError, match="intrinsic: not a numeric"):
        wire.decode_camera_params(wire.encode_json({"client_id": "c", "intrinsic": [[1, 2], [3]]}))
