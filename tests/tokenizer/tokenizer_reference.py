#!/usr/bin/env python3
"""Independent references for the C++ tokenizer tests (tests/tokenizer/tokenizer-test.cpp).

Writes into OUT_DIR:
  cases.json          the test strings (valid UTF-8 only; >= 1000 of them)
  smollm.json         ids of every case from HF `tokenizers` built from the default GGUF's vocab
                      and merges with SmolLM2's pre-tokenizer (Digits(individual) + ByteLevel),
                      and smollm-hf/tokenizer.json (the same tokenizer saved)
  gpt2.json           ids from a small byte-level BPE trained here with the GPT-2 pre-tokenizer,
                      saved as gpt2-hf/tokenizer.json and gpt2-vocab/{vocab.json,merges.txt}
  llama3.json         the same with the Llama-3 Split regex (llama3-hf/tokenizer.json), and
                      llama3.gguf: that vocabulary as a GGUF with tokenizer.ggml.pre = "llama-bpe"
  qwen2.json          the same with Qwen2's Split regex (qwen2-hf/tokenizer.json, qwen2.gguf with
                      tokenizer.ggml.pre = "qwen2"); llama3.gguf and qwen2-hf also carry recommended
                      sampling (general.sampling.*, generation_config.json)
  pretok.json         the pieces HF's Split pre-tokenizer cuts every case into, per regex
                      (gpt2, llama3, qwen2): the splitting alone, independent of any vocabulary
  spm.json            ids from python `sentencepiece` for a tiny BPE model with byte fallback
                      trained here: spm/tokenizer.model, and spm.gguf (tokenizer.ggml.model=llama)
  bad-*.gguf          GGUF files with broken tokenizer metadata

usage: tokenizer_reference.py GGUF_PATH OUT_DIR
"""
import json
import os
import random
import sys

import gguf
import sentencepiece as spm
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers, AddedToken, Regex

SEED = 1234
LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                  r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
# Qwen2/2.5's tokenizer.json Split regex: Llama-3's with one digit per piece.
QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
                 r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
GPT2_PATTERN = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"

WORDS = [
    "hello", "world", "The", "quick", "brown", "fox", "jumps", "über", "naïve", "café", "résumé",
    "Straße", "ĳ", "Ωμέγα", "αλφάβητο", "Привет", "мир", "Україна", "שלום", "مرحبا", "بالعالم",
    "नमस्ते", "हिन्दी", "সবাই", "தமிழ்", "ภาษาไทย", "ສະບາຍດີ", "안녕하세요", "한국어", "日本語", "こんにちは",
    "カタカナ", "中文", "汉字测试", "漢字", "𠀀𠀁", "ქართული", "Հայերեն", "አማርኛ", "ᚠᛇᚻ", "ꦗꦮ", "ℕℤℚℝ",
    "x²", "½", "Ⅻ", "٣٤٥", "१२३", "๑๒", "e\u0301", "a\u0308\u0301", "ﬁ", "Ａｂｃ", "ǅ", "İstanbul",
    "don't", "I'm", "we're", "they've", "she'll", "he'd", "it's", "IT'S", "YOU'LL", "O'Neil", "rock'n'roll",
]
EMOJI = ["😀", "👍🏽", "👨‍👩‍👧‍👦", "🇩🇪", "❤️", "🤖", "🧑🏿‍💻", "☕", "🏳️‍🌈", "✨", "🫠", "1️⃣"]
CODE = [
    "def f(x):\n    return x ** 2\n",
    "for (int i = 0; i < n; ++i) {\n\tsum += a[i];\n}",
    "if (a != b && c >= d) { return -1; }",
    "#include <stdio.h>\nint main() { printf(\"%d\\n\", 42); }",
    "SELECT * FROM users WHERE id = 7;",
    "const x = () => { console.log('hi'); };",
    "    indented\n        more\n\t\ttabs\r\n",
    "<html><body class=\"x\">Text&nbsp;here</body></html>",
    "λx.x + 1 ≤ ∞ ∑ ∫ √2 ≈ 1.414",
    "path/to/file_name-v2.3.tar.gz",
    "https://example.com/a?b=c&d=e#frag",
    "{\"key\": [1, 2.5, -3e10, null, true]}",
]
DIGITS = ["0", "7", "42", "1234567890", "3.14159", "-273.15", "1e-9", "2024-05-09", "12:30:45",
          "100,000", "0x1F", "٠١٢", "１２３", "4 5 6", "99.9%", "$1,000.00"]
SPACES = [" ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", " \n ", "\t \t", "\u00a0", "\u3000", "\u2028",
          "\u0085", "\u200b", "\ufeff", "\u001c", "\u000b", "\u000c", "\u2003", " \u00a0 "]
PUNCT = [".", ",", "!", "?", "...", "—", "–", "'", "\"", "(", ")", "[", "]", "{", "}", "@", "#", "$",
         "%", "^", "&", "*", "_", "+", "=", "|", "\\", "/", "<", ">", "~", "`", "«", "»", "“", "”", "¿",
         "'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'LL"]
SPECIALS = ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<repo_name>", "<file_sep>"]


