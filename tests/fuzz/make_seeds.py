#!/usr/bin/env python3
"""Writes the fuzz targets' seed corpora (tests/fuzz/corpus/<target>/: small valid inputs a fuzzer mutates) and
the regression inputs (tests/fuzz/regressions/<target>/<case> with <case>.expect: text the error must contain,
or "accepted"): the hostile inputs the issue named and minimal forms of the fuzzers' findings (the
findings' own inputs are committed beside them as found_*, not written by this script).

Committed as files (a few KB); this script says how each was made:  python3 tests/fuzz/make_seeds.py
"""
import gzip
import json
import os
import struct

ROOT = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.dirname(os.path.dirname(ROOT))


def put(target, name, data):
    d = os.path.join(ROOT, "corpus", target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def safetensors(tensors, dtype="F32"):
    """tensors: name -> (shape, values); F32 or BF16 (truncated), as transformers writes them."""
    header, blob = {"__metadata__": {"format": "pt"}}, b""
    for name, (shape, vals) in tensors.items():
        raw = b"".join(struct.pack("<f", v) if dtype == "F32" else struct.pack("<f", v)[2:] for v in vals)
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(blob), len(blob) + len(raw)]}
        blob += raw
    h = json.dumps(header).encode()
    h += b" " * ((8 - (8 + len(h)) % 8) % 8)
    return struct.pack("<Q", len(h)) + h + blob


