#!/usr/bin/env python3
"""Make tests/data/gguf_hybrid/: the HF fixtures converted to GGUF by llama.cpp's own converter.

    /tmp/venv-conv/bin/python tools/make_hybrid_gguf.py [OUT_DIR]     (default tests/data/gguf_hybrid)

Needs a Python with torch + transformers (the converter imports both): made here with
`python3 -m venv /tmp/venv-conv && /tmp/venv-conv/bin/pip install torch transformers numpy safetensors
sentencepiece pyyaml` (torch 2.15.0, transformers 5.24.0). llama.cpp: LLAMA_CPP (default /work/peers/llama.cpp,
the unslothai snapshot of Aug 2026, see tools/llamacpp_reference.py), whose gguf-py is put first on sys.path so
the converter runs against its own gguf package. Its build/bin/llama-quantize makes the Q8_0 copy and
GREEDY_DUMP (default /work/peers/weft-ref/greedy_dump, see tools/llamacpp_reference.py) records llama.cpp's own
greedy ids when present.

What is converted (tests/data/fixtures/<name>, bf16 safetensors, transformers 5.17 configs):
  qwen3 (f16), qwen3_5 (f32, and Q8_0 by llama-quantize), qwen3_5_moe (f16), nemotron_h (f32),
  nemotron_h_moe (f16)  ->  <name>-<type>.gguf
bf16 -> f16 is exact for these weights except f16 subnormals (|w| < 6.1e-5, error < 3e-8), and the converter keeps
norms, 1-D tensors, ssm_conv1d and routers in F32, so the F32/F16 files must reproduce the HF goldens.

The converter is run unmodified (`convert_hf_to_gguf.main()` in a child process) with three adaptations made
in that child only, none touching the tensors or their transforms:
  1. Vocabulary: the fixtures have no tokenizer, and set_vocab needs one (transformers' AutoTokenizer, plus a
     pre-tokenizer hash check). get_vocab_base is replaced by a synthetic byte-level BPE vocabulary of the
     model's size (the 256 GPT-2 byte symbols, then two-letter merges "ab" of [a-zA-Z] pairs, listed in a
     merges.txt the converter's SpecialVocab reads), tokenizer.ggml.pre "qwen35" / "qwen2" / "default";
     Nemotron-H's set_vocab (AutoTokenizer) is replaced by the converter's own _set_vocab_gpt2. bos/eos/pad
     come from the fixture's config via SpecialVocab as usual.
  2. Nemotron-H config (a temporary copy; the same model): transformers 5 configs list `layers_block_type` as
     linear_attention / mlp / full_attention / moe and leave out num_hidden_layers, while this converter (which
     reads config.json itself for Mamba-2 models) needs num_hidden_layers and matches mamba / attention / moe
     or M - * E in hybrid_override_pattern: the copy gets hybrid_override_pattern "M-*-" / "ME*E" built from
     the list and num_hidden_layers = its length (else the converter stops). transformers 5 also writes MoE
     keys into every NemotronH config, and the converter picks arch nemotron_h_moe whenever
     num_experts_per_tok is present, which makes the dense fixture a broken nemotron_h_moe file (its '-' MLP
     layers unlisted): for a pattern without MoE layers the copy drops the moe_* keys and n_routed_experts,
     num_experts_per_tok, n_shared_experts, n_group, topk_group, routed_scaling_factor, norm_topk_prob (the
     hub's dense Nemotron-H configs have none), and the child reads Nemotron-H's config.json directly instead
     of through AutoConfig (whose to_dict() re-adds default MoE keys), as the converter's Mamba-2 base class
     does. The copy also gets rms_norm_eps = layer_norm_epsilon: the converter writes
     attention.layer_norm_rms_epsilon only from rms_norm_eps, and llama.cpp's nemotron_h loader requires it.
  3. The model directory is a temporary copy (config.json, generation_config.json, model.safetensors symlink).

Outputs besides the GGUFs:
  qwen3_5-q8_0.golden.json + qwen3_5-q8_0.logits.f32: reference for the Q8_0 file = HF Qwen3_5 (transformers in
  this venv) with every tensor replaced by what the GGUF dequantizes to (gguf-py), the converter's transforms
  undone (norms −1, A_log = log(−ssm_a), V heads back to grouped order); prompt = the fixture's, greedy and
  teacher-forced logits recomputed from that model (full recompute, as tools' make_fixtures.py does).
  llamacpp_greedy.json: llama.cpp's greedy ids on each file (greedy_dump --kv f32 --fa off), when it runs them.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

LLAMA_CPP = os.environ.get("LLAMA_CPP", "/work/peers/llama.cpp")
GREEDY_DUMP = os.environ.get("GREEDY_DUMP", "/work/peers/weft-ref/greedy_dump")
FIXTURES = "tests/data/fixtures"
MODELS = [("qwen3", "f16"), ("qwen3_5", "f32"), ("qwen3_5_moe", "f16"), ("nemotron_h", "f32"),
          ("nemotron_h_moe", "f16")]
Q8_SOURCE = "qwen3_5"
DENSE_DROP = {"n_routed_experts", "num_experts_per_tok", "n_shared_experts", "n_group", "topk_group",
              "routed_scaling_factor", "norm_topk_prob"}
NEMOTRON_KIND = {"linear_attention": "M", "mamba": "M", "mlp": "-", "full_attention": "*", "attention": "*",
                 "moe": "E"}


def byte_symbols():
    """GPT-2 bytes_to_unicode: byte b -> printable code point."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    table = dict(zip(bs, cs))
    return [chr(table[b]) for b in range(256)]


