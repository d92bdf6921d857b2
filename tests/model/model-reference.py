#!/usr/bin/env python3
"""Reference data for tests/model/model-loader-test.cpp, made with independent tools
(the gguf and safetensors PyPI packages and numpy), never with our C++ readers.

  model-reference.py gguf MODEL.gguf OUT_DIR
      OUT_DIR/tok_embd_rows.f32   token_embd rows for the ids in OUT_DIR/ids.txt, dequantized by
                                  gguf.quants
      OUT_DIR/blk.N.attn_{q,k}.f32 those weights in Hugging Face row order: llama.cpp's converter
                                  permutation inverted with numpy (reshape/swapaxes)
  model-reference.py hf OUT_DIR
      OUT_DIR/{llama,opt,opt350}/ tiny random-weight Hugging Face folders (config.json +
                                  safetensors; llama sharded with an index and mixed dtypes)
      OUT_DIR/<model>/expected/<tensor name>.f32   each weight as float32
"""
import json
import os
import sys

import numpy as np


def write_f32(path, a):
    np.ascontiguousarray(a, dtype="<f4").tofile(path)


def gguf_mode(model, out):
    from gguf import GGUFReader
    from gguf.quants import dequantize

    r = GGUFReader(model)
    tensors = {t.name: t for t in r.tensors}
    n_head = int(r.fields["llama.attention.head_count"].contents())
    n_head_kv = int(r.fields["llama.attention.head_count_kv"].contents())

    def deq(name):
        t = tensors[name]
        return dequantize(t.data, t.tensor_type).reshape(int(t.shape[1]), int(t.shape[0]))

    ids = [0, 1, 2, 100, 1000, 12345, 49151]
    with open(os.path.join(out, "ids.txt"), "w") as f:
        f.write(" ".join(map(str, ids)))
    write_f32(os.path.join(out, "tok_embd_rows.f32"), deq("token_embd.weight")[ids])

    def unpermute(w, n):
        # convert_hf_to_gguf.py: gguf = hf.reshape(n, 2, hd/2, in).swapaxes(1, 2).reshape(...)
        # so hf = gguf.reshape(n, hd/2, 2, in).swapaxes(1, 2).reshape(...)
        return w.reshape(n, w.shape[0] // n // 2, 2, w.shape[1]).swapaxes(1, 2).reshape(w.shape)

    for il in (0, 29):
        write_f32(os.path.join(out, f"blk.{il}.attn_q.f32"), unpermute(deq(f"blk.{il}.attn_q.weight"), n_head))
        write_f32(os.path.join(out, f"blk.{il}.attn_k.f32"), unpermute(deq(f"blk.{il}.attn_k.weight"), n_head_kv))
        write_f32(os.path.join(out, f"blk.{il}.attn_q_raw.f32"), deq(f"blk.{il}.attn_q.weight"))


def to_bf16(x):
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    return (u >> 16).astype(np.uint16)


def hf_mode(out):
    from safetensors.numpy import save_file

    rng = np.random.default_rng(42)

    def folder(name, config, weights, shards=1, dtypes=None):
        d = os.path.join(out, name)
        os.makedirs(os.path.join(d, "expected"), exist_ok=True)
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(config, f, indent=1)
        names = sorted(weights)
        stored = {}
        for i, n in enumerate(names):
            w = weights[n].astype(np.float32)
            kind = (dtypes or {}).get(n, "F32") if dtypes is not None else "F32"
            if kind == "F16":
                stored[n] = w.astype(np.float16)
                exp = stored[n].astype(np.float32)
            elif kind == "BF16":
                # safetensors.numpy has no bfloat16: write BF16 by hand below
                stored[n] = to_bf16(w)
                exp = (stored[n].astype(np.uint32) << 16).view(np.float32)
            else:
                stored[n] = w
                exp = w
            write_f32(os.path.join(d, "expected", n + ".f32"), exp)
        bf16_names = {n for n in names if (dtypes or {}).get(n) == "BF16"}
        groups = [names[i::shards] for i in range(shards)]
        weight_map = {}
        for s, group in enumerate(groups):
            fname = "model.safetensors" if shards == 1 else f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
            path = os.path.join(d, fname)
            if bf16_names & set(group):
                write_safetensors_by_hand(path, {n: stored[n] for n in group}, bf16_names)
            else:
                save_file({n: stored[n] for n in group}, path, metadata={"format": "pt"})
            for n in group:
                weight_map[n] = fname
        if shards > 1:
            with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
                json.dump({"metadata": {"total_size": 0}, "weight_map": weight_map}, f, indent=1)

    # --- tiny Llama: GQA 4/2, head_dim 8, untied, sharded in 3, mixed dtypes
    E, L, H, KV, F, V = 32, 2, 4, 2, 48, 64
    HD = E // H
    w = {"model.embed_tokens.weight": rng.standard_normal((V, E)), "model.norm.weight": 1 + 0.1 * rng.standard_normal(E),
         "lm_head.weight": rng.standard_normal((V, E))}
    for il in range(L):
        p = f"model.layers.{il}."
        w[p + "input_layernorm.weight"] = 1 + 0.1 * rng.standard_normal(E)
        w[p + "post_attention_layernorm.weight"] = 1 + 0.1 * rng.standard_normal(E)
        w[p + "self_attn.q_proj.weight"] = rng.standard_normal((H * HD, E))
        w[p + "self_attn.k_proj.weight"] = rng.standard_normal((KV * HD, E))
        w[p + "self_attn.v_proj.weight"] = rng.standard_normal((KV * HD, E))
        w[p + "self_attn.o_proj.weight"] = rng.standard_normal((E, H * HD))
        w[p + "mlp.gate_proj.weight"] = rng.standard_normal((F, E))
        w[p + "mlp.up_proj.weight"] = rng.standard_normal((F, E))
        w[p + "mlp.down_proj.weight"] = rng.standard_normal((E, F))
    dt = {n: ["F32", "F16", "BF16"][i % 3] for i, n in enumerate(sorted(w))}
    folder("llama", {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": E,
                     "num_hidden_layers": L, "num_attention_heads": H, "num_key_value_heads": KV,
                     "intermediate_size": F, "vocab_size": V, "max_position_embeddings": 256,
                     "rms_norm_eps": 1e-5, "rope_theta": 50000.0, "tie_word_embeddings": False,
                     "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                      "high_freq_factor": 4.0, "original_max_position_embeddings": 128}},
           w, shards=3, dtypes=dt)

    # --- tiny OPT (pre-LN) and an OPT-350m-like one (post-LN, projections)
    for name, E, P, pre in (("opt", 32, 32, True), ("opt350", 32, 16, False)):
        L, H, F, V, C = 2, 4, 64, 64, 40
        w = {"model.decoder.embed_tokens.weight": rng.standard_normal((V, P)),
             "model.decoder.embed_positions.weight": rng.standard_normal((C + 2, E))}
        if pre:
            w["model.decoder.final_layer_norm.weight"] = 1 + 0.1 * rng.standard_normal(E)
            w["model.decoder.final_layer_norm.bias"] = 0.1 * rng.standard_normal(E)
        if P != E:
            w["model.decoder.project_in.weight"] = rng.standard_normal((E, P))
            w["model.decoder.project_out.weight"] = rng.standard_normal((P, E))
        for il in range(L):
            p = f"model.decoder.layers.{il}."
            for proj in ("q", "k", "v", "out"):
                w[p + f"self_attn.{proj}_proj.weight"] = rng.standard_normal((E, E))
                w[p + f"self_attn.{proj}_proj.bias"] = rng.standard_normal(E)
            for ln in ("self_attn_layer_norm", "final_layer_norm"):
                w[p + ln + ".weight"] = 1 + 0.1 * rng.standard_normal(E)
                w[p + ln + ".bias"] = 0.1 * rng.standard_normal(E)
            w[p + "fc1.weight"] = rng.standard_normal((F, E))
            w[p + "fc1.bias"] = rng.standard_normal(F)
            w[p + "fc2.weight"] = rng.standard_normal((E, F))
            w[p + "fc2.bias"] = rng.standard_normal(E)
        folder(name, {"architectures": ["OPTForCausalLM"], "model_type": "opt", "hidden_size": E,
                      "num_hidden_layers": L, "num_attention_heads": H, "ffn_dim": F, "vocab_size": V,
                      "max_position_embeddings": C, "word_embed_proj_dim": P, "do_layer_norm_before": pre,
                      "activation_function": "relu", "enable_bias": True}, w)


def write_safetensors_by_hand(path, tensors, bf16_names):
    """The safetensors layout, written directly (numpy has no bfloat16 dtype)."""
    header, blobs, off = {}, [], 0
    for n in sorted(tensors):
        a = np.ascontiguousarray(tensors[n])
        dtype = "BF16" if n in bf16_names else {np.dtype("float32"): "F32", np.dtype("float16"): "F16"}[a.dtype]
        b = a.tobytes()
        header[n] = {"dtype": dtype, "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(len(h).to_bytes(8, "little"))
        f.write(h)
        for b in blobs:
            f.write(b)
    # cross-check with the safetensors package: it must read what we wrote
    from safetensors import safe_open
    with safe_open(path, framework="numpy") as f:
        assert sorted(f.keys()) == sorted(tensors)


if __name__ == "__main__":
    if sys.argv[1] == "gguf":
        gguf_mode(sys.argv[2], sys.argv[3])
    elif sys.argv[1] == "hf":
        hf_mode(sys.argv[2])
    else:
        sys.exit("usage: model-reference.py gguf MODEL OUT | hf OUT")