def main():
    wb = {"w": ([2, 3], [0.5, -1, 2, 0, 1.5, 3]), "b": ([3], [1, 2, 3])}
    put("safetensors", "f32", safetensors(wb))
    put("safetensors", "bf16", safetensors(wb, "BF16"))
    put("safetensors", "w_only", safetensors({"w": wb["w"]}))

    put("safetensors_index", "two_shards", json.dumps(
        {"metadata": {"total_size": 36},
         "weight_map": {"w": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}}))
    put("safetensors_index", "one_shard", json.dumps({"weight_map": {"w": "model-00001-of-00002.safetensors"}}))

    # token_file: the byte stream targets.cpp reads (has-bits, datasets as type/rank/dims/values, attributes,
    # then batch, seq, world, rank)
    def dataset(kind, dims, payload):
        return bytes([kind, len(dims)]) + bytes(dims) + payload

    toks = dataset(0, [40], b"".join(struct.pack("<I", (7 * i) % 256) for i in range(40)))
    docs = dataset(1, [2], struct.pack("<qq", 0, 10))
    vocab_attr = bytes([1, 0]) + struct.pack("<q", 256) + struct.pack("<d", 0.0)
    tok_attr = bytes([1, 2, 4]) + b"byte"
    tail = bytes([1, 7, 0, 0, 0])  # batch 2, seq 8, world 1, rank 0, no explicit vocab
    put("token_file", "good", bytes([3]) + toks + docs + vocab_attr + bytes([0]) + tok_attr + bytes([0]) + tail)
    put("token_file", "tokens_only", bytes([1]) + toks + bytes([0, 0, 0, 0]) + tail)

    # checkpoint: a mode byte (0x80: an HF export, else a training-state checkpoint), then operations
    put("checkpoint", "unchanged", b"\0")
    put("checkpoint", "step_attr", bytes([0, 3, 2, 0]) + struct.pack("<q", 5) + struct.pack("<d", 0))
    put("checkpoint", "replace_w", bytes([0, 0, 1, 2, 2, 2, 3]) + bytes(range(24)))
    put("checkpoint", "export_unchanged", b"\x80")

    byte_level = {
        "version": "1.0", "added_tokens": [{"id": 256, "content": "<|endoftext|>", "special": True}],
        "normalizer": {"type": "NFC"},
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": "\\s+|\\p{L}+|\\p{N}|[^\\s\\p{L}\\p{N}]+"}, "behavior": "Isolated",
             "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "use_regex": False}]},
        "model": {"type": "BPE", "vocab": {}, "merges": []}}
    n = 0
    for b in range(256):
        printable = 33 <= b <= 126 or 0xA1 <= b <= 0xAC or 0xAE <= b <= 0xFF
        byte_level["model"]["vocab"][chr(b if printable else 256 + n)] = b
        n += 0 if printable else 1
    merges = [("h", "e"), ("l", "l"), ("he", "ll"), ("hell", "o")]
    for i, (a, b) in enumerate(merges):
        byte_level["model"]["vocab"][a + b] = 257 + i
        byte_level["model"]["merges"].append(f"{a} {b}")
    put("tokenizer", "bpe", json.dumps(byte_level) + "\0hello world, héllo<|endoftext|>hello 123")

    for cfg in ("qwen3_debug", "qwen3_moe_debug", "gpt_oss_debug", "llama3_debug", "mixtral_debug", "olmo2_debug", "gemma3_debug",
                "deepseek_v3_debug", "llama4_debug"):
        with open(os.path.join(SRC, "configs", cfg + ".yaml")) as f:
            text = f.read()
        put("job_config", cfg, text)
        layers = "4" if cfg == "llama4_debug" else "2"  # llama4's NoPE layer is its 4th (its keys would not act on 2)
        put("job_config", cfg + "_overrides", text + "\0training.steps\n3\nmodel.n_layers\n" + layers + "\n")
    put("job_config", "flavor", "model:\n  name: qwen3\n  flavor: 0.6b\nparallelism:\n  tensor_parallel_degree: 2\n")

    base = {"vocab_size": 256, "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
            "num_key_value_heads": 2, "head_dim": 16, "intermediate_size": 128, "rms_norm_eps": 1e-6,
            "tie_word_embeddings": False, "rope_theta": 1000000.0, "max_position_embeddings": 512}
    put("hf_config", "qwen3", json.dumps({"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", **base}))
    put("hf_config", "qwen3_moe", json.dumps({"model_type": "qwen3_moe", **base, "num_experts": 4,
                                              "num_experts_per_tok": 2, "moe_intermediate_size": 32,
                                              "norm_topk_prob": True, "decoder_sparse_step": 1, "mlp_only_layers": []}))
    put("hf_config", "gpt_oss", json.dumps({"model_type": "gpt_oss", **base, "num_local_experts": 4,
                                            "num_experts_per_tok": 2, "sliding_window": 32, "swiglu_limit": 7.0,
                                            "layer_types": ["sliding_attention", "full_attention"],
                                            "rope_scaling": {"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0,
                                                             "beta_slow": 1.0,
                                                             "original_max_position_embeddings": 4096}}))
    put("hf_config", "mixtral", json.dumps({"architectures": ["MixtralForCausalLM"], "model_type": "mixtral", **base,
                                            "num_local_experts": 4, "num_experts_per_tok": 2, "sliding_window": 64,
                                            "router_aux_loss_coef": 0.02, "output_router_logits": False}))
    put("hf_config", "olmo2", json.dumps({"architectures": ["Olmo2ForCausalLM"], "model_type": "olmo2", **base}))
    put("hf_config", "gemma3", json.dumps({"architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text",
                                           **{k: v for k, v in base.items() if k != "tie_word_embeddings"},
                                           "hidden_activation": "gelu_pytorch_tanh", "query_pre_attn_scalar": 16,
                                           "sliding_window": 8, "layer_types": ["sliding_attention", "full_attention"],
                                           "rope_local_base_freq": 10000.0, "final_logit_softcapping": None,
                                           "rope_scaling": {"rope_type": "linear", "factor": 8.0}}))
    put("hf_config", "gemma3_rope_parameters", json.dumps({"model_type": "gemma3_text", **base, "rope_parameters": {
        "full_attention": {"rope_type": "linear", "rope_theta": 1000000.0, "factor": 8.0},
        "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}}}))
    put("hf_config", "deepseek_v3", json.dumps({"architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3",
                                                **{k: v for k, v in base.items() if k not in ("num_key_value_heads", "head_dim")},
                                                "num_key_value_heads": 4, "kv_lora_rank": 16, "q_lora_rank": None,
                                                "qk_nope_head_dim": 8, "qk_rope_head_dim": 8, "v_head_dim": 12,
                                                "n_routed_experts": 8, "num_experts_per_tok": 2, "n_group": 4,
                                                "topk_group": 2, "n_shared_experts": 2, "routed_scaling_factor": 2.5,
                                                "first_k_dense_replace": 1, "moe_intermediate_size": 16,
                                                "rope_interleave": True,
                                                "rope_scaling": {"type": "yarn", "factor": 4.0, "mscale": 1.0,
                                                                 "mscale_all_dim": 1.0, "beta_fast": 32.0,
                                                                 "beta_slow": 1.0,
                                                                 "original_max_position_embeddings": 128}}))
    put("hf_config", "llama4", json.dumps({"architectures": ["Llama4ForCausalLM"], "model_type": "llama4_text", **base,
                                           "intermediate_size_mlp": 96, "num_local_experts": 4,
                                           "num_experts_per_tok": 1, "interleave_moe_layer_step": 2,
                                           "no_rope_layers": [1, 0], "attention_chunk_size": 8,
                                           "attn_temperature_tuning": 4, "floor_scale": 8, "attn_scale": 0.1,
                                           "use_qk_norm": True,
                                           "rope_scaling": {"rope_type": "llama3", "factor": 16.0,
                                                            "low_freq_factor": 1.0, "high_freq_factor": 1.0,
                                                            "original_max_position_embeddings": 64}}))
    put("hf_config", "llama", json.dumps({"model_type": "llama", **base,
                                          "rope_scaling": {"rope_type": "llama3", "factor": 8.0,
                                                           "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                                           "original_max_position_embeddings": 8192}}))

    for kind, folder, names in ((0, "chips", ("trainium2", "h100-sxm", "cpu-epyc-zen4-2c")),
                                (1, "systems", ("trn2-ultraserver", "h100-hgx", "meta-h100-roce"))):
        for name in names:
            with open(os.path.join(SRC, "simulator", "specs", folder, name + ".yaml"), "rb") as f:
                put("specs", name, bytes([kind]) + f.read())

    lines = "\n".join(json.dumps({"text": t, "id": i}) for i, t in enumerate(["In the beginning", "", "é ünï", "x"]))
    put("corpus", "jsonl", b"\0" + lines.encode() + b"\n")
    put("corpus", "jsonl_gz", b"\1" + gzip.compress(lines.encode(), mtime=0))
    put("corpus", "jsonl_zipped", b"\2" + lines.encode())
    put("corpus", "text", b"\3In the beginning God created the heaven and the earth.\n")


def regression(target, name, data, expect):
    d = os.path.join(ROOT, "regressions", target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())
    with open(os.path.join(d, name + ".expect"), "w") as f:
        f.write(expect + "\n")


def regressions():
    qwen3 = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "vocab_size": 256, "hidden_size": 64,
             "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
             "intermediate_size": 128, "rms_norm_eps": 1e-6, "tie_word_embeddings": False}
    cfg = lambda **kw: json.dumps({**qwen3, **kw})
    # the four cases of the issue
    regression("hf_config", "negative_layers", cfg(num_hidden_layers=-3), "num_hidden_layers = -3 must be > 0")
    regression("hf_config", "huge_vocab", cfg(vocab_size=1099511627776, hidden_size=65536),
               "vocab_size 1099511627776")
    st = lambda header, blob=b"": struct.pack("<Q", len(header)) + header.encode() + blob
    regression("safetensors", "size_overflow",
               st(json.dumps({"w": {"dtype": "F32", "shape": [4294967296, 4294967296, 4], "data_offsets": [0, 0]}})),
               "is more than 2^63 bytes")
    regression("safetensors", "zero_dim_hides_huge",  # review finding: 0 x 2^62 x 2^62 passed the size check
               st(json.dumps({"__metadata__": {"titan_checksums": json.dumps({"w": "0"})},
                              "w": {"dtype": "F32", "shape": [0, 2**62, 2**62], "data_offsets": [0, 0]}})),
               "is more than 2^63 bytes")
    regression("safetensors", "deep_header", st('{"a": ' + "[" * 200 + "]" * 200 + "}"),
               "nests objects and lists more than 64 deep")
    good_w = '"w": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]}'
    regression("safetensors", "duplicate_name", st("{" + good_w + ", " + good_w + "}", bytes(24)),
               "names 'w' twice")
    # more sizes and shapes where they enter
    regression("hf_config", "layers_1e9", cfg(num_hidden_layers=10**9), "num_hidden_layers = 1000000000 must be at most")
    regression("hf_config", "layers_as_text", cfg(num_hidden_layers="4"), 'num_hidden_layers = "4" is not an integer')
    regression("hf_config", "layers_2e27", cfg(num_hidden_layers=2.111e27),  # fuzz finding: UB casting to int64
               "num_hidden_layers = 2.111e+27 is beyond what titan reads")
    regression("hf_config", "layers_fractional", cfg(num_hidden_layers=4.5), "num_hidden_layers = 4.5 is not an integer")
    regression("hf_config", "negative_window", cfg(sliding_window=-5, use_sliding_window=True, max_window_layers=0),
               "has a sliding window of -5 tokens")
    regression("hf_config", "deep_nesting", '{"model_type": "qwen3", "x": ' + "[" * 1000 + "]" * 1000 + "}",
               "nests objects and lists more than 64 deep")
    regression("hf_config", "model_type_number", cfg(model_type=256), "model_type = 256 is not a string")  # fuzz finding
    regression("safetensors", "negative_dim",
               st(json.dumps({"w": {"dtype": "F32", "shape": [-2, 3], "data_offsets": [0, 24]}})),
               "holds -2, not a non-negative integer")
    regression("safetensors", "offsets_past_end",
               st(json.dumps({"w": {"dtype": "F32", "shape": [2, 3], "data_offsets": [8, 32]}}), bytes(24)),
               "damaged or truncated")
    regression("safetensors", "bad_checksum_text",
               st(json.dumps({"__metadata__": {"titan_checksums": json.dumps({"w": "zz"})},
                              "w": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]}}), bytes(24)),
               "not a 64-bit hex number")
    regression("safetensors_index", "path_outside",
               json.dumps({"weight_map": {"w": "../../etc/passwd"}}), "not the name of a file beside the index")
    regression("safetensors_index", "duplicate_weight",
               '{"weight_map": {"w": "model-00001-of-00002.safetensors", "w": "model-00002-of-00002.safetensors"}}',
               "names 'w' twice")
    # token files: the byte stream of targets.cpp (see make_seeds' token_file seeds)
    toks = bytes([0, 1, 40]) + bytes(160)
    tail = bytes([1, 7, 0, 0, 0])
    regression("token_file", "vocab_size_list",  # an array attribute read into one int64: a stack overflow before
               bytes([1]) + toks + bytes([1, 3, 4]) + bytes(32) + bytes([0, 0, 0]) + tail, "holds 4 value(s)")
    regression("token_file", "float_tokens", bytes([1, 2, 1, 40]) + bytes(160) + bytes([0, 0, 0, 0]) + tail,
               "does not hold integers")
    regression("token_file", "more_doc_starts_than_tokens",
               bytes([3, 0, 1, 30]) + bytes(120) + bytes([1, 1, 31]) + bytes(8 * 31) + bytes([0, 0, 0, 0]) + tail,
               "at most one start per token")
    regression("checkpoint", "checksums_not_hex",  # attribute 'checksums' (8) replaced by a string
               bytes([0, 8, 2, 2, 11]) + b"model/w zz\n", "not a 64-bit hex number")
    regression("checkpoint", "export_config_replaced", bytes([0x80, 7, 2, 2, 19]) + b'{"model_type": "x"}',
               "model_type 'x' is not supported")
    regression("checkpoint", "step_int64_max", bytes([0, 3, 2, 0]) + struct.pack("<q", 2**63 - 1) + bytes(8),
               "step = 9223372036854775807, not a count in [0, 2^53)")
    regression("checkpoint", "rng_damaged", bytes([0, 6, 2, 2, 3]) + b"abc", "malformed RNG state")
    regression("checkpoint", "step_as_text", bytes([0, 3, 2, 2, 3]) + b"two", "titan expects one integer")
    tok = {"model": {"type": "BPE", "vocab": {"a": -1}, "merges": []}}
    regression("tokenizer", "negative_id", json.dumps(tok) + "\0a", "not an integer in [0, 16777215]")
    tok = {"model": {"type": "BPE", "vocab": {"a": 4000000000}, "merges": []}}
    regression("tokenizer", "id_beyond_2_24", json.dumps(tok) + "\0a", "not an integer in [0, 16777215]")
    tok = {"model": {"type": "BPE", "vocab": {"a": 16777215}, "merges": []}}  # review finding: a 16.7M-entry table
    regression("tokenizer", "sparse_ids", json.dumps(tok) + "\0a", "ids leave most of [0, 16777215] unused")
    tok = {"model": {"type": "BPE", "vocab": {"a": 0}, "merges": [["a"]]}}
    regression("tokenizer", "short_merge", json.dumps(tok) + "\0a", 'is not ["left", "right"]')
    tok = {"model": {"type": "BPE", "vocab": {"a": 0}}, "pre_tokenizer": {"type": "Sequence"}}
    regression("tokenizer", "sequence_without_list", json.dumps(tok) + "\0a", "has no pretokenizers list")
    regression("job_config", "deep_nesting", "model: " + "[" * 5000, "nested more than 64 levels deep")
    regression("job_config", "tokens_2_40", "training:\n  seq_len: 1048576\n  local_batch_size: 1048576\n",
               "is more than 2^31 tokens per rank and step")
    regression("job_config", "degrees_2_40", "parallelism:\n  tensor_parallel_degree: 1048576\n"
               "  pipeline_parallel_degree: 1048576\n", "multiply to 1.09951e+12 ranks")
    regression("job_config", "newline_in_string",  # fuzz finding: a string with a newline did not print back
               'job:\n  description: "two\n\n  lines \\"quoted\\" \\\\ back"\n', "accepted")
    regression("job_config", "lr_inf", "optimizer:\n  lr: inf\n", "optimizer.lr")  # review: printed as inf.0
    regression("job_config", "nesting_behind_hash", "model: [a#b, " + "[" * 5000 + "\n",
               "nested more than 64 levels deep")
    regression("job_config", "list_as_key", "? [a, b]\n: 1\n", "a key must be a plain name")
    with open(os.path.join(SRC, "configs", "gpt_oss_debug.yaml")) as f:  # fuzz finding: printed YAML did not load
        lines = f.read().splitlines()
    legacy = "\n".join(l.replace("moe_hidden_dim: 128", "hidden_dim: 128") for l in lines[:17]) + "\n"
    regression("job_config", "gpt_oss_flavor_hidden_dim", legacy, "model.hidden_dim does nothing for this model")
    regression("specs", "units_huge", b"\1name: x\nchip: trainium2\nchips: 4\nlevels:\n  - {topology: ring, units: 1e300,"
               b" bandwidth_gbps: 1, latency_us: 1, efficiency: 0.5}\n", "must be a whole number in [1, 10000000]")
    llama4 = {"model_type": "llama4_text", "vocab_size": 256, "hidden_size": 64, "num_hidden_layers": 4,
              "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "intermediate_size": 32,
              "intermediate_size_mlp": 96, "num_local_experts": 4, "attention_chunk_size": 8}
    regression("hf_config", "llama4_rope_pattern", json.dumps(dict(llama4, no_rope_layers=[1, 0, 0, 1])),
               "is not every n-th layer without RoPE (layer 2)")
    regression("hf_config", "llama4_null_chunk", json.dumps(dict(llama4, attention_chunk_size=None)),
               "attention_chunk_size null")
    regression("hf_config", "llama4_moe_layers", json.dumps(dict(llama4, moe_layers=[0, 2])),
               "llama4 config: moe_layers [0,2] is not every 1-th layer")
    regression("hf_config", "llama4_multimodal", json.dumps(dict(llama4, model_type="llama4")),
               "give its text_config as a config of model_type llama4_text")
    regression("specs", "list_as_key", b"\0? [a]\n: 1\n", "is not a plain name")
    regression("corpus", "damaged_gz", b"\1" + gzip.compress(b'{"text": "abc"}\n', mtime=0)[:-6],
               "ends inside its compressed data")


if __name__ == "__main__":
    main()
    regressions()
