"""Tensor files in, result files out: open_tensor, load_tensor, save_result, load_result, .tns read/write."""

from tuckerkit.io._dask import open_npy_dask
from tuckerkit.io._load import FORMATS, TensorFileError, load_tensor
from tuckerkit.io._open import connect_scheduler, open_tensor
from tuckerkit.io._save import (
    OutputFileError,
    atomic_write,
    check_output_path,
    load_metadata,
    load_result,
    save_result,
)
from tuckerkit.io._tns import read_tns, write_tns

__all__ = [
    "FORMATS",
    "OutputFileError",
    "TensorFileError",
    "atomic_write",
    "check_output_path",
    "connect_scheduler",
    "load_metadata",
    "load_result",
    "load_tensor",
    "open_npy_dask",
    "open_tensor",
    "read_tns",
    "save_result",
    "write_tns",
]
