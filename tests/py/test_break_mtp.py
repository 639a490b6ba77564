"""Break tests of MTP drafting: batched head drafts across streams (src/core/lanes/rounds.c head_drafts,
src/families/mtp.c draft_many) and draft heads found beside the model (src/model/model_mtp.c GGUF mtp-*.gguf,
src/families/mtp_sidecar.c MLX mtp*.safetensors).

- a FIFO named like a head file beside the model made `weft info/run/serve` block forever in open(): now the
  exact name is a one-line error and a candidate is passed over (gguf.c / safetensors.c open with O_NONBLOCK);
- `weft info` said "none (copy drafts)" for a Nemotron-H checkpoint with its MTP head and for an MLX
  checkpoint with an mtp*.safetensors sidecar, both of which draft with the head;
- head files beside a GGUF model that are broken (wrong architecture / size / vocabulary, truncated, a
  directory, a symlink loop, two candidates) are a one-line error (exact mtp-<model> name) or no head (other
  mtp-*.gguf), and the reply never changes;
- a concurrent mix (greedy / seeded, n > 1, logprobs, "draft": false, 1..90 tokens, client disconnects,
  repeated prompts for the prompt cache) served with --parallel 16 and --mtp-drafts 1 / 8 equals each request
  alone and with "draft": false, and /metrics counts every choice's drafts.

    WEFT_BIN=build-test/weft .venv/bin/python -m pytest -q tests/py/test_break_mtp.py
"""

import concurrent.futures as cf
import json
import os
import random
import subprocess

import httpx
import numpy as np
import pytest

from e2e_util import FIXTURES, ROOT, require_bin, serving
from gguf_edit import gguf_rewrite

DATA = ROOT / "tests" / "data"
HEAD = DATA / "mtp" / "mtp-qwen3_5-bf16.gguf"
SANITIZER_MARKS = ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:")
PROMPT = "1,2,3,4,5,6"


def weft(*args, timeout=60):
    p = subprocess.run([require_bin(), *map(str, args)], capture_output=True, text=True, timeout=timeout)
    for mark in SANITIZER_MARKS:
        assert mark not in p.stderr, p.stderr[-4000:]
    return p


def run_report(tmp_path, model):
    rp = tmp_path / "report.json"
    p = weft("run", model, "--tokens", PROMPT, "--max-tokens", "12", "--ignore-eos", "--temperature", "0",
             "--report", rp)
    return p, (json.loads(rp.read_text()) if p.returncode == 0 else None)


@pytest.fixture
def model_dir(tmp_path):
    """tmp_path/m.gguf: the Qwen3.5 fixture without its NextN block (no head unless one is put beside it)."""
    (tmp_path / "m.gguf").symlink_to(DATA / "mtp" / "qwen3_5-bf16.gguf")
    return tmp_path


@pytest.fixture(scope="module")
def plain_sha(tmp_path_factory):
    d = tmp_path_factory.mktemp("plain")
    _, r = run_report(d, DATA / "mtp" / "qwen3_5-bf16.gguf")
    return r["token_sha"]


def one_line_error(p, *needles):
    assert p.returncode == 2 and p.stderr.count("\n") == 1, p.stderr
    for n in needles:
        assert n in p.stderr, p.stderr


@pytest.mark.parametrize("name", ["mtp-m.gguf", "mtp-x.gguf"], ids=["exact", "candidate"])
def test_fifo_head_file_does_not_hang(model_dir, plain_sha, name):
    os.mkfifo(model_dir / name)
    p, r = run_report(model_dir, model_dir / "m.gguf")  # blocked in open() before the fix: TimeoutExpired
    if name == "mtp-m.gguf":
        one_line_error(p, "mtp-m.gguf: not a regular file")
    else:
        assert p.returncode == 0 and r["drafted"] == 0 and r["token_sha"] == plain_sha, p.stderr


def test_fifo_mlx_sidecar_does_not_hang(tmp_path):
    src = FIXTURES / "qwen3_5-mlx-q4g64"
    for f in src.iterdir():
        (tmp_path / f.name).symlink_to(f)
    os.mkfifo(tmp_path / "mtp-4bit.safetensors")
    p = weft("info", tmp_path, timeout=30)
    one_line_error(p, "mtp-4bit.safetensors: not a readable regular file")


