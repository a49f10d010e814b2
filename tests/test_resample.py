"""uform_resample (c/src/media/decode/resample.c) against the float64 reference and against the
signal-processing properties docs/media.md promises.

The resampler is internal (the audio decoders and audio_encode_samples call it), so these
tests reach it through tests/c/media_probe.c.

Tolerances. The C resampler computes the same kernel values in float64 and accumulates in
float64, then rounds each output to float32: it differs from the reference by float32
rounding of outputs of magnitude <= ~1.2 (2^-24 relative, about 7e-8), so 2e-7 absolute.
"""
import math

import numpy as np
import pytest

import media_probe
from reference import media

ROUNDING = 2e-7   # float32 rounding of outputs below ~1.2 in magnitude, plus float64 noise


def length(count: int, from_rate: int, to_rate: int) -> int:
    """ceil(count * to / from), in integers."""
    return (count * to_rate + from_rate - 1) // from_rate


@pytest.mark.parametrize("from_rate, to_rate", [
    (8000, 16000), (44100, 16000), (48000, 16000), (16000, 16000), (22050, 48000),
    (44101, 16000),      # coprime rates: 16000 phases, still tabulated
    (1000003, 16000),    # too many phases x taps for the table: the per-sample path
])
def test_matches_reference(from_rate, to_rate):
    rng = np.random.default_rng(from_rate + to_rate)
    count = 20000 if from_rate > 100000 else 3001
    samples = rng.uniform(-1, 1, count).astype(np.float32)
    produced = media_probe.resample(samples, from_rate, to_rate)
    assert len(produced) == length(count, from_rate, to_rate)
    expected = media.resample(samples, from_rate, to_rate)
    np.testing.assert_allclose(produced, expected, rtol=0, atol=ROUNDING)


def test_equal_rates_copy_bit_for_bit():
    samples = np.random.default_rng(1).standard_normal(777).astype(np.float32)
    assert np.array_equal(media_probe.resample(samples, 44100, 44100), samples)


@pytest.mark.parametrize("count", [0, 1, 2, 3])
def test_tiny_inputs(count):
    samples = np.ones(count, dtype=np.float32)
    for from_rate, to_rate in ((48000, 16000), (8000, 16000)):
        produced = media_probe.resample(samples, from_rate, to_rate)
        assert len(produced) == length(count, from_rate, to_rate)
        np.testing.assert_allclose(produced, media.resample(samples, from_rate, to_rate), atol=ROUNDING)


def fitted_amplitude(signal: np.ndarray, rate: int, frequency: float) -> tuple[float, float]:
    """(amplitude of the best-fitting sinusoid at `frequency`, RMS of the residual), over
    the middle half of the signal (away from the zero-padded edges)."""
    n = len(signal)
    middle = slice(n // 4, 3 * n // 4)
    t = np.arange(n)[middle] / rate
    basis = np.stack([np.sin(2 * np.pi * frequency * t), np.cos(2 * np.pi * frequency * t)], axis=1)
    coefficients, *_ = np.linalg.lstsq(basis, signal[middle].astype(np.float64), rcond=None)
    residual = signal[middle] - basis @ coefficients
    return float(np.hypot(*coefficients)), float(np.sqrt(np.mean(residual ** 2)))


@pytest.mark.parametrize("from_rate, to_rate, frequency", [
    (48000, 16000, 1000.0), (44100, 16000, 1000.0), (44100, 16000, 5000.0),
    (8000, 16000, 1000.0), (8000, 16000, 2500.0), (16000, 48000, 4000.0),
])
def test_a_tone_in_the_passband_keeps_its_frequency_and_amplitude(from_rate, to_rate, frequency):
    amplitude = 0.5
    t = np.arange(from_rate) / from_rate                     # one second
    tone = (amplitude * np.sin(2 * np.pi * frequency * t)).astype(np.float32)
    produced = media_probe.resample(tone, from_rate, to_rate)
    fitted, residual = fitted_amplitude(produced, to_rate, frequency)
    # Passband ripple of the Kaiser-windowed sinc (beta 8.6, 16 zeros) below 0.65 x the
    # lower Nyquist frequency is under 1e-4 relative; 1e-3 leaves room and still fails a
    # wrong gain or a wrong frequency (which would leave the fit near zero and a residual
    # near the amplitude).
    assert abs(fitted - amplitude) < 1e-3 * amplitude, fitted
    assert residual < 1e-3 * amplitude, residual


@pytest.mark.parametrize("from_rate, to_rate, frequency, alias", [
    (48000, 16000, 10000.0, 6000.0),    # above the new Nyquist (8 kHz): would alias to 6 kHz
    (44100, 16000, 12000.0, 4000.0),
    (48000, 16000, 20000.0, 4000.0),
])
def test_a_tone_above_the_new_nyquist_is_removed(from_rate, to_rate, frequency, alias):
    amplitude = 0.5
    t = np.arange(from_rate) / from_rate
    tone = (amplitude * np.sin(2 * np.pi * frequency * t)).astype(np.float32)
    produced = media_probe.resample(tone, from_rate, to_rate)
    middle = produced[len(produced) // 4: 3 * len(produced) // 4]
    # The stopband of this kernel is below -80 dB from about 1.1 x the new Nyquist
    # frequency (measured: -89 dB at 10 kHz for 48 -> 16 kHz); 1e-4 is -80 dB.
    assert np.abs(middle).max() < 1e-4 * amplitude
    fitted, _ = fitted_amplitude(produced, to_rate, alias)
    assert fitted < 1e-4 * amplitude


def test_upsampling_leaves_no_image_above_the_old_nyquist():
    amplitude, frequency = 0.5, 2000.0         # half the old Nyquist frequency: passband
    t = np.arange(8000) / 8000
    tone = (amplitude * np.sin(2 * np.pi * frequency * t)).astype(np.float32)
    produced = media_probe.resample(tone, 8000, 16000)
    image, _ = fitted_amplitude(produced, 16000, 8000 - frequency)   # the mirror at 6 kHz
    kept, _ = fitted_amplitude(produced, 16000, frequency)
    assert image < 1e-4 * amplitude            # -80 dB, as above
    assert abs(kept - amplitude) < 1e-3 * amplitude


def test_reference_kernel_is_the_documented_formula():
    """One output of the reference recomputed by a scalar loop over the documented formula
    (guards the vectorised reference itself)."""
    rng = np.random.default_rng(5)
    samples = rng.uniform(-1, 1, 500)
    from_rate, to_rate, j = 44100, 16000, 77
    f = 0.9 * 0.5 * min(1, to_rate / from_rate)
    w = 16 * max(1, from_rate / to_rate)
    t = j * from_rate / to_rate
    total = 0.0
    for i in range(len(samples)):
        x = i - t
        if abs(x) < w:
            z = 2 * f * x
            sinc = 1.0 if z == 0 else math.sin(math.pi * z) / (math.pi * z)
            window = np.i0(8.6 * math.sqrt(1 - (x / w) ** 2)) / np.i0(8.6)
            total += samples[i] * 2 * f * sinc * window
    assert abs(media.resample(samples, from_rate, to_rate)[j] - total) < 1e-12
