#!/usr/bin/env python3
"""Writes MLX affine quantization test vectors for tests/unit/test_mlx.c into tests/data/mlx/.

mlx itself is not installable on the dev machine, so this is a numpy transcription of mlx/ops.cpp at 846d17622:
`affine_quantize` (the fallback: per group of `gs` weights, in fp32) and `pack_and_quantize` (power-of-two bit
widths packed 32/bits per uint32 word, LSB first; 3/5/6 bits packed as one LSB-first bitstream), and the fp32
form of `affine_dequantize` (`scales * q + biases`, one fp32 multiply then one fp32 add).

Output:
  tests/data/mlx/vectors.safetensors  for each case P (e.g. "b3_g32"):
      P.weight   U32  packed words [.., rows, cols*bits/32]
      P.scales   F32|F16|BF16 [.., rows, cols/gs]
      P.biases   same
      P.q        U8   the quantized integers [.., rows, cols] (checks the unpacking on its own)
      P.expected F32  the dequantized weights [.., rows, cols]
  tests/data/mlx/config.json          {"quantization": {...}} with per-module entries giving each case's
                                      bits/group_size (some through mlx's dict defaults gs 64 / bits 4)

Usage: /tmp/venv/bin/python tools/gen_mlx_vectors.py [outdir]   (deterministic; seed 1234)
"""
import json
import os
import struct
import sys

import numpy as np

F32 = np.float32


def to_bf16_bits(x):
    """float32 -> bfloat16 bit patterns, round to nearest even (no NaNs here)."""
    b = np.asarray(x, dtype=F32).view(np.uint32).astype(np.uint64)
    b = (b + 0x7FFF + ((b >> 16) & 1)) >> 16
    return b.astype(np.uint16)


def bf16_bits_to_f32(h):
    return (h.astype(np.uint32) << 16).view(F32)


def store(x, dtype):
    """Rounds fp32 values to the storage dtype; returns (raw bytes array, the stored values as fp32)."""
    if dtype == "F32":
        a = np.asarray(x, dtype=F32)
        return a, a
    if dtype == "F16":
        a = np.asarray(x, dtype=F32).astype(np.float16)
        return a, a.astype(F32)
    h = to_bf16_bits(x)
    return h, bf16_bits_to_f32(h)


