"""Array namespace and dtype policy (numpy on the CPU; cupy is added by the GPU layer)."""

from tuckerkit.backend._namespace import array_namespace, is_cupy_array, result_dtype, to_float_array

__all__ = ["array_namespace", "is_cupy_array", "result_dtype", "to_float_array"]
