"""A GGUF of a tfm / Hugging Face Qwen3 checkpoint (safetensors, tokenizer.json) for llama.cpp,
written with llama.cpp's own gguf-py, so a benchmark runs llama.cpp on the same weights. Needs only
numpy (llama.cpp's convert_hf_to_gguf.py needs torch). Tensors keep their dtype (bf16 or f32).

    python3 tools/make_gguf.py LLAMA_CPP_DIR MODEL_DIR OUT.gguf
"""
import json
import os
import struct
import sys

import numpy as np


def read_safetensors(path):
    """{name: (dtype, shape, raw bytes as a numpy array)}."""
    with open(path, "rb") as f:
        header_len = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(header_len))
        data = np.frombuffer(f.read(), dtype=np.uint8)
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        start, end = info["data_offsets"]
        raw = data[start:end]
        if info["dtype"] == "BF16":
            array = raw.view(np.uint16)
        elif info["dtype"] == "F32":
            array = raw.view(np.float32)
        else:
            sys.exit(f"{path}: {name} is {info['dtype']}; only BF16 and F32 are written")
        tensors[name] = (info["dtype"], array.reshape(info["shape"]))
    return tensors


def gguf_name(name):
    """llama.cpp's name of a Qwen3 weight, or None for weights it does not take."""
    if name == "model.embed_tokens.weight":
        return "token_embd.weight"
    if name == "model.norm.weight":
        return "output_norm.weight"
    if name == "lm_head.weight":
        return "output.weight"
    parts = name.split(".")
    if parts[:2] != ["model", "layers"]:
        return None
    layer, rest = parts[2], ".".join(parts[3:])
    names = {
        "input_layernorm.weight": "attn_norm.weight",
        "self_attn.q_proj.weight": "attn_q.weight",
        "self_attn.k_proj.weight": "attn_k.weight",
        "self_attn.v_proj.weight": "attn_v.weight",
        "self_attn.o_proj.weight": "attn_output.weight",
        "self_attn.q_norm.weight": "attn_q_norm.weight",
        "self_attn.k_norm.weight": "attn_k_norm.weight",
        "post_attention_layernorm.weight": "ffn_norm.weight",
        "mlp.gate_proj.weight": "ffn_gate.weight",
        "mlp.up_proj.weight": "ffn_up.weight",
        "mlp.down_proj.weight": "ffn_down.weight",
    }
    return f"blk.{layer}.{names[rest]}" if rest in names else None


def add_tokenizer(writer, gguf, model_dir, vocab_size):
    with open(os.path.join(model_dir, "tokenizer.json")) as f:
        tok = json.load(f)
    if tok["model"]["type"] != "BPE":
        sys.exit("only byte-level BPE tokenizers are written")
    tokens = {i: t for t, i in tok["model"]["vocab"].items()}
    types = {i: gguf.TokenType.NORMAL for i in tokens}
    for added in tok.get("added_tokens", []):
        tokens[added["id"]] = added["content"]
        types[added["id"]] = gguf.TokenType.CONTROL if added["special"] else \
            gguf.TokenType.USER_DEFINED
    for i in range(vocab_size):  # the embedding's rows past the tokenizer's ids
        if i not in tokens:
            tokens[i], types[i] = f"[PAD{i}]", gguf.TokenType.UNUSED
    writer.add_tokenizer_model("gpt2")
    # Qwen's pre-tokenizer is a Split by regex; GPT-2's regex otherwise.
    writer.add_tokenizer_pre("qwen2" if tok["pre_tokenizer"]["type"] == "Sequence" else "gpt-2")
    writer.add_token_list([tokens[i] for i in range(vocab_size)])
    writer.add_token_types([types[i] for i in range(vocab_size)])
    merges = tok["model"]["merges"]
    writer.add_token_merges([m if isinstance(m, str) else " ".join(m) for m in merges])


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    llama_cpp, model_dir, out = sys.argv[1:]
    sys.path.insert(0, os.path.join(llama_cpp, "gguf-py"))
    import gguf

    with open(os.path.join(model_dir, "config.json")) as f:
        c = json.load(f)
    if c["architectures"][0] != "Qwen3ForCausalLM":
        sys.exit("only Qwen3ForCausalLM checkpoints are written")
    rope = c.get("rope_parameters") or {"rope_theta": c.get("rope_theta", 10000.0)}
    writer = gguf.GGUFWriter(out, "qwen3")
    writer.add_context_length(c["max_position_embeddings"])
    writer.add_embedding_length(c["hidden_size"])
    writer.add_block_count(c["num_hidden_layers"])
    writer.add_feed_forward_length(c["intermediate_size"])
    writer.add_head_count(c["num_attention_heads"])
    writer.add_head_count_kv(c["num_key_value_heads"])
    head_dim = c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"]
    writer.add_key_length(head_dim)
    writer.add_value_length(head_dim)
    writer.add_rope_freq_base(rope["rope_theta"])
    writer.add_layer_norm_rms_eps(c["rms_norm_eps"])
    add_tokenizer(writer, gguf, model_dir, c["vocab_size"])
    for key, add in (("bos_token_id", writer.add_bos_token_id),
                     ("eos_token_id", writer.add_eos_token_id)):
        value = c.get(key)
        if isinstance(value, list):
            value = value[0]
        if value is not None:
            add(value)
    writer.add_add_bos_token(False)
    for name, (dtype, array) in sorted(read_safetensors(
            os.path.join(model_dir, "model.safetensors")).items()):
        target = gguf_name(name)
        if target is None:
            sys.exit(f"{name}: no llama.cpp name for it")
        # Norm weights in f32, as llama.cpp's converter writes them.
        if dtype == "BF16" and array.ndim == 1:
            array = (array.astype(np.uint32) << 16).view(np.float32)
            dtype = "F32"
        raw = gguf.GGMLQuantizationType.BF16 if dtype == "BF16" else None
        writer.add_tensor(target, array, raw_dtype=raw)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


if __name__ == "__main__":
    main()
