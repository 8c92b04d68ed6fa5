import math

import numpy as np
import pytest

from gesim_ros.contract import image_codec as ic


def _psnr(a, b):
    mse = np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2)
    return math.inf if mse == 0 else 10 * math.log10(255.0 ** 2 / mse)


def _sample(encoding, h=24, w=32):
    rng = np.random.default_rng(0)
    dtype, channels = ic.ENCODINGS[encoding]
    shape = (h, w, channels) if channels > 1 else (h, w)
    if dtype == np.float32:
        return rng.uniform(0.2, 4.0, shape).astype(np.float32)
    return rng.integers(0, np.iinfo(dtype).max, shape, dtype=dtype, endpoint=True)


@pytest.mark.parametrize("encoding", ["rgb8", "bgr8", "rgba8", "mono8", "16UC1", "32FC1"])
def test_raw_round_trip_is_exact(encoding):
    image = _sample(encoding)
    msg = ic.to_image_msg(image, encoding)
    assert (msg.encoding, msg.height, msg.width) == (encoding, 24, 32)
    assert msg.step == 32 * image.itemsize * (image.shape[2] if image.ndim == 3 else 1)
    np.testing.assert_array_equal(ic.from_image_msg(msg), image)


def test_receive_views_the_message_buffer_without_copying():
    msg = ic.to_image_msg(_sample("mono8"), "mono8")
    view = ic.from_image_msg(msg)
    msg.data[0] = (int(msg.data[0]) + 1) % 256
    assert view[0, 0] == msg.data[0]


def test_padded_rows_are_handled():
    from sensor_msgs.msg import Image

    image = _sample("rgb8", 4, 5)
    padded = np.zeros((4, 5 * 3 + 1), np.uint8)
    padded[:, :15] = image.reshape(4, 15)
    msg = Image(height=4, width=5, encoding="rgb8", step=16, data=padded.tobytes())
    np.testing.assert_array_equal(ic.from_image_msg(msg), image)


def test_big_endian_depth_is_read_correctly():
    from sensor_msgs.msg import Image

    depth = np.array([[1, 258], [1000, 65535]], dtype=np.uint16)
    msg = Image(height=2, width=2, encoding="16UC1", is_bigendian=1, step=4, data=depth.astype(">u2").tobytes())
    np.testing.assert_array_equal(ic.from_image_msg(msg), depth)


def test_jpeg_keeps_rgb_order_and_quality():
    y, x = np.mgrid[0:64, 0:96]
    image = np.stack([x * 2, y * 3, np.full_like(x, 200)], -1).astype(np.uint8)
    msg = ic.to_compressed_msg(image, "rgb8", "jpeg", quality=95)
    assert msg.format == "rgb8; jpeg compressed bgr8"
    decoded = ic.from_compressed_msg(msg)
    assert decoded.shape == image.shape and _psnr(decoded, image) > 35
    assert abs(float(decoded[..., 2].mean()) - 200) < 2  # blue stays blue: no channel swap


@pytest.mark.parametrize("encoding", ["16UC1", "mono8", "rgb8"])
def test_png_is_lossless(encoding):
    image = _sample(encoding)
    np.testing.assert_array_equal(ic.from_compressed_msg(ic.to_compressed_msg(image, encoding, "png")), image)


def test_bad_inputs_are_named():
    with pytest.raises(ic.ImageCodecError, match="rgb8 image must be"):
        ic.to_image_msg(np.zeros((4, 4), np.uint8), "rgb8")
    with pytest.raises(ic.ImageCodecError, match="not supported"):
        ic.to_image_msg(np.zeros((4, 4), np.uint8), "yuv422")
    with pytest.raises(ic.ImageCodecError, match="JPEG holds"):
        ic.encode_compressed(np.zeros((4, 4), np.uint16), "16UC1", "jpeg")
    with pytest.raises(ic.ImageCodecError, match="could not be decoded"):
        ic.decode_compressed(b"not an image", "rgb8")
    from sensor_msgs.msg import Image
    with pytest.raises(ic.ImageCodecError, match="needs step"):
        ic.from_image_msg(Image(height=4, width=4, encoding="mono8", step=4, data=b"\0" * 3))


def _rgb_sample():
    return _sample("rgb8")


@pytest.mark.parametrize("encoding, as_encoding", [
    ("rgb8", lambda rgb: rgb),
    ("bgr8", lambda rgb: np.ascontiguousarray(rgb[..., ::-1])),
    ("rgba8", lambda rgb: np.dstack([rgb, np.full(rgb.shape[:2], 7, np.uint8)])),
])
def test_colour_images_of_every_colour_encoding_become_the_same_rgb(encoding, as_encoding):
    rgb = _rgb_sample()
    np.testing.assert_array_equal(ic.rgb_from_camera_msg(ic.to_image_msg(as_encoding(rgb), encoding)), rgb)


def test_mono8_becomes_grey_in_all_three_channels():
    grey = _sample("mono8")
    rgb = ic.rgb_from_camera_msg(ic.to_image_msg(grey, "mono8"))
    assert rgb.shape == (24, 32, 3) and rgb.dtype == np.uint8
    for channel in range(3):
        np.testing.assert_array_equal(rgb[..., channel], grey)


@pytest.mark.parametrize("stored", ["rgb8", "mono8", "rgba8"])
def test_png_frames_become_rgb_losslessly(stored):
    image = _sample(stored)
    rgb = ic.rgb_from_camera_msg(ic.to_compressed_msg(image, stored, "png"))
    expected = {"rgb8": image, "mono8": np.dstack([image] * 3), "rgba8": image[..., :3]}[stored]
    np.testing.assert_array_equal(rgb, expected)


def test_jpeg_frames_become_rgb():
    y, x = np.mgrid[0:64, 0:96]
    image = np.stack([x * 2, y * 3, np.full_like(x, 200)], -1).astype(np.uint8)
    rgb = ic.rgb_from_camera_msg(ic.to_compressed_msg(image, "rgb8", "jpeg", quality=95))
    assert rgb.shape == image.shape and _psnr(rgb, image) > 35


@pytest.mark.parametrize("encoding", ["16UC1", "32FC1"])
def test_depth_images_are_refused_naming_the_source(encoding):
    msg = ic.to_image_msg(_sample(encoding), encoding)
    with pytest.raises(ic.ImageCodecError, match=f"^/cam: Image encoding '{encoding}' is depth, which has no RGB; "
                                                 "a colour camera publishes rgb8, bgr8, rgba8, mono8 or a jpeg/png"):
        ic.rgb_from_camera_msg(msg, "/cam")


def test_depth_png_is_refused_not_cut_to_8_bits():
    msg = ic.to_compressed_msg(_sample("16UC1"), "16UC1", "png")
    with pytest.raises(ic.ImageCodecError, match="holds uint16 pixels, not the uint8 of rgb8"):
        ic.rgb_from_camera_msg(msg)


def test_an_unknown_encoding_is_refused():
    from sensor_msgs.msg import Image

    with pytest.raises(ic.ImageCodecError, match="'yuv422' is not a colour encoding"):
        ic.rgb_from_camera_msg(Image(height=1, width=2, encoding="yuv422", step=4, data=b"\0" * 4))


def test_colour_encodings_are_the_contracts_minus_depth():
    from gesim_ros.contract.contract import IMAGE_ENCODINGS

    assert set(ic.COLOUR_ENCODINGS) == set(IMAGE_ENCODINGS) - {"16UC1", "32FC1"}
