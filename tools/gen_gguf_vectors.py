#!/usr/bin/env python3
"""Writes the GGUF reader's test data into tests/data/gguf/ (run from the repository root with the dev venv:
`/tmp/venv/bin/python tools/gen_gguf_vectors.py`). Deterministic (fixed seeds); the reference is the PyPI `gguf`
package (gguf.quants dequantization, GGUFWriter).

1. dq_<TYPE>.bin for every ggml block type weft decodes: the quantized blocks followed by gguf's dequantized
   float32 values (little-endian). Blocks come from gguf.quants.quantize where the package can quantize the type
   (Q4_0..Q8_0; plus some random-byte blocks so every bit pattern is exercised), and otherwise (K-quants) from
   random bytes whose fp16 scale fields hold sane values (random sign and magnitude, one subnormal, one zero).
2. mixed.gguf: a 2-layer arch-llama GGUF v3 whose tensors use every supported type (F32, F16, BF16, Q4_0..Q8_0,
   Q2_K..Q6_K) plus rope_freqs.weight; mixed.fnv lists, per canonical tensor name, the FNV-1a 64 hash of gguf's
   dequantized float32 bytes (PyTorch row-major order).
3. v2_qwen3.gguf: a 1-layer arch-qwen3 file with version 2, alignment 64, tied embeddings, q/k norms and one key
   of every metadata value type; v2_qwen3.fnv likewise.
"""
import os
import sys

import numpy as np
import gguf
from gguf import GGMLQuantizationType as T
from gguf import GGUFValueType as V

OUT = "tests/data/gguf"

# (type, byte offsets of the fp16 scale fields in a block)
BLOCK_TYPES = [
    (T.Q4_0, [0]), (T.Q4_1, [0, 2]), (T.Q5_0, [0]), (T.Q5_1, [0, 2]), (T.Q8_0, [0]),
    (T.Q2_K, [80, 82]), (T.Q3_K, [108]), (T.Q4_K, [0, 2]), (T.Q5_K, [0, 2]), (T.Q6_K, [208]),
]


def block_info(t):
    return gguf.GGML_QUANT_SIZES[t]  # (elements per block, bytes per block)


def random_blocks(rng, t, scale_offsets, n):
    """n blocks of random bytes with sane fp16 scale fields (block 0 subnormal scales, block 1 zero scales)."""
    bs, nb = block_info(t)
    raw = rng.integers(0, 256, size=(n, nb), dtype=np.uint8)
    for b in range(n):
        for off in scale_offsets:
            if b == 0:
                h = np.array([rng.integers(1, 0x400)], dtype=np.uint16)  # subnormal half
            elif b == 1:
                h = np.array([0], dtype=np.uint16)
            else:
                v = rng.uniform(1e-4, 0.5) * (1 if rng.random() < 0.7 else -1)
                h = np.array([v], dtype=np.float16).view(np.uint16)
            raw[b, off:off + 2] = h.view(np.uint8)
    return raw


def quantized_blocks(rng, t, scale_offsets, n_quant, n_random):
    bs, nb = block_info(t)
    parts = []
    if n_quant:
        x = rng.standard_normal((n_quant, bs)).astype(np.float32)
        x[0] *= 0  # an all-zero block
        x[1] = 0.25  # a constant block
        x[2] *= 1e-3
        x[3] *= 100
        parts.append(gguf.quants.quantize(x, t).reshape(n_quant, nb))
    parts.append(random_blocks(rng, t, scale_offsets, n_random))
    return np.concatenate(parts, axis=0)


def can_quantize(t):
    try:
        gguf.quants.quantize(np.zeros((1, block_info(t)[0]), dtype=np.float32), t)
        return True
    except NotImplementedError:
        return False


def write_dequant_vectors():
    for k, (t, offs) in enumerate(BLOCK_TYPES):
        rng = np.random.default_rng(1000 + k)
        bs, nb = block_info(t)
        if bs == 32:
            blocks = quantized_blocks(rng, t, offs, 16 if can_quantize(t) else 0, 16 if can_quantize(t) else 32)
        else:
            blocks = quantized_blocks(rng, t, offs, 0, 6)
        deq = gguf.quants.dequantize(blocks.reshape(-1), t).astype("<f4", copy=False).reshape(-1)
        assert deq.size == blocks.shape[0] * bs and np.all(np.isfinite(deq)), t.name
        with open(os.path.join(OUT, f"dq_{t.name}.bin"), "wb") as f:
            f.write(blocks.tobytes())
            f.write(deq.tobytes())


