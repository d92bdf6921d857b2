#!/usr/bin/env python3
"""Writes tiny random-weight Hugging Face model folders for the forward-pass tests.

Usage: make-tiny-models.py OUT_DIR [--seed N]
Creates OUT_DIR/tiny-llama (LlamaForCausalLM: GQA 4/2, llama3 RoPE scaling, untied lm_head),
OUT_DIR/tiny-opt (OPTForCausalLM, pre-LN), OUT_DIR/tiny-opt-350m (post-LN with
project_in/project_out, like facebook/opt-350m), OUT_DIR/tiny-qwen2 (Qwen2ForCausalLM: Q/K/V
biases, tied lm_head) and OUT_DIR/tiny-qwen3 (Qwen3ForCausalLM: per-head Q/K RMSNorm, a head
dimension of its own, tied lm_head): config.json + model.safetensors each.
No tokenizer: the tests feed token ids. Deterministic for a given seed.
"""
import argparse
import json
import os

import numpy as np
from safetensors.numpy import save_file


def rnd(rng, *shape, scale=None):
    if scale is None:
        scale = 1.0 / np.sqrt(shape[-1])
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def norm_w(rng, n):
    return (1.0 + 0.1 * rng.standard_normal(n)).astype(np.float32)


def write(folder, config, tensors):
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    save_file(tensors, os.path.join(folder, "model.safetensors"))


def tiny_llama(rng, folder):
    V, E, L, H, KV, FF = 320, 64, 3, 4, 2, 160
    D = E // H
    cfg = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": V, "hidden_size": E,
        "intermediate_size": FF, "num_hidden_layers": L, "num_attention_heads": H, "num_key_value_heads": KV,
        "head_dim": D, "max_position_embeddings": 2048, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
        "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                         "original_max_position_embeddings": 64},
        "tie_word_embeddings": False, "hidden_act": "silu", "bos_token_id": 1, "eos_token_id": 2,
        "torch_dtype": "float32",
    }
    t = {"model.embed_tokens.weight": rnd(rng, V, E, scale=1.0), "model.norm.weight": norm_w(rng, E),
         "lm_head.weight": rnd(rng, V, E)}
    for i in range(L):
        p = f"model.layers.{i}."
        t[p + "input_layernorm.weight"] = norm_w(rng, E)
        t[p + "post_attention_layernorm.weight"] = norm_w(rng, E)
        t[p + "self_attn.q_proj.weight"] = rnd(rng, H * D, E, scale=0.5)  # peaky attention
        t[p + "self_attn.k_proj.weight"] = rnd(rng, KV * D, E, scale=0.5)
        t[p + "self_attn.v_proj.weight"] = rnd(rng, KV * D, E)
        t[p + "self_attn.o_proj.weight"] = rnd(rng, E, H * D)
        t[p + "mlp.gate_proj.weight"] = rnd(rng, FF, E)
        t[p + "mlp.up_proj.weight"] = rnd(rng, FF, E)
        t[p + "mlp.down_proj.weight"] = rnd(rng, E, FF)
    write(folder, cfg, t)


def tiny_opt(rng, folder, post_ln=False):
    V, E, L, H, FF, P = 300, 64, 3, 4, 192, 1024
    W = 32 if post_ln else E  # word_embed_proj_dim
    cfg = {
        "architectures": ["OPTForCausalLM"], "model_type": "opt", "vocab_size": V, "hidden_size": E,
        "ffn_dim": FF, "num_hidden_layers": L, "num_attention_heads": H, "max_position_embeddings": P,
        "do_layer_norm_before": not post_ln, "word_embed_proj_dim": W, "activation_function": "relu",
        "enable_bias": True, "layer_norm_elementwise_affine": True, "bos_token_id": 2, "eos_token_id": 2,
        "pad_token_id": 1, "tie_word_embeddings": True, "torch_dtype": "float32",
    }
    d = "model.decoder."
    t = {d + "embed_tokens.weight": rnd(rng, V, W, scale=1.0), d + "embed_positions.weight": rnd(rng, P + 2, E, scale=0.5)}
    if post_ln:
        t[d + "project_in.weight"] = rnd(rng, E, W)
        t[d + "project_out.weight"] = rnd(rng, W, E)
    else:
        t[d + "final_layer_norm.weight"] = norm_w(rng, E)
        t[d + "final_layer_norm.bias"] = rnd(rng, E, scale=0.1)
    for i in range(L):
        p = f"{d}layers.{i}."
        for name, (o, n) in {"self_attn.q_proj": (E, E), "self_attn.k_proj": (E, E), "self_attn.v_proj": (E, E),
                             "self_attn.out_proj": (E, E), "fc1": (FF, E), "fc2": (E, FF)}.items():
            t[p + name + ".weight"] = rnd(rng, o, n, scale=(2.0 if "q_proj" in name or "k_proj" in name else 1.0) / np.sqrt(n))
            t[p + name + ".bias"] = rnd(rng, o, scale=0.1)
        for name in ("self_attn_layer_norm", "final_layer_norm"):
            t[p + name + ".weight"] = norm_w(rng, E)
            t[p + name + ".bias"] = rnd(rng, E, scale=0.1)
    write(folder, cfg, t)


