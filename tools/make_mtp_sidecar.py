#!/usr/bin/env python3
"""Write TensorFold-style MTP sidecars (`mtp-4bit.safetensors`, families-and-formats §6.2) for the test
fixtures, from the `mtp.*` tensors of their hub checkpoints:

    tests/data/mtp/qwen3_5-mtp-4bit.safetensors         from tests/data/fixtures/qwen3_5
    tests/data/mtp/qwen3_5_moe-mtp-4bit.safetensors     from tests/data/fixtures/qwen3_5_moe
    tests/data/mtp/nemotron_h_moe-mtp-4bit.safetensors  from tests/data/fixtures/nemotron_h_moe

Layout, as §6.2 describes the sidecar beside an MLX checkpoint (which has dropped the head):
- Qwen3.5: names keep the `mtp.` prefix; linears MLX-affine 4-bit g64 (`.weight` uint32 words, `.scales`,
  `.biases` bf16), routers (`mlp.gate`, `mlp.shared_expert_gate`) 8-bit g64, experts stacked as
  `mlp.switch_mlp.{gate,up,down}_proj` [E, out, in]; norms bf16. The qwen3_5 sidecar bakes the zero-centred
  norms' +1 in (as the Ornith make_mtp.py does), the qwen3_5_moe one stores w (as the Qwen3.8-27B loader
  expects): weft detects which from the values.
- Nemotron-H: names drop the `mtp.` prefix (`layers.0.*`, `layers.1.*`); experts `mixer.switch_mlp.fc1`
  (up) / `fc2` (down); the router `mixer.gate.weight` stays bf16 (a raw parameter in MLX), the correction
  bias fp32; norms plain, bf16.
__metadata__: {"format": "mlx", "group_size": "64", "bits": "4"}.

The quantizer is mlx's affine one (§6.2: fp32 per group, scale/bias rounded to bf16 when stored). Output is
deterministic (no randomness). usage: make_mtp_sidecar.py [--root REPO]
"""
import argparse
import json
import os
import struct

import numpy as np

GS = 64


