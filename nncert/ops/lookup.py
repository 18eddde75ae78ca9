"""Lookups and selections: EMBEDDING_LOOKUP, HASHTABLE_LOOKUP, LSH_PROJECTION, TOPK_V2.

EMBEDDING_LOOKUP and HASHTABLE_LOOKUP copy rows of a table (the "strict" criterion; a miss
of HASHTABLE_LOOKUP is a row of zero bytes, for a quantised table the stored value 0, not
the real 0). TOPK_V2 sorts each last-dimension row: equal values come out with the larger
index first (NNAPI's rule; TFLite and ONNX put the smaller index first, so their exports
reverse the row before and map the indices back after).

LSH_PROJECTION hashes bytes: for each seed (a float of the hash tensor, as a 32-bit float)
and each row of the input (its stored bytes: dimension 0 is the row), the key is the seed's
four bytes followed by the row's, hashed with FarmHash's Fingerprint64 (``fingerprint64``,
written here from the published algorithm: the "na" 64-bit hash). The hash, read as a
signed 64-bit integer and converted to a double, times the row's weight (1 without
weights), is summed over the rows in order, in double precision; the bit is 1 where the
sum is positive. DENSE (2) outputs every bit; SPARSE (3, HAL 1.2) packs each hash
function's bits into an int32, most significant first, plus k * 2**bits for function k;
SPARSE_DEPRECATED (1) packs them without the offset. Android's CPU path takes the weight
with DENSE only and rejects it with the sparse types (``check``).
"""

from __future__ import annotations

import math
import struct

import numpy as np

from nncert.hal.model import dtype_of
from nncert.hal.types import OperandType as T
from nncert.hal.types import OperationType as Op
from nncert.hal.types import Version
from nncert.ops import edges
from nncert.ops.base import (
    Arg,
    OpContext,
    OpRecord,
    SampleContext,
    ShapeError,
    Signature,
    fixed,
    same_as,
    variant,
    variants,
)

_F16, _F32, _I32 = T.TENSOR_FLOAT16, T.TENSOR_FLOAT32, T.TENSOR_INT32
_Q8, _Q8S = T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED
#: "Supported rank: from 2" (8 stands in for no upper bound, as in shape.py).
_FROM_1 = tuple(range(1, 9))
_FROM_2 = tuple(range(2, 9))


def _vs(table: dict[Version, tuple[T, ...]]) -> tuple:
    return tuple(v for version, types in table.items() for v in variants(version, *types))


def _int_vector(ctx: OpContext, name: str) -> np.ndarray:
    dims = ctx.dims(name)
    if len(dims) != 1:
        raise ShapeError(f"{name} must be a 1-D tensor, has shape {list(dims)}")
    return np.asarray(ctx.value(name), np.int64).reshape(-1)


def _rows(s: SampleContext, lo_rank: int = 2) -> tuple[int, ...]:
    return s.dims(s.draw.int(lo_rank, 4), 1, 5)


# ---------------------------------------------------------------------------------------
# FarmHash Fingerprint64 (farmhashna::Hash64), from the published algorithm

_M64 = (1 << 64) - 1
_K0 = 0xC3A5C85C97CB3127
_K1 = 0xB492B66FBE98F273
_K2 = 0x9AE16A3B2F90404F


def _u64(b: bytes, i: int) -> int:
    return int.from_bytes(b[i:i + 8], "little")


def _u32(b: bytes, i: int) -> int:
    return int.from_bytes(b[i:i + 4], "little")


def _rot(v: int, s: int) -> int:
    return v if s == 0 else ((v >> s) | (v << (64 - s))) & _M64


def _shift_mix(v: int) -> int:
    return v ^ (v >> 47)


def _len16(u: int, v: int, mul: int) -> int:
    a = ((u ^ v) * mul) & _M64
    a ^= a >> 47
    b = ((v ^ a) * mul) & _M64
    b ^= b >> 47
    return (b * mul) & _M64


