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

# ---------------------------------------------------------------- tokenizer loaders
# tokenizer-fuzz inputs: a loader byte (0 GGUF, 1 tokenizer.json folder, 2 vocab.json + merges.txt)
# then the file(s), cut at lines "--8<--".
if len(sys.argv) > 3:
    tok_dir = sys.argv[3]
    os.makedirs(tok_dir, exist_ok=True)
    CUT = b"\n--8<--\n"

    def bytes_to_unicode():
        """GPT-2's byte -> printable character table (byte-level BPE token spelling)."""
        bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
        cs, n = bs[:], 0
        for b in range(256):
            if b not in bs:
                bs.append(b)
                cs.append(256 + n)
                n += 1
        return {b: chr(c) for b, c in zip(bs, cs)}

    def str_array(items):
        return struct.pack("<IQ", 8, len(items)) + b"".join(s(x) for x in items)

    def bpe_gguf(tokens, merges, types, pre="smollm", extra=()):
        kvs = [("general.architecture", 8, s("llama")), ("tokenizer.ggml.model", 8, s("gpt2")),
               ("tokenizer.ggml.pre", 8, s(pre)), ("tokenizer.ggml.tokens", 9, str_array(tokens)),
               ("tokenizer.ggml.token_type", 9, struct.pack("<IQ", 5, len(types)) +
                b"".join(struct.pack("<i", t) for t in types)),
               ("tokenizer.ggml.merges", 9, str_array(merges))] + list(extra)
        return gguf(3, kvs, [])

    def hf_json(tokens, merges, types):
        vocab = {t: i for i, t in enumerate(tokens) if types[i] == 1}
        added = [{"id": i, "content": t, "special": types[i] == 3, "lstrip": False, "rstrip": False}
                 for i, t in enumerate(tokens) if types[i] in (3, 4)]
        return json.dumps({"version": "1.0", "added_tokens": added, "normalizer": None,
                           "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
                               {"type": "Digits", "individual_digits": True},
                               {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                                "use_regex": True}]},
                           "decoder": {"type": "ByteLevel"},
                           "model": {"type": "BPE", "vocab": vocab, "merges": merges, "unk_token": None}},
                          ensure_ascii=False).encode()

    # A tiny byte-level BPE vocabulary: all 256 byte tokens, a few merges, control tokens.
    b2u = bytes_to_unicode()
    tiny = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"] + [b2u[b] for b in range(256)]
    tiny_merges = []
    for a, b in [("h", "e"), ("l", "l"), ("he", "ll"), ("hell", "o"), ("\u0120", "w"), ("\u0120w", "o")]:
        tiny_merges.append(a + " " + b)
        tiny.append(a + b)
    tiny_types = [3, 3, 3] + [1] * (len(tiny) - 3)
    ids = [("tokenizer.ggml.bos_token_id", 4, struct.pack("<I", 1)),
           ("tokenizer.ggml.eos_token_id", 4, struct.pack("<I", 2)),
           ("tokenizer.ggml.add_bos_token", 7, b"\0"),
           ("tokenizer.chat_template", 8, s("{% for m in messages %}<|im_start|>{{ m['content'] }}<|im_end|>{% endfor %}"))]
    open(f"{tok_dir}/tiny-bpe.gguf", "wb").write(b"\0" + bpe_gguf(tiny, tiny_merges, tiny_types, extra=ids))
    open(f"{tok_dir}/tiny-tokenizer-json", "wb").write(
        b"\1" + hf_json(tiny, tiny_merges, tiny_types) + CUT +
        json.dumps({"bos_token": "<|im_start|>", "eos_token": {"content": "<|im_end|>"}, "add_bos_token": False,
                    "added_tokens_decoder": {"0": {"content": "<|endoftext|>", "special": True}},
                    "chat_template": "{{ messages }}"}).encode() + CUT +
        json.dumps({"model_type": "llama", "eos_token_id": [0, 2]}).encode())
    open(f"{tok_dir}/tiny-vocab-merges", "wb").write(
        b"\2" + json.dumps({t: i for i, t in enumerate(tiny) if tiny_types[i] == 1}, ensure_ascii=False).encode() +
        CUT + ("#version: 0.2\n" + "\n".join(tiny_merges) + "\n").encode("utf-8") + CUT +
        json.dumps({"<|endoftext|>": 0, "<|im_start|>": 1, "<|im_end|>": 2}).encode())

    # A SentencePiece-style vocabulary: U+2581 pieces with scores and <0xXX> byte fallback.
    spm = ["<unk>", "<s>", "</s>"] + ["<0x%02X>" % b for b in range(256)] + \
          ["\u2581", "\u2581h", "\u2581he", "llo", "\u2581hello", "w", "o", "r", "l", "d", "\u2581w"]
    spm_types = [2, 3, 3] + [6] * 256 + [1] * 11
    spm_kvs = [("tokenizer.ggml.model", 8, s("llama")), ("tokenizer.ggml.tokens", 9, str_array(spm)),
               ("tokenizer.ggml.scores", 9, struct.pack("<IQ", 6, len(spm)) +
                b"".join(struct.pack("<f", -float(i)) for i in range(len(spm)))),
               ("tokenizer.ggml.token_type", 9, struct.pack("<IQ", 5, len(spm)) +
                b"".join(struct.pack("<i", t) for t in spm_types)),
               ("tokenizer.ggml.unknown_token_id", 4, struct.pack("<I", 0)),
               ("tokenizer.ggml.bos_token_id", 4, struct.pack("<I", 1))]
    open(f"{tok_dir}/tiny-spm.gguf", "wb").write(b"\0" + gguf(3, spm_kvs, []))

    # The default model's vocabulary made small: its first tokens, the merges among them, its
    # special tokens (read from the GGUF metadata; skipped when the model is not there).
    model = os.environ.get("IMPRESS_DEFAULT_MODEL", "")
    if model and os.path.exists(model):
        def read_vocab(path):
            f = open(path, "rb")
            magic, version, n_tensors, n_kv = struct.unpack("<4sIQQ", f.read(24))
            if magic != b"GGUF":
                return None
            sizes = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
            rd_s = lambda: f.read(struct.unpack("<Q", f.read(8))[0]).decode("utf-8", "replace")
            out = {}
            for _ in range(n_kv):
                key = rd_s()
                t = struct.unpack("<I", f.read(4))[0]
                if t == 8:
                    out[key] = rd_s()
                elif t == 9:
                    et, n = struct.unpack("<IQ", f.read(12))
                    if et == 8:
                        out[key] = [rd_s() for _ in range(n)]
                    else:
                        raw = f.read(sizes[et] * n)
                        if et == 5:
                            out[key] = list(struct.unpack("<%di" % n, raw))
                else:
                    raw = f.read(sizes[t])
                    if t in (4, 5):
                        out[key] = struct.unpack("<I", raw)[0]
            return out

        meta = read_vocab(model)
        if meta and "tokenizer.ggml.tokens" in meta and "tokenizer.ggml.merges" in meta:
            toks, types = meta["tokenizer.ggml.tokens"], meta.get("tokenizer.ggml.token_type", [])
            keep = 600
            small = toks[:keep]
            have = set(small)
            merges = [m for m in meta["tokenizer.ggml.merges"]
                      if " " in m[1:] and m.split(" ", 1)[0] in have and m.split(" ", 1)[1] in have
                      and m.replace(" ", "", 1) in have]
            small_types = (types[:keep] if len(types) >= keep else [1] * keep)
            extra = [(k, 4, struct.pack("<I", v)) for k, v in meta.items()
                     if k.endswith("_token_id") and isinstance(v, int) and v < keep]
            open(f"{tok_dir}/default-model-small.gguf", "wb").write(
                b"\0" + bpe_gguf(small, merges, small_types, pre=meta.get("tokenizer.ggml.pre", "smollm"), extra=extra))
            open(f"{tok_dir}/default-model-small-tokenizer-json", "wb").write(
                b"\1" + hf_json(small, merges, small_types))