def synthetic_vocab(n):
    letters = [chr(c) for c in range(ord("a"), ord("z") + 1)] + [chr(c) for c in range(ord("A"), ord("Z") + 1)]
    tokens = byte_symbols()
    merges = []
    for a in letters:
        for b in letters:
            if len(tokens) >= n:
                return tokens, merges
            tokens.append(a + b)
            merges.append(f"{a} {b}")
    raise ValueError(f"vocab {n} too large for the synthetic vocabulary")


def child_convert(model_dir, outfile, outtype):
    """Runs in a child process: patches the converter's vocabulary hooks and calls its main()."""
    sys.path.insert(0, os.path.join(LLAMA_CPP, "gguf-py"))
    sys.path.insert(0, LLAMA_CPP)
    import convert_hf_to_gguf as conv
    from conversion import base, nemotron, qwen

    cfg = json.load(open(os.path.join(model_dir, "config.json")))
    text = cfg.get("text_config", cfg)
    tokens, _ = synthetic_vocab(text["vocab_size"])
    pre = "qwen35" if cfg["model_type"].startswith("qwen3_5") else "qwen2" if cfg["model_type"] == "qwen3" \
        else "default"

    def get_vocab_base(self):
        return list(tokens), [1] * len(tokens), pre  # gguf.TokenType.NORMAL

    base.TextModel.get_vocab_base = get_vocab_base
    nemotron.NemotronHModel.set_vocab = base.TextModel._set_vocab_gpt2
    for cls in (qwen.Qwen3Model, qwen.Qwen3_5TextModel, qwen.Qwen3_5MoeTextModel):
        cls.set_vocab = base.TextModel._set_vocab_gpt2

    if cfg["model_type"] == "nemotron_h":
        # NemotronHModel picks its arch from ModelBase.load_hparams (AutoConfig), whose transformers-5 to_dict()
        # re-adds the default MoE keys: read config.json as the converter's Mamba-2 base class itself does.
        def load_hparams(dir_model, is_mistral_format):
            with open(os.path.join(dir_model, "config.json"), encoding="utf-8") as fh:
                return json.load(fh)

        base.ModelBase.load_hparams = staticmethod(load_hparams)
    sys.argv = ["convert_hf_to_gguf.py", model_dir, "--outfile", outfile, "--outtype", outtype]
    conv.main()


def convert(name, outtype, out_dir):
    src = os.path.abspath(os.path.join(FIXTURES, name))
    top = tempfile.mkdtemp(prefix="hgguf-")
    tmp = os.path.join(top, name)  # the converter names the model after its directory
    os.mkdir(tmp)
    try:
        shutil.copy(os.path.join(src, "generation_config.json"), tmp)
        cfg = json.load(open(os.path.join(src, "config.json")))
        lbt = cfg.get("layers_block_type")
        if cfg["model_type"] == "nemotron_h" and isinstance(lbt, list):
            cfg["hybrid_override_pattern"] = "".join(NEMOTRON_KIND[k] for k in lbt)
            cfg.setdefault("num_hidden_layers", len(lbt))
            cfg.setdefault("rms_norm_eps", cfg["layer_norm_epsilon"])
            if "moe" not in lbt:  # a dense Nemotron-H: hub configs of those have no MoE keys
                for k in [k for k in cfg if k.startswith("moe_") or k in DENSE_DROP]:
                    del cfg[k]
        json.dump(cfg, open(os.path.join(tmp, "config.json"), "w"), indent=1)
        os.symlink(os.path.join(src, "model.safetensors"), os.path.join(tmp, "model.safetensors"))
        _, merges = synthetic_vocab(cfg.get("text_config", cfg)["vocab_size"])
        with open(os.path.join(tmp, "merges.txt"), "w", encoding="utf-8") as fh:
            fh.write("#version: 0.2\n" + "\n".join(merges) + "\n")
        out = os.path.abspath(os.path.join(out_dir, f"{name}-{outtype}.gguf"))
        subprocess.run([sys.executable, os.path.abspath(__file__), "--child", tmp, out, outtype], check=True)
        return out
    finally:
        shutil.rmtree(top)


