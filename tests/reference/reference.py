#!/usr/bin/env python3
"""Independent numpy forward pass for Llama (Qwen2: Llama with Q/K/V biases; Qwen3: Llama with per-head Q/K RMSNorm) and OPT: the reference the C++ engine is checked against.

Reads a GGUF file with the `gguf` package (its own dequantization; Llama RoPE applied the
llama.cpp way, on adjacent pairs, to the RAW permuted GGUF Q/K weights, so the engine's
un-permutation is checked independently) or a Hugging Face folder (config.json +
*.safetensors, read with the `safetensors` package; Llama RoPE rotate-half as transformers does).

K (post-RoPE) and V are rounded to fp16 before attention, as the engine keeps KV in fp16.

Usage: reference.py --model PATH --request REQ.json --out OUT
  REQ.json: {"sequences": [{"tokens": [ids...], "rows": [row indices], "greedy": N}, ...]}
  OUT.json: {"n_vocab": V, "greedy": [[ids...], ...]}; OUT.bin: float32 logits of the requested
  rows of every sequence, in order (len(rows) x V each).
"""
import argparse
import glob
import json
import os
import sys

import numpy as np

F32 = np.float32


KV_F16 = True


def f16_round(x):
    return x.astype(np.float16).astype(F32) if KV_F16 else x


# ---------------------------------------------------------------------------------------------
# Model loading


class Cfg:
    pass