def fnv64(b):
    h = 0xcbf29ce484222325
    for c in b:
        h = ((h ^ c) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return h


def make_tensor(rng, t, shape):
    """(stored array for GGUFWriter, raw_dtype or None, dequantized float32 in PyTorch order)."""
    rows, cols = int(np.prod(shape[:-1])), shape[-1]
    if t == T.F32:
        x = (1 + 0.1 * rng.standard_normal(shape)).astype(np.float32)
        return x, None, x
    if t == T.F16:
        x = rng.standard_normal(shape).astype(np.float16)
        return x, None, x.astype(np.float32)
    if t == T.BF16:
        q = gguf.quants.quantize(rng.standard_normal(shape).astype(np.float32), t)
        return q, t, gguf.quants.dequantize(q, t).reshape(shape)
    bs, nb = block_info(t)
    if can_quantize(t):
        q = gguf.quants.quantize((0.05 * rng.standard_normal(shape)).astype(np.float32), t)
    else:
        offs = dict(BLOCK_TYPES)[t]
        q = random_blocks(rng, t, offs, rows * cols // bs)
    q = np.ascontiguousarray(q.reshape(*shape[:-1], cols // bs * nb))
    return q, t, gguf.quants.dequantize(q, t).reshape(shape)


def llama_name(n):
    g = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight",
         "output.weight": "lm_head.weight", "rope_freqs.weight": "rope_freqs.weight"}
    if n in g:
        return g[n]
    _, layer, stem, suffix = n.split(".")
    hf = {"attn_norm": "input_layernorm", "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj",
          "attn_v": "self_attn.v_proj", "attn_output": "self_attn.o_proj", "attn_q_norm": "self_attn.q_norm",
          "attn_k_norm": "self_attn.k_norm", "ffn_norm": "post_attention_layernorm", "ffn_gate": "mlp.gate_proj",
          "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj"}[stem]
    return f"model.layers.{layer}.{hf}.{suffix}"


def write_gguf(path, arch, tensors, kv, seed, version=3, alignment=None):
    rng = np.random.default_rng(seed)
    w = gguf.GGUFWriter(path, arch)
    if alignment:
        w.add_custom_alignment(alignment)
    for key, val, vt, sub in kv:
        w.add_key_value(key, val, vt, sub)
    lines = []
    for name, t, shape in tensors:
        stored, raw, deq = make_tensor(rng, t, shape)
        if raw is None:
            w.add_tensor(name, stored)
        else:
            w.add_tensor(name, stored, raw_dtype=raw)
        lines.append(f"{llama_name(name)} {fnv64(np.ascontiguousarray(deq, dtype='<f4').tobytes()):016x}")
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    if version != 3:
        with open(path, "r+b") as f:
            f.seek(4)
            f.write(int(version).to_bytes(4, "little"))
    with open(path[:-5] + ".fnv", "w") as f:
        f.write("\n".join(lines) + "\n")


def tok_kv(n):
    return [("tokenizer.ggml.model", "llama", V.STRING, None),
            ("tokenizer.ggml.tokens", [f"t{i}" for i in range(n)], V.ARRAY, V.STRING),
            ("tokenizer.ggml.scores", [float(-i) for i in range(n)], V.ARRAY, V.FLOAT32),
            ("tokenizer.ggml.token_type", [1] * n, V.ARRAY, V.INT32),
            ("tokenizer.ggml.bos_token_id", 1, V.UINT32, None),
            ("tokenizer.ggml.eos_token_id", 2, V.UINT32, None)]


def write_mixed():
    H, F, V_, HD = 256, 32, 16, 8
    kv = [("llama.context_length", 128, V.UINT32, None), ("llama.embedding_length", H, V.UINT32, None),
          ("llama.block_count", 2, V.UINT32, None), ("llama.feed_forward_length", F, V.UINT32, None),
          ("llama.attention.head_count", 4, V.UINT32, None), ("llama.attention.head_count_kv", 2, V.UINT32, None),
          ("llama.attention.key_length", HD, V.UINT32, None), ("llama.rope.dimension_count", HD, V.UINT32, None),
          ("llama.attention.layer_norm_rms_epsilon", 1e-5, V.FLOAT32, None),
          ("llama.rope.freq_base", 500000.0, V.FLOAT32, None)] + tok_kv(V_)
    ts = [("token_embd.weight", T.Q4_K, (V_, H)), ("output_norm.weight", T.F32, (H,)),
          ("output.weight", T.Q6_K, (V_, H)), ("rope_freqs.weight", T.F32, (HD // 2,))]
    layer_types = [
        dict(attn_norm=T.F32, attn_q=T.Q4_K, attn_k=T.Q5_K, attn_v=T.Q6_K, attn_output=T.Q4_0, ffn_norm=T.F16,
             ffn_gate=T.Q2_K, ffn_up=T.Q3_K, ffn_down=T.Q4_1),
        dict(attn_norm=T.BF16, attn_q=T.Q8_0, attn_k=T.Q5_0, attn_v=T.Q5_1, attn_output=T.Q8_0, ffn_norm=T.F32,
             ffn_gate=T.BF16, ffn_up=T.Q5_1, ffn_down=T.Q5_0)]
    shapes = dict(attn_norm=(H,), attn_q=(4 * HD, H), attn_k=(2 * HD, H), attn_v=(2 * HD, H),
                  attn_output=(H, 4 * HD), ffn_norm=(H,), ffn_gate=(F, H), ffn_up=(F, H), ffn_down=(H, F))
    for l, types in enumerate(layer_types):
        for stem, t in types.items():
            ts.append((f"blk.{l}.{stem}.weight", t, shapes[stem]))
    write_gguf(os.path.join(OUT, "mixed.gguf"), "llama", ts, kv, seed=7)


def write_v2_qwen3():
    H, F, V_, HD = 32, 64, 16, 16
    kv = [("qwen3.context_length", 4096, V.UINT32, None), ("qwen3.embedding_length", H, V.UINT32, None),
          ("qwen3.block_count", 1, V.UINT32, None), ("qwen3.feed_forward_length", F, V.UINT32, None),
          ("qwen3.attention.head_count", 4, V.UINT32, None), ("qwen3.attention.head_count_kv", 1, V.UINT32, None),
          ("qwen3.attention.key_length", HD, V.UINT32, None), ("qwen3.attention.value_length", HD, V.UINT32, None),
          ("qwen3.attention.layer_norm_rms_epsilon", 1e-6, V.FLOAT32, None),
          ("qwen3.rope.freq_base", 1000000.0, V.FLOAT32, None),
          ("general.sampling.temp", 0.6, V.FLOAT32, None), ("general.sampling.top_k", 20, V.INT32, None),
          ("tokenizer.ggml.padding_token_id", 0, V.UINT32, None),
          ("tokenizer.ggml.eot_token_id", 3, V.UINT32, None),
          # one key of every value type, for the getters
          ("weft.u8", 200, V.UINT8, None), ("weft.i8", -100, V.INT8, None), ("weft.u16", 60000, V.UINT16, None),
          ("weft.i16", -30000, V.INT16, None), ("weft.u32", 4000000000, V.UINT32, None),
          ("weft.i32", -2000000000, V.INT32, None), ("weft.f32", 0.1, V.FLOAT32, None),
          ("weft.bool", True, V.BOOL, None), ("weft.str", "héllo", V.STRING, None),
          ("weft.u64", 2**63 + 5, V.UINT64, None), ("weft.i64", -(2**62), V.INT64, None),
          ("weft.f64", 0.1, V.FLOAT64, None), ("weft.arr_i16", [-1, 2, -3], V.ARRAY, V.INT16),
          ("weft.arr_f64", [0.5, -2.25], V.ARRAY, V.FLOAT64), ("weft.arr_bool", [True, False], V.ARRAY, V.BOOL),
          ("weft.arr_u64", [7, 2**64 - 1], V.ARRAY, V.UINT64)] + tok_kv(V_)[:4] + [
          ("tokenizer.ggml.bos_token_id", 5, V.UINT32, None), ("tokenizer.ggml.eos_token_id", 3, V.UINT32, None)]
    ts = [("token_embd.weight", T.F16, (V_, H)), ("output_norm.weight", T.F32, (H,))]
    for stem, t, shape in [("attn_norm", T.F32, (H,)), ("attn_q", T.F16, (4 * HD, H)), ("attn_k", T.BF16, (HD, H)),
                           ("attn_v", T.F32, (HD, H)), ("attn_output", T.Q8_0, (H, 4 * HD)),
                           ("attn_q_norm", T.F32, (HD,)), ("attn_k_norm", T.F32, (HD,)),
                           ("ffn_norm", T.F32, (H,)), ("ffn_gate", T.Q4_0, (F, H)), ("ffn_up", T.F16, (F, H)),
                           ("ffn_down", T.Q8_0, (H, F))]:
        ts.append((f"blk.0.{stem}.weight", t, shape))
    write_gguf(os.path.join(OUT, "v2_qwen3.gguf"), "qwen3", ts, kv, seed=11, version=2, alignment=64)


def main():
    os.makedirs(OUT, exist_ok=True)
    write_dequant_vectors()
    write_mixed()
    write_v2_qwen3()
    print("wrote", sorted(os.listdir(OUT)), file=sys.stderr)


if __name__ == "__main__":
    main()