def quantize_q8(src, dst):
    q = os.path.join(LLAMA_CPP, "build", "bin", "llama-quantize")
    subprocess.run([q, src, dst, "Q8_0"], check=True, stdout=subprocess.DEVNULL)


# ---------- Q8_0 reference: HF model over the dequantized GGUF ----------
def gguf_to_hf_qwen35(path, cfg):
    """GGUF qwen35 tensors dequantized to float32 under HF names, converter transforms undone."""
    import numpy as np
    sys.path.insert(0, os.path.join(LLAMA_CPP, "gguf-py"))
    import gguf
    t = cfg["text_config"]
    hk, hv, dk, dv = (t["linear_num_key_heads"], t["linear_num_value_heads"], t["linear_key_head_dim"],
                      t["linear_value_head_dim"])
    r = hv // hk
    n_layer = t["num_hidden_layers"]

    def untile(x, axis, hd):  # tiled (GGUF) -> grouped (HF) value-head order along axis
        x = np.moveaxis(x, axis, 0)
        shp = x.shape
        x = x.reshape((r, hk, hd) + shp[1:]).transpose((1, 0, 2) + tuple(range(3, x.ndim + 2)))
        return np.moveaxis(x.reshape(shp), 0, axis)

    blk = {"attn_norm": "input_layernorm.weight", "post_attention_norm": "post_attention_layernorm.weight",
           "attn_qkv": "linear_attn.in_proj_qkv.weight", "attn_gate": "linear_attn.in_proj_z.weight",
           "ssm_beta": "linear_attn.in_proj_b.weight", "ssm_alpha": "linear_attn.in_proj_a.weight",
           "ssm_conv1d": "linear_attn.conv1d.weight", "ssm_dt": "linear_attn.dt_bias",
           "ssm_a": "linear_attn.A_log", "ssm_norm": "linear_attn.norm.weight",
           "ssm_out": "linear_attn.out_proj.weight", "attn_q": "self_attn.q_proj.weight",
           "attn_k": "self_attn.k_proj.weight", "attn_v": "self_attn.v_proj.weight",
           "attn_output": "self_attn.o_proj.weight", "attn_q_norm": "self_attn.q_norm.weight",
           "attn_k_norm": "self_attn.k_norm.weight", "ffn_gate": "mlp.gate_proj.weight",
           "ffn_up": "mlp.up_proj.weight", "ffn_down": "mlp.down_proj.weight"}
    out = {}
    for ti in gguf.GGUFReader(path).tensors:
        w = gguf.quants.dequantize(ti.data, ti.tensor_type).astype(np.float32)
        w = w.reshape([int(x) for x in reversed(ti.shape)] if w.ndim == 1 else w.shape)
        name = ti.name
        if name == "token_embd.weight":
            out["model.language_model.embed_tokens.weight"] = w
            continue
        if name == "output.weight":
            out["lm_head.weight"] = w
            continue
        if name == "output_norm.weight":
            out["model.language_model.norm.weight"] = w - 1
            continue
        _, layer, rest = name.split(".", 2)
        layer = int(layer)
        if layer >= n_layer:
            continue  # MTP block: HF ignores it
        stem = rest.rsplit(".", 1)[0] if rest.endswith((".weight", ".bias")) else rest
        hf = blk[stem]
        if stem in ("attn_norm", "post_attention_norm", "attn_q_norm", "attn_k_norm"):
            w = w - 1
        if stem == "ssm_a":
            w = np.log(-w)
        if hk != hv:
            if stem == "attn_qkv":
                w = np.concatenate([w[:2 * hk * dk], untile(w[2 * hk * dk:], 0, dv)])
            elif stem == "attn_gate":
                w = untile(w, 0, dv)
            elif stem in ("ssm_beta", "ssm_alpha", "ssm_a", "ssm_dt"):
                w = untile(w, 0, 1)
            elif stem == "ssm_conv1d":
                w = np.concatenate([w[:2 * hk * dk], untile(w[2 * hk * dk:], 0, dv)])
            elif stem == "ssm_out":
                w = untile(w, 1, dv)
        if stem == "ssm_conv1d":
            w = w[:, None, :]
        out[f"model.language_model.layers.{layer}.{hf}"] = w
    return out


