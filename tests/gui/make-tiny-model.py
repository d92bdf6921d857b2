"""Writes a tiny random-weight Llama GGUF with the tokenizer (and chat template) of a given
GGUF, so the GUI's model picker has a second, different model to switch to in tests.

Usage: make-tiny-model.py SOURCE.gguf OUT.gguf [SEED]
Shape: 2 layers, width 64, 4 query heads over 2 KV heads (head 16), feed-forward 128, context
2048, tied embeddings; F16 matrices, F32 norms. Weights are N(0, 0.02^2) from SEED: answers are
gibberish, which is all the picker's test needs (it loads, answers, keeps its KV apart).
"""
import sys

import gguf
import numpy as np


def main():
    src, out = sys.argv[1], sys.argv[2]
    seed = int(sys.argv[3]) if len(sys.argv) > 3 else 1
    reader = gguf.GGUFReader(src)
    n_vocab = len(reader.fields["tokenizer.ggml.tokens"].contents())
    n_layer, n_embd, n_head, n_head_kv, n_ff, n_ctx = 2, 64, 4, 2, 128, 2048
    head = n_embd // n_head

    w = gguf.GGUFWriter(out, "llama")
    w.add_name("tiny random llama")
    w.add_block_count(n_layer)
    w.add_context_length(n_ctx)
    w.add_embedding_length(n_embd)
    w.add_feed_forward_length(n_ff)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_head_kv)
    w.add_rope_dimension_count(head)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_freq_base(10000.0)
    for name, field in reader.fields.items():
        if not name.startswith("tokenizer."):
            continue
        vtype = field.types[0]
        sub = field.types[1] if vtype == gguf.GGUFValueType.ARRAY else None
        w.add_key_value(name, field.contents(), vtype, sub_type=sub)

    rng = np.random.default_rng(seed)

    def mat(rows, cols):
        return (rng.standard_normal((rows, cols)) * 0.02).astype(np.float16)

    w.add_tensor("token_embd.weight", mat(n_vocab, n_embd))
    w.add_tensor("output_norm.weight", np.ones(n_embd, dtype=np.float32))
    for i in range(n_layer):
        p = f"blk.{i}."
        w.add_tensor(p + "attn_norm.weight", np.ones(n_embd, dtype=np.float32))
        w.add_tensor(p + "attn_q.weight", mat(n_head * head, n_embd))
        w.add_tensor(p + "attn_k.weight", mat(n_head_kv * head, n_embd))
        w.add_tensor(p + "attn_v.weight", mat(n_head_kv * head, n_embd))
        w.add_tensor(p + "attn_output.weight", mat(n_embd, n_head * head))
        w.add_tensor(p + "ffn_norm.weight", np.ones(n_embd, dtype=np.float32))
        w.add_tensor(p + "ffn_gate.weight", mat(n_ff, n_embd))
        w.add_tensor(p + "ffn_up.weight", mat(n_ff, n_embd))
        w.add_tensor(p + "ffn_down.weight", mat(n_embd, n_ff))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    main()
