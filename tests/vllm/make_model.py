"""Builds tiny-llama, the model the engine suite serves with vLLM, from nothing but this file.

No model hub is reachable from the machines that run the tests, so the model is made here:
Llama architecture, 2 layers, hidden size 128, 2 heads of 64, random weights from a fixed seed,
and a byte-level BPE tokenizer (2,048 tokens) trained on the questions and contexts of
train/examples/operator-example.jsonl. Its answers are noise; what the suite needs is a real vLLM
engine with a real tokenizer, KV cache, prefix cache, scheduler and metrics behind the gateway.

Deterministic: the same script, corpus and pinned libraries give byte-identical files (weights
from numpy's PCG64, JSON written with sorted keys; --check builds twice and compares sha256s).
The end-of-sequence row of lm_head is zero, so its logit is 0 while the other 2,047 are random:
greedy decoding practically never stops early and max_tokens sets the answer's length.

    python make_model.py --corpus train/examples/operator-example.jsonl --out DIR [--check]
"""
import argparse
import hashlib
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np
from safetensors.numpy import save_file
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

SEED = 20240611
VOCAB = 2048
HIDDEN = 128
HEADS = 2
KV_HEADS = 2
LAYERS = 2
INTERMEDIATE = 256
MAX_POSITIONS = 4096
BOS, EOS, PAD = "<s>", "</s>", "<pad>"

# One turn per message, then the assistant's turn; bos once at the start (vLLM tokenizes a chat
# prompt without adding special tokens, a completion prompt with them: both start with one bos).
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "<|{{ message['role'] }}|>\n{{ message['content'] }}{{ eos_token }}\n"
    "{% endfor %}{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)


def corpus_lines(path):
    with open(path, encoding="utf-8") as f:
        for line in f:
            row = json.loads(line)
            for key in ("text", "context"):
                if row.get(key):
                    yield row[key]


def build_tokenizer(corpus):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB, min_frequency=2, special_tokens=[BOS, EOS, PAD],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(list(corpus_lines(corpus)), trainer=trainer)
    if tok.get_vocab_size() != VOCAB:
        raise SystemExit(f"tokenizer has {tok.get_vocab_size()} tokens, want {VOCAB}: corpus too small")
    bos = tok.token_to_id(BOS)
    tok.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", pair=f"{BOS} $A {BOS} $B", special_tokens=[(BOS, bos)])
    return tok


def build_weights(eos_id):
    rng = np.random.default_rng(SEED)

    def normal(*shape):
        return (rng.standard_normal(shape, dtype=np.float32) * 0.02).astype(np.float32)

    head = HIDDEN // HEADS
    w = {"model.embed_tokens.weight": normal(VOCAB, HIDDEN)}
    for i in range(LAYERS):
        p = f"model.layers.{i}."
        w[p + "self_attn.q_proj.weight"] = normal(HEADS * head, HIDDEN)
        w[p + "self_attn.k_proj.weight"] = normal(KV_HEADS * head, HIDDEN)
        w[p + "self_attn.v_proj.weight"] = normal(KV_HEADS * head, HIDDEN)
        w[p + "self_attn.o_proj.weight"] = normal(HIDDEN, HEADS * head)
        w[p + "mlp.gate_proj.weight"] = normal(INTERMEDIATE, HIDDEN)
        w[p + "mlp.up_proj.weight"] = normal(INTERMEDIATE, HIDDEN)
        w[p + "mlp.down_proj.weight"] = normal(HIDDEN, INTERMEDIATE)
        w[p + "input_layernorm.weight"] = np.ones(HIDDEN, dtype=np.float32)
        w[p + "post_attention_layernorm.weight"] = np.ones(HIDDEN, dtype=np.float32)
    w["model.norm.weight"] = np.ones(HIDDEN, dtype=np.float32)
    lm_head = normal(VOCAB, HIDDEN)
    lm_head[eos_id] = 0.0
    w["lm_head.weight"] = lm_head
    return w


def write_json(path, obj):
    path.write_text(json.dumps(obj, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def build(corpus, out):
    out.mkdir(parents=True)
    tok = build_tokenizer(corpus)
    tok.save(str(out / "tokenizer.json"))
    bos, eos, pad = (tok.token_to_id(t) for t in (BOS, EOS, PAD))
    save_file(build_weights(eos), str(out / "model.safetensors"), metadata={"format": "pt"})
    write_json(out / "config.json", {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama",
        "vocab_size": VOCAB, "hidden_size": HIDDEN, "intermediate_size": INTERMEDIATE,
        "num_hidden_layers": LAYERS, "num_attention_heads": HEADS, "num_key_value_heads": KV_HEADS,
        "head_dim": HIDDEN // HEADS, "hidden_act": "silu", "max_position_embeddings": MAX_POSITIONS,
        "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "attention_bias": False, "mlp_bias": False,
        "tie_word_embeddings": False, "initializer_range": 0.02, "dtype": "float32",
        "bos_token_id": bos, "eos_token_id": eos, "pad_token_id": pad,
    })
    write_json(out / "generation_config.json", {"bos_token_id": bos, "eos_token_id": eos, "pad_token_id": pad})
    write_json(out / "tokenizer_config.json", {
        "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": BOS, "eos_token": EOS,
        "pad_token": PAD, "model_max_length": MAX_POSITIONS, "add_bos_token": True,
        "clean_up_tokenization_spaces": False, "chat_template": CHAT_TEMPLATE,
    })
    write_json(out / "special_tokens_map.json", {"bos_token": BOS, "eos_token": EOS, "pad_token": PAD})
    for p in out.iterdir():
        p.chmod(0o644)  # safetensors writes 0600; the cache is shared by every clone and user


def digests(folder):
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir()) if p.is_file()}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", required=True, type=Path, help="JSONL with text/context fields")
    ap.add_argument("--out", required=True, type=Path, help="folder to create (must not exist)")
    ap.add_argument("--check", action="store_true", help="build a second time and require identical files")
    args = ap.parse_args()
    if args.out.exists():
        raise SystemExit(f"{args.out} exists; remove it first")
    build(args.corpus, args.out)
    sums = digests(args.out)
    if args.check:
        scratch = Path(tempfile.mkdtemp())
        try:
            build(args.corpus, scratch / "again")
            again = digests(scratch / "again")
        finally:
            shutil.rmtree(scratch)
        if again != sums:
            diff = sorted(k for k in sums.keys() | again.keys() if sums.get(k) != again.get(k))
            raise SystemExit(f"two builds differ in {diff}")
    write_json(args.out / "SHA256SUMS.json", sums)
    for name, digest in sums.items():
        print(f"{digest}  {name}")
    print(f"tiny-llama written to {args.out}" + (" (two builds identical)" if args.check else ""), file=sys.stderr)


if __name__ == "__main__":
    main()