def random_codepoint(rng):
    while True:
        cp = rng.choice([rng.randrange(0x20, 0x7F), rng.randrange(0xA0, 0x3000),
                         rng.randrange(0x3000, 0xD800), rng.randrange(0xE000, 0x10000),
                         rng.randrange(0x10000, 0x30000)])
        if not (0xD800 <= cp < 0xE000):
            return chr(cp)


def make_cases(n, with_specials):
    rng = random.Random(SEED)
    pools = [WORDS, WORDS, EMOJI, CODE, DIGITS, SPACES, SPACES, PUNCT]
    if with_specials:
        pools.append(SPECIALS)
    cases = ["", " ", "a", "  leading", "trailing  ", "\n\n\n", "   \t\t  \n  x", "123456789012",
             "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "Hello, world! I'm here.",
             "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n" if with_specials else "user: hi"]
    while len(cases) < n:
        kind = rng.random()
        parts = []
        if kind < 0.15:  # random code points
            parts = [random_codepoint(rng) for _ in range(rng.randrange(1, 20))]
        else:
            for _ in range(rng.randrange(1, 14)):
                pool = rng.choice(pools)
                parts.append(rng.choice(pool))
                if rng.random() < 0.5:
                    parts.append(rng.choice([" ", " ", "", "\n", "  "]))
        cases.append("".join(parts))
    return cases


def bytes_to_unicode_inverse():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


def encode_all(tok, cases):
    return [tok.encode(c, add_special_tokens=False).ids for c in cases]


def smollm_reference(gguf_path, out, cases):
    r = gguf.GGUFReader(gguf_path)
    tokens = r.fields["tokenizer.ggml.tokens"].contents()
    types = r.fields["tokenizer.ggml.token_type"].contents()
    merges = r.fields["tokenizer.ggml.merges"].contents()
    pre = r.fields["tokenizer.ggml.pre"].contents()
    assert pre == "smollm", pre
    vocab = {t: i for i, t in enumerate(tokens)}
    merge_pairs = [tuple(m.split(" ", 1)) for m in merges]
    tok = Tokenizer(models.BPE(vocab, merge_pairs, fuse_unk=False))
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                                 pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(tokens[i], special=True, normalized=False)
                            for i in range(len(tokens)) if types[i] == 3])
    os.makedirs(os.path.join(out, "smollm-hf"), exist_ok=True)
    tok.save(os.path.join(out, "smollm-hf", "tokenizer.json"))
    ids = encode_all(tok, cases)
    decoded = [tok.decode(x, skip_special_tokens=False) for x in ids]
    with open(os.path.join(out, "smollm.json"), "w") as f:
        json.dump({"ids": ids, "decoded": decoded}, f)


def train_text(cases):
    here = os.path.dirname(os.path.abspath(__file__))
    doc = os.path.join(here, "..", "..", "assets", "docs", "gpl-3.0.txt")
    text = open(doc, encoding="utf-8").read()
    return [text[i:i + 2000] for i in range(0, len(text), 2000)] + cases[::3]


def trained_bpe(out, name, cases, pre, ignore_merges=False):
    tok = Tokenizer(models.BPE(ignore_merges=ignore_merges))
    tok.pre_tokenizer = pre
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=1200, min_frequency=2, show_progress=False,
                                  special_tokens=["<s>", "<pad>", "</s>", "<unk>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(train_text(cases), trainer)
    os.makedirs(os.path.join(out, name + "-hf"), exist_ok=True)
    tok.save(os.path.join(out, name + "-hf", "tokenizer.json"))
    ids = encode_all(tok, cases)
    with open(os.path.join(out, name + ".json"), "w") as f:
        json.dump({"ids": ids}, f)
    return tok


def gpt2_reference(out, cases):
    tok = trained_bpe(out, "gpt2", cases, pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True))
    # The same model as vocab.json + merges.txt (OPT's folder layout) with a special tokens map.
    vdir = os.path.join(out, "gpt2-vocab")
    os.makedirs(vdir, exist_ok=True)
    tok.model.save(vdir)
    with open(os.path.join(vdir, "special_tokens_map.json"), "w") as f:
        json.dump({"bos_token": "</s>", "eos_token": "</s>", "unk_token": "<unk>", "pad_token": "<pad>"}, f)
    with open(os.path.join(vdir, "config.json"), "w") as f:
        json.dump({"model_type": "opt", "architectures": ["OPTForCausalLM"]}, f)


