#!/usr/bin/env python3
"""Writes reference block decodings for tests/quant/quant-decode-test.cpp.

For each quantized GGML type: random blocks (random bytes; fp16 scale fields finite, half of them
realistic, some subnormal; plus blocks from gguf's own quantizer where it has one) go to
OUT/<TYPE>.bin and the gguf package's dequantization of them (gguf.quants, independent of our
C++) to OUT/<TYPE>.f32 (little-endian fp32).
Usage: quant-reference.py OUT_DIR [N_BLOCKS]
"""
import sys
import numpy as np
from gguf import GGMLQuantizationType as T, GGML_QUANT_SIZES
from gguf import quants

out = sys.argv[1]
n_blocks = int(sys.argv[2]) if len(sys.argv) > 2 else 256
rng = np.random.default_rng(4321)

# byte offsets of the fp16 scale fields in each block
HALF_FIELDS = {
    T.Q8_0: [0], T.Q4_0: [0], T.Q4_1: [0, 2], T.Q5_0: [0], T.Q5_1: [0, 2],
    T.Q4_K: [0, 2], T.Q5_K: [0, 2], T.Q6_K: [208],
}


def halves(n):
    """A mix of finite fp16 bit patterns: anything finite, realistic scales, subnormals."""
    h = rng.integers(0, 0x10000, size=n, dtype=np.uint32).astype(np.uint16)
    h[(h & 0x7C00) == 0x7C00] &= np.uint16(0xBFFF)  # no inf / nan
    kind = rng.integers(0, 4, size=n)
    real = (rng.uniform(1e-4, 1.0, size=n) * rng.choice([-1, 1], size=n)).astype(np.float16).view(np.uint16)
    sub = rng.integers(1, 0x400, size=n, dtype=np.uint32).astype(np.uint16) | (rng.integers(0, 2, size=n) << 15).astype(np.uint16)
    h[kind == 1] = real[kind == 1]
    h[kind == 2] = real[kind == 2]
    h[kind == 3] = sub[kind == 3]
    return h


for qtype, fields in HALF_FIELDS.items():
    block, tsize = GGML_QUANT_SIZES[qtype]
    raw = rng.integers(0, 256, size=(n_blocks, tsize), dtype=np.uint8)
    for off in fields:
        raw[:, off:off + 2] = halves(n_blocks).view(np.uint8).reshape(n_blocks, 2)
    raw[0, :] = 0  # a zero block
    try:  # plus blocks from gguf's own quantizer, where it has one
        x = rng.standard_normal((2, block * 4)).astype(np.float32)
        q = quants.quantize(x, qtype)
        raw = np.concatenate([raw.reshape(-1), q.reshape(-1)]).reshape(-1, tsize)
    except NotImplementedError:
        pass
    ref = np.ascontiguousarray(quants.dequantize(raw, qtype), dtype=np.float32)
    assert ref.size * tsize == raw.size * block, (qtype.name, ref.size, raw.size)
    raw.tofile(f"{out}/{qtype.name}.bin")
    ref.astype("<f4").tofile(f"{out}/{qtype.name}.f32")
print("ok")