def affine_quantize(w, gs, bits):
    """mlx affine_quantize fallback: returns q (uint32, w's shape) and fp32 scales/biases [.., cols/gs]."""
    shape = w.shape
    g = w.reshape(-1, shape[-1] // gs, gs).astype(F32)
    n_bins = F32((1 << bits) - 1)
    w_max = g.max(axis=-1, keepdims=True)
    w_min = g.min(axis=-1, keepdims=True)
    mask = np.abs(w_min) > np.abs(w_max)
    scales = np.maximum((w_max - w_min) / n_bins, F32(1e-7)).astype(F32)
    scales = np.where(mask, scales, -scales).astype(F32)
    edge = np.where(mask, w_min, w_max).astype(F32)
    q0 = np.round(edge / scales).astype(F32)  # numpy and mlx both round half to even
    with np.errstate(divide="ignore", invalid="ignore"):
        scales = np.where(q0 != 0, edge / q0, scales).astype(F32)
    biases = np.where(q0 == 0, F32(0), edge).astype(F32)
    q = np.clip(np.round((g - biases) / scales), F32(0), n_bins).astype(np.uint32)
    sshape = shape[:-1] + (shape[-1] // gs,)
    return q.reshape(shape), scales.reshape(sshape), biases.reshape(sshape)


def pack(q, bits):
    """mlx pack_and_quantize packing of q [.., cols] into uint32 words [.., cols*bits/32]."""
    rows = q.reshape(-1, q.shape[-1]).astype(np.uint64)
    if bits in (2, 4, 8):
        per = 32 // bits
        shifts = (np.arange(per, dtype=np.uint64) * bits)
        words = (rows.reshape(rows.shape[0], -1, per) << shifts).sum(axis=-1)
    else:
        bitsarr = (rows[..., None] >> np.arange(bits, dtype=np.uint64)) & 1  # [r, cols, bits]
        stream = bitsarr.reshape(rows.shape[0], -1, 32)
        words = (stream << np.arange(32, dtype=np.uint64)).sum(axis=-1)
    return words.astype(np.uint32).reshape(q.shape[:-1] + (q.shape[-1] * bits // 32,))


def unpack_check(words, bits, cols):
    """Independent decoder (element e = stream bits [e*bits, (e+1)*bits)) to self-check pack()."""
    w = words.reshape(-1, words.shape[-1]).astype(np.uint64)
    out = np.zeros((w.shape[0], cols), dtype=np.uint32)
    for e in range(cols):
        bit = e * bits
        k, off = bit // 32, bit % 32
        v = w[:, k] >> np.uint64(off)
        if off + bits > 32:
            v |= w[:, k + 1] << np.uint64(32 - off)
        out[:, e] = (v & np.uint64((1 << bits) - 1)).astype(np.uint32)
    return out


def make_weights(rng, shape, gs):
    w = rng.standard_normal(shape).astype(F32) * F32(0.05)
    flat = w.reshape(-1, shape[-1])
    flat[0, :gs] = F32(0.5)          # constant group: hi == lo, scale clamps to ±1e-7
    if flat.shape[0] > 1:
        flat[1, :gs] = F32(0.0)      # all-zero group: q0 == 0, bias 0
    if flat.shape[0] > 2:
        flat[2, gs:2 * gs] = np.abs(flat[2, gs:2 * gs]) + F32(0.01)   # positive group: negative scale
    if flat.shape[0] > 3:
        flat[3, gs:2 * gs] = -np.abs(flat[3, gs:2 * gs]) - F32(0.01)  # negative group: positive scale
    return w


def write_safetensors(path, tensors):
    header, blobs, off = {"__metadata__": {"format": "mlx"}}, [], 0
    for name, (dtype, arr) in tensors.items():
        raw = np.ascontiguousarray(arr).tobytes()
        header[name] = {"dtype": dtype, "shape": list(arr.shape), "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def main():
    outdir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "tests", "data",
                                                                 "mlx")
    os.makedirs(outdir, exist_ok=True)
    rng = np.random.default_rng(1234)
    tensors = {}
    quant = {"group_size": 64, "bits": 4, "mode": "affine"}
    dtypes = ["BF16", "F16", "F32"]
    i = 0
    for bits in (2, 3, 4, 5, 6, 8):
        for gs in (32, 64, 128):
            name = f"b{bits}_g{gs}"
            shape = (4, 256)
            if (bits, gs) == (5, 32):
                name, shape = "experts.switch_mlp.fc1", (2, 3, 256)  # stacked experts: a leading [E] axis
            sdt = dtypes[i % 3]
            i += 1
            w = make_weights(rng, shape, gs)
            q, s, b = affine_quantize(w, gs, bits)
            words = pack(q, bits)
            assert (unpack_check(words, bits, shape[-1]) == q.reshape(-1, shape[-1])).all()
            s_raw, s32 = store(s, sdt)
            b_raw, b32 = store(b, sdt)
            qf = q.astype(F32).reshape(s.shape + (gs,))
            expected = (s32[..., None] * qf + b32[..., None]).astype(F32).reshape(shape)
            tensors[name + ".weight"] = ("U32", words)
            tensors[name + ".scales"] = (sdt, s_raw)
            tensors[name + ".biases"] = (sdt, b_raw)
            tensors[name + ".q"] = ("U8", q.astype(np.uint8))
            tensors[name + ".expected"] = ("F32", expected)
            # per-module parameters; mlx's dict defaults (gs 64, bits 4) cover the omitted member
            if (bits, gs) == (4, 64):
                continue  # global parameters
            entry = {}
            if bits != 4:
                entry["bits"] = bits
            if gs != 64:
                entry["group_size"] = gs
            quant[name] = entry
    # a module the config marks unquantized stays as stored
    tensors["plain.weight"] = ("F32", rng.standard_normal((2, 64)).astype(F32))
    quant["plain"] = False
    write_safetensors(os.path.join(outdir, "vectors.safetensors"), tensors)
    with open(os.path.join(outdir, "config.json"), "w") as f:
        json.dump({"model_type": "llama", "quantization": quant}, f, indent=1)
        f.write("\n")
    print(f"wrote {len(tensors)} tensors to {outdir}")


if __name__ == "__main__":
    main()
