"""`weft run` end to end: the embedded stories260K and the stories260K GGUF files against llama.cpp's goldens
(issue A), exit codes and one-line errors for missing and corrupt models (SPEC §2)."""
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data"
WEFT = os.environ.get("WEFT_BIN", str(ROOT / "build-test" / "weft"))
STORIES = DATA / "stories260K"


def run(*args, check=True, timeout=120):
    p = subprocess.run([WEFT, *args], capture_output=True, text=True, timeout=timeout)
    if check and p.returncode != 0:
        raise AssertionError(f"weft {' '.join(args)} exited {p.returncode}: {p.stderr}")
    return p


GOLDENS = [
    ("stories260K.gguf", "golden_llamacpp.json"),
    ("stories260K-f16.gguf", "golden_llamacpp_f16.json"),
    ("stories260K-q8_0.gguf", "golden_llamacpp_q8_0.json"),
    ("stories260K-q4_0.gguf", "golden_llamacpp_q4_0.json"),
]


@pytest.mark.parametrize("gguf,golden", GOLDENS)
def test_stories_greedy_ids_match_llamacpp(gguf, golden, tmp_path):
    g = json.loads((STORIES / golden).read_text())
    for entry in g["generations"]:
        ids = ",".join(str(i) for i in entry["prompt_ids_with_bos"])
        report = tmp_path / "r.json"
        run("run", str(STORIES / gguf), "--tokens", ids, "--max-tokens", "32", "--temperature", "0", "--ignore-eos",
            "--report", str(report))
        r = json.loads(report.read_text())
        assert r["token_ids"] == entry["completion_ids_first32"], entry["prompt"]
        assert r["prompt_ids"] == entry["prompt_ids_with_bos"]


@pytest.mark.parametrize("gguf,golden", GOLDENS)
def test_stories_prompt_text_matches_completion(gguf, golden):
    g = json.loads((STORIES / golden).read_text())
    entry = g["generations"][0]
    p = run("run", str(STORIES / gguf), "--prompt", entry["prompt"], "--temperature", "0")
    # llama.cpp's completion call tokenizes the prompt itself: weft's text must begin with its 64 tokens.
    assert p.stdout.startswith(entry["completion"]), (p.stdout[:200], entry["completion"][:200])


