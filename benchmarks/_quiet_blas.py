"""Imported by the timing scripts before numpy: OpenBLAS's idle worker threads go to sleep at once.

After a multi-threaded BLAS call OpenBLAS keeps its worker threads spinning for about 2^28 cycles (0.1 s)
waiting for the next call. Interleaved timings then run each callable beside the spinning thread the previous
BLAS-based one (numpy's GEMM, TensorLy, pyttb) left: on the project's 2-core machine it held the second core
during tuckerkit's two-worker kernels (measured: 15-19 ms of the spinning thread's CPU inside a 25 ms TTM, two
workers no faster than one), and under load it slowed one-worker runs 1.7-3.5x. ``OPENBLAS_THREAD_TIMEOUT=4``
(OpenBLAS's smallest, 2^4 cycles; read when OpenBLAS loads) makes them sleep instead: each BLAS call then wakes
its threads (tens of microseconds on calls of milliseconds). A value set in the environment is kept.
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "4")
