"""Out-of-core Tucker: a float32 tensor written to disk in slabs, decomposed with a memory limit.

Generates a low-rank-plus-noise tensor slab by slab into a ``.npy`` file (with a SHA-256 checksum), then runs,
each in a fresh subprocess so its peak RSS is its own: one plain read of the file (the I/O floor), ST-HOSVD
and HOOI with ``memory_limit``, and the same decomposition of a smaller in-memory replica (the fit to
expect). The issue's target is 1500 x 1500 x 3500 (31 GB, larger than this machine's RAM); the default here
is smaller so that a run fits in a session: pass ``--shape 1500,1500,3500`` for the full case.

It also runs the command a user would type, ``tuckerkit decompose big.npy --ranks R,R,R --memory-limit L``, in
its own process (peak RSS from ``wait4``), and with ``--dask-iters K`` the same file as a Dask array (one task
per slab reads its rows from the file) on a 2-worker LocalCluster.

Run:  python benchmarks/scale.py [--shape 1000,1000,1000] [--memory-limit 1GB] [--iters 5] [--dask-iters 0]
Writes benchmarks/results/scale.{json,md}; rows of other shapes already there are kept.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import environment, write_json, write_text

CHILD = r"""
import json, sys, time, warnings
import numpy as np
warnings.simplefilter("ignore")
path, what, limit, iters, rank = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
t0 = time.perf_counter()
out = {}
if what == "read":  # the I/O floor: the file read once in 256 MB pieces into one reused buffer
    X = np.load(path, mmap_mode="r")
    offset = X.offset
    del X
    buf = bytearray(256 << 20)
    n = 0
    with open(path, "rb") as f:
        f.seek(offset)
        while k := f.readinto(buf):
            n += k
    out["bytes_read"] = n
elif what == "dask":  # the same file on a 2-process LocalCluster, one chunk per ~256 MB slab
    import dask.array as da
    from dask.distributed import Client, LocalCluster
    import tuckerkit as tk
    from tuckerkit.io import open_npy_dask
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cl, \
            Client(cl):
        X = open_npy_dask(path, chunk_bytes=256 << 20)
        r = (rank,) * X.ndim
        t1 = time.perf_counter()
        st = tk.st_hosvd(X, r)
        out["st_hosvd_s"] = time.perf_counter() - t1
        t1 = time.perf_counter()
        T = tk.hooi(X, r, init=st, tol=0, max_iter=iters)
        out["hooi_s"] = time.perf_counter() - t1
        out["fit"] = T.fit
        out["chunks"] = len(X.chunks[0])
elif what == "sketch":  # ST-HOSVD with the randomized first step: two TTM-cost passes
    import tuckerkit as tk
    X = np.load(path, mmap_mode="r")
    r = (rank,) * X.ndim
    t1 = time.perf_counter()
    st = tk.st_hosvd(X, r, memory_limit=limit, sketch=True)
    out["st_hosvd_sketch_s"] = time.perf_counter() - t1
    out["st_hosvd_sketch_fit"] = st.fit
else:
    import tuckerkit as tk
    X = np.load(path, mmap_mode="r")
    r = (rank,) * X.ndim
    t1 = time.perf_counter()
    st = tk.st_hosvd(X, r, memory_limit=limit)
    out["st_hosvd_s"] = time.perf_counter() - t1
    t1 = time.perf_counter()
    T = tk.hooi(X, r, init=st, tol=0, max_iter=iters, memory_limit=limit)
    out["hooi_s"] = time.perf_counter() - t1
    out["fit"] = T.fit
    out["passes_per_iteration"] = T.passes_per_iteration
out["seconds"] = time.perf_counter() - t0
# VmHWM: this process's own peak resident memory (ru_maxrss would include the parent's at fork time)
with open("/proc/self/status") as f:
    hwm = next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))