def q8_reference(gguf_path, name, out_dir):
    import numpy as np
    import torch
    from safetensors.torch import save_file
    from transformers.models.qwen3_5 import Qwen3_5ForConditionalGeneration
    src = os.path.join(FIXTURES, name)
    cfg = json.load(open(os.path.join(src, "config.json")))
    golden = json.load(open(os.path.join(src, "golden.json")))
    model = Qwen3_5ForConditionalGeneration.from_pretrained(src, dtype=torch.float32).eval()
    sd = model.state_dict()
    deq = gguf_to_hf_qwen35(gguf_path, cfg)
    missing = [k for k in sd if k.startswith("model.language_model.") or k == "lm_head.weight"]
    missing = [k for k in missing if k not in deq]
    if missing:
        raise SystemExit(f"Q8_0 reference: no GGUF tensor for {missing[:5]}")
    with torch.no_grad():
        for k, v in deq.items():
            if sd[k].shape != v.shape:
                raise SystemExit(f"{k}: HF {tuple(sd[k].shape)} vs GGUF {v.shape}")
            sd[k].copy_(torch.from_numpy(np.ascontiguousarray(v)))
    model.load_state_dict(sd)
    prompt = torch.tensor([golden["prompt_ids"]])
    ids, margins = prompt.clone(), []
    with torch.no_grad():
        for _ in range(len(golden["greedy_ids"])):
            lg = model(input_ids=ids).logits[0, -1].float()
            top2 = torch.topk(lg, 2)
            margins.append(float(top2.values[0] - top2.values[1]))
            ids = torch.cat([ids, top2.indices[:1].view(1, 1)], dim=1)
        full = model(input_ids=ids).logits[0].float().numpy()
    base = os.path.basename(gguf_path)[:-5]
    full.astype("<f4").tofile(os.path.join(out_dir, base + ".logits.f32"))
    import transformers
    g = {"prompt_ids": golden["prompt_ids"], "greedy_ids": ids[0, len(golden["prompt_ids"]):].tolist(),
         "greedy_top2_margins": margins,
         "note": f"HF Qwen3_5 (transformers {transformers.__version__}, torch {torch.__version__}, fp32 CPU) with "
                 f"every tensor replaced by the GGUF's dequantization (gguf-py), converter transforms undone",
         "logits_rows": "teacher-forced over prompt_ids + greedy_ids (row r predicts token r+1)",
         "logits_file": base + ".logits.f32", "logits_shape": list(full.shape), "logits_dtype": "float32"}
    json.dump(g, open(os.path.join(out_dir, base + ".golden.json"), "w"), indent=1)
    print(base, "reference: min margin", min(margins), "greedy", g["greedy_ids"])


def llamacpp_greedy(files, out_dir):
    if not os.access(GREEDY_DUMP, os.X_OK):
        print("greedy_dump not found: llama.cpp greedy ids not recorded")
        return
    res = {}
    env = dict(os.environ, LD_LIBRARY_PATH=os.path.join(LLAMA_CPP, "build", "bin"))
    for path, name in files:
        golden = json.load(open(os.path.join(FIXTURES, name, "golden.json")))
        cmd = [GREEDY_DUMP, "-m", path, "-n", str(len(golden["greedy_ids"])), "-t", "2", "--kv", "f32", "--fa",
               "off", "--ids", ",".join(map(str, golden["prompt_ids"]))]
        p = subprocess.run(cmd, capture_output=True, text=True, env=env)
        key = os.path.basename(path)
        if p.returncode != 0:
            res[key] = {"error": (p.stderr.strip().splitlines() or ["?"])[-1]}
        else:
            out = json.loads(p.stdout[p.stdout.index("{"):])
            res[key] = {"greedy_ids": out["greedy_ids"], "margins": out.get("margins"),
                        "equals_hf_greedy": out["greedy_ids"] == golden["greedy_ids"]}
        print(key, res[key])
    res["_settings"] = "greedy_dump --kv f32 --fa off -t 2, prompt = golden prompt_ids (no BOS), EOS ignored"
    with open(os.path.join(out_dir, "llamacpp_greedy.json"), "w") as fh:  # one line per file
        fh.write("{\n" + ",\n".join(f" {json.dumps(k)}: {json.dumps(v)}" for k, v in res.items()) + "\n}\n")


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child_convert(*sys.argv[2:5])
        return
    out_dir = sys.argv[1] if len(sys.argv) > 1 else "tests/data/gguf_hybrid"
    os.makedirs(out_dir, exist_ok=True)
    made = []
    for name, typ in MODELS:
        made.append((convert(name, typ, out_dir), name))
    q8 = os.path.abspath(os.path.join(out_dir, f"{Q8_SOURCE}-q8_0.gguf"))
    quantize_q8(os.path.abspath(os.path.join(out_dir, f"{Q8_SOURCE}-f32.gguf")), q8)
    made.append((q8, Q8_SOURCE))
    q8_reference(q8, Q8_SOURCE, out_dir)
    llamacpp_greedy(made, out_dir)


if __name__ == "__main__":
    main()
