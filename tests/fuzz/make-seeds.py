#!/usr/bin/env python3
"""Writes small valid seed inputs for the fuzzers (standard library only):
   make-seeds.py GGUF_DIR SAFETENSORS_DIR"""
import json
import os
import struct
import sys

gguf_dir, st_dir = sys.argv[1], sys.argv[2]
os.makedirs(gguf_dir, exist_ok=True)
os.makedirs(st_dir, exist_ok=True)


def s(x):
    b = x.encode()
    return struct.pack("<Q", len(b)) + b


def gguf(version, kvs, tensors, align=32):
    out = b"GGUF" + struct.pack("<IQQ", version, len(tensors), len(kvs))
    for k, t, v in kvs:
        out += s(k) + struct.pack("<I", t) + v
    off, blobs = 0, []
    for name, ne, ttype, data in tensors:
        out += s(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", d) for d in ne)
        out += struct.pack("<IQ", ttype, off)
        blobs.append((off, data))
        off += (len(data) + align - 1) // align * align
    out += b"\0" * ((-len(out)) % align)
    base = len(out)
    for o, data in blobs:
        out += b"\0" * (base + o - len(out)) + data
    return out


kvs = [
    ("general.architecture", 8, s("llama")),
    ("llama.block_count", 4, struct.pack("<I", 1)),
    ("llama.rope.freq_base", 6, struct.pack("<f", 10000.0)),
    ("tokenizer.ggml.tokens", 9, struct.pack("<IQ", 8, 3) + s("a") + s("b") + s("<s>")),
    ("tokenizer.ggml.scores", 9, struct.pack("<IQ", 6, 2) + struct.pack("<ff", 0.0, -1.0)),
    ("tokenizer.ggml.token_type", 9, struct.pack("<IQ", 5, 2) + struct.pack("<ii", 1, 3)),
    ("x.bool", 7, b"\1"),
    ("x.i64", 11, struct.pack("<q", -5)),
    ("x.f64", 12, struct.pack("<d", 0.5)),
    ("x.nested", 9, struct.pack("<IQ", 9, 1) + struct.pack("<IQ", 0, 2) + b"\1\2"),
]
q4_1 = struct.pack("<ee", 0.5, -1.0) + bytes(range(16))
q8_0 = struct.pack("<e", 0.25) + bytes(range(32))
q4_k = bytes(range(144))
q6_k = bytes(range(208)) + struct.pack("<e", 0.1)
tensors = [
    ("t.f32", [4, 2], 0, struct.pack("<8f", *range(8))),
    ("t.f16", [8], 1, struct.pack("<8e", *range(8))),
    ("t.q4_1", [32], 3, q4_1),
    ("t.q8_0", [32], 8, q8_0),
    ("t.q4_k", [256], 12, q4_k),
    ("t.q6_k", [256], 14, q6_k),
    ("t.bf16", [2, 2], 30, b"\0\x3f" * 4),
]
for v in (2, 3):
    open(f"{gguf_dir}/full-v{v}.gguf", "wb").write(gguf(v, kvs, tensors))
open(f"{gguf_dir}/align64.gguf", "wb").write(
    gguf(3, kvs[:2] + [("general.alignment", 4, struct.pack("<I", 64))], tensors[:2], align=64))
open(f"{gguf_dir}/empty.gguf", "wb").write(gguf(3, [], []))


def st(tensors, meta=None):
    header, data = {}, b""
    if meta:
        header["__metadata__"] = meta
    for name, dtype, shape, blob in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(blob)]}
        data += blob
    h = json.dumps(header).encode()
    return struct.pack("<Q", len(h)) + h + data


open(f"{st_dir}/mixed.safetensors", "wb").write(st([
    ("a", "F32", [2, 2], struct.pack("<4f", 1, 2, 3, 4)),
    ("b", "F16", [3], struct.pack("<3e", 1, 2, 3)),
    ("c", "BF16", [2], b"\0\x3f\0\x40"),
    ("d", "I64", [1], struct.pack("<q", 7)),
    ("e", "F32", [0], b""),
], {"format": "pt"}))
open(f"{st_dir}/one.safetensors", "wb").write(st([("w", "F32", [], struct.pack("<f", 1))]))