def draft_head_line(model):
    p = weft("info", model)
    assert p.returncode == 0, p.stderr
    return next(ln for ln in p.stdout.splitlines() if ln.startswith("draft head"))


@pytest.mark.parametrize("hub", ["qwen3_5", "qwen3_5_moe", "nemotron_h_moe"])
def test_info_names_the_head_that_drafts(tmp_path, hub):
    assert "MTP, 1 layer(s) in the checkpoint" in draft_head_line(FIXTURES / hub)
    mlx = tmp_path / "mlx"
    mlx.mkdir()
    for f in (FIXTURES / f"{hub}-mlx-q4g64").iterdir():
        (mlx / f.name).symlink_to(f)
    assert "none" in draft_head_line(mlx)
    (mlx / "mtp-4bit.safetensors").symlink_to(DATA / "mtp" / f"{hub}-mtp-4bit.safetensors")
    assert draft_head_line(mlx).startswith("draft head     MTP")
    _, r = run_report(tmp_path, mlx)  # and it does draft (the prompt has no repeat for copy drafts)
    assert r["drafted"] > 0


def test_info_no_head_for_models_without_one():
    for hub in ("nemotron_h", "qwen3", "llama"):
        assert "none (copy drafts)" in draft_head_line(FIXTURES / hub)


MISFITS = {  # a head that does not fit the model: (rewrite args, the reason named for the exact file name)
    "hidden": (dict(kv={"qwen35.embedding_length": 96}), "embedding_length 96, the model's is 64"),
    "blocks": (dict(kv={"qwen35.block_count": 6}), "its NextN blocks follow 5 blocks, the model has 4"),
    "no_nextn": (dict(kv={"qwen35.nextn_predict_layers": 0}), "no NextN blocks"),
    "vocab": (dict(tensors={"token_embd.weight": np.zeros((1000, 64), np.float32)}),
              "a vocabulary of 1000 tokens, the model's has 1024"),
}


@pytest.mark.parametrize("case", MISFITS)
def test_misfit_head_exact_is_an_error_candidate_is_no_head(model_dir, plain_sha, case):
    kw, why = MISFITS[case]
    gguf_rewrite(HEAD, model_dir / "mtp-m.gguf", **kw)
    one_line_error(run_report(model_dir, model_dir / "m.gguf")[0], "is not an MTP head file for", why)
    os.rename(model_dir / "mtp-m.gguf", model_dir / "mtp-z.gguf")
    p, r = run_report(model_dir, model_dir / "m.gguf")
    assert p.returncode == 0 and r["drafted"] == 0 and r["token_sha"] == plain_sha, p.stderr


def test_fitting_head_with_wrong_tensor_shape_is_an_error(model_dir):
    gguf_rewrite(HEAD, model_dir / "mtp-z.gguf",
                 tensors={"blk.4.nextn.eh_proj.weight": np.zeros((64, 100), np.float32)})
    one_line_error(run_report(model_dir, model_dir / "m.gguf")[0], "mtp-z.gguf", "blk.4.nextn.eh_proj.weight")


@pytest.mark.parametrize("frac", [0.0, 0.01, 0.5, 0.999])
def test_truncated_head(model_dir, plain_sha, frac):
    data = HEAD.read_bytes()
    (model_dir / "mtp-m.gguf").write_bytes(data[:int(len(data) * frac)])
    one_line_error(run_report(model_dir, model_dir / "m.gguf")[0], "mtp-m.gguf")
    os.rename(model_dir / "mtp-m.gguf", model_dir / "mtp-z.gguf")
    p, r = run_report(model_dir, model_dir / "m.gguf")
    assert p.returncode == 0 and r["drafted"] == 0 and r["token_sha"] == plain_sha, p.stderr


def test_odd_entries_named_like_heads(model_dir, plain_sha):
    (model_dir / "mtp-m.gguf").mkdir()
    one_line_error(run_report(model_dir, model_dir / "m.gguf")[0], "mtp-m.gguf: not a regular file")
    (model_dir / "mtp-m.gguf").rmdir()
    (model_dir / "mtp-d.gguf").mkdir()
    (model_dir / "mtp-a.gguf").symlink_to("mtp-b.gguf")
    (model_dir / "mtp-b.gguf").symlink_to("mtp-a.gguf")
    (model_dir / "mtp-m.gguf").symlink_to("mtp-m.gguf")  # the exact name, a loop: no head, as when absent
    p, r = run_report(model_dir, model_dir / "m.gguf")
    assert p.returncode == 0 and r["drafted"] == 0 and r["token_sha"] == plain_sha, p.stderr


