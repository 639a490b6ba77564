"""Adversarial tests of the `weft` command line (run / info / bench flags, model loading), written by a tester.

Each known defect is a strict xfail: it fails today and must flip to a pass when fixed. The other tests are
regression checks of behaviour found correct. Binary: $WEFT_BIN, else build-break/weft, else build-test/weft.
Uses only the embedded stories260K and tests/data fixtures; the whole file runs in well under a minute.
"""
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data"
LLAMA_FIXTURE = DATA / "fixtures" / "llama"


def _weft():
    for cand in (os.environ.get("WEFT_BIN"), ROOT / "build-break" / "weft", ROOT / "build-test" / "weft"):
        if cand and os.access(str(cand), os.X_OK):
            return str(cand)
    return None


WEFT = _weft()
pytestmark = pytest.mark.skipif(WEFT is None, reason="no weft binary (set WEFT_BIN)")

SANITIZER_MARKS = ("AddressSanitizer", "LeakSanitizer", "runtime error:", "UndefinedBehaviorSanitizer")


def weft(*args, timeout=60, env=None):
    return subprocess.run([WEFT, *map(str, args)], capture_output=True, text=True, timeout=timeout, env=env,
                          errors="replace")


def generated(stderr):
    m = re.search(r"(\d+) generated", stderr)
    assert m, f"no summary line in stderr: {stderr!r}"
    return int(m.group(1))


def is_sanitized():
    p = subprocess.run([WEFT, "--version"], capture_output=True, text=True, env={**os.environ, "ASAN_OPTIONS": "help=1"})
    return "AddressSanitizer" in p.stdout + p.stderr


# ---------------------------------------------------------------- regression checks (pass today)


@pytest.mark.parametrize("prompt", ["", " ", "\n\n", "🦙 日本語 é", "a\u0301" * 20])
def test_run_odd_prompts_work(prompt):
    p = weft("run", "--prompt", prompt, "--max-tokens", "4", "--temperature", "0")
    assert p.returncode == 0, p.stderr
    assert generated(p.stderr) == 4


def test_run_prompt_over_context_is_one_line_error():
    p = weft("run", "--prompt", "once upon a time " * 200, "--max-tokens", "4")
    assert p.returncode == 2
    assert p.stderr.count("\n") <= 1 and "context is 512" in p.stderr


@pytest.mark.parametrize("args,needle", [
    (["--temperature", "nan"], "temperature"),
    (["--top-p", "0"], "top_p"),
    (["--min-p", "5"], "min_p"),
    (["--top-k", "-3"], "top_k"),
    (["--seed", "18446744073709551615"], "--seed"),
    (["--tokens", "1,99999"], "99999"),
    (["--max-tokens", "abc"], "--max-tokens"),
    (["--bogus"], "--bogus"),
])
def test_run_bad_values_are_one_line_errors(args, needle):
    base = [] if "--tokens" in args else ["--prompt", "hi"]
    p = weft("run", *base, *args)
    assert p.returncode == 2, p.stderr
    assert needle in p.stderr and p.stderr.count("\n") <= 1, p.stderr


@pytest.mark.parametrize("args,message", [
    (["--max-tokens", "99999999999"], "--max-tokens must be between 0 and 1073741824, got 99999999999"),
    (["--chunk", "-99999999999999999999999"], "--chunk must be between 0 and 65536, got -99999999999999999999999"),
    (["--context", "2147483648"], "--context must be between 0 and 1073741824, got 2147483648"),
    (["--top-k", "4294967296"], "--top-k must be between -2147483647 and 2147483647, got 4294967296"),
    (["--max-tokens", "12x"], "--max-tokens expects an integer, got '12x'"),
])
def test_run_int_flags_past_int_range_name_the_range(args, message):
    # An integer too large for an int is a range error with the flag's range, not "expects an integer".
    p = weft("run", "--prompt", "hi", *args)
    assert p.returncode == 2, p.stderr
    assert p.stderr.strip() == f"weft: {message}", p.stderr