def tiny_qwen(rng, folder, version):
    """Qwen2 (Q/K/V biases) or Qwen3 (q_norm/k_norm over each head; head_dim 32 > hidden / heads)."""
    V, E, L, H, KV, FF = 300, 64, 3, 4, 2, 160
    D = 32 if version == 3 else E // H
    cfg = {
        "architectures": [f"Qwen{version}ForCausalLM"], "model_type": f"qwen{version}", "vocab_size": V,
        "hidden_size": E, "intermediate_size": FF, "num_hidden_layers": L, "num_attention_heads": H,
        "num_key_value_heads": KV, "max_position_embeddings": 2048, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0,
        "tie_word_embeddings": True, "hidden_act": "silu", "bos_token_id": 1, "eos_token_id": 2,
        "torch_dtype": "float32",
    }
    if version == 3:
        cfg.update({"head_dim": D, "attention_bias": False, "use_sliding_window": False})
    t = {"model.embed_tokens.weight": rnd(rng, V, E, scale=1.0), "model.norm.weight": norm_w(rng, E)}
    for i in range(L):
        p = f"model.layers.{i}."
        t[p + "input_layernorm.weight"] = norm_w(rng, E)
        t[p + "post_attention_layernorm.weight"] = norm_w(rng, E)
        t[p + "self_attn.q_proj.weight"] = rnd(rng, H * D, E, scale=0.5)
        t[p + "self_attn.k_proj.weight"] = rnd(rng, KV * D, E, scale=0.5)
        t[p + "self_attn.v_proj.weight"] = rnd(rng, KV * D, E)
        t[p + "self_attn.o_proj.weight"] = rnd(rng, E, H * D)
        if version == 2:
            t[p + "self_attn.q_proj.bias"] = rnd(rng, H * D, scale=0.5)
            t[p + "self_attn.k_proj.bias"] = rnd(rng, KV * D, scale=0.5)
            t[p + "self_attn.v_proj.bias"] = rnd(rng, KV * D, scale=0.1)
        else:  # norm weights far from 1, so a skipped norm shows
            t[p + "self_attn.q_norm.weight"] = (1.0 + 0.5 * rng.standard_normal(D)).astype(np.float32)
            t[p + "self_attn.k_norm.weight"] = (1.0 + 0.5 * rng.standard_normal(D)).astype(np.float32)
        t[p + "mlp.gate_proj.weight"] = rnd(rng, FF, E)
        t[p + "mlp.up_proj.weight"] = rnd(rng, FF, E)
        t[p + "mlp.down_proj.weight"] = rnd(rng, E, FF)
    write(folder, cfg, t)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out_dir")
    ap.add_argument("--seed", type=int, default=1234)
    a = ap.parse_args()
    rng = np.random.default_rng(a.seed)
    tiny_llama(rng, os.path.join(a.out_dir, "tiny-llama"))
    tiny_opt(rng, os.path.join(a.out_dir, "tiny-opt"))
    tiny_opt(rng, os.path.join(a.out_dir, "tiny-opt-350m"), post_ln=True)
    tiny_qwen(rng, os.path.join(a.out_dir, "tiny-qwen2"), 2)
    tiny_qwen(rng, os.path.join(a.out_dir, "tiny-qwen3"), 3)


if __name__ == "__main__":
    main()
