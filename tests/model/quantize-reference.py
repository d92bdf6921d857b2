#!/usr/bin/env python3
"""Reads a GGUF file written by our GgufWriter with the `gguf` package (independent of our C++
reader) for tests/model/quantize-test.cpp.

Usage: quantize-reference.py MODEL.gguf OUT_DIR
  OUT_DIR/<tensor name>.f32   the tensor dequantized by gguf.quants (little-endian float32)
  OUT_DIR/meta.json           {"kv": {key: value}, "tensors": {name: {"type": TYPE, "shape": [ggml order]}}}
"""
import json
import os
import sys

import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize

path, out = sys.argv[1], sys.argv[2]
r = GGUFReader(path)
kv = {}
for name, field in r.fields.items():
    if name.startswith("GGUF."):
        continue
    v = field.contents()
    if isinstance(v, (np.generic,)):
        v = v.item()
    kv[name] = v
tensors = {}
for t in r.tensors:
    a = dequantize(t.data, t.tensor_type)
    np.ascontiguousarray(a, dtype="<f4").tofile(os.path.join(out, t.name + ".f32"))
    tensors[t.name] = {"type": t.tensor_type.name, "shape": [int(d) for d in t.shape]}
with open(os.path.join(out, "meta.json"), "w") as f:
    json.dump({"kv": kv, "tensors": tensors}, f)