def read_st(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        head = json.loads(f.read(n))
        data = f.read()
    out = {}
    for k, v in head.items():
        if k == "__metadata__":
            continue
        a, b = v["data_offsets"]
        raw = data[a:b]
        if v["dtype"] == "BF16":
            x = (np.frombuffer(raw, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)
        elif v["dtype"] == "F32":
            x = np.frombuffer(raw, dtype=np.float32)
        else:
            raise SystemExit(f"{path}: {k}: dtype {v['dtype']} not handled")
        out[k] = x.reshape(v["shape"]).copy()
    return out


def to_bf16(x):
    """fp32 -> bf16 bits, round to nearest even."""
    u = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    return r


def quantize(w, bits):
    """mlx affine quantization of w [..., out, in] along `in` in groups of GS."""
    shape = w.shape
    g = w.reshape(-1, GS).astype(np.float32)
    hi, lo = g.max(1), g.min(1)
    n = float(2**bits - 1)
    s0 = np.maximum((hi - lo) / n, np.float32(1e-7)).astype(np.float32)
    neg = np.abs(lo) > np.abs(hi)
    scale = np.where(neg, s0, -s0).astype(np.float32)
    edge = np.where(neg, lo, hi).astype(np.float32)
    q0 = np.round(edge / scale)
    scale = np.where(q0 != 0, edge / np.where(q0 != 0, q0, 1), scale).astype(np.float32)
    bias = np.where(q0 == 0, 0, edge).astype(np.float32)
    q = np.clip(np.round((g - bias[:, None]) / scale[:, None]), 0, n).astype(np.uint32)
    per = 32 // bits
    q = q.reshape(-1, per)
    words = np.zeros(q.shape[0], dtype=np.uint32)
    for m in range(per):
        words |= q[:, m] << np.uint32(m * bits)
    lead = shape[:-1]
    return (
        words.reshape(*lead, shape[-1] * bits // 32),
        to_bf16(scale).reshape(*lead, shape[-1] // GS),
        to_bf16(bias).reshape(*lead, shape[-1] // GS),
    )


class Writer:
    def __init__(self):
        self.items = []

    def raw(self, name, dtype, shape, buf):
        self.items.append((name, dtype, list(shape), bytes(buf)))

    def bf16(self, name, x):
        self.raw(name, "BF16", x.shape, to_bf16(x).tobytes())

    def f32(self, name, x):
        self.raw(name, "F32", x.shape, np.asarray(x, dtype=np.float32).tobytes())

    def linear(self, module, w, bits=4):
        words, s, b = quantize(w, bits)
        self.raw(module + ".weight", "U32", words.shape, words.tobytes())
        self.raw(module + ".scales", "BF16", s.shape, s.tobytes())
        self.raw(module + ".biases", "BF16", b.shape, b.tobytes())

    def save(self, path):
        head, off = {"__metadata__": {"format": "mlx", "group_size": str(GS), "bits": "4"}}, 0
        for name, dt, shape, buf in self.items:
            head[name] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + len(buf)]}
            off += len(buf)
        hj = json.dumps(head, separators=(",", ":")).encode()
        hj += b" " * ((8 - len(hj) % 8) % 8)
        with open(path, "wb") as f:
            f.write(struct.pack("<Q", len(hj)))
            f.write(hj)
            for item in self.items:
                f.write(item[3])


def qwen(src, bake):
    t = read_st(src)
    w = Writer()
    for k in sorted(t):
        if not k.startswith("mtp."):
            continue
        x = t[k]
        if k.endswith("norm.weight") or k.endswith("_norm.weight") or ".pre_fc_norm_" in k:
            w.bf16(k, x + 1.0 if bake else x)
        elif ".mlp.experts." in k:
            continue  # stacked below
        elif k.endswith("mlp.gate.weight") or k.endswith("shared_expert_gate.weight"):
            w.linear(k[: -len(".weight")], x, bits=8)
        else:
            w.linear(k[: -len(".weight")], x)
    experts = sorted({int(k.split(".")[5]) for k in t if k.startswith("mtp.") and ".mlp.experts." in k})
    for p in ("gate_proj", "up_proj", "down_proj"):
        if experts:
            stack = np.stack([t[f"mtp.layers.0.mlp.experts.{e}.{p}.weight"] for e in experts])
            w.linear(f"mtp.layers.0.mlp.switch_mlp.{p}", stack)
    return w


def nemotron(src):
    t = read_st(src)
    w = Writer()
    for k in sorted(t):
        if not k.startswith("mtp."):
            continue
        x, name = t[k], k[len("mtp."):]
        if ".mixer.experts." in k:
            continue
        if name.endswith("e_score_correction_bias"):
            w.f32(name, x)
        elif name.endswith("norm.weight") or name.endswith("final_layernorm.weight") or name == "layers.1.mixer.gate.weight":
            w.bf16(name, x)
        else:
            w.linear(name[: -len(".weight")], x)
    experts = sorted({int(k.split(".")[5]) for k in t if k.startswith("mtp.") and ".mixer.experts." in k})
    for p, fc in (("up_proj", "fc1"), ("down_proj", "fc2")):
        stack = np.stack([t[f"mtp.layers.1.mixer.experts.{e}.{p}.weight"] for e in experts])
        w.linear(f"layers.1.mixer.switch_mlp.{fc}", stack)
    return w


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    a = ap.parse_args()
    fx = os.path.join(a.root, "tests/data/fixtures")
    out = os.path.join(a.root, "tests/data/mtp")
    os.makedirs(out, exist_ok=True)
    qwen(os.path.join(fx, "qwen3_5/model.safetensors"), True).save(os.path.join(out, "qwen3_5-mtp-4bit.safetensors"))
    qwen(os.path.join(fx, "qwen3_5_moe/model.safetensors"), False).save(
        os.path.join(out, "qwen3_5_moe-mtp-4bit.safetensors"))
    nemotron(os.path.join(fx, "nemotron_h_moe/model.safetensors")).save(
        os.path.join(out, "nemotron_h_moe-mtp-4bit.safetensors"))


if __name__ == "__main__":
    main()