def write_bpe_gguf(out, name, pre, sampling=None):
    """The trained vocabulary of OUT/NAME-hf as a GGUF (llama.cpp's layout for byte-level BPE)."""
    j = json.load(open(os.path.join(out, name + "-hf", "tokenizer.json"), encoding="utf-8"))
    vocab = j["model"]["vocab"]
    tokens = [None] * len(vocab)
    for t, i in vocab.items():
        tokens[i] = t
    specials = {a["content"] for a in j["added_tokens"] if a["special"]}
    merges = [m if isinstance(m, str) else " ".join(m) for m in j["model"]["merges"]]
    w = gguf.GGUFWriter(os.path.join(out, name + ".gguf"), "llama")
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(pre)
    w.add_token_list(tokens)
    w.add_token_types([3 if t in specials else 1 for t in tokens])
    w.add_token_merges(merges)
    w.add_bos_token_id(vocab["<s>"])
    w.add_eos_token_id(vocab["</s>"])
    w.add_add_bos_token(False)
    for key, value in (sampling or {}).items():  # the model's recommended sampling
        if isinstance(value, int):
            w.add_uint32("general.sampling." + key, value)
        else:
            w.add_float32("general.sampling." + key, value)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def split_then_bytes(pattern):
    """A regex Split followed by a regex-less ByteLevel, as Llama-3's and Qwen2's tokenizer.json."""
    return pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])


def llama3_reference(out, cases):
    pre = split_then_bytes(LLAMA3_PATTERN)
    trained_bpe(out, "llama3", cases, pre, ignore_merges=True)  # as Llama-3's tokenizer.json
    write_bpe_gguf(out, "llama3", "llama-bpe", sampling={"temp": 0.6, "top_p": 0.9, "top_k": 50, "min_p": 3.0})


def qwen2_reference(out, cases):
    pre = split_then_bytes(QWEN2_PATTERN)
    trained_bpe(out, "qwen2", cases, pre, ignore_merges=False)  # as Qwen2's tokenizer.json
    # Qwen2.5-Instruct's recommended sampling, and a setting out of range (ignored).
    with open(os.path.join(out, "qwen2-hf", "generation_config.json"), "w") as f:
        json.dump({"do_sample": True, "temperature": 0.7, "top_p": 0.8, "top_k": 20, "repetition_penalty": 1.05,
                   "min_p": -1}, f)
    write_bpe_gguf(out, "qwen2", "qwen2")


def pretok_reference(out, cases):
    pieces = {}
    for name, pattern in (("gpt2", GPT2_PATTERN), ("llama3", LLAMA3_PATTERN), ("qwen2", QWEN2_PATTERN)):
        split = pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False)
        pieces[name] = [[p for p, _ in split.pre_tokenize_str(c)] for c in cases]
    with open(os.path.join(out, "pretok.json"), "w") as f:
        json.dump(pieces, f)


def spm_reference(out, cases):
    d = os.path.join(out, "spm")
    os.makedirs(d, exist_ok=True)
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(train_text(cases)), model_prefix=os.path.join(d, "tokenizer"),
        model_type="bpe", vocab_size=2000, byte_fallback=True, normalization_rule_name="identity",
        remove_extra_whitespaces=False, add_dummy_prefix=True, character_coverage=0.98,
        bos_id=1, eos_id=2, unk_id=0, pad_id=-1, minloglevel=2, num_threads=1)
    sp = spm.SentencePieceProcessor(model_file=os.path.join(d, "tokenizer.model"))
    ids = [sp.encode(c) for c in cases]
    decoded = [sp.decode(x) for x in ids]
    with open(os.path.join(out, "spm.json"), "w") as f:
        json.dump({"ids": ids, "decoded": decoded}, f)
    # The same vocabulary as a GGUF (llama.cpp's layout for SentencePiece models).
    n = sp.get_piece_size()
    tokens, scores, types = [], [], []
    for i in range(n):
        tokens.append(sp.id_to_piece(i))
        scores.append(sp.get_score(i))
        if sp.is_unknown(i):
            types.append(2)
        elif sp.is_control(i):
            types.append(3)
        elif sp.is_byte(i):
            types.append(6)
        elif sp.is_unused(i):
            types.append(5)
        else:
            types.append(1)

    def write(path, model="llama", bos=1, pre=None):
        w = gguf.GGUFWriter(path, "llama")
        w.add_tokenizer_model(model)
        if pre is not None:
            w.add_tokenizer_pre(pre)
        w.add_token_list(tokens)
        w.add_token_scores(scores)
        w.add_token_types(types)
        w.add_bos_token_id(bos)
        w.add_eos_token_id(2)
        w.add_unk_token_id(0)
        w.add_add_bos_token(True)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()

    write(os.path.join(out, "spm.gguf"))
    write(os.path.join(out, "bad-model.gguf"), model="bert")
    write(os.path.join(out, "bad-bos.gguf"), bos=n + 5)
    write(os.path.join(out, "bad-pre.gguf"), model="gpt2", pre="no-such-pre")


def main():
    gguf_path, out = sys.argv[1], sys.argv[2]
    os.makedirs(out, exist_ok=True)
    cases_special = make_cases(1200, with_specials=True)
    cases_plain = make_cases(1200, with_specials=False)
    with open(os.path.join(out, "cases.json"), "w") as f:
        json.dump({"special": cases_special, "plain": cases_plain}, f)
    smollm_reference(gguf_path, out, cases_special)
    gpt2_reference(out, cases_plain)
    llama3_reference(out, cases_plain)
    qwen2_reference(out, cases_plain)
    pretok_reference(out, cases_plain)
    spm_reference(out, cases_plain)
    with open(os.path.join(out, "done"), "w") as f:
        f.write("ok\n")


if __name__ == "__main__":
    main()
