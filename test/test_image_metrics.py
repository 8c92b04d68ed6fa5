"""PSNR and SSIM against cases that can be checked by hand."""

import math

import numpy as np
import pytest

from gesim_ros.comparator.image_metrics import ImageMetricError, K1, K2, match_resolution, psnr, ssim

C1, C2 = (K1 * 255) ** 2, (K2 * 255) ** 2


def gray(value, size=(32, 48)):
    return np.full((*size, 3), value, np.uint8)


def noise(seed, size=(40, 56)):
    return np.random.default_rng(seed).integers(0, 256, (*size, 3), dtype=np.uint8)


def test_identical_images():
    image = noise(0)
    assert psnr(image, image) == math.inf
    assert ssim(image, image) == pytest.approx(1.0, abs=1e-6)


@pytest.mark.parametrize("a, b, expected_db", [(100, 101, 20 * math.log10(255)),  # MSE 1
                                               (100, 110, 20 * math.log10(25.5)),  # MSE 100
                                               (0, 255, 0.0)])                      # MSE 255^2
def test_psnr_of_a_constant_offset(a, b, expected_db):
    assert psnr(gray(a), gray(b)) == pytest.approx(expected_db, abs=1e-9)


def test_psnr_counts_every_channel():
    a, b = gray(100), gray(100)
    b[..., 2] = 110  # one channel of three off by 10: MSE = 100 / 3
    assert psnr(a, b) == pytest.approx(10 * math.log10(255 ** 2 * 3 / 100), abs=1e-9)


def test_ssim_of_flat_images_is_the_luminance_term():
    # No variance anywhere, so SSIM = (2 mu_a mu_b + C1) / (mu_a^2 + mu_b^2 + C1) exactly.
    expected = (2 * 100 * 110 + C1) / (100 ** 2 + 110 ** 2 + C1)
    assert ssim(gray(100), gray(110)) == pytest.approx(expected, rel=1e-6)
    assert ssim(gray(0), gray(255)) == pytest.approx(C1 / (255 ** 2 + C1), rel=1e-3)


def test_ssim_of_one_window_matches_the_formula():
    # An 11x11 image holds exactly one window position: compute it with explicit Gaussian weights.
    a, b = noise(1, (11, 11)), noise(2, (11, 11))
    g = np.exp(-((np.arange(11) - 5) ** 2) / (2 * 1.5 ** 2))
    w = np.outer(g, g) / np.outer(g, g).sum()
    x, y = (img.astype(float) @ [0.299, 0.587, 0.114] for img in (a, b))
    mx, my = (w * x).sum(), (w * y).sum()
    vx, vy, cov = (w * (x - mx) ** 2).sum(), (w * (y - my) ** 2).sum(), (w * (x - mx) * (y - my)).sum()
    expected = (2 * mx * my + C1) * (2 * cov + C2) / ((mx ** 2 + my ** 2 + C1) * (vx + vy + C2))
    assert ssim(a, b) == pytest.approx(expected, abs=1e-4)


def test_ssim_keeps_structure_under_a_brightness_shift_and_turns_negative_for_the_negative():
    image = noise(3)
    brighter = np.clip(image.astype(int) + 20, 0, 255).astype(np.uint8)
    assert ssim(image, brighter) > 0.9
    assert ssim(image, 255 - image) < 0
    assert ssim(brighter, image) == pytest.approx(ssim(image, brighter))


def test_match_resolution_takes_the_smaller_size():
    big, small = gray(200, (64, 80)), gray(200, (32, 48))
    a, b = match_resolution(big, small)
    assert a.shape == b.shape == (32, 48, 3)
    assert b is small and (a == 200).all()


def test_bad_inputs_say_what_to_pass():
    with pytest.raises(ImageMetricError, match="uint8 RGB array"):
        psnr(gray(1).astype(np.float32), gray(1))
    with pytest.raises(ImageMetricError, match="differ in size.*match_resolution"):
        ssim(gray(1, (32, 48)), gray(1, (32, 40)))
    with pytest.raises(ImageMetricError, match="smaller than the 11x11 SSIM window"):
        ssim(gray(1, (8, 48)), gray(1, (8, 48)))
