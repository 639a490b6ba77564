#!/usr/bin/env python3
"""Writes tests/data/rope/vectors.json: RoPE inverse frequencies for the llama3 and yarn scalings, computed with
HF transformers' formulas (modeling_rope_utils.py: _compute_llama3_parameters, _compute_yarn_parameters)
re-implemented here in float64 numpy, independently of weft's C code."""
import json
import math
from pathlib import Path

import numpy as np


def base_inv_freq(theta, dim):
    return 1.0 / (theta ** (np.arange(0, dim, 2, dtype=np.float64) / dim))


def llama3(theta, dim, factor, low, high, n0):
    inv = base_inv_freq(theta, dim)
    low_wl, high_wl = n0 / low, n0 / high
    wl = 2 * math.pi / inv
    out = np.where(wl > low_wl, inv / factor, inv)
    smooth = (n0 / wl - low) / (high - low)
    smoothed = (1 - smooth) * out / factor + smooth * out
    medium = ~(wl < high_wl) & ~(wl > low_wl)
    return np.where(medium, smoothed, out), 1.0


def yarn(theta, dim, factor, n0, beta_fast=32.0, beta_slow=1.0):
    def corr_dim(rot):
        return (dim * math.log(n0 / (rot * 2 * math.pi))) / (2 * math.log(theta))
    lo, hi = max(math.floor(corr_dim(beta_fast)), 0), min(math.ceil(corr_dim(beta_slow)), dim - 1)
    if lo == hi:
        hi += 0.001
    ramp = np.clip((np.arange(dim // 2, dtype=np.float64) - lo) / (hi - lo), 0, 1)
    extra = base_inv_freq(theta, dim)
    inter = extra / factor
    ext_factor = 1 - ramp
    return inter * (1 - ext_factor) + extra * ext_factor, 0.1 * math.log(factor) + 1.0


cases = []
f, a = llama3(500000.0, 128, 8.0, 1.0, 4.0, 8192)
cases.append({"type": "llama3", "theta": 500000.0, "head_dim": 128, "factor": 8.0, "low_freq_factor": 1.0,
              "high_freq_factor": 4.0, "original_max_position_embeddings": 8192, "inv_freq": f.tolist(),
              "attention_factor": a})
f, a = yarn(1000000.0, 128, 4.0, 32768)
cases.append({"type": "yarn", "theta": 1000000.0, "head_dim": 128, "factor": 4.0,
              "original_max_position_embeddings": 32768, "inv_freq": f.tolist(), "attention_factor": a})
f = base_inv_freq(10000.0, 64) / 2.0
cases.append({"type": "linear", "theta": 10000.0, "head_dim": 64, "factor": 2.0, "inv_freq": f.tolist(),
              "attention_factor": 1.0})
out = Path(__file__).resolve().parents[1] / "tests/data/rope/vectors.json"
out.parent.mkdir(parents=True, exist_ok=True)
out.write_text(json.dumps(cases, indent=1))