def _free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("args,needle", [
    (["run", "--chat", "hi", "--chat-template", "{dir}", "--max-tokens", "2"], "is a directory"),
    (["run", "--prompt", "hi", "--report", "{dir}"], "--report {dir}: is a directory"),
    (["run", "--prompt", "hi", "--report", "/nonexistent-weft/x.json"], "No such file or directory"),
    (["run", "--tokens", "1,,2"], "--tokens: empty token id in '1,,2'"),
    (["run", "--tokens", "1,2,"], "--tokens: empty token id in '1,2,'"),
    (["run", "--prompt", "hi", "--context", "1"], "--context must be 0 (the model's) or at least 2, got 1"),
    (["run", "--prompt", "hi", "--device", "-1"], "--device must be between 0 and 1023, got -1"),
    (["serve", "--temperature", "nan"], "temperature must be a finite number >= 0 (got nan)"),
    (["serve", "--top-p", "-1"], "top_p must be in (0, 1] (got -1)"),
    (["serve", "--min-p", "inf"], "min_p must be in [0, 1] (got inf)"),
    (["serve", "--shutdown-grace", "1e9"], "--shutdown-grace must be in [0, 1000000) seconds, got 1e+09"),
    (["serve", "--prompt-cache-gib", "-1"], "--prompt-cache-gib must be in [0, 1000000), got -1"),
    (["serve", "--log-format", "xml"], "--log-format must be text or json, got 'xml'"),
    (["serve", "--name", ""], "--name must not be empty"),
    (["serve", "--api-key-file", "{dir}"], "--api-key-file {dir} is not a regular file"),
    (["serve", "--prompt-cache-gib", "900000", "--port", "{port}"], "--prompt-cache-gib 900000 is more than"),
])
def test_bad_settings_are_named_before_work(tmp_path, args, needle):
    # Breaker findings (session 6): each bad setting is one line naming the flag and value, exit 2 — before a
    # reply is generated or a server starts answering, and never a sanitizer report.
    port = str(_free_port())
    args = [a.replace("{dir}", str(tmp_path)).replace("{port}", port) for a in args]
    needle = needle.replace("{dir}", str(tmp_path))
    p = weft(*args, timeout=60)
    assert p.returncode == 2, p.stderr
    assert needle in p.stderr, p.stderr
    assert "generated" not in p.stderr and not any(s in p.stderr for s in SANITIZER_MARKS), p.stderr


@pytest.mark.parametrize("cut", [0, 10, 24, 1000, 100000])
def test_truncated_gguf_is_named_error(tmp_path, cut):
    src = (DATA / "stories260K" / "stories260K.gguf").read_bytes()
    f = tmp_path / "t.gguf"
    f.write_bytes(src[:cut])
    p = weft("run", f, "--prompt", "hi", "--max-tokens", "2")
    assert p.returncode == 2 and "t.gguf" in p.stderr, p.stderr
    assert not any(s in p.stderr for s in SANITIZER_MARKS)


def test_directory_without_config_is_named_error(tmp_path):
    p = weft("run", tmp_path, "--prompt", "hi")
    assert p.returncode == 2 and "config.json" in p.stderr


def test_config_wrong_type_is_named_error(tmp_path):
    d = tmp_path / "m"
    shutil.copytree(LLAMA_FIXTURE, d)
    cfg = json.loads((d / "config.json").read_text())
    cfg["num_hidden_layers"] = "two"
    (d / "config.json").write_text(json.dumps(cfg))
    p = weft("run", d, "--tokens", "1,2,3", "--max-tokens", "2")
    assert p.returncode == 2 and "num_hidden_layers" in p.stderr, p.stderr


