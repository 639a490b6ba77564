#!/usr/bin/env python3
"""Make the GGUF MTP test files in tests/data/mtp/ with llama.cpp's own converter (convert_hf_to_gguf.py).

    /tmp/venv-conv/bin/python tools/make_mtp_gguf.py [OUT_DIR]      (default tests/data/mtp)

Same Python, llama.cpp checkout (LLAMA_CPP, default /work/peers/llama.cpp) and converter adaptations as
tools/make_hybrid_gguf.py (its docstring: a synthetic byte-level vocabulary for the tokenizer-less fixtures;
nothing touches the tensors): its child_convert runs the converter, with the extra flags below added to argv.
For each MTP fixture the converter exports as NextN (tests/data/fixtures/qwen3_5, qwen3_5_moe; bf16, so that
bf16 weights are stored unchanged) it runs twice, as llama.cpp's `--no-nextn` help suggests for publishing
a model and its draft head as two files:

  convert_hf_to_gguf.py DIR --outtype bf16 --no-nextn --outfile <name>-bf16.gguf      (the trunk, no NextN)
  convert_hf_to_gguf.py DIR --outtype bf16 --mtp      --outfile mtp-<name>-bf16.gguf  (the head alone)

The head file holds the model's metadata (block_count counting the NextN block, nextn_predict_layers = 1),
token_embd / output_norm / output, and blk.4.* = the NextN block (nextn.eh_proj, nextn.enorm, nextn.hnorm,
nextn.shared_head_norm, and the block's attn_* / post_attention_norm / ffn_* tensors), zero-centred norms
stored as 1 + w as in the trunk. weft loads it beside its trunk (src/model/model_mtp.c). With an output
directory instead of --outfile the converter names the files {Name}-{Size}-{Type}.gguf and mtp-{Name}-{Type}.gguf.
The files with the head inside the model (no flag) are tests/data/gguf_hybrid/qwen3_5-f32.gguf and
qwen3_5_moe-f16.gguf (tools/make_hybrid_gguf.py).

Nemotron-H: the converter has no NextN export (conversion/nemotron.py skips every `mtp.*` tensor of the MoE
model, and `--mtp` / `--no-nextn` are refused for NemotronHForCausalLM); this script records that refusal.
"""
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_hybrid_gguf as mh  # noqa: E402

FIXTURES = mh.FIXTURES
MODELS = ["qwen3_5", "qwen3_5_moe"]


def child(model_dir, outfile, outtype, flag):
    """In a child process: make_hybrid_gguf's converter call, with `flag` appended to the converter's argv."""
    sys.path.insert(0, os.path.join(mh.LLAMA_CPP, "gguf-py"))
    sys.path.insert(0, mh.LLAMA_CPP)
    import convert_hf_to_gguf as conv
    real_main = conv.main

    def main_with_flag():
        sys.argv.append(flag)
        real_main()

    conv.main = main_with_flag
    mh.child_convert(model_dir, outfile, outtype)


def convert(name, outtype, out, flag):
    src = os.path.abspath(os.path.join(FIXTURES, name))
    top = tempfile.mkdtemp(prefix="mtpgguf-")
    tmp = os.path.join(top, name)
    os.mkdir(tmp)
    try:
        for f in ("config.json", "generation_config.json", "model.safetensors"):
            os.symlink(os.path.join(src, f), os.path.join(tmp, f))
        cfg = json.load(open(os.path.join(src, "config.json")))
        _, merges = mh.synthetic_vocab(cfg.get("text_config", cfg)["vocab_size"])
        with open(os.path.join(tmp, "merges.txt"), "w", encoding="utf-8") as fh:
            fh.write("#version: 0.2\n" + "\n".join(merges) + "\n")
        return subprocess.run([sys.executable, os.path.abspath(__file__), "--child", tmp, os.path.abspath(out),
                               outtype, flag], capture_output=True, text=True)
    finally:
        for f in os.listdir(tmp):
            os.unlink(os.path.join(tmp, f))
        os.rmdir(tmp)
        os.rmdir(top)


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(*sys.argv[2:6])
        return
    out_dir = sys.argv[1] if len(sys.argv) > 1 else "tests/data/mtp"
    os.makedirs(out_dir, exist_ok=True)
    for name in MODELS:
        for flag, fname in (("--no-nextn", f"{name}-bf16.gguf"), ("--mtp", f"mtp-{name}-bf16.gguf")):
            p = convert(name, "bf16", os.path.join(out_dir, fname), flag)
            if p.returncode != 0:
                raise SystemExit(f"{name} {flag}: the converter failed:\n{p.stderr[-2000:]}")
            print(f"{fname}: {os.path.getsize(os.path.join(out_dir, fname))} bytes")
    # Nemotron-H: llama.cpp has no NextN export; show the converter's own refusal (nothing is written).
    p = convert("nemotron_h_moe", "bf16", os.path.join(tempfile.gettempdir(), "nemotron-mtp.gguf"), "--mtp")
    last = (p.stderr.strip().splitlines() or ["?"])[-1]
    print(f"nemotron_h_moe --mtp: exit {p.returncode}: {last}")


if __name__ == "__main__":
    main()