out["peak_rss_bytes"] = hwm * 1024
print("RESULT " + json.dumps(out))
"""


def generate(path: Path, shape, rank: int, noise: float, seed: int = 0) -> str:
    """Low rank + noise, float32, written slab by slab; returns the file's SHA-256."""
    rng = np.random.default_rng(seed)
    core = rng.standard_normal((rank,) * len(shape)).astype(np.float32)
    Us = [np.linalg.qr(rng.standard_normal((n, rank)))[0].astype(np.float32) for n in shape]
    X = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=tuple(shape))
    row = int(np.prod(shape[1:]))
    step = max(1, (128 << 20) // (4 * row))
    import tuckerkit as tk

    scale = None
    for s in range(0, shape[0], step):
        U0 = Us[0][s:s + step]
        slab = np.asarray(tk.multi_ttm(core, [U0, *Us[1:]]))
        if scale is None:  # noise level relative to the signal, estimated on the first slab
            scale = noise * float(np.linalg.norm(slab)) / np.sqrt(slab.size)
        slab += scale * rng.standard_normal(slab.shape, dtype=np.float32)
        X[s:s + step] = slab
    X.flush()
    del X
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 24):
            h.update(chunk)
    return h.hexdigest()


def child(path: Path, what: str, limit: str, iters: int, rank: int) -> dict:
    proc = subprocess.run([sys.executable, "-c", CHILD, str(path), what, limit, str(iters), str(rank)],
                          capture_output=True, text=True)
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    raise RuntimeError(proc.stderr[-2000:])


CLI_WRAPPER = r"""
import atexit, os, sys
def _peak():  # this process's own peak resident memory (VmHWM), written when the command exits
    with open("/proc/self/status") as f:
        hwm = next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))
    with open(os.environ["TK_PEAK_FILE"], "w") as f:
        f.write(str(hwm * 1024))
atexit.register(_peak)
sys.argv = ["tuckerkit", *sys.argv[1:]]
from tuckerkit.cli import main
main()
"""