def _len0to16(s: bytes) -> int:
    n = len(s)
    if n >= 8:
        mul = _K2 + n * 2
        a = (_u64(s, 0) + _K2) & _M64
        b = _u64(s, n - 8)
        c = (_rot(b, 37) * mul + a) & _M64
        d = ((_rot(a, 25) + b) * mul) & _M64
        return _len16(c, d, mul)
    if n >= 4:
        mul = _K2 + n * 2
        return _len16(n + (_u32(s, 0) << 3), _u32(s, n - 4), mul)
    if n > 0:
        y = s[0] + (s[n >> 1] << 8)
        z = n + (s[n - 1] << 2)
        return (_shift_mix(((y * _K2) ^ (z * _K0)) & _M64) * _K2) & _M64
    return _K2


def _len17to32(s: bytes) -> int:
    n = len(s)
    mul = _K2 + n * 2
    a = (_u64(s, 0) * _K1) & _M64
    b = _u64(s, 8)
    c = (_u64(s, n - 8) * mul) & _M64
    d = (_u64(s, n - 16) * _K2) & _M64
    return _len16((_rot((a + b) & _M64, 43) + _rot(c, 30) + d) & _M64,
                  (a + _rot((b + _K2) & _M64, 18) + c) & _M64, mul)


def _len33to64(s: bytes) -> int:
    n = len(s)
    mul = _K2 + n * 2
    a = (_u64(s, 0) * _K2) & _M64
    b = _u64(s, 8)
    c = (_u64(s, n - 8) * mul) & _M64
    d = (_u64(s, n - 16) * _K2) & _M64
    y = (_rot((a + b) & _M64, 43) + _rot(c, 30) + d) & _M64
    z = _len16(y, (a + _rot((b + _K2) & _M64, 18) + c) & _M64, mul)
    e = (_u64(s, 16) * mul) & _M64
    f = _u64(s, 24)
    g = ((y + _u64(s, n - 32)) * mul) & _M64
    h = ((z + _u64(s, n - 24)) * mul) & _M64
    return _len16((_rot((e + f) & _M64, 43) + _rot(g, 30) + h) & _M64,
                  (e + _rot((f + a) & _M64, 18) + g) & _M64, mul)


def _weak32(s: bytes, i: int, a: int, b: int) -> tuple[int, int]:
    w, x, y, z = _u64(s, i), _u64(s, i + 8), _u64(s, i + 16), _u64(s, i + 24)
    a = (a + w) & _M64
    b = _rot((b + a + z) & _M64, 21)
    c = a
    a = (a + x + y) & _M64
    b = (b + _rot(a, 44)) & _M64
    return (a + z) & _M64, (b + c) & _M64


