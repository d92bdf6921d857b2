#!/usr/bin/env python3
"""Writes reference dequantizations for tests/model/dequant-test.cpp.

For each GGML type, random blocks (random bytes with finite fp16 scale fields, plus blocks made
by gguf's own quantizers where it has one) go to OUT/<TYPE>.bin and the gguf package's
dequantization of them (gguf.quants, independent of our C++) to OUT/<TYPE>.f32 (little-endian).
Usage: dequant-reference.py OUT_DIR [N_BLOCKS]
"""
import sys
import numpy as np
from gguf import GGMLQuantizationType as T, GGML_QUANT_SIZES
from gguf import quants

out = sys.argv[1]
n_blocks = int(sys.argv[2]) if len(sys.argv) > 2 else 512
rng = np.random.default_rng(1234)


def finite_halves(n):
    h = rng.integers(0, 0x10000, size=n, dtype=np.uint32).astype(np.uint16)
    bad = (h & 0x7C00) == 0x7C00  # inf / nan -> clear the exponent's top bit
    h[bad] &= np.uint16(0xBFFF)
    return h


def small_halves(n):
    # realistic scales: |d| in [1e-4, 1)
    return (rng.uniform(1e-4, 1.0, size=n) * rng.choice([-1, 1], size=n)).astype(np.float16).view(np.uint16)


# byte offsets of the fp16 fields in each block
HALF_FIELDS = {
    T.Q8_0: [0], T.Q4_0: [0], T.Q4_1: [0, 2], T.Q4_K: [0, 2], T.Q6_K: [208],
}

for qtype in [T.F32, T.F16, T.BF16, T.Q8_0, T.Q4_0, T.Q4_1, T.Q4_K, T.Q6_K]:
    block, tsize = GGML_QUANT_SIZES[qtype]
    if qtype == T.F32:
        vals = rng.standard_normal(n_blocks * 256).astype(np.float32)
        vals[:4] = [0.0, -0.0, 1e-40, 3.4e38]
        raw = vals.view(np.uint8).reshape(8, -1)
    elif qtype == T.F16:
        raw = finite_halves(n_blocks * 256).view(np.uint8).reshape(8, -1)
    elif qtype == T.BF16:
        b = rng.integers(0, 0x10000, size=n_blocks * 256, dtype=np.uint32).astype(np.uint16)
        b[(b & 0x7F80) == 0x7F80] &= np.uint16(0xBFFF)  # no inf / nan
        raw = b.view(np.uint8).reshape(8, -1)
    else:
        raw = rng.integers(0, 256, size=(n_blocks, tsize), dtype=np.uint8)
        for k, off in enumerate(HALF_FIELDS[qtype]):
            h = finite_halves(n_blocks) if k == 0 and qtype != T.Q4_1 else small_halves(n_blocks)
            raw[:, off:off + 2] = h.view(np.uint8).reshape(n_blocks, 2)
        # half of the blocks with realistic scales
        for off in HALF_FIELDS[qtype]:
            raw[: n_blocks // 2, off:off + 2] = small_halves(n_blocks // 2).view(np.uint8).reshape(-1, 2)
        raw = raw.reshape(4, -1)  # 4 rows of n_blocks/4 blocks
        try:  # plus blocks from gguf's own quantizer, where it has one
            x = rng.standard_normal((2, block * 8)).astype(np.float32)
            q = quants.quantize(x, qtype)
            raw = np.concatenate([raw.reshape(-1), q.reshape(-1)]).reshape(-1, tsize)
        except NotImplementedError:
            raw = raw.reshape(-1, tsize)
    ref = quants.dequantize(raw, qtype)
    ref = np.ascontiguousarray(ref, dtype=np.float32)
    assert ref.size * tsize == raw.size * block, (qtype.name, ref.size, raw.size)
    raw.tofile(f"{out}/{qtype.name}.bin")
    ref.astype("<f4").tofile(f"{out}/{qtype.name}.f32")
print("ok")
