"""MTP draft heads from GGUF end to end (`weft run` / `weft serve`): the NextN head inside the model's file
(tests/data/gguf_hybrid/qwen3_5-f32.gguf, qwen3_5_moe-f16.gguf) and the head converted alone by llama.cpp's
`--mtp`, found beside its `--no-nextn` model (tests/data/mtp/, tools/make_mtp_gguf.py).

- drafted == serial (SPEC §4.3.4, §4.5): with the head each reply equals its --no-drafts run, greedy and seeded,
  and equals the safetensors fixture's run token for token with the same drafted / accepted counts (the same
  head proposals; the prompt has no repeat, so copy drafts have nothing to propose from it);
- `weft serve` names MTP drafts in its banner for a model whose head is a separate file;
- a head file given as the model, a head file missing one of its NextN tensors, and a Nemotron-H file claiming
  NextN blocks are one-line errors naming what is wrong (exit 2, no sanitizer report); a GGUF without NextN
  blocks runs.

    WEFT_BIN=build-nextn/weft .venv/bin/python -m pytest -q tests/py/test_mtp_gguf.py
"""

import json
import subprocess

import gguf
import httpx
import pytest

from e2e_util import FIXTURES, ROOT, require_bin, serving
from gguf_edit import gguf_rewrite

DATA = ROOT / "tests" / "data"
PROMPT = ",".join(str(i) for i in range(1, 40))  # no repeated n-gram: copy drafts find nothing in the prompt
SANITIZER_MARKS = ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:")
MODELS = [("gguf_hybrid/qwen3_5-f32.gguf", "qwen3_5"), ("gguf_hybrid/qwen3_5_moe-f16.gguf", "qwen3_5_moe"),
          ("mtp/qwen3_5-bf16.gguf", "qwen3_5"), ("mtp/qwen3_5_moe-bf16.gguf", "qwen3_5_moe")]
SAMPLINGS = [["--temperature", "0"], ["--temperature", "0.8", "--top-p", "0.9", "--seed", "7"]]


def weft(*args, timeout=120):
    p = subprocess.run([require_bin(), *map(str, args)], capture_output=True, text=True, timeout=timeout)
    for mark in SANITIZER_MARKS:
        assert mark not in p.stderr, p.stderr[-4000:]
    return p


def report(tmp_path, model, *extra):
    rp = tmp_path / "report.json"
    p = weft("run", model, "--tokens", PROMPT, "--max-tokens", "40", "--ignore-eos", *extra, "--report", rp)
    assert p.returncode == 0, p.stderr
    return json.loads(rp.read_text())


@pytest.mark.parametrize("sampling", SAMPLINGS, ids=["greedy", "seeded"])
@pytest.mark.parametrize("model,hub", MODELS, ids=[m for m, _ in MODELS])
def test_gguf_head_drafted_equals_serial(tmp_path, model, hub, sampling):
    drafted = report(tmp_path, DATA / model, *sampling)
    serial = report(tmp_path, DATA / model, *sampling, "--no-drafts")
    assert drafted["token_ids"] == serial["token_ids"] and drafted["token_sha"] == serial["token_sha"]
    assert serial["drafted"] == 0 and drafted["drafted"] > 0
    st = report(tmp_path, FIXTURES / hub, *sampling)  # the same head from the safetensors checkpoint
    assert st["token_ids"] == drafted["token_ids"]
    assert (st["drafted"], st["accepted"]) == (drafted["drafted"], drafted["accepted"])


def test_serve_banner_names_mtp_for_a_head_file():
    with serving(DATA / "mtp" / "qwen3_5-bf16.gguf") as s:
        body = {"prompt": list(range(1, 40)), "max_tokens": 24, "temperature": 0, "ignore_eos": True,
                "return_token_ids": True}
        d = httpx.post(s.base + "/v1/completions", json=body, timeout=120).json()
        p = httpx.post(s.base + "/v1/completions", json={**body, "draft": False}, timeout=120).json()
        assert d["weft"]["token_ids"] == p["weft"]["token_ids"]
        assert d["weft"]["drafted"] > 0 and p["weft"]["drafted"] == 0
        banner = next(ln for ln in s.log_tail(1 << 16).splitlines() if "serving" in ln)
        assert "mtp" in banner.lower(), banner