def fingerprint64(s: bytes) -> int:
    """FarmHash's Fingerprint64 of ``s`` (an unsigned 64-bit integer)."""
    n = len(s)
    if n <= 16:
        return _len0to16(s)
    if n <= 32:
        return _len17to32(s)
    if n <= 64:
        return _len33to64(s)
    seed = 81
    x = seed
    y = (seed * _K1 + 113) & _M64
    z = (_shift_mix((y * _K2 + 113) & _M64) * _K2) & _M64
    v = (0, 0)
    w = (0, 0)
    x = (x * _K2 + _u64(s, 0)) & _M64
    end = ((n - 1) // 64) * 64
    last64 = end + ((n - 1) & 63) - 63
    i = 0
    while True:
        x = (_rot((x + y + v[0] + _u64(s, i + 8)) & _M64, 37) * _K1) & _M64
        y = (_rot((y + v[1] + _u64(s, i + 48)) & _M64, 42) * _K1) & _M64
        x ^= w[1]
        y = (y + v[0] + _u64(s, i + 40)) & _M64
        z = (_rot((z + w[0]) & _M64, 33) * _K1) & _M64
        v = _weak32(s, i, (v[1] * _K1) & _M64, (x + w[0]) & _M64)
        w = _weak32(s, i + 32, (z + w[1]) & _M64, (y + _u64(s, i + 16)) & _M64)
        z, x = x, z
        i += 64
        if i == end:
            break
    mul = _K1 + ((z & 0xFF) << 1)
    i = last64
    w0 = (w[0] + ((n - 1) & 63)) & _M64
    v0 = (v[0] + w0) & _M64
    w0 = (w0 + v0) & _M64
    v, w = (v0, v[1]), (w0, w[1])
    x = (_rot((x + y + v[0] + _u64(s, i + 8)) & _M64, 37) * mul) & _M64
    y = (_rot((y + v[1] + _u64(s, i + 48)) & _M64, 42) * mul) & _M64
    x ^= (w[1] * 9) & _M64
    y = (y + v[0] * 9 + _u64(s, i + 40)) & _M64
    z = (_rot((z + w[0]) & _M64, 33) * mul) & _M64
    v = _weak32(s, i, (v[1] * mul) & _M64, (x + w[0]) & _M64)
    w = _weak32(s, i + 32, (z + w[1]) & _M64, (y + _u64(s, i + 16)) & _M64)
    z, x = x, z
    return _len16((_len16(v[0], w[0], mul) + _shift_mix(y) * _K0 + z) & _M64,
                  (_len16(v[1], w[1], mul) + x) & _M64, mul)


# ---------------------------------------------------------------------------------------
# EMBEDDING_LOOKUP


def _embedding_check(ctx: OpContext) -> None:
    n = ctx.dims("values")[0]
    idx = _int_vector(ctx, "lookups")
    if idx.size and (idx.min() < 0 or idx.max() >= n):
        raise ShapeError(f"lookups must lie in 0..{n - 1} (the rows of values), "
                         f"got {int(idx.min())}..{int(idx.max())}")


def _embedding_shape(ctx: OpContext) -> list[tuple[int, ...]]:
    dims = ctx.dims("values")
    if len(dims) < 2:
        raise ShapeError(f"values has rank {len(dims)}, EMBEDDING_LOOKUP takes rank 2 or more")
    return [(*ctx.dims("lookups"), *dims[1:])]


def _embedding_kernel(ctx: OpContext) -> list[np.ndarray]:
    _embedding_check(ctx)
    return [np.take(ctx.value("values"), _int_vector(ctx, "lookups"), axis=0)]


def _lookups(s: SampleContext, rows: int, k: int) -> np.ndarray:
    return s.draw.integers((k,), 0, rows - 1).astype(np.int32)


def _embedding_sample(s: SampleContext) -> None:
    dims = _rows(s)
    k = s.draw.int(1, 5)
    s.tensor("lookups", (k,), value=_lookups(s, dims[0], k), const=s.draw.bool(0.3))
    s.tensor("values", dims)


def _first_last_rows(s: SampleContext) -> None:
    """Lookups of the first and the last row (twice each, in both orders)."""
    dims = (s.draw.int(3, 6), *s.dims(s.draw.int(1, 2), 1, 4))
    last = dims[0] - 1
    s.tensor("lookups", (4,), value=np.array([last, 0, 0, last], np.int32))
    s.tensor("values", dims)


#: Rows of the long EMBEDDING_LOOKUP table: past 2**16, so that a lookup held in 16 bits wraps.
LONG_TABLE = 70_000


def _long_table(s: SampleContext) -> None:
    """A table of LONG_TABLE rows of one value, six lookups: three past 65536, one below it,
    the first row and the last."""
    n = LONG_TABLE
    look = [*s.draw.integers((3,), 1 << 16, n - 1), s.draw.int(1, (1 << 16) - 1), 0, n - 1]
    s.tensor("lookups", (6,), value=np.asarray(look, np.int32), const=s.draw.bool(0.3))
    s.tensor("values", (n, 1))


# EMBEDDING_LOOKUP's own edge: generated tables have a few rows, so a driver holding lookups
# (or the row offsets they become) in 16 bits passed every case.
_LONG_TABLE = edges.Edge("long_table", "long", f"a table of {LONG_TABLE} rows, lookups past 65536",
                         sample=_long_table, heavy=True)


_FIRST_LAST = edges.Edge("rows_first_last", "lookup",
                         "lookups of the table's first and last rows, each twice",
                         sample=_first_last_rows)

EMBEDDING_LOOKUP = OpRecord(
    Op.EMBEDDING_LOOKUP,
    (Signature((Arg("lookups", _I32, ranks=(1,)), Arg("values", ranks=_FROM_2)),
               (Arg("output", ranks=_FROM_2, quant=same_as("values")),)),),
    _vs({Version.V1_0: (_F32,), Version.V1_2: (_I32, _Q8), Version.V1_3: (_F16, _Q8S)}),
    _embedding_kernel, _embedding_shape, _embedding_sample,
    criterion="strict", check=_embedding_check, edges=(_FIRST_LAST, _LONG_TABLE, edges.int32_wide("any")),
    picks=("lookups", "values", None),
    doc="rows of values (dimension 0) picked by lookups; an index out of range fails",
)


# ---------------------------------------------------------------------------------------
# HASHTABLE_LOOKUP


def _hashtable_check(ctx: OpContext) -> None:
    n = ctx.dims("values")[0]
    if ctx.dims("keys") != (n,):
        raise ShapeError(f"keys has shape {list(ctx.dims('keys'))}, values has {n} rows: "
                         f"keys must have shape [{n}]")
    keys = _int_vector(ctx, "keys")
    if keys.size > 1 and np.any(np.diff(keys) <= 0):
        raise ShapeError("keys must be sorted in ascending order, without repeats (a binary "
                         "search finds them)")


def _hashtable_shape(ctx: OpContext) -> list[tuple[int, ...]]:
    dims = ctx.dims("values")
    if len(dims) < 2:
        raise ShapeError(f"values has rank {len(dims)}, HASHTABLE_LOOKUP takes rank 2 or more")
    if ctx.dims("keys") != (dims[0],):
        raise ShapeError(f"keys has shape {list(ctx.dims('keys'))}, values has {dims[0]} rows: "
                         f"keys must have shape [{dims[0]}]")
    k = ctx.dims("lookups")
    return [(*k, *dims[1:]), k]


def _hashtable_kernel(ctx: OpContext) -> list[np.ndarray]:
    _hashtable_check(ctx)
    keys = _int_vector(ctx, "keys")
    lookups = _int_vector(ctx, "lookups")
    values = ctx.value("values")
    pos = np.searchsorted(keys, lookups)
    hit = (pos < keys.size) & (keys[np.minimum(pos, keys.size - 1)] == lookups)
    rows = np.take(values, np.where(hit, pos, 0), axis=0)
    o = ctx.operand("values")
    # A miss is a row of zero bytes: the stored value 0, real (0 - zero point) x scale.
    miss = (0 - o.zero_point) * o.scale if o.type.is_quant else 0
    out = np.where(hit.reshape((-1,) + (1,) * (values.ndim - 1)), rows, miss)
    return [out.astype(values.dtype), hit.astype(np.float64)]


def _hashtable_sample(s: SampleContext) -> None:
    dims = _rows(s)
    n = dims[0]
    keys = np.sort(s.draw.rng.choice(np.arange(-40, 41), size=n, replace=False)).astype(np.int32)
    k = s.draw.int(1, 5)
    # About half the lookups hit.
    look = np.where(s.draw.integers((k,), 0, 1) == 1, keys[s.draw.integers((k,), 0, n - 1)],
                    s.draw.integers((k,), -45, 45)).astype(np.int32)
    s.tensor("lookups", (k,), value=look, const=s.draw.bool(0.3))
    s.tensor("keys", (n,), value=keys, const=True)
    s.tensor("values", dims)


def _all_miss_and_ends(s: SampleContext) -> None:
    """Lookups below, above and between the keys, and the first and last key."""
    n = s.draw.int(3, 5)
    dims = (n, *s.dims(s.draw.int(1, 2), 1, 4))
    keys = (np.arange(n) * 10 - 7).astype(np.int32)
    look = np.array([keys[0] - 1, keys[0], keys[0] + 5, keys[-1], keys[-1] + 1,
                     np.iinfo(np.int32).min, np.iinfo(np.int32).max], np.int32)
    s.tensor("lookups", (look.size,), value=look)
    s.tensor("keys", (n,), value=keys, const=True)
    s.tensor("values", dims)


_MISSES = edges.Edge("keys_ends_and_misses", "lookup",
                     "lookups of the first and last keys, just outside them, between two keys "
                     "and at the int32 extremes", sample=_all_miss_and_ends)


def _wide_keys(s: SampleContext) -> None:
    """Keys 1..3 apart past 2^30 (either sign), lookups of them and of the values between
    and beside them: distinct int32 keys that are one float32 value."""
    n = s.draw.int(3, 6)
    dims = (n, *s.dims(s.draw.int(1, 2), 1, 3))
    base = s.draw.choice((1, -1)) * s.draw.int(2**30, 2**31 - 2**10)
    keys = (base + np.cumsum(s.draw.integers((n,), 1, 3))).astype(np.int32)
    near = np.concatenate([keys, keys + 1, keys - 1])
    look = near[s.draw.integers((s.draw.int(4, 8),), 0, near.size - 1)].astype(np.int32)
    s.tensor("lookups", (look.size,), value=look)
    s.tensor("keys", (n,), value=keys, const=True)
    s.tensor("values", dims)


# Generated keys lie within +-40: a driver comparing keys in float32 (a GPU's) is exact there.
_WIDE_KEYS = edges.Edge("wide_keys", "lookup", "keys 1..3 apart past 2^30, looked up and missed "
                        "by one: distinct int32 keys equal in float32", sample=_wide_keys)

HASHTABLE_LOOKUP = OpRecord(
    Op.HASHTABLE_LOOKUP,
    (Signature((Arg("lookups", _I32, ranks=(1,)), Arg("keys", _I32, ranks=(1,)),
                Arg("values", ranks=_FROM_2)),
               (Arg("output", ranks=_FROM_2, quant=same_as("values")),
                Arg("hits", _Q8, ranks=(1,), quant=fixed(1.0, 0)))),),
    _vs({Version.V1_0: (_F32, _I32, _Q8)}),
    _hashtable_kernel, _hashtable_shape, _hashtable_sample,
    criterion="strict", check=_hashtable_check, edges=(_MISSES, _WIDE_KEYS, edges.int32_wide("any")),
    graphs="its keys must be a sorted table of distinct int32 values with one entry per row "
           "of values, which no other operation of a random graph computes",
    doc="for each lookup, the row of values at the position of the equal key (keys sorted "
        "ascending), or a row of zero bytes on a miss; hits is 1 for a hit, 0 for a miss",
)


# ---------------------------------------------------------------------------------------
# LSH_PROJECTION

SPARSE_DEPRECATED, DENSE, SPARSE = 1, 2, 3


def _lsh_checked(ctx: OpContext) -> tuple[int, int, int]:
    """(number of hash functions, bits per function, projection type)."""
    hdims = ctx.dims("hash")
    if len(hdims) != 2:
        raise ShapeError(f"hash must be a 2-D tensor, has shape {list(hdims)}")
    num_hash, num_bits = hdims
    if num_bits > 32:
        raise ShapeError(f"hash has {num_bits} bits per function (dimension 1), at most 32")
    kind = int(ctx.value("type"))
    if kind not in (SPARSE_DEPRECATED, DENSE, SPARSE):
        raise ShapeError(f"type must be 1 (SPARSE_DEPRECATED), 2 (DENSE) or 3 (SPARSE), is {kind}")
    if len(ctx.dims("input")) < 1:
        raise ShapeError("input must have rank 1 or more")
    if kind == DENSE:
        if not ctx.has("weight"):
            raise ShapeError("type DENSE takes a weight (Android's CPU path requires it)")
        wdims = ctx.dims("weight")
        if len(wdims) != 1 or wdims[0] != ctx.dims("input")[0]:
            raise ShapeError(f"weight has shape {list(wdims)}, must be [{ctx.dims('input')[0]}] "
                             f"(input dimension 0)")
    else:
        if ctx.has("weight"):
            raise ShapeError("the sparse types take no weight (Android's CPU path rejects it)")
        if num_bits + math.ceil(math.log2(max(num_hash, 1))) > 32:
            raise ShapeError(f"sparse projection: {num_bits} bits + ceil(log2({num_hash})) "
                             f"exceeds 32")
    return num_hash, num_bits, kind


def _lsh_check(ctx: OpContext) -> None:
    _lsh_checked(ctx)


def _lsh_shape(ctx: OpContext) -> list[tuple[int, ...]]:
    num_hash, num_bits, kind = _lsh_checked(ctx)
    return [(num_hash * num_bits,) if kind == DENSE else (num_hash,)]


def lsh_bits(seeds: np.ndarray, rows: list[bytes], weights: np.ndarray | None) -> np.ndarray:
    """One bit per seed: the sign of sum over rows of weight x Fingerprint64(seed bytes +
    row bytes), the hash read as int64, summed in double precision in row order."""
    bits = np.zeros(len(seeds), np.int32)
    for j, seed in enumerate(seeds):
        head = struct.pack("<f", float(seed))
        score = 0.0
        for i, row in enumerate(rows):
            h = fingerprint64(head + row)
            running = float(h - (1 << 64) if h >> 63 else h)
            score += running if weights is None else float(weights[i]) * running
        bits[j] = score > 0
    return bits


def _lsh_kernel(ctx: OpContext) -> list[np.ndarray]:
    num_hash, num_bits, kind = _lsh_checked(ctx)
    x = np.ascontiguousarray(np.asarray(ctx.value("input")).astype(dtype_of(ctx.operand("input").type)))
    n = ctx.dims("input")[0]
    flat = x.tobytes()
    width = len(flat) // n if n else 0
    rows = [flat[i * width:(i + 1) * width] for i in range(n)]
    ht = ctx.operand("hash").type
    # The seeds are the hash tensor's values (float16 ones widened exactly) as 32-bit floats.
    seeds = np.asarray(ctx.value("hash")).astype(dtype_of(ht)).astype(np.float32).reshape(-1)
    weights = None
    if ctx.has("weight"):
        weights = np.asarray(ctx.value("weight")).astype(dtype_of(ht)).astype(np.float64)
    bits = lsh_bits(seeds, rows, weights).reshape(num_hash, num_bits)
    if kind == DENSE:
        return [bits.reshape(-1)]
    packed = np.zeros(num_hash, np.int64)
    for j in range(num_bits):
        packed = (packed << 1) | bits[:, j]
    if kind == SPARSE:
        packed += np.arange(num_hash, dtype=np.int64) << num_bits
    return [((packed + (1 << 31)) % (1 << 32) - (1 << 31)).astype(np.int32)]


def _lsh_sample(s: SampleContext) -> None:
    kind = s.draw.choice((DENSE, SPARSE_DEPRECATED, SPARSE) if s.variant.version >= Version.V1_2
                         else (DENSE, SPARSE_DEPRECATED))
    num_hash, num_bits = s.draw.int(1, 4), s.draw.int(1, 4)
    s.tensor("hash", (num_hash, num_bits), value=np.round(s.draw.array((num_hash, num_bits), -9, 9), 3),
             const=s.draw.bool(0.7))
    it = s.type("input")
    dims = s.dims(s.draw.int(1, 3), 1, 4)
    if it is _I32:
        s.tensor("input", dims, value=s.draw.integers(dims, -10**6, 10**6).astype(np.int32))
    else:
        s.tensor("input", dims)
    if kind == DENSE:
        s.tensor("weight", (dims[0],), value=np.round(s.draw.array((dims[0],), -1, 1), 2))
    else:
        s.omit("weight")
    s.scalar("type", kind)


def _lsh_min_version(ctx: OpContext) -> Version:
    if int(ctx.value("type")) == SPARSE:
        return max(ctx.match.version, Version.V1_2)
    return ctx.match.version


def _long_rows(s: SampleContext) -> None:
    """Rows of 17..100 bytes (keys past FarmHash's 16-, 32- and 64-byte branches)."""
    it = s.type("input")
    width = s.draw.int(17, 100) // max(1, np.dtype(dtype_of(it)).itemsize)
    dims = (s.draw.int(1, 3), width)
    s.tensor("hash", (2, 3), value=np.round(s.draw.array((2, 3), -9, 9), 3))
    s.tensor("input", dims)
    s.tensor("weight", (dims[0],), value=np.round(s.draw.array((dims[0],), -1, 1), 2))
    s.scalar("type", DENSE)


_LONG_KEYS = edges.Edge("long_keys", "lookup",
                        "input rows of 17 to 100 bytes: hash keys past FarmHash's 16-, 32- "
                        "and 64-byte branches", sample=_long_rows)


def _lsh_types() -> tuple:
    out = [variant(Version.V1_0, T=_F32, I=i) for i in (_F32, _I32, _Q8)]
    out.append(variant(Version.V1_2, T=_F32, I=_F16))
    out += [variant(Version.V1_2, T=_F16, I=i) for i in (_F16, _F32, _I32, _Q8)]
    return tuple(out)


LSH_PROJECTION = OpRecord(
    Op.LSH_PROJECTION,
    (Signature((Arg("hash", ranks=(2,)), Arg("input", "I", ranks=_FROM_1),
                Arg("weight", ranks=(1,), optional=True), Arg("type", T.INT32)),
               (Arg("output", _I32, ranks=(1,)),)),),
    _lsh_types(), _lsh_kernel, _lsh_shape, _lsh_sample,
    criterion="strict", dequantize=False, check=_lsh_check,
    min_version=_lsh_min_version, edges=(_LONG_KEYS,), reads_bytes=True,
    graphs="its bits hash the input's stored bytes (one unit in the last place anywhere changes "
           "them), and its hash and weight tensors are parameters rather than data",
    doc="sign bits of sum over input rows of weight x Fingerprint64(seed + row bytes), one "
        "per seed of hash: every bit (DENSE), or packed per hash function (SPARSE, "
        "SPARSE_DEPRECATED)",
)


# ---------------------------------------------------------------------------------------
# TOPK_V2


def _topk_k(ctx: OpContext) -> int:
    dims = ctx.dims("input")
    if len(dims) < 1:
        raise ShapeError("input must have rank 1 or more")
    k = int(ctx.value("k"))
    if not 1 <= k <= dims[-1]:
        raise ShapeError(f"k = {k} must lie in 1..{dims[-1]} (the last dimension)")
    return k


def _topk_check(ctx: OpContext) -> None:
    _topk_k(ctx)


def _topk_shape(ctx: OpContext) -> list[tuple[int, ...]]:
    k = _topk_k(ctx)
    dims = ctx.dims("input")
    return [(*dims[:-1], k)] * 2


def topk(x: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The k largest values of each last-axis row, descending; equal values larger index first."""
    n = x.shape[-1]
    # A stable sort of the reversed row, descending: ties keep reversed order (larger index first).
    rev = x[..., ::-1]
    order = np.argsort(-rev, axis=-1, kind="stable")[..., :k]
    idx = (n - 1 - order).astype(np.int32)
    return np.take_along_axis(x, idx.astype(np.int64), axis=-1), idx


def _topk_kernel(ctx: OpContext) -> list[np.ndarray]:
    values, idx = topk(np.asarray(ctx.value("input")), _topk_k(ctx))
    return [values, idx]


def _distinct_rows(s: SampleContext, dims: tuple[int, ...]) -> np.ndarray:
    """Values with no two equal (or nearly equal) in a last-axis row."""
    n = dims[-1]
    ranks = np.argsort(np.argsort(s.draw.array(dims, 0.0, 1.0), axis=-1), axis=-1)
    t = s.type("input")
    if t.is_quant or t is _I32:
        lo, hi = t.quant_range if t.is_quant else (-50, 50)
        width = (hi - lo + 1) // n
        return lo + ranks * width + s.draw.integers(dims, 0, width - 1)
    return (ranks + s.draw.array(dims, 0.0, 0.8)) * (4.0 / n) - 2.0


def _topk_sample(s: SampleContext) -> None:
    dims = s.dims(s.draw.int(1, 4), 1, 6)
    s.tensor("input", dims, value=_distinct_rows(s, dims))
    s.scalar("k", s.draw.int(1, dims[-1]))


def _ties_sample(s: SampleContext) -> None:
    """Rows of a few distinct values, each repeated, k the whole row (every tie ordered)."""
    dims = (*s.dims(s.draw.int(0, 2), 1, 3), s.draw.int(4, 8))
    t = s.type("input")
    pick = s.draw.integers(dims, 0, 2)
    if t.is_quant:
        lo = t.quant_range[0]
        s.tensor("input", dims, value=(lo + 40 + pick * 60).astype(np.int64), scale=0.05, zero_point=lo + 100)
    elif t is _I32:
        s.tensor("input", dims, value=(pick * 7 - 7).astype(np.int32))
    else:
        s.tensor("input", dims, value=pick * 0.5 - 0.5)
    s.scalar("k", dims[-1] if s.draw.bool() else s.draw.int(2, dims[-1] - 1))


def _k_is_n(s: SampleContext) -> None:
    dims = s.dims(s.draw.int(1, 3), 1, 6)
    s.tensor("input", dims, value=_distinct_rows(s, dims))
    s.scalar("k", dims[-1])


def _k_is_1(s: SampleContext) -> None:
    dims = s.dims(s.draw.int(1, 3), 2, 6)
    s.tensor("input", dims, value=_distinct_rows(s, dims))
    s.scalar("k", 1)


def _wide_rows(s: SampleContext) -> None:
    """Rows of 300..600 distinct integers (exact in every float type), k of 4..12, each row's
    largest at an index past 255."""
    rows, n = s.draw.int(1, 2), s.draw.int(300, 600)
    x = np.argsort(s.draw.array((rows, n), 0.0, 1.0), axis=1) - n // 2
    for r in range(rows):
        top, at = int(np.argmax(x[r])), s.draw.int(256, n - 1)
        x[r, top], x[r, at] = x[r, at], x[r, top]
    s.tensor("input", (rows, n), value=x.astype(np.int32 if s.type("input") is _I32 else np.float64))
    s.scalar("k", s.draw.int(4, 12))


#: Length of the long TOPK_V2 rows: past 2**16, so that an index held in 16 bits wraps.
TOPK_LONG_ROW = 70_000


def _long_row(s: SampleContext) -> None:
    """One or two rows of TOPK_LONG_ROW values, k of 4..8: the k largest distinct, above every
    other value, all but one of them past index 65536 (the other below it)."""
    rows, n, k = s.draw.int(1, 2), TOPK_LONG_ROW, s.draw.int(4, 8)
    t = s.type("input")
    if t.is_quant or t is _I32:
        lo, hi = t.quant_range if t.is_quant else (-50, 50)
        x = s.draw.integers((rows, n), lo, hi - k)  # stored values
        top = np.arange(hi - k + 1, hi + 1)
    else:
        x = s.draw.array((rows, n), -2.0, 1.0)
        top = 1.0 + np.arange(1, k + 1) * 0.125
    for r in range(rows):
        at = [*s.draw.integers((2 * k,), 1 << 16, n - 1), s.draw.int(0, (1 << 16) - 1)]
        at = [*list(dict.fromkeys(int(a) for a in at[:-1]))[:k - 1], int(at[-1])]
        x[r, at] = top[np.argsort(s.draw.array((k,), 0.0, 1.0))][:len(at)]
    s.tensor("input", (rows, n), value=x.astype(np.int32) if t is _I32 else x)
    s.scalar("k", k)


_TOPK_EDGES = (
    edges.Edge("ties", "selection", "rows of repeated values: equal values come out larger "
               "index first (NNAPI's rule)", sample=_ties_sample),
    edges.Edge("k_is_n", "selection", "k equal to the last dimension: the whole row sorted",
               sample=_k_is_n),
    edges.Edge("k_is_1", "selection", "k = 1: the maximum of each row", sample=_k_is_1),
    edges.int32_wide("near"),
    edges.past_255("rows of 300..600, the largest past index 255 (not quantised: 8 bits hold no "
                   "300 distinct values)", sample=_wide_rows,
                   applies=lambda record, sig, var_: not var_.primary.is_quant),
    # Heavy: the real runtimes sort 70,000 values per row.
    edges.Edge("long_axis", "long", f"rows of {TOPK_LONG_ROW}, the k largest past index 65536 but one: "
               "past a 16-bit index", sample=_long_row, heavy=True),
)

TOPK_V2 = OpRecord(
    Op.TOPK_V2,
    (Signature((Arg("input", ranks=_FROM_1), Arg("k", T.INT32)),
               (Arg("values", ranks=_FROM_1, quant=same_as("input")),
                Arg("indices", _I32, ranks=_FROM_1))),),
    _vs({Version.V1_2: (_F16, _F32, _I32, _Q8), Version.V1_3: (_Q8S,)}),
    _topk_kernel, _topk_shape, _topk_sample,
    criterion="strict", check=_topk_check, edges=_TOPK_EDGES,
    doc="the k largest values of each last-dimension row in descending order and their "
        "indices; equal values come out with the larger index first",
)


RECORDS: list[OpRecord] = [EMBEDDING_LOOKUP, HASHTABLE_LOOKUP, LSH_PROJECTION, TOPK_V2]
