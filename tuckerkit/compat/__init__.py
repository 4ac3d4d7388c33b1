"""Drop-in entry points with the signatures of TensorLy and pyttb, computed by tuckerkit.

``from tuckerkit.compat.tensorly import tucker, parafac`` (or ``from tuckerkit.compat.pyttb import cp_als,
tucker_als, hosvd``) and nothing else in the calling code changes: the same arguments, the same return values
(the peer's own objects when the peer is installed, tuckerkit's results otherwise). An option the layer cannot
honour is refused in one line that names it. Nothing is imported until a submodule is used.
"""

__all__: list[str] = []


def _installed(name: str) -> bool:
    """Whether the peer library ``name`` can be imported (its objects are then returned)."""
    import importlib.util

    return importlib.util.find_spec(name) is not None
