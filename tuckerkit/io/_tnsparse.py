"""Compiled (numba) scanner, number parser and formatter behind :mod:`tuckerkit.io._tns`.

The scanner walks the bytes of a ``.tns`` file once: lines are split at ``\\n``, ``#`` starts a comment,
tokens are separated by ASCII whitespace. Coordinates are parsed as integers. A value is parsed in the scanner
when it can be done exactly (a decimal whose digits fit in 2**53 and whose power of ten is at most 22: one
correctly rounded multiplication or division of two exact doubles, Clinger's fast path); any other token is
recorded (row, byte span, line) for a correctly rounded fallback in the caller. The scan stops at the first
malformed line and reports it, so a bad line costs no more than reading up to it.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from tuckerkit._numba_load import load_lightly

# status codes of scan_tns
OK = 0
E_WIDTH = 1  # a line with another number of columns than the first data line
E_COORD = 2  # a coordinate that is not an integer
E_LOW = 3  # a coordinate below 1
E_BIG = 4  # a coordinate that does not fit the index type (int32 pass: retry with int64; int64: error)
E_FEW = 5  # the first data line has fewer than two columns
E_MANY = 6  # more columns than MAX_COLS

MAX_COLS = 65  # 64 modes and a value

_POW10 = np.array([10.0**k for k in range(23)], dtype=np.float64)  # exact doubles 1e0..1e22
# byte classes: 0 token, 1 blank (space, tab, CR, VT, FF), 2 newline, 3 comment start
CLS = np.zeros(256, dtype=np.uint8)
CLS[[32, 9, 13, 11, 12]] = 1
CLS[10] = 2
CLS[35] = 3


@njit(cache=True, nogil=True)
def _is_space(b):  # pragma: no cover
    return b == 32 or b == 9 or b == 13 or b == 11 or b == 12


@njit(cache=True, nogil=True)
def count_lines(buf, start):  # pragma: no cover
    """Number of lines after ``start`` (newlines, plus one for a last line without one)."""
    b = buf[start:]
    n = b.shape[0]
    c = np.int64(0)
    for k in range(n):  # branch-free over a range from 0: the compiler vectorizes the sum (4x faster)
        c += np.int64(b[k] == 10)
    if n > 0 and b[n - 1] != 10:
        c += 1
    return c


@njit(cache=True, nogil=True)
def _parse_value(buf, s, e, pow10):  # pragma: no cover
    """(ok, value) of the token buf[s:e]: ok is 1 when the token is a decimal done exactly here, 2 when it
    is a well-formed decimal that needs the correctly rounded fallback, 0 when it is not a plain decimal
    (inf, nan, underscores or garbage: the fallback decides)."""
    i = s
    neg = False
    if i < e and (buf[i] == 43 or buf[i] == 45):
        neg = buf[i] == 45
        i += 1
    mant = np.uint64(0)
    nd = 0  # significant digits taken into mant
    drop = 0  # digits that did not fit (count toward the exponent)
    frac = 0  # digits after the point taken into mant
    seen = 0
    exact = True
    while i < e and 48 <= buf[i] <= 57:
        d = buf[i] - 48
        seen += 1
        if nd == 0 and d == 0:
            pass
        elif nd < 19:
            mant = mant * np.uint64(10) + np.uint64(d)
            nd += 1
        else:
            exact = False
            drop += 1
        i += 1
    if i < e and buf[i] == 46:
        i += 1
        while i < e and 48 <= buf[i] <= 57:
            d = buf[i] - 48
            seen += 1
            if nd == 0 and d == 0:
                frac += 1
            elif nd < 19:
                mant = mant * np.uint64(10) + np.uint64(d)
                nd += 1
                frac += 1
            else:
                exact = False
            i += 1
    if seen == 0:
        return 0, 0.0
    ex = 0
    if i < e and (buf[i] == 101 or buf[i] == 69):
        i += 1
        eneg = False
        if i < e and (buf[i] == 43 or buf[i] == 45):
            eneg = buf[i] == 45
            i += 1
        if i >= e:
            return 0, 0.0
        while i < e and 48 <= buf[i] <= 57:
            if ex < 100000:
                ex = ex * 10 + (buf[i] - 48)
            i += 1
        if eneg:
            ex = -ex
    if i != e:
        return 0, 0.0
    if mant == 0 and exact:
        return 1, -0.0 if neg else 0.0
    if not exact or mant > np.uint64(9007199254740992):
        return 2, 0.0
    p = ex + drop - frac
    if p < -22 or p > 22:
        return 2, 0.0
    v = float(mant)
    if p >= 0:
        v = v * pow10[p]
    else:
        v = v / pow10[-p]
    return 1, -v if neg else v


@njit(cache=True, nogil=True)
def _parse_coord(buf, s, e, limit):  # pragma: no cover
    """(status, value) of an integer token: OK, E_COORD (not an integer), E_LOW (below 1), E_BIG (> limit)."""
    i = s
    neg = False
    if i < e and (buf[i] == 43 or buf[i] == 45):
        neg = buf[i] == 45
        i += 1
    if i >= e:
        return E_COORD, 0
    v = 0
    big = False
    while i < e:
        b = buf[i]
        if b < 48 or b > 57:
            return E_COORD, 0
        if not big:
            if v > 461168601842738790:  # (2**62 // 10: one more digit is above 2**62; stop before int64 overflows)
                big = True
            else:
                v = v * 10 + (b - 48)
                if v > 4611686018427387904:  # 2**62
                    big = True
        i += 1
    if neg and (v != 0 or big):
        return E_LOW, 0
    if v < 1:
        return E_LOW, 0
    if big or v > limit:
        return E_BIG, 0
    return OK, v


@njit(cache=True, nogil=True)
def bare_cr(buf, start):  # pragma: no cover
    """Whether the line from ``start`` holds a carriage return followed by more data on the same line (classic
    Mac line ends: the whole file reads as one line)."""
    n = buf.shape[0]
    i = start
    while i < n and buf[i] != 10:
        if buf[i] == 13:
            j = i + 1
            while j < n and (buf[j] == 13 or buf[j] == 32 or buf[j] == 9):
                j += 1
            if j < n and buf[j] != 10:  # (a comment after the CR counts: '# a\r# b\r1 1 1' holds data too)
                return True
            i = j
        else:
            i += 1
    return False


@njit(cache=True, nogil=True)
def first_data_line(buf, start):  # pragma: no cover
    """(line number, number of columns, byte offset) of the first line holding data; zeros when none."""
    n = buf.shape[0]
    i = start
    line = 1
    while i < n:
        lstart = i
        col = 0
        while True:
            while i < n and _is_space(buf[i]):
                i += 1
            if i >= n or buf[i] == 10 or buf[i] == 35:
                break
            while i < n and not _is_space(buf[i]) and buf[i] != 10 and buf[i] != 35:
                i += 1
            col += 1
        while i < n and buf[i] != 10:
            i += 1
        if col > 0:
            return line, col, lstart
        i += 1
        line += 1
    return 0, 0, 0


@njit(cache=True, nogil=True)
def scan_tns(buf, start, coords, vals, limit, pow10, cls):  # pragma: no cover
    """Fill ``coords`` (0-based: one less than in the file) and ``vals`` row by row.

    Returns (status, rows, bad line, byte offset of the bad line, fallback rows, fallback starts, fallback
    ends, fallback lines, number of fallbacks, per-mode maxima). ``vals`` of a fallback row is left for the
    caller.
    """
    n = buf.shape[0]
    ncol = coords.shape[1] + 1
    ts = np.empty(MAX_COLS, dtype=np.int64)
    te = np.empty(MAX_COLS, dtype=np.int64)
    fcap = 64
    f_row = np.empty(fcap, dtype=np.int64)
    f_s = np.empty(fcap, dtype=np.int64)
    f_e = np.empty(fcap, dtype=np.int64)
    f_line = np.empty(fcap, dtype=np.int64)
    nf = 0
    cmax = np.zeros(ncol - 1, dtype=np.int64)
    i = start
    line = 1
    row = 0
    tmp = np.empty(MAX_COLS, dtype=np.int64)
    while i < n:
        lstart = i
        # fast path: plain coordinates (digits, 1..limit) each followed by spaces or tabs, then a value token
        # the exact parse takes, then blanks to the line's end; any other line (comments, blank lines,
        # signs, errors, values for the fallback) is parsed below from its start, as if this had not run
        j = i
        fast = True
        for m in range(ncol - 1):
            s = j
            c = np.int64(0)
            while j < n:
                d = np.int64(buf[j]) - 48
                if d < 0 or d > 9:
                    break
                c = c * 10 + d
                j += 1
            if j == s or j - s > 18 or c < 1 or c > limit or j >= n or (buf[j] != 32 and buf[j] != 9):
                fast = False
                break
            j += 1
            while j < n and (buf[j] == 32 or buf[j] == 9):
                j += 1
            tmp[m] = c
        if fast:
            # the value: a decimal of at most 18 digits with an exponent of at most 4 digits whose power of ten
            # is within 22 is converted here (the same operations as _parse_value: the digits as an integer,
            # then one multiplication or division by an exact power of ten); any other token sends the line
            # to the general parse
            neg = False
            if j < n and (buf[j] == 45 or buf[j] == 43):
                neg = buf[j] == 45
                j += 1
            mant = np.int64(0)
            nd = 0
            frac = -1
            while j < n:
                d = np.int64(buf[j]) - 48
                if 0 <= d <= 9:
                    mant = mant * 10 + d
                    nd += 1
                elif d == -2 and frac < 0:  # the decimal point
                    frac = nd
                else:
                    break
                j += 1
            ex = np.int64(0)
            if j < n and (buf[j] == 101 or buf[j] == 69):
                j += 1
                eneg = False
                if j < n and (buf[j] == 43 or buf[j] == 45):
                    eneg = buf[j] == 45
                    j += 1
                es = j
                while j < n and j - es < 4 and 48 <= buf[j] <= 57:
                    ex = ex * 10 + (np.int64(buf[j]) - 48)
                    j += 1
                if j == es:
                    nd = 0
                if eneg:
                    ex = -ex
            p = ex - (nd - frac if frac >= 0 else 0)
            if (j < n and cls[buf[j]] == 0) or nd == 0 or nd > 18 or mant > 9007199254740992 or (
                    mant != 0 and (p < -22 or p > 22)):
                fast = False
        if fast:
            while j < n and cls[buf[j]] == 1:
                j += 1
            if j >= n or buf[j] == 10:
                if mant == 0:
                    v = -0.0 if neg else 0.0
                else:
                    v = float(mant)
                    if p >= 0:
                        v = v * pow10[p]
                    else:
                        v = v / pow10[-p]
                    if neg:
                        v = -v
                for m in range(ncol - 1):
                    c = tmp[m]
                    coords[row, m] = c - 1
                    if c > cmax[m]:
                        cmax[m] = c
                vals[row] = v
                row += 1
                i = j + 1
                line += 1
                continue
        col = 0
        while True:
            while i < n and cls[buf[i]] == 1:
                i += 1
            if i >= n or cls[buf[i]] != 0:
                break
            s = i
            while i < n and cls[buf[i]] == 0:
                i += 1
            if col < MAX_COLS:
                ts[col] = s
                te[col] = i
            col += 1
        while i < n and buf[i] != 10:
            i += 1
        if col > 0:
            if col != ncol:
                return E_WIDTH, row, line, lstart, f_row, f_s, f_e, f_line, nf, cmax
            for m in range(ncol - 1):
                st, c = _parse_coord(buf, ts[m], te[m], limit)
                if st != OK:
                    return st, row, line, lstart, f_row, f_s, f_e, f_line, nf, cmax
                coords[row, m] = c - 1
                if c > cmax[m]:
                    cmax[m] = c
            ok, v = _parse_value(buf, ts[ncol - 1], te[ncol - 1], pow10)
            if ok == 1:
                vals[row] = v
            else:
                if nf == fcap:
                    fcap *= 2
                    f_row = _grow(f_row, fcap)
                    f_s = _grow(f_s, fcap)
                    f_e = _grow(f_e, fcap)
                    f_line = _grow(f_line, fcap)
                f_row[nf] = row
                f_s[nf] = ts[ncol - 1]
                f_e[nf] = te[ncol - 1]
                f_line[nf] = line
                nf += 1
                vals[row] = 0.0
            row += 1
        i += 1
        line += 1
    return OK, row, 0, 0, f_row, f_s, f_e, f_line, nf, cmax


@njit(cache=True, nogil=True)
def _grow(a, cap):  # pragma: no cover
    b = np.empty(cap, dtype=a.dtype)
    b[: a.shape[0]] = a
    return b


@njit(cache=True, nogil=True)
def gather_tokens(buf, starts, ends, width):  # pragma: no cover
    """The tokens buf[starts[k]:ends[k]] as rows of a (k, width) byte matrix padded with NULs."""
    k = starts.shape[0]
    out = np.zeros((k, width), dtype=np.uint8)
    for r in range(k):
        for j in range(ends[r] - starts[r]):
            out[r, j] = buf[starts[r] + j]
    return out


@njit(cache=True, nogil=True)
def _ndigits(x):  # pragma: no cover
    """Decimal digits of the unsigned integer ``x`` (1 for 0)."""
    d = 1
    while x >= np.uint64(10000):
        x //= np.uint64(10000)
        d += 4
    if x >= np.uint64(100):
        d += 2
        x //= np.uint64(100)
    if x >= np.uint64(10):
        d += 1
    return d


#: the two ASCII digits of 0..99, back to back
_PAIRS = np.frombuffer("".join(f"{k:02d}" for k in range(100)).encode(), dtype=np.uint8).copy()


@njit(cache=True, nogil=True)
def _put_digits(out, o, x, nd, pairs):  # pragma: no cover
    """The ``nd`` decimal digits of ``x`` at ``out[o:o + nd]``, two at a time from the right."""
    t = o + nd
    while x >= np.uint64(100):
        q = x // np.uint64(100)
        r = np.int64(x - q * np.uint64(100))
        t -= 2
        out[t] = pairs[2 * r]
        out[t + 1] = pairs[2 * r + 1]
        x = q
    if x >= np.uint64(10):
        out[t - 2] = pairs[2 * np.int64(x)]
        out[t - 1] = pairs[2 * np.int64(x) + 1]
    else:
        out[t - 1] = np.uint8(48 + x)
    return o + nd


@njit(cache=True, nogil=True)
def format_rows(coords, vbytes):  # pragma: no cover
    """The ``.tns`` text of 0-based ``coords`` (written 1-based) and the values already formatted in the byte
    string ``vbytes``, one per row, each followed by a newline."""
    nnz, N = coords.shape
    size = vbytes.shape[0]
    for r in range(nnz):
        for m in range(N):
            size += _ndigits(np.uint64(coords[r, m] + 1)) + 1  # the digits and the separator
    out = np.empty(size, dtype=np.uint8)
    o = 0
    j = 0
    nv = vbytes.shape[0]
    for r in range(nnz):
        for m in range(N):
            x = np.uint64(coords[r, m] + 1)
            o = _put_digits(out, o, x, _ndigits(x), _PAIRS)
            out[o] = 32
            o += 1
        while j < nv and vbytes[j] != 10:
            out[o] = vbytes[j]
            o += 1
            j += 1
        out[o] = 10
        o += 1
        j += 1
    return out[:o]


@njit(cache=True, nogil=True)
def _put_uint(out, o, x):  # pragma: no cover
    """``x`` (>= 0) in decimal at ``out[o:]``; returns the offset after it."""
    x = np.uint64(x)
    return _put_digits(out, o, x, _ndigits(x), _PAIRS)


@njit(cache=True, nogil=True)
def format_values(vals, pow10):  # pragma: no cover
    """Each value as text that reads back to the same double, one per line, when 15 significant digits
    suffice (checked: the digits are parsed back exactly by Clinger's rule and compared); the rows of the
    others are returned for a correctly rounded formatter (their lines hold only a newline)."""
    n = vals.shape[0]
    out = np.empty(n * 24, dtype=np.uint8)
    miss = np.empty(n, dtype=np.int64)
    nm = 0
    o = 0
    for r in range(n):
        x = vals[r]
        ax = abs(x)
        done = False
        if x == 0.0:
            if np.signbit(x):
                out[o] = 45
                o += 1
            out[o] = 48
            out[o + 1] = 46
            out[o + 2] = 48
            o += 3
            done = True
        elif ax >= 1e-300 and ax < 1e300:
            k = int(np.floor(np.log10(ax)))
            s = 14 - k
            if -22 <= s <= 22:
                M = np.floor(ax * pow10[s] + 0.5) if s >= 0 else np.floor(ax / pow10[-s] + 0.5)
                if M < 9007199254740992.0:
                    back = M / pow10[s] if s >= 0 else M * pow10[-s]
                    if back == ax:
                        mi = np.uint64(M)
                        e = -s
                        while mi % np.uint64(10) == 0 and mi > 0:
                            mi //= np.uint64(10)
                            e += 1
                        nd = _ndigits(mi)
                        if x < 0:
                            out[o] = 45
                            o += 1
                        pt = nd + e  # digits before the decimal point
                        if e >= 0 and pt <= 16:
                            o = _put_uint(out, o, mi)
                            for _ in range(e):
                                out[o] = 48
                                o += 1
                            out[o] = 46
                            out[o + 1] = 48
                            o += 2
                        elif e < 0 and pt > 0:
                            o0 = o
                            o = _put_uint(out, o, mi)
                            # shift the last -e digits right by one to make room for the point
                            for t2 in range(o - 1, o0 + pt - 1, -1):
                                out[t2 + 1] = out[t2]
                            out[o0 + pt] = 46
                            o += 1
                        elif e < 0 and pt > -5:
                            out[o] = 48
                            out[o + 1] = 46
                            o += 2
                            for _ in range(-pt):
                                out[o] = 48
                                o += 1
                            o = _put_uint(out, o, mi)
                        else:
                            o0 = o
                            o = _put_uint(out, o, mi)
                            if nd > 1:
                                for t2 in range(o - 1, o0, -1):
                                    out[t2 + 1] = out[t2]
                                out[o0 + 1] = 46
                                o += 1
                            out[o] = 101
                            o += 1
                            ex = pt - 1
                            if ex < 0:
                                out[o] = 45
                                o += 1
                                ex = -ex
                            o = _put_uint(out, o, ex)
                        done = True
        if not done:
            miss[nm] = r
            nm += 1
        out[o] = 10
        o += 1
    return out[:o], miss[:nm]


@njit(cache=True, nogil=True)
def splice_values(text, miss, fill, fill_w):  # pragma: no cover
    """``text`` (one value per line) with the empty lines of rows ``miss`` filled from the NUL-padded byte
    rows of ``fill``."""
    extra = 0
    for k in range(miss.shape[0]):
        for j in range(fill_w):
            if fill[k, j] == 0:
                break
            extra += 1
    out = np.empty(text.shape[0] + extra, dtype=np.uint8)
    o = 0
    row = 0
    k = 0
    for i in range(text.shape[0]):
        if text[i] == 10:
            if k < miss.shape[0] and miss[k] == row:
                for j in range(fill_w):
                    if fill[k, j] == 0:
                        break
                    out[o] = fill[k, j]
                    o += 1
                k += 1
            row += 1
        out[o] = text[i]
        o += 1
    return out


load_lightly(globals())  # cached kernels load without numba's compiler refresh (tuckerkit/_numba_load.py)