def test_head_file_is_not_a_model():
    p = weft("run", DATA / "mtp" / "mtp-qwen3_5-bf16.gguf", "--tokens", "1,2,3")
    assert p.returncode == 2 and p.stderr.count("\n") == 1, p.stderr
    assert "holds only an MTP head" in p.stderr


def test_gguf_without_nextn_runs():
    p = weft("run", DATA / "gguf_hybrid" / "nemotron_h_moe-f16.gguf", "--tokens", PROMPT, "--max-tokens", "8")
    assert p.returncode == 0, p.stderr


@pytest.mark.parametrize("stem", ["eh_proj", "enorm", "hnorm", "shared_head_norm"])
def test_head_file_missing_a_nextn_tensor(tmp_path, stem):
    (tmp_path / "m.gguf").symlink_to(DATA / "mtp" / "qwen3_5-bf16.gguf")
    name = f"blk.4.nextn.{stem}.weight"
    gguf_rewrite(DATA / "mtp" / "mtp-qwen3_5-bf16.gguf", tmp_path / "mtp-m.gguf", drop={name})
    p = weft("run", tmp_path / "m.gguf", "--tokens", "1,2,3", "--max-tokens", "2")
    assert p.returncode == 2 and p.stderr.count("\n") == 1, p.stderr
    assert f"lacks tensor {name}" in p.stderr and "mtp-m.gguf" in p.stderr, p.stderr


def test_model_file_missing_a_layer_tensor_of_its_nextn_block(tmp_path):
    gguf_rewrite(DATA / "gguf_hybrid" / "qwen3_5-f32.gguf", tmp_path / "m.gguf", drop={"blk.4.attn_k.weight"})
    p = weft("run", tmp_path / "m.gguf", "--tokens", "1,2,3", "--max-tokens", "2")
    assert p.returncode == 2 and p.stderr.count("\n") == 1, p.stderr
    assert "mtp.layers.0.self_attn.k_proj.weight" in p.stderr, p.stderr


def test_nemotron_nextn_blocks_refused(tmp_path):
    # llama.cpp's converter has no NextN export for Nemotron-H: a file claiming NextN blocks is refused by name
    gguf_rewrite(DATA / "gguf_hybrid" / "nemotron_h_moe-f16.gguf", tmp_path / "n.gguf",
            add_kv={"nemotron_h_moe.nextn_predict_layers": (1, gguf.GGUFValueType.UINT32)})
    p = weft("run", tmp_path / "n.gguf", "--tokens", "1,2,3", "--max-tokens", "2")
    assert p.returncode == 2 and p.stderr.count("\n") == 1, p.stderr
    assert "nextn_predict_layers" in p.stderr and "Nemotron-H" in p.stderr, p.stderr


def test_info_names_the_draft_head():
    """`weft info` says where the MTP head came from: a head file beside a GGUF, the checkpoint, or none."""
    r = weft("info", str(ROOT / "tests/data/mtp/qwen3_5-bf16.gguf"))
    assert r.returncode == 0, r.stderr
    assert "draft head     MTP, 1 layer(s), from " in r.stdout and "mtp-qwen3_5-bf16.gguf" in r.stdout, r.stdout
    r = weft("info", str(FIXTURES / "qwen3_5"))
    assert "draft head     MTP, 1 layer(s) in the checkpoint" in r.stdout, r.stdout
    r = weft("info", str(FIXTURES / "llama"))
    assert "draft head     none (copy drafts)" in r.stdout, r.stdout
