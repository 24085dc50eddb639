"""Streaming resampling: chunks in, chunks out, the same samples as resampling the whole signal.

:func:`susurrus.audio.io.resample` filters a whole array; cutting a stream into chunks and
resampling each one would zero-pad every chunk edge (clicks, and a drifting sample count).
:class:`StreamResampler` applies the same windowed-sinc polyphase filter to a stream: it keeps
the input history the filter still needs and emits an output sample as soon as all its taps
have arrived; :meth:`StreamResampler.flush` zero-pads the end as the offline filter does.
Concatenated outputs equal ``resample(whole, orig_sr, new_sr)`` to float32 rounding, for any
chunking.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from susurrus.audio.io import _ROLLOFF, _ZERO_CROSSINGS, _windowed_sinc

__all__ = ["StreamResampler"]


class StreamResampler:
    """Resample a stream of mono float32 chunks from ``orig_sr`` to ``new_sr``."""

    def __init__(self, orig_sr: int, new_sr: int):
        if int(orig_sr) != orig_sr or int(new_sr) != new_sr or orig_sr <= 0 or new_sr <= 0:
            raise ValueError(f"sample rates must be positive integers, got {orig_sr} -> {new_sr}")
        self.orig_sr, self.new_sr = int(orig_sr), int(new_sr)
        g = math.gcd(self.orig_sr, self.new_sr)
        self.up, self.down = self.new_sr // g, self.orig_sr // g
        self.identity = self.up == self.down
        fc = _ROLLOFF * min(1.0, self.up / self.down)
        self.half_width = w = math.ceil(_ZERO_CROSSINGS / fc)
        pos = np.arange(self.up, dtype=np.int64) * self.down
        self.base = pos // self.up  # input sample at or before each phase's position
        frac = (pos % self.up) / self.up
        # taps k = -W+1 .. W around the base sample: the only ones the Kaiser window leaves non-zero
        offsets = np.arange(-w + 1, w + 1, dtype=np.float64)
        kernel = _windowed_sinc(offsets[None, :] - frac[:, None], fc, w)
        kernel /= kernel.sum(axis=1, keepdims=True)  # unit gain at DC per phase, as offline
        self.kernel = kernel.astype(np.float32)  # (up, 2W)
        self.offsets = np.arange(-w + 1, w + 1, dtype=np.int64)
        self.history = np.zeros(0, np.float32)  # input samples still needed, from absolute index ...
        self.history_start = 0
        self.n_in = 0  # input samples received
        self.n_out = 0  # output samples emitted
        self.finished = False

    def _input_center(self, j: np.ndarray) -> np.ndarray:
        """Absolute input index of the base tap of output samples ``j``."""
        return (j // self.up) * self.down + self.base[j % self.up]

    def _emit(self, upto: int) -> np.ndarray:
        """Outputs ``self.n_out .. upto - 1`` from the history (zeros outside the input)."""
        if upto <= self.n_out:
            return np.zeros(0, np.float32)
        w = self.half_width
        j = np.arange(self.n_out, upto, dtype=np.int64)
        first = self._input_center(j) - (w - 1)  # absolute input index of each output's first tap
        # the input these outputs read, [lo, hi), with zeros where it lies outside the input received
        lo, hi = int(first[0]), int(first[-1]) + 2 * w
        span = np.zeros(hi - lo, np.float32)
        a, b = max(lo, self.history_start), min(hi, self.history_start + len(self.history))
        if b > a:
            span[a - lo:b - lo] = self.history[a - self.history_start:b - self.history_start]
        # each phase's outputs read windows ``down`` inputs apart: a strided view of the span, no copy
        windows = sliding_window_view(span, 2 * w)
        out = np.empty(len(j), np.float32)
        for i0 in range(min(self.up, len(j))):
            rows = windows[first[i0] - lo:first[-1] - lo + 1:self.down]
            out[i0::self.up] = np.einsum("ij,j->i", rows[:len(out[i0::self.up])], self.kernel[j[i0] % self.up],
                                         dtype=np.float32)
        self.n_out = upto
        # keep only what later outputs can still read
        keep_from = int(self._input_center(np.array([upto]))[0]) - self.half_width + 1
        drop = max(0, min(len(self.history), keep_from - self.history_start))
        if drop:
            self.history = self.history[drop:]
            self.history_start += drop
        return out

    def process(self, chunk: np.ndarray) -> np.ndarray:
        """Append input samples; returns every output sample whose taps have all arrived."""
        if self.finished:
            raise RuntimeError("resampler already flushed")
        chunk = np.asarray(chunk, dtype=np.float32).reshape(-1)
        if self.identity:
            self.n_in += len(chunk)
            self.n_out += len(chunk)
            return chunk.copy()
        self.history = np.concatenate([self.history, chunk]) if len(self.history) else chunk.copy()
        self.n_in += len(chunk)
        # output j is complete once input index center(j) + W has arrived
        ready = self._count_ready(self.n_in - 1 - self.half_width)
        return self._emit(ready)

    def _count_ready(self, last_center: int) -> int:
        """Number of outputs whose base tap is at most ``last_center``."""
        if last_center < 0:
            return 0
        periods = last_center // self.down
        within = last_center - periods * self.down
        return int(periods * self.up + np.searchsorted(self.base, within, side="right"))

    def flush(self) -> np.ndarray:
        """End of stream: the remaining outputs, reading zeros past the end as offline."""
        if self.finished:
            return np.zeros(0, np.float32)
        self.finished = True
        if self.identity:
            return np.zeros(0, np.float32)
        total = -(-self.n_in * self.up // self.down)
        return self._emit(total)