def test_two_candidates_first_in_name_order(model_dir, plain_sha):
    (model_dir / "mtp-a.gguf").symlink_to(DATA / "mtp" / "mtp-qwen3_5_moe-bf16.gguf")  # another model's
    (model_dir / "mtp-b.gguf").symlink_to(HEAD)
    (model_dir / "mtp-c.gguf").symlink_to(HEAD)
    assert draft_head_line(model_dir / "m.gguf").endswith("mtp-b.gguf")
    p, r = run_report(model_dir, model_dir / "m.gguf")
    assert p.returncode == 0 and r["drafted"] > 0 and r["token_sha"] == plain_sha, p.stderr


def mix(k, seed):
    rng = random.Random(seed)
    reqs = []
    for _ in range(k):
        if rng.random() < 0.5:
            prompt = [rng.randrange(1000) for _ in range(rng.randrange(2, 60))]
        else:  # a shared prefix: prompt-cache hits
            prompt = [7, 8, 9, 10, 11, 12, 7, 8, 9, 10] * rng.randrange(1, 4) + [rng.randrange(1000)]
        b = {"prompt": prompt, "max_tokens": rng.choice([1, 2, 3, 5, 17, 40, 90]), "ignore_eos": rng.random() < .7}
        if rng.random() < .5:
            b["temperature"] = 0
        else:
            b.update(temperature=rng.choice([0.5, 0.8, 1.2]), seed=rng.randrange(1 << 31))
        if rng.random() < .3:
            b.update(top_p=0.9, top_k=40)
        if rng.random() < .2:
            b["n"] = rng.choice([2, 3])
        if rng.random() < .25:
            b["logprobs"] = rng.choice([0, 1, 3])
        if rng.random() < .2:
            b["draft"] = False
        reqs.append(b)
    return reqs


def shas(j):
    w = j["weft"]
    return tuple(c["token_sha"] for c in w["choices"]) if "choices" in w else (w["token_sha"],)


def disconnect(base, body, after):
    with httpx.Client(base_url=base, timeout=300) as c:
        with c.stream("POST", "/v1/completions", json={**body, "stream": True}) as r:
            for i, _ in enumerate(r.iter_lines()):
                if i >= after:
                    break


@pytest.mark.parametrize("args", [["--mtp-drafts", "1"], ["--mtp-drafts", "8"]], ids=["d1", "d8"])
@pytest.mark.parametrize("model", [FIXTURES / "qwen3_5_moe", FIXTURES / "nemotron_h_moe",
                                   DATA / "mtp" / "qwen3_5-bf16.gguf"], ids=lambda m: m.name)
def test_concurrent_mix_equals_alone_and_serial(model, args):
    reqs = mix(32, 3)
    with serving(model, "--parallel", "16", *args) as s, s.http() as c:
        def post(b):
            r = c.post("/v1/completions", json=b)
            assert r.status_code == 200, r.text
            return r.json()
        alone = [post(b) for b in reqs]
        serial = [post({**b, "draft": False}) for b in reqs]
        m0 = s.metric("weft:spec_decode_num_draft_tokens_total")
        with cf.ThreadPoolExecutor(16) as ex:
            cut = [ex.submit(disconnect, s.base, {**reqs[i], "max_tokens": 90, "ignore_eos": True}, 1 + i % 5)
                   for i in range(0, 32, 4)]
            together = list(ex.map(post, reqs))
            for f in cut:
                f.result()
        for i, (a, b, t) in enumerate(zip(alone, serial, together)):
            assert shas(a) == shas(b) == shas(t), f"request {i} {reqs[i]}"
            assert b["weft"]["drafted"] == 0 and t["weft"]["accepted"] <= t["weft"]["drafted"]
        assert sum(t["weft"]["drafted"] for t in together) > 0
        assert s.metric("weft:spec_decode_num_draft_tokens_total") >= m0 + sum(
            t["weft"]["drafted"] for t in together)
