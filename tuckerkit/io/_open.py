"""``open_tensor``: a tensor file opened as the operand a decomposition runs on (the CLI's one door)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from tuckerkit.io._load import _check_options, _check_path, load_tensor, open_h5_dataset

CSF_CHOICES = ("auto", "all", "two", "one")


def open_tensor(
    path: str | os.PathLike,
    *,
    key: str | None = None,
    shape: Sequence[int] | None = None,
    dtype: Any = None,
    memory_limit: Any = None,
    scheduler: Any = None,
    csf: str | None = None,
    iterations: int | None = None,
    check_finite: bool = True,
    allow_external: bool = False,
    name: str | None = None,
) -> Any:
    """Open a tensor file as an :class:`~tuckerkit.engine.Operand`, validated once.

    ``.tns`` (FROSTT) files give a sparse :class:`~tuckerkit.sparse.COOTensor` (never densified); ``.npy``
    files are memory-mapped and read into memory, or read in slabs (a :class:`~tuckerkit.engine.SlabTensor`)
    when larger than ``memory_limit``, or chunk by chunk on a Dask cluster with ``scheduler``; ``.h5``/``.hdf5``
    datasets are read lazily under ``memory_limit``; ``.npz`` and ``.mat`` are read into memory. Dense tensors
    are checked for NaN and Inf here, once (streamed ones during their first pass), so the decomposition that
    follows does not scan them again. A complex dense tensor opens in memory (HOSVD, ST-HOSVD, HOOI and CP-ALS
    take it; streaming with ``memory_limit`` is for real tensors).

    Parameters
    ----------
    path : path-like
    key : str, optional
        Array name inside ``.npz``/``.mat``/``.h5`` files holding several.
    shape : sequence of int, optional
        Shape of a ``.tns`` tensor (default: the largest index in each mode).
    dtype : {None, "float32", "float64"}, optional
        Convert the tensor (slab by slab when streamed); default: keep the file's (integers become float64).
    memory_limit : int or str, optional
        Read a dense tensor larger than this (e.g. ``"4GB"``) in slabs.
    scheduler : None, "local", an address such as ``"tcp://host:8786"``, or a ``dask.distributed.Client``
        Read a ``.npy`` file as a Dask array whose tasks read their own rows; a string starts a
        ``LocalCluster`` or connects to that scheduler, and closing the returned tensor closes them.
    csf : {None, "auto", "all", "two", "one"}, optional
        Build this CSF plan of a sparse tensor now (see :meth:`~tuckerkit.sparse.COOTensor.plan`).
    iterations : int, optional
        The sweeps the caller will run, which ``csf="auto"`` weighs against the cost of building trees.
    allow_external : bool, default False
        Read HDF5 datasets whose data lives in other files (refused by default: see :func:`load_tensor`).
    check_finite : bool, default True
        Scan a dense tensor for NaN and Inf now; False leaves the (one) scan to the decomposition it is
        passed to, so that cheaper checks (ranks, the output path) can fail first.
    name : str, optional
        How error messages name the tensor (default: ``tensor in '<path>'``).

    Returns
    -------
    Operand
        Usable as a context manager: ``with open_tensor(p) as X: ...`` closes files and Dask clients.

    Raises
    ------
    TensorFileError
        A missing, unreadable, corrupt or unsupported file (one line).
    ValueError, TypeError
        A tensor the decompositions cannot take (NaN/Inf, empty modes, fewer than 2 modes), bad options.

    Examples
    --------
    >>> import numpy as np, tempfile, os
    >>> from tuckerkit.io import open_tensor
    >>> d = tempfile.mkdtemp(); p = os.path.join(d, "x.npy"); np.save(p, np.ones((20, 3, 4)))
    >>> open_tensor(p).shape, open_tensor(p, memory_limit=200)
    ((20, 3, 4), SlabTensor(shape=(20, 3, 4), dtype=float64, memory_limit=200, slab_rows=1))
    >>> with open(os.path.join(d, "s.tns"), "w") as f:
    ...     _ = f.write("1 1 1 2.0\\n3 2 1 1.5\\n")
    >>> open_tensor(os.path.join(d, "s.tns"))
    COOTensor(shape=(3, 2, 1), nnz=2, dtype=float64)
    """
    from tuckerkit.engine import as_operand
    from tuckerkit.engine._slabs import parse_memory

    p = _check_path(path)
    _check_options(p, key, shape)
    label = name or f"tensor in {str(p)!r}"
    ext = p.suffix.lower()
    limit = parse_memory(memory_limit, "memory_limit") if memory_limit is not None else None
    if csf is not None and csf not in CSF_CHOICES:
        raise ValueError(f"csf={csf!r} is not valid; expected one of {', '.join(map(repr, CSF_CHOICES))}")
    if scheduler is not None:
        if ext != ".npy":
            raise ValueError(f"scheduler reads .npy files chunk by chunk; received {ext or 'no extension'!r}")
        if limit is not None:
            raise ValueError("pass either scheduler or memory_limit, not both")
        return _open_dask(p, scheduler, dtype, label, check_finite)
    if ext == ".tns":
        from tuckerkit.sparse import COOTensor

        if limit is not None:
            raise ValueError(f"memory_limit streams dense files; {str(p)!r} holds a sparse tensor, read whole")
        return _sparse_operand(COOTensor.from_tns(p, shape=shape), dtype, csf, iterations, check_finite, label)
    if limit is not None and ext in (".h5", ".hdf5"):  # out of core: read in slabs, never whole
        ds = open_h5_dataset(p, key, allow_external=allow_external)
        op = as_operand(ds, memory_limit=limit, dtype=dtype, check_finite=check_finite, real=True, min_ndim=2,
                        name=label)
        if getattr(op, "streamed", False):
            op.closer = ds.file.close
        else:
            ds.file.close()
        return op
    if limit is not None and ext in (".npz", ".mat"):  # (read whole: a limit would bound nothing)
        raise ValueError(f"memory_limit streams .npy and .h5 files; {str(p)!r} is a {ext} file, read whole (save "
                         "its array with numpy.save to stream it)")
    data = load_tensor(p, key=key, allow_external=allow_external)  # .npy memory-mapped: read when needed
    from tuckerkit.sparse import COOTensor

    if isinstance(data, COOTensor):  # a sparse .npz (COOTensor.save_npz; memory_limit refused above): as .tns
        return _sparse_operand(data, dtype, csf, iterations, check_finite, label)
    if csf is not None:
        raise ValueError(f"csf= applies to sparse tensors (.tns, a sparse .npz); {str(p)!r} holds a dense one")
    if dtype is not None and np.dtype(getattr(data, "dtype", np.float64)).kind == "c" and np.dtype(dtype).kind != "c":
        raise TypeError(f"dtype={np.dtype(dtype).name!r} would drop the imaginary part of the complex tensor in "
                        f"{str(p)!r} ({data.dtype}); leave dtype out to decompose it as complex")
    # (complex in memory, as the decompositions take it, with or without a memory_limit it fits; a streamed one
    # is refused by the slab reader in one line: streaming is for real tensors)
    return as_operand(data, memory_limit=limit, dtype=dtype, check_finite=check_finite, real=False,
                      min_ndim=2, name=label)


def _sparse_operand(X: Any, dtype: Any, csf: str | None, iterations: int | None, check_finite: bool,
                    label: str) -> Any:
    """A sparse file's tensor as an operand: cast to ``dtype``, its CSF plan ``csf`` built now."""
    from tuckerkit.engine import as_operand

    if dtype is not None:
        X = X.astype(dtype)
    op = as_operand(X, check_finite=check_finite, real=True, min_ndim=2, name=label)
    if csf is not None:
        op.plan(csf=csf, iterations=iterations if csf == "auto" else None)
    return op


