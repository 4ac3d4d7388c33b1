"""Array namespace, dtype policy and devices (numpy on the CPU, cupy on CUDA GPUs)."""

from tuckerkit.backend._device import (
    Device,
    DeviceError,
    check_fits,
    device_of,
    get_cupy,
    memory_info,
    on_device,
    parse_device,
    to_device,
    to_host,
)
from tuckerkit.backend._namespace import array_namespace, is_cupy_array, result_dtype, to_float_array

__all__ = [
    "Device",
    "DeviceError",
    "array_namespace",
    "check_fits",
    "device_of",
    "get_cupy",
    "is_cupy_array",
    "memory_info",
    "on_device",
    "parse_device",
    "result_dtype",
    "to_device",
    "to_float_array",
    "to_host",
]