def test_embedded_model_runs_without_arguments(tmp_path):
    p = subprocess.run([WEFT, "run", "--prompt", "Once upon a time", "--temperature", "0", "--max-tokens", "16"],
                       capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith(", there was a little girl named Lily")
    assert "token_sha" in p.stderr


def test_report_fields(tmp_path):
    report = tmp_path / "r.json"
    run("run", "--prompt", "Lily and Ben", "--temperature", "0.8", "--seed", "7", "--max-tokens", "8",
        "--report", str(report))
    r = json.loads(report.read_text())
    for key in ("prompt_ids", "token_ids", "token_sha", "text", "finish_reason", "timings", "sampling"):
        assert key in r
    assert len(r["token_sha"]) == 12 and len(r["token_ids"]) == 8 and r["finish_reason"] == "length"
    # same seed, same tokens
    report2 = tmp_path / "r2.json"
    run("run", "--prompt", "Lily and Ben", "--temperature", "0.8", "--seed", "7", "--max-tokens", "8",
        "--report", str(report2))
    assert json.loads(report2.read_text())["token_ids"] == r["token_ids"]


def test_missing_model_is_one_line_exit_2(tmp_path):
    p = run("run", str(tmp_path / "nope.gguf"), "--prompt", "x", check=False)
    assert p.returncode == 2
    assert p.stderr.count("\n") == 1 and "nope.gguf" in p.stderr


def _corrupt(tmp_path, name, mutate):
    src = (STORIES / "stories260K.gguf").read_bytes()
    path = tmp_path / name
    path.write_bytes(mutate(bytearray(src)))
    return path


@pytest.mark.parametrize("name,mutate", [
    ("truncated.gguf", lambda b: b[: len(b) // 2]),
    ("header.gguf", lambda b: b[:20]),
    ("magic.gguf", lambda b: b"XXXX" + b[4:]),
    ("version.gguf", lambda b: b[:4] + (99).to_bytes(4, "little") + b[8:]),
    ("counts.gguf", lambda b: b[:8] + (1 << 40).to_bytes(8, "little") + b[16:]),
])
def test_corrupt_gguf_is_named_error_exit_2(tmp_path, name, mutate):
    path = _corrupt(tmp_path, name, mutate)
    p = run("run", str(path), "--prompt", "x", check=False)
    assert p.returncode == 2, p.stderr
    assert p.stderr.startswith("weft: ") and p.stderr.count("\n") == 1, p.stderr


def test_corrupt_safetensors_dir_exit_2(tmp_path):
    src = DATA / "fixtures" / "llama"
    d = tmp_path / "m"
    shutil.copytree(src, d)
    st = (d / "model.safetensors").read_bytes()
    (d / "model.safetensors").write_bytes(st[: len(st) - 1000])
    p = run("info", str(d), check=False)
    assert p.returncode == 2 and p.stderr.startswith("weft: ")
    (d / "model.safetensors").write_bytes(st)
    cfg = json.loads((d / "config.json").read_text())
    del cfg["hidden_size"]
    (d / "config.json").write_text(json.dumps(cfg))
    p = run("info", str(d), check=False)
    assert p.returncode == 2 and "hidden_size" in p.stderr


def test_capabilities_json():
    caps = json.loads(run("capabilities", "--json").stdout)
    assert caps["schema"] == 1 and "cpu" in caps["backends"]
    assert "--port" in caps["serve"]["flags"]
    # every family the CPU backend runs, each from all three formats (SPEC §2.2, §6)
    for fam in ("llama", "qwen3", "qwen3_5", "qwen3_5_moe", "nemotron_h"):
        assert caps["families"].get(fam) == ["safetensors", "mlx-affine", "gguf"], (fam, caps["families"])
    for d in caps["devices"]:  # only with a CUDA build on a machine with a GPU
        assert d["backend"] == "cuda" and d["chip"].startswith("nvidia-sm") and d["memory_bytes"] > 0
    if "cuda" not in caps["backends"]:
        assert caps["devices"] == []
    else:
        assert caps["cuda_activations"] == ["fp32", "f16"]
    assert "--activations" in caps["serve"]["flags"]


def test_help_on_every_command():
    for cmd in ("serve", "run", "info", "capabilities", "bench"):
        p = run(cmd, "--help")
        assert p.stdout.startswith(f"usage: weft {cmd}")


def test_drafts_never_change_the_reply(tmp_path):
    """drafted == serial (SPEC §4.3.4) through the CLI: copy drafts on (default) vs --no-drafts, greedy and
    seeded; a prompt that repeats a passage makes copy drafts get accepted."""
    passage = "Lily went to the park. She saw a big red ball. She played with the ball all day. "
    prompt = passage + passage + "Lily went to the"
    accepted = 0
    for extra in (["--temperature", "0"], ["--temperature", "0.8", "--top-p", "0.9", "--seed", "7"]):
        reports = []
        for drafts in ([], ["--no-drafts"]):
            rp = tmp_path / f"r{len(reports)}.json"
            run("run", "--prompt", prompt, "--max-tokens", "48", *extra, *drafts, "--report", str(rp))
            reports.append(json.loads(rp.read_text()))
        assert reports[0]["token_ids"] == reports[1]["token_ids"]
        assert reports[0]["token_sha"] == reports[1]["token_sha"]
        assert reports[1]["drafted"] == 0
        accepted += reports[0]["accepted"]
    assert accepted > 0


def test_bench_streams_table():
    """weft bench --streams N: one row with prefill, 1-stream decode and N-stream aggregate decode, all > 0."""
    r = run("bench", "--backend", "cpu", "--prompt-len", "16", "--gen-len", "5", "--repeat", "1", "--streams", "3",
            "--chunk", "5")
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("| stories260K")]
    assert "3 streams, aggregate decode tok/s" in r.stdout and "chunks of 5" in r.stdout
    assert len(lines) == 1
    cells = [c.strip() for c in lines[0].strip("|").split("|")]
    assert cells[2] == "cpu" and all(float(c) > 0 for c in cells[3:6])


def test_bench_refuses_bad_streams():
    r = run("bench", "--streams", "-1", check=False)
    assert r.returncode == 2 and "--streams" in r.stderr


def test_activations_flag():
    """--activations: fp32 (the default) runs everywhere; f16 is the CUDA backend's and the CPU backend refuses
    it with a named error; any other value is refused before a model loads."""
    base = ["run", "--prompt", "Once upon a time", "--max-tokens", "8", "--temperature", "0"]
    reports = []
    for extra in ([], ["--activations", "fp32"]):
        p = run(*base, "--backend", "cpu", *extra)
        reports.append(p.stdout)
    assert reports[0] == reports[1]
    p = run(*base, "--backend", "cpu", "--activations", "f16", check=False)
    assert p.returncode != 0 and "--activations f16" in p.stderr and "CPU" in p.stderr, p.stderr
    assert p.stderr.startswith("weft: ") and p.stderr.count("\n") == 1, p.stderr
    p = run(*base, "--activations", "fp16", check=False)
    assert p.returncode != 0 and "--activations 'fp16'" in p.stderr, p.stderr
    # refused at parse time: before the model (here a missing file) is even opened
    p = run("run", "/nonexistent.gguf", "--prompt", "Hi", "--activations", "bogus", check=False)
    assert p.returncode == 2 and "--activations 'bogus'" in p.stderr, p.stderr
    assert "--activations" in run("run", "--help").stdout