def _open_dask(p: Any, scheduler: Any, dtype: Any, label: str, check_finite: bool) -> Any:
    from tuckerkit.engine import DaskTensor, as_operand
    from tuckerkit.io._dask import open_npy_dask

    data = open_npy_dask(p)
    if dtype is not None:
        data = data.astype(dtype)
    client = cluster = None
    if isinstance(scheduler, str):
        client, cluster = connect_scheduler(scheduler)
    elif not (type(scheduler).__name__ == "Client" and hasattr(scheduler, "submit")):
        from tuckerkit._validation import describe

        raise TypeError(f"scheduler must be 'local', a scheduler address such as 'tcp://host:8786', or a "
                        f"dask.distributed.Client; received {describe(scheduler)}")
    try:
        op = as_operand(data, check_finite=check_finite, real=True, min_ndim=2, name=label)
    except BaseException:
        _close(client, cluster)
        raise
    if isinstance(op, DaskTensor) and client is not None:
        op.closer = lambda: _close(client, cluster)
    return op


def connect_scheduler(scheduler: str, *, name: str = "scheduler") -> tuple[Any, Any]:
    """A Dask client and the cluster it started (or None): ``"local"`` starts a ``LocalCluster`` on this
    machine, anything else is a scheduler address such as ``"tcp://host:8786"``.

    Parameters
    ----------
    scheduler : str
    name : str, default "scheduler"
        How error messages name the parameter.

    Returns
    -------
    (dask.distributed.Client, LocalCluster or None)

    Raises
    ------
    ConnectionError
        ``scheduler 'tcp://...': cannot connect (...)``.

    Examples
    --------
    >>> from tuckerkit.io import connect_scheduler
    >>> connect_scheduler("tcp://127.0.0.1:9")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ConnectionError: scheduler 'tcp://127.0.0.1:9': cannot connect (...)
    """
    try:
        from dask.distributed import Client, LocalCluster
    except ImportError:
        raise ImportError(f"{name} needs dask.distributed; install it with: pip install 'tuckerkit[distributed]'") \
            from None
    if scheduler == "local":
        cluster = LocalCluster(dashboard_address=None, processes=True)
        return Client(cluster), cluster
    try:
        return Client(scheduler, timeout="10s"), None
    except ValueError as exc:  # (an address dask cannot parse: "missing port number in address 'bogus'")
        raise ValueError(f"{name} {scheduler!r} is not a scheduler address ({str(exc).splitlines()[0]}); expected "
                         "'local' or an address such as tcp://host:8786") from None
    except (OSError, TimeoutError) as exc:
        raise ConnectionError(f"{name} {scheduler!r}: cannot connect ({str(exc).splitlines()[0]})") from None


def _close(client: Any, cluster: Any) -> None:
    if client is not None:
        client.close()
    if cluster is not None:
        cluster.close()