def load_gguf(path):
    import gguf
    from gguf.quants import dequantize

    r = gguf.GGUFReader(path)

    def meta(key, default=None):
        f = r.fields.get(key)
        if f is None:
            return default
        return f.contents()

    arch = meta("general.architecture")
    if arch not in ("llama", "qwen2", "qwen3"):
        sys.exit(f"reference: GGUF architecture {arch!r} not supported (llama, qwen2, qwen3)")
    c = Cfg()
    c.arch = "llama"
    c.n_embd = int(meta(f"{arch}.embedding_length"))
    c.n_layer = int(meta(f"{arch}.block_count"))
    c.n_head = int(meta(f"{arch}.attention.head_count"))
    c.n_head_kv = int(meta(f"{arch}.attention.head_count_kv", c.n_head))
    c.head_dim = int(meta(f"{arch}.attention.key_length", c.n_embd // c.n_head))
    c.eps = float(meta(f"{arch}.attention.layer_norm_rms_epsilon", 1e-5))
    c.theta = float(meta(f"{arch}.rope.freq_base", 10000.0))
    # llama: llama.cpp's LLAMA_ROPE_TYPE_NORM on permuted weights; qwen2/3: NEOX (rotate-half) on
    # weights in Hugging Face order
    c.rope_style = "interleaved" if arch == "llama" else "half"
    c.scaling = None
    stype = meta(f"{arch}.rope.scaling.type")
    if stype == "linear":
        c.scaling = {"rope_type": "linear", "factor": float(meta(f"{arch}.rope.scaling.factor"))}
    elif stype not in (None, "none"):
        sys.exit(f"reference: rope scaling {stype!r} not supported for GGUF")
    tensors = {t.name: t for t in r.tensors}
    c.freq_factors = None
    if "rope_freqs.weight" in tensors:  # Llama 3.1: per-dimension divisors of the frequencies
        t = tensors["rope_freqs.weight"]
        c.freq_factors = np.asarray(dequantize(t.data, t.tensor_type), dtype=np.float64).reshape(-1)

    def T(name):
        t = tensors[name]
        a = dequantize(t.data, t.tensor_type)
        shape = tuple(int(d) for d in reversed(t.shape))  # ggml ne[] -> numpy (out, in)
        return np.ascontiguousarray(a.reshape(shape), dtype=F32)

    w = {"tok_embd": T("token_embd.weight"), "output_norm": T("output_norm.weight")}
    w["output"] = T("output.weight") if "output.weight" in tensors else w["tok_embd"]
    c.n_vocab = w["tok_embd"].shape[0]
    layers = []
    for i in range(c.n_layer):
        p = f"blk.{i}."
        layers.append({
            "attn_norm": T(p + "attn_norm.weight"), "wq": T(p + "attn_q.weight"), "wk": T(p + "attn_k.weight"),
            "wv": T(p + "attn_v.weight"), "wo": T(p + "attn_output.weight"), "ffn_norm": T(p + "ffn_norm.weight"),
            "w_gate": T(p + "ffn_gate.weight"), "w_up": T(p + "ffn_up.weight"), "w_down": T(p + "ffn_down.weight"),
        })
        if arch == "qwen2":
            layers[-1].update({"bq": T(p + "attn_q.bias"), "bk": T(p + "attn_k.bias"), "bv": T(p + "attn_v.bias")})
        if arch == "qwen3":
            layers[-1].update({"q_norm": T(p + "attn_q_norm.weight"), "k_norm": T(p + "attn_k_norm.weight")})
    w["layers"] = layers
    return c, w


def load_hf(folder):
    from safetensors.numpy import load_file

    with open(os.path.join(folder, "config.json")) as f:
        cfg = json.load(f)
    st = {}
    for fn in sorted(glob.glob(os.path.join(folder, "*.safetensors"))):
        st.update(load_file(fn))
    archs = cfg.get("architectures") or [cfg.get("model_type", "")]

    def get(*names):
        for n in names:
            if n in st:
                return np.ascontiguousarray(st[n], dtype=F32)
        raise KeyError(names[0])

    c = Cfg()
    c.n_embd = cfg["hidden_size"]
    c.n_layer = cfg["num_hidden_layers"]
    c.n_head = cfg["num_attention_heads"]
    qwen2 = "Qwen2ForCausalLM" in archs or cfg.get("model_type") == "qwen2"
    qwen3 = "Qwen3ForCausalLM" in archs or cfg.get("model_type") == "qwen3"
    if "LlamaForCausalLM" in archs or cfg.get("model_type") == "llama" or qwen2 or qwen3:
        c.arch = "llama"
        c.freq_factors = None
        c.n_head_kv = cfg.get("num_key_value_heads", c.n_head)
        c.head_dim = cfg.get("head_dim", c.n_embd // c.n_head)
        c.eps = cfg.get("rms_norm_eps", 1e-6)
        c.theta = cfg.get("rope_theta", 10000.0)
        c.rope_style = "half"
        c.scaling = cfg.get("rope_scaling")
        w = {"tok_embd": get("model.embed_tokens.weight"), "output_norm": get("model.norm.weight")}
        w["output"] = w["tok_embd"] if cfg.get("tie_word_embeddings", False) or "lm_head.weight" not in st \
            else get("lm_head.weight")
        layers = []
        for i in range(c.n_layer):
            p = f"model.layers.{i}."
            layers.append({
                "attn_norm": get(p + "input_layernorm.weight"), "wq": get(p + "self_attn.q_proj.weight"),
                "wk": get(p + "self_attn.k_proj.weight"), "wv": get(p + "self_attn.v_proj.weight"),
                "wo": get(p + "self_attn.o_proj.weight"), "ffn_norm": get(p + "post_attention_layernorm.weight"),
                "w_gate": get(p + "mlp.gate_proj.weight"), "w_up": get(p + "mlp.up_proj.weight"),
                "w_down": get(p + "mlp.down_proj.weight"),
            })
            if qwen2:
                layers[-1].update({"bq": get(p + "self_attn.q_proj.bias"), "bk": get(p + "self_attn.k_proj.bias"),
                                   "bv": get(p + "self_attn.v_proj.bias")})
            if qwen3:  # Qwen3RMSNorm over each head of Q and K, before RoPE
                layers[-1].update({"q_norm": get(p + "self_attn.q_norm.weight"),
                                   "k_norm": get(p + "self_attn.k_norm.weight")})
        w["layers"] = layers
    elif "OPTForCausalLM" in archs or cfg.get("model_type") == "opt":
        c.arch = "opt"
        c.n_head_kv = c.n_head
        c.head_dim = c.n_embd // c.n_head
        c.eps = 1e-5
        c.pre_ln = cfg.get("do_layer_norm_before", True)
        c.final_ln = c.pre_ln and not cfg.get("_remove_final_layer_norm", False)

        def g(name):
            return get("model.decoder." + name, "decoder." + name)

        w = {"tok_embd": g("embed_tokens.weight"), "pos_embd": g("embed_positions.weight")}
        w["output"] = get("lm_head.weight") if "lm_head.weight" in st else w["tok_embd"]
        w["project_in"] = g("project_in.weight") if cfg.get("word_embed_proj_dim", c.n_embd) != c.n_embd else None
        w["project_out"] = g("project_out.weight") if w["project_in"] is not None else None
        if c.final_ln:
            w["output_norm"], w["output_norm_b"] = g("final_layer_norm.weight"), g("final_layer_norm.bias")
        layers = []
        for i in range(c.n_layer):
            p = f"layers.{i}."
            layers.append({k: g(p + v) for k, v in {
                "attn_norm": "self_attn_layer_norm.weight", "attn_norm_b": "self_attn_layer_norm.bias",
                "wq": "self_attn.q_proj.weight", "bq": "self_attn.q_proj.bias",
                "wk": "self_attn.k_proj.weight", "bk": "self_attn.k_proj.bias",
                "wv": "self_attn.v_proj.weight", "bv": "self_attn.v_proj.bias",
                "wo": "self_attn.out_proj.weight", "bo": "self_attn.out_proj.bias",
                "ffn_norm": "final_layer_norm.weight", "ffn_norm_b": "final_layer_norm.bias",
                "w_up": "fc1.weight", "b_up": "fc1.bias", "w_down": "fc2.weight", "b_down": "fc2.bias",
            }.items()})
        w["layers"] = layers
    else:
        sys.exit(f"reference: architecture {archs} not supported")
    c.n_vocab = w["tok_embd"].shape[0]
    return c, w


# ---------------------------------------------------------------------------------------------
# Forward pass


def inv_freq(c):
    d = c.head_dim
    f = 1.0 / (float(c.theta) ** (np.arange(0, d, 2, dtype=np.float64) / d))
    s = c.scaling or {}
    kind = s.get("rope_type", s.get("type"))
    if kind == "linear":
        f = f / s["factor"]
    elif kind == "llama3":
        factor, lo, hi, orig = s["factor"], s["low_freq_factor"], s["high_freq_factor"], \
            s["original_max_position_embeddings"]
        wavelen = 2 * np.pi / f
        scaled = np.where(wavelen > orig / lo, f / factor, f)
        smooth = (orig / wavelen - lo) / (hi - lo)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        medium = ~(wavelen < orig / hi) & ~(wavelen > orig / lo)
        f = np.where(medium, smoothed, scaled)
    elif kind not in (None, "default"):
        sys.exit(f"reference: rope scaling {kind!r} not supported")
    if getattr(c, "freq_factors", None) is not None:
        f = f / c.freq_factors
    return f.astype(F32).astype(np.float64)  # float32 frequencies, as transformers keeps them


def rope(x, pos, c):
    """x: (n, heads, d). Angles in float64."""
    ang = pos.astype(np.float64)[:, None] * inv_freq(c)[None, :]  # (n, d/2)
    cos, sin = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
    x = x.astype(np.float64)
    out = np.empty_like(x)
    if c.rope_style == "interleaved":  # llama.cpp: pairs (2i, 2i+1)
        x0, x1 = x[..., 0::2], x[..., 1::2]
        out[..., 0::2] = x0 * cos - x1 * sin
        out[..., 1::2] = x1 * cos + x0 * sin
    else:  # transformers rotate_half: pairs (i, i + d/2)
        h = x.shape[-1] // 2
        x0, x1 = x[..., :h], x[..., h:]
        out[..., :h] = x0 * cos - x1 * sin
        out[..., h:] = x1 * cos + x0 * sin
    return out.astype(F32)


def rms_norm(x, w, eps):
    x64 = x.astype(np.float64)
    return (x64 / np.sqrt((x64 * x64).mean(-1, keepdims=True) + eps)).astype(F32) * w


def layer_norm(x, w, b, eps):
    x64 = x.astype(np.float64)
    mu = x64.mean(-1, keepdims=True)
    var = ((x64 - mu) ** 2).mean(-1, keepdims=True)
    return ((x64 - mu) / np.sqrt(var + eps)).astype(F32) * w + b


def attention(q, k, v, n_past, c):
    """q: (n, H, d) new rows; k, v: (n_past + n, Hkv, d) fp16-rounded; causal."""
    n, H, d = q.shape
    group = H // c.n_head_kv
    out = np.empty((n, H, d), dtype=F32)
    n_keys = k.shape[0]
    mask = np.arange(n_keys)[None, :] > (n_past + np.arange(n))[:, None]
    scale = 1.0 if c.arch == "opt" else 1.0 / np.sqrt(d)  # OPT scales q itself (as transformers)
    for h in range(H):
        g = h // group
        s = (q[:, h, :] @ k[:, g, :].T).astype(np.float64) * scale
        s[mask] = -np.inf
        s -= s.max(-1, keepdims=True)
        p = np.exp(s)
        p /= p.sum(-1, keepdims=True)
        out[:, h, :] = (p.astype(F32) @ v[:, g, :])
    return out


def forward(c, w, tokens, pos, cache):
    """Runs new tokens through the model, appending their K/V to cache; returns hidden (n, e)."""
    tokens = np.asarray(tokens, dtype=np.int64)
    n = len(tokens)
    n_past = cache[0][0].shape[0] if cache[0][0] is not None else 0
    if c.arch == "llama":
        x = w["tok_embd"][tokens].copy()
    else:
        x = w["tok_embd"][tokens]
        if w["project_in"] is not None:
            x = x @ w["project_in"].T
        x = x + w["pos_embd"][pos + 2]
    for il, L in enumerate(w["layers"]):
        if c.arch == "llama":
            h = rms_norm(x, L["attn_norm"], c.eps)
            q, k, v = h @ L["wq"].T, h @ L["wk"].T, h @ L["wv"].T
            if "bq" in L:  # Qwen2
                q, k, v = q + L["bq"], k + L["bk"], v + L["bv"]
            q = q.reshape(n, c.n_head, c.head_dim)
            k = k.reshape(n, c.n_head_kv, c.head_dim)
            v = v.reshape(n, c.n_head_kv, c.head_dim)
            if "q_norm" in L:  # Qwen3
                q, k = rms_norm(q, L["q_norm"], c.eps), rms_norm(k, L["k_norm"], c.eps)
            q, k = rope(q, pos, c), rope(k, pos, c)
        else:
            h = layer_norm(x, L["attn_norm"], L["attn_norm_b"], c.eps) if c.pre_ln else x
            q = ((h @ L["wq"].T + L["bq"]) * F32(c.head_dim ** -0.5)).reshape(n, c.n_head, c.head_dim)
            k = (h @ L["wk"].T + L["bk"]).reshape(n, c.n_head_kv, c.head_dim)
            v = (h @ L["wv"].T + L["bv"]).reshape(n, c.n_head_kv, c.head_dim)
        k, v = f16_round(k), f16_round(v)
        kc, vc = cache[il]
        kc = k if kc is None else np.concatenate([kc, k])
        vc = v if vc is None else np.concatenate([vc, v])
        cache[il] = (kc, vc)
        a = attention(q, kc, vc, n_past, c).reshape(n, -1)
        if c.arch == "llama":
            x = x + a @ L["wo"].T
            h = rms_norm(x, L["ffn_norm"], c.eps)
            g = h @ L["w_gate"].T
            u = h @ L["w_up"].T
            act = (g / (1.0 + np.exp(-g.astype(np.float64)))).astype(F32) * u
            x = x + act @ L["w_down"].T
        else:
            x = x + (a @ L["wo"].T + L["bo"])
            if not c.pre_ln:
                x = layer_norm(x, L["attn_norm"], L["attn_norm_b"], c.eps)
            h = layer_norm(x, L["ffn_norm"], L["ffn_norm_b"], c.eps) if c.pre_ln else x
            f = np.maximum(h @ L["w_up"].T + L["b_up"], 0)
            x = x + (f @ L["w_down"].T + L["b_down"])
            if not c.pre_ln:
                x = layer_norm(x, L["ffn_norm"], L["ffn_norm_b"], c.eps)
    return x


def logits(c, w, x):
    if c.arch == "llama":
        h = rms_norm(x, w["output_norm"], c.eps)
    else:
        h = layer_norm(x, w["output_norm"], w["output_norm_b"], c.eps) if c.final_ln else x
        if w["project_out"] is not None:
            h = h @ w["project_out"].T
    return (h @ w["output"].T).astype(F32)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--request", required=True)
    ap.add_argument("--out", required=True, help="output path prefix (.json and .bin are added)")
    ap.add_argument("--dtype", default="float32", choices=["float32", "float64"], help="compute precision")
    ap.add_argument("--kv-dtype", default="float16", choices=["float16", "float32"], help="KV storage precision")
    args = ap.parse_args()
    global F32, KV_F16
    F32 = np.float64 if args.dtype == "float64" else np.float32
    KV_F16 = args.kv_dtype == "float16"
    c, w = load_gguf(args.model) if os.path.isfile(args.model) else load_hf(args.model)
    with open(args.request) as f:
        req = json.load(f)
    greedy_all = []
    with open(args.out + ".bin", "wb") as fout:
        for seq in req["sequences"]:
            toks = list(seq["tokens"])
            cache = [(None, None)] * c.n_layer
            x = forward(c, w, toks, np.arange(len(toks)), cache)
            rows = seq.get("rows", [])
            if rows:
                fout.write(np.ascontiguousarray(logits(c, w, x[rows]), dtype=np.float32).tobytes())
            greedy = []
            last = logits(c, w, x[-1:])[0]
            for step in range(seq.get("greedy", 0)):
                t = int(np.argmax(last))
                greedy.append(t)
                if step + 1 == seq["greedy"]:
                    break
                pos = len(toks) + step
                x = forward(c, w, [t], np.array([pos]), cache)
                last = logits(c, w, x)[0]
            greedy_all.append(greedy)
    with open(args.out + ".json", "w") as f:
        json.dump({"n_vocab": int(c.n_vocab), "greedy": greedy_all}, f)


if __name__ == "__main__":
    main()
