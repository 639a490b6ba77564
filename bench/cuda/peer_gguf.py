#!/usr/bin/env python3
# Copy of ../shared/tools/peer_gguf.py (the generator of the SPEC §7 anchor model), kept here because ../shared does
# not travel to the GPU machine. Runs there (torch on the GPU).
"""Write a random-weight llama-architecture GGUF (Q4_0 2-D weights, F32 norms) at a real model's shape, with a
real Llama-3 BPE vocabulary, for timing peers. usage: peer_gguf.py OUT.gguf TOKENIZER.json [shape] [q4_0|f16]
(f16: the same random weights before quantization, stored as F16 — for the F16 side by side)"""
import json, struct, sys, time
import numpy as np, torch

out, tokjs = sys.argv[1], sys.argv[2]
shape = sys.argv[3] if len(sys.argv) > 3 else "llama3-8b"
wtype = sys.argv[4] if len(sys.argv) > 4 else "q4_0"
assert wtype in ("q4_0", "f16"), wtype
WT = 2 if wtype == "q4_0" else 1  # ggml type of the 2-D weights: Q4_0 or F16
S = {"llama3-8b": dict(H=4096, L=32, nh=32, nkv=8, F=14336, V=128256, theta=500000.0),
     "dense-32b": dict(H=5120, L=64, nh=40, nkv=8, F=25600, V=128256, theta=1000000.0),
     # Qwen3-8B's shape (per-head q/k RMSNorms: the qwen3 architecture), for the qwen3 decode path
     "qwen3-8b": dict(H=4096, L=36, nh=32, nkv=8, F=12288, V=151936, theta=1000000.0, arch="qwen3")}[shape]
A = S.get("arch", "llama")
dev = "cuda"

def s(b, x): x = x.encode(); b += struct.pack("<Q", len(x)) + x
T = {"uint32": 4, "int32": 5, "float32": 6, "string": 8, "array": 9}
def kv(b, k, t, v):
    s(b, k)
    if t == "array":
        et, items = v
        b += struct.pack("<II", T["array"], T[et]) + struct.pack("<Q", len(items))
        if et == "string":
            for it in items: s(b, it)
        elif et == "int32": b += np.asarray(items, dtype="<i4").tobytes()
        elif et == "float32": b += np.asarray(items, dtype="<f4").tobytes()
    else:
        b += struct.pack("<I", T[t])
        if t == "string": s(b, v)
        elif t == "uint32": b += struct.pack("<I", v)
        elif t == "float32": b += struct.pack("<f", v)

tj = json.load(open(tokjs))
vocab = tj["model"]["vocab"]; merges = tj["model"]["merges"]
merges = [m if isinstance(m, str) else " ".join(m) for m in merges]
toks = [None] * S["V"]; ttype = [1] * S["V"]
for t, i in vocab.items(): toks[i] = t
for a in tj.get("added_tokens", []):
    toks[a["id"]] = a["content"]; ttype[a["id"]] = 3 if a.get("special") else 4
for i in range(S["V"]):
    if toks[i] is None: toks[i] = f"[PAD{i}]"; ttype[i] = 5

H, L, nh, nkv, F, V = S["H"], S["L"], S["nh"], S["nkv"], S["F"], S["V"]
hd = H // nh
tensors = [("token_embd.weight", (V, H), WT), ("output_norm.weight", (H,), 0), ("output.weight", (V, H), WT)]
for l in range(L):
    p = f"blk.{l}."
    tensors += [(p + "attn_norm.weight", (H,), 0), (p + "attn_q.weight", (nh * hd, H), WT), (p + "attn_k.weight", (nkv * hd, H), WT),
                (p + "attn_v.weight", (nkv * hd, H), WT), (p + "attn_output.weight", (H, nh * hd), WT),
                (p + "ffn_norm.weight", (H,), 0), (p + "ffn_gate.weight", (F, H), WT), (p + "ffn_up.weight", (F, H), WT),
                (p + "ffn_down.weight", (H, F), WT)]
    if A == "qwen3": tensors += [(p + "attn_q_norm.weight", (hd,), 0), (p + "attn_k_norm.weight", (hd,), 0)]
b = bytearray(b"GGUF") + struct.pack("<I", 3) + struct.pack("<Q", len(tensors))
meta = [("general.architecture", "string", A), ("general.alignment", "uint32", 32), ("general.name", "string", shape + "-random"),
        ("general.file_type", "uint32", 2 if WT == 2 else 1), (A + ".context_length", "uint32", 131072), (A + ".embedding_length", "uint32", H),
        (A + ".block_count", "uint32", L), (A + ".feed_forward_length", "uint32", F), (A + ".rope.dimension_count", "uint32", hd),
        (A + ".attention.head_count", "uint32", nh), (A + ".attention.head_count_kv", "uint32", nkv),
        (A + ".attention.layer_norm_rms_epsilon", "float32", 1e-5), (A + ".rope.freq_base", "float32", S["theta"]),
        (A + ".vocab_size", "uint32", V), ("tokenizer.ggml.model", "string", "gpt2"), ("tokenizer.ggml.pre", "string", "llama-bpe"),
        ("tokenizer.ggml.tokens", "array", ("string", toks)), ("tokenizer.ggml.token_type", "array", ("int32", ttype)),
        ("tokenizer.ggml.merges", "array", ("string", merges)), ("tokenizer.ggml.bos_token_id", "uint32", 128000),
        ("tokenizer.ggml.eos_token_id", "uint32", 128009)]
b += struct.pack("<Q", len(meta))
for k, t, v in meta: kv(b, k, t, v)
off = 0; sizes = []
for name, shp, typ in tensors:
    n = int(np.prod(shp)); sz = n * 4 if typ == 0 else n * 2 if typ == 1 else n // 32 * 18
    s(b, name); b += struct.pack("<I", len(shp)) + b"".join(struct.pack("<Q", x) for x in reversed(shp))
    b += struct.pack("<I", typ) + struct.pack("<Q", off); sizes.append(sz); off += sz + ((-sz) % 32)
b += b"\0" * ((-len(b)) % 32)
g = torch.Generator(device=dev).manual_seed(0)
t0 = time.time()
with open(out, "wb") as f:
    f.write(b)
    for (name, shp, typ), sz in zip(tensors, sizes):
        n = int(np.prod(shp))
        if typ == 0:
            data = (1 + 0.1 * torch.randn(n, generator=g, device=dev)).float().cpu().numpy().astype("<f4").tobytes()
        elif typ == 1:  # the same draws as the Q4_0 file's weights, unquantized
            data = (0.02 * torch.randn(n, generator=g, device=dev)).half().cpu().numpy().astype("<f2").tobytes()
        else:
            w = (0.02 * torch.randn(n, generator=g, device=dev)).view(-1, 32)
            idx = w.abs().argmax(1); mx = w.gather(1, idx[:, None])[:, 0]
            d = (mx / -8.0).half(); df = d.float(); inv = torch.where(df != 0, 1.0 / df, torch.zeros_like(df))
            q = torch.clamp(torch.floor(w * inv[:, None] + 8.5), 0, 15).to(torch.uint8)
            packed = q[:, :16] | (q[:, 16:] << 4)
            blk = torch.cat([d.view(torch.uint8).view(-1, 2), packed], 1)
            data = blk.cpu().numpy().tobytes()
        assert len(data) == sz, (name, len(data), sz)
        f.write(data); f.write(b"\0" * ((-sz) % 32))
print(f"wrote {out}: {off/1e9:.2f} GB of tensors in {time.time()-t0:.1f}s")