def cli_child(path: Path, limit: str, rank: int, work: Path) -> dict:
    """``tuckerkit decompose`` as a user runs it, in its own process; its own peak RSS (VmHWM at exit)."""
    import os

    out = work / "big_result.npz"
    out.unlink(missing_ok=True)
    peak = work / "cli_peak.txt"
    ranks = ",".join([str(rank)] * len(np.load(path, mmap_mode="r").shape))
    args = ["decompose", str(path), "--ranks", ranks, "--memory-limit", limit, "--json", "--quiet", "-o", str(out)]
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", CLI_WRAPPER, *args], capture_output=True, text=True,
                          env={**os.environ, "TK_PEAK_FILE": str(peak)})
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr[-2000:])
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    out.unlink(missing_ok=True)
    res["peak_rss_bytes"] = int(peak.read_text())
    return {"command": " ".join(["tuckerkit", *args]), "wall_s": wall, **res}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", default="1000,1000,1000")
    ap.add_argument("--rank", type=int, default=20)
    ap.add_argument("--memory-limit", default="1GB")
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--workdir", default="/tmp/tuckerkit-scale")
    ap.add_argument("--cli", action="store_true", help="also run the tuckerkit command on the file")
    ap.add_argument("--keep", action="store_true", help="keep the generated file (and reuse it next time)")
    ap.add_argument("--dask-iters", type=int, default=0, help="HOOI iterations of a Dask run (0: none)")
    ap.add_argument("--only", default="read,tucker,sketch,cli,dask,replica",
                    help="which runs (a row measured before keeps the values of the runs left out)")
    args = ap.parse_args(argv)
    only = set(args.only.split(","))
    shape = [int(s) for s in args.shape.split(",")]
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    path = work / f"big_{'x'.join(map(str, shape))}.npy"
    t0 = time.perf_counter()
    side = path.with_suffix(".json")
    if path.exists() and side.exists() and json.loads(side.read_text()).get("bytes") == path.stat().st_size:
        meta = json.loads(side.read_text())  # written by an earlier run with the same shape
        sha, gen_s = meta["sha256"], meta["generate_s"]
        print(f"reusing {path} (sha256 {sha[:16]}... from its generation)", flush=True)
    else:
        sha = generate(path, shape, args.rank, noise=0.01)
        gen_s = time.perf_counter() - t0
        side.write_text(json.dumps({"bytes": path.stat().st_size, "sha256": sha, "generate_s": gen_s}))
    size = path.stat().st_size
    print(f"wrote {path} ({size / 1e9:.2f} GB) in {gen_s:.0f} s, sha256 {sha[:16]}...", flush=True)
    res = Path(__file__).resolve().parent / "results" / "scale.json"
    old = json.loads(res.read_text())["rows"] if res.exists() else []
    row = next((r for r in old if r["shape"] == shape), {})
    row.update({"shape": shape, "bytes": size, "sha256": sha, "memory_limit": args.memory_limit, "rank": args.rank,
                "generate_s": gen_s})
    if "read" in only:  # the floor of this run: a partial re-run records its own (the disk's speed varies)
        read = child(path, "read", args.memory_limit, 0, args.rank)
        key = "read_s" if "tucker" in only else "sketch_read_s"
        row.update({key: read["seconds"]}, read_peak_rss=read["peak_rss_bytes"])
        print(f"one read: {read['seconds']:.1f} s, peak RSS {read['peak_rss_bytes'] / 1e9:.2f} GB", flush=True)
    if "tucker" in only:
        dec = child(path, "tucker", args.memory_limit, args.iters, args.rank)
        passes = 2 + dec["passes_per_iteration"] * args.iters  # ST-HOSVD: Gram pass + projection pass
        per_pass = (dec["st_hosvd_s"] + dec["hooi_s"]) / passes
        row.update(**dec, iterations=args.iters, passes=passes, seconds_per_pass=per_pass)
        print(f"ST-HOSVD {dec['st_hosvd_s']:.1f} s, HOOI x{args.iters} {dec['hooi_s']:.1f} s, {per_pass:.1f} s per "
              f"pass, fit {dec['fit']:.6f}, peak RSS {dec['peak_rss_bytes'] / 1e9:.2f} GB", flush=True)
    if "sketch" in only:
        sk = child(path, "sketch", args.memory_limit, 0, args.rank)
        row.update(st_hosvd_sketch_s=sk["st_hosvd_sketch_s"], st_hosvd_sketch_fit=sk["st_hosvd_sketch_fit"],
                   sketch_peak_rss=sk["peak_rss_bytes"])
        print(f"sketched ST-HOSVD {sk['st_hosvd_sketch_s']:.1f} s (2 passes), fit {sk['st_hosvd_sketch_fit']:.6f}, "
              f"peak RSS {sk['peak_rss_bytes'] / 1e9:.2f} GB", flush=True)
    if args.cli and "cli" in only:
        row["cli"] = c = cli_child(path, args.memory_limit, args.rank, work)
        print(f"CLI: {c['wall_s']:.1f} s wall, {c['iterations']} HOOI iterations, fit {c['fit']:.6f}, peak RSS "
              f"{c['peak_rss_bytes'] / 1e9:.2f} GB", flush=True)
    if args.dask_iters and "dask" in only:
        row["dask"] = d = child(path, "dask", args.memory_limit, args.dask_iters, args.rank)
        row["dask_iterations"] = args.dask_iters
        print(f"Dask: ST-HOSVD {d['st_hosvd_s']:.1f} s, HOOI x{args.dask_iters} {d['hooi_s']:.1f} s, fit "
              f"{d['fit']:.6f}", flush=True)
    spath = work / "replica.npy"
    if "replica" in only:
        small = [max(2 * args.rank, s // 4) for s in shape]
        generate(spath, small, args.rank, noise=0.01)
        import tuckerkit as tk

        Ts = tk.hooi(np.load(spath), (args.rank,) * len(shape), tol=0, max_iter=args.iters)
        row.update(replica_shape=small, replica_fit=Ts.fit)
    if "read_s" in row and "seconds_per_pass" in row:
        row["hooi_seconds_per_pass"] = row["hooi_s"] / (row["passes_per_iteration"] * row["iterations"])
        row["pass_over_read"] = row["seconds_per_pass"] / row["read_s"]
        row["hooi_pass_over_read"] = row["hooi_seconds_per_pass"] / row["read_s"]
    if "st_hosvd_sketch_s" in row and ("sketch_read_s" in row or "read_s" in row):
        row["sketch_pass_over_read"] = row["st_hosvd_sketch_s"] / 2 / row.get("sketch_read_s", row["read_s"])
    row["date"] = time.strftime("%Y-%m-%d %H:%M:%S")
    rows = sorted([r for r in old if r["shape"] != shape] + [row], key=lambda r: r["bytes"])
    write_json("scale.json", {"benchmark": "out_of_core_tucker", "environment": environment(), "rows": rows})
    write_text("scale.md", table(rows))
    if not args.keep:
        path.unlink()
        side.unlink()
    spath.unlink(missing_ok=True)
    print(table(rows))


def table(rows: list[dict]) -> str:
    gb = 1e9

    def f(r, k, fmt):
        return format(r[k], fmt) if k in r else "-"

    lines = ["# Out-of-core Tucker (memory-mapped float32 .npy, slabs along mode 0)", "",
             "| shape | file GB | memory limit | one read s | ST-HOSVD s | HOOI s (iterations) | HOOI pass / read | "
             "all passes / read | peak RSS GB | fit | fit of an in-memory replica | sketched ST-HOSVD s "
             "(pass / read) |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        hp = f(r, "hooi_pass_over_read", ".2f") if "hooi_pass_over_read" in r else "-"
        sk = (f"{r['st_hosvd_sketch_s']:.1f} ({r['sketch_pass_over_read']:.2f}"
              + (f" of its run's read, {r['sketch_read_s']:.1f} s" if "sketch_read_s" in r else "") + ")"
              if "sketch_pass_over_read" in r else "-")
        lines.append(
            f"| {'x'.join(map(str, r['shape']))} | {r['bytes'] / gb:.2f} | {r['memory_limit']} | "
            f"{f(r, 'read_s', '.1f')} | {f(r, 'st_hosvd_s', '.1f')} | {f(r, 'hooi_s', '.1f')} "
            f"({r.get('iterations', '-')}) | {hp} | "
            f"{f(r, 'pass_over_read', '.2f')} | {r['peak_rss_bytes'] / gb:.2f} | {f(r, 'fit', '.6f')} | "
            f"{f(r, 'replica_fit', '.6f')} ({'x'.join(map(str, r.get('replica_shape', [])))}) | {sk} |")
    lines += ["", "Passes counted: ST-HOSVD 2 (the first mode's Gram, then the projection), HOOI 2 per iteration; "
              "the sketched ST-HOSVD replaces the Gram pass by a sketch pass. 'one read' is a plain read of the "
              "same file in the same run: from the page cache when the file fits in RAM, from disk when it "
              "does not (this disk read the 31.5 GB file in 35 to 60 s across runs, so ratios are taken "
              "within a run)."]
    cli = [r for r in rows if "cli" in r]
    if cli:
        lines += ["", "The command line on the same files (HOOI until converged from its default initialization, the "
                  "sketched ST-HOSVD, for a streamed tensor):", "",
                  "| command | wall s | HOOI iterations | fit | peak RSS GB |", "|---|---|---|---|---|"]
        for r in cli:
            c = r["cli"]
            bound = (" (upper bound: measured by wait4, with the parent's memory at fork)"
                     if "peak_rss_note" in c else "")
            lines.append(f"| `{c['command'].split(' -o ')[0]}` | {c['wall_s']:.1f} | {c['iterations']} | "
                         f"{c['fit']:.6f} | {c['peak_rss_bytes'] / gb:.2f}{bound} |")
    dk = [r for r in rows if "dask" in r]
    if dk:
        lines += ["", "Dask (2-process LocalCluster, one task per ~256 MB slab read from the same file; the exact "
                  "ST-HOSVD):", "",
                  "| shape | chunks | ST-HOSVD s | HOOI s (iterations) | fit | fit out of core |",
                  "|---|---|---|---|---|---|"]
        for r in dk:
            d = r["dask"]
            lines.append(f"| {'x'.join(map(str, r['shape']))} | {d['chunks']} | {d['st_hosvd_s']:.1f} | "
                         f"{d['hooi_s']:.1f} ({r['dask_iterations']}) | {d['fit']:.6f} | {r['fit']:.6f} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