def test_info_and_capabilities():
    p = weft("capabilities", "--json")
    assert p.returncode == 0
    caps = json.loads(p.stdout)
    assert caps["schema"] == 1 and "--api-key" in caps["serve"]["flags"]
    p = weft("info", DATA / "stories260K" / "stories260K-q8_0.gguf")
    assert p.returncode == 0 and "context        512" in p.stdout


# ---------------------------------------------------------------- defects (strict xfail)


def test_run_text_omits_special_tokens(tmp_path):
    # seed 1 at temperature 1 generates the BOS token (id 1) mid-reply; the server's text for the same tokens
    # (same token_sha) has no "<s>", `weft run` prints "...what happened.<s> Once upon a time..."
    rep = tmp_path / "r.json"
    p = weft("run", "--prompt", "hi", "--max-tokens", "509", "--seed", "1", "--temperature", "1", "--ignore-eos",
             "--report", rep)
    assert p.returncode == 0, p.stderr
    r = json.loads(rep.read_text())
    if 1 not in r["token_ids"]:
        pytest.skip("precondition lost: this seed no longer samples the BOS token")
    assert "<s>" not in r["text"]
    assert "<s>" not in p.stdout


def test_run_default_max_tokens_matches_help():
    # the help states the default (4096, capped by the context) and run does what it says
    h = weft("run", "--help").stdout
    assert "4096, capped by the context" in h
    p = weft("run", "--prompt", "hi", "--ignore-eos", "--temperature", "0")
    assert p.returncode == 0, p.stderr
    assert generated(p.stderr) == 509  # context 512 - 3 prompt tokens


def test_run_negative_max_tokens_rejected():
    p = weft("run", "--prompt", "hi", "--max-tokens", "-1", "--temperature", "0")
    assert p.returncode == 2, f"rc {p.returncode}, {p.stderr.strip()}"  # got rc 0 and 509 tokens


@pytest.mark.parametrize("flag", ["--threads", "--context"])
def test_run_negative_counts_rejected(flag):
    p = weft("run", "--prompt", "hi", "--max-tokens", "2", flag, "-2")
    assert p.returncode == 2, p.stderr


def test_run_report_failure_is_an_error(tmp_path):
    p = weft("run", "--prompt", "hi", "--max-tokens", "2", "--report", tmp_path / "missing" / "r.json")
    # checked before any generation (session 6): the path and the reason, exit 2
    assert "--report" in p.stderr and "No such file or directory" in p.stderr, p.stderr
    assert "generated" not in p.stderr
    assert p.returncode == 2


def test_unsupported_hidden_act_refused(tmp_path):
    d = tmp_path / "m"
    shutil.copytree(LLAMA_FIXTURE, d)
    cfg = json.loads((d / "config.json").read_text())
    cfg["hidden_act"] = "gelu_pytorch_tanh"
    (d / "config.json").write_text(json.dumps(cfg))
    p = weft("run", d, "--tokens", "1,2,3", "--max-tokens", "2", "--temperature", "0")
    assert p.returncode == 2 and "hidden_act" in p.stderr, p.stderr


def test_mlp_bias_without_tensors_refused(tmp_path):
    # attention_bias=true without bias tensors is refused ("missing tensor"); mlp_bias=true is not.
    d = tmp_path / "m"
    shutil.copytree(LLAMA_FIXTURE, d)
    cfg = json.loads((d / "config.json").read_text())
    cfg["mlp_bias"] = True
    (d / "config.json").write_text(json.dumps(cfg))
    p = weft("run", d, "--tokens", "1,2,3", "--max-tokens", "2", "--temperature", "0")
    assert p.returncode == 2, p.stderr


def test_run_absurd_thread_count_does_not_crash():
    if not is_sanitized():
        pytest.skip("the abort shows in sanitizer builds only")
    p = weft("run", "--prompt", "hi", "--max-tokens", "2", "--threads", "100000", timeout=120)
    assert p.returncode in (0, 2), p.stderr[-500:]
    assert not any(s in p.stderr for s in SANITIZER_MARKS) and "Failed to mmap" not in p.stderr
