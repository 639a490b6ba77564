"""`--chunk N` on `weft serve` and `weft run`: the row budget of one forward (prefill chunk, drafted window).
SPEC §4.3.2 (chunk invariance): replies are bit-identical whatever the chunk, including 1-row chunks (every
prompt token a decode step) with drafts on (their depth is capped to fit the budget)."""
import concurrent.futures as cf
import json
import subprocess

import pytest

from e2e_util import WEFT_BIN, require_bin, serving, token_sha, weft_of

PROMPT = "Once upon a time, there was a little girl named Lily. She loved to play outside in the park with"


def run(*args, check=True):
    p = subprocess.run([require_bin(), *args], capture_output=True, text=True, timeout=120)
    if check and p.returncode != 0:
        raise AssertionError(f"weft {' '.join(args)} exited {p.returncode}: {p.stderr}")
    return p


@pytest.mark.parametrize("sampling", [{"temperature": 0}, {"temperature": 0.9, "top_p": 0.9, "seed": 7}])
def test_serve_chunk_invariance(sampling):
    shas, prompt_tokens = {}, {}
    for chunk in (None, 3, 1):
        args = ["--parallel", "2"] + (["--chunk", str(chunk)] if chunk else [])
        with serving(None, *args) as s:
            r = s.client().completions.create(model=s.model_id(), prompt=PROMPT, max_tokens=40, **sampling)
            shas[chunk] = weft_of(r)["token_sha"]
            prompt_tokens[chunk] = r.usage.prompt_tokens
            assert r.usage.completion_tokens > 0
    assert prompt_tokens[None] > 3, "the prompt must span several chunks of 3"
    assert shas[3] == shas[None] and shas[1] == shas[None], shas


def test_budget_below_parallel_concurrent_equals_alone():
    """--chunk 2 with 4 streams: a round cannot hold every stream's row; each reply still equals its solo run."""
    def ask(s, i):
        return weft_of(s.client().completions.create(model=s.model_id(), prompt=PROMPT + " x" * i, max_tokens=30,
                                                     temperature=0.8, seed=i))["token_sha"]
    with serving(None, "--parallel", "4") as s:
        alone = [ask(s, i) for i in range(4)]
    with serving(None, "--parallel", "4", "--chunk", "2") as s:
        with cf.ThreadPoolExecutor(4) as ex:
            conc = list(ex.map(lambda i: ask(s, i), range(4)))
    assert conc == alone


def test_run_chunk_invariance(tmp_path):
    reports = {}
    for chunk in ("256", "2", "1"):
        rep = tmp_path / f"r{chunk}.json"
        run("run", "--prompt", PROMPT, "--temperature", "0", "--max-tokens", "32", "--chunk", chunk,
            "--report", str(rep))
        reports[chunk] = json.loads(rep.read_text())
    ids = reports["256"]["token_ids"]
    assert len(ids) > 0
    for chunk in ("2", "1"):
        assert reports[chunk]["token_ids"] == ids, chunk
        assert reports[chunk]["token_sha"] == token_sha(ids)


@pytest.mark.parametrize("value", ["-1", "70000", "x"])
def test_bad_chunk_named(value):
    p = run("run", "--prompt", "hi", "--chunk", value, check=False)
    assert p.returncode == 2
    assert "--chunk" in p.stderr, p.stderr


def test_chunk_capped_at_context(tmp_path):
    """A --chunk past the context is a row budget nobody can use: it is capped (same reply, no huge buffers)."""
    reps = []
    for chunk in ("65536", "64"):
        rep = tmp_path / f"c{chunk}.json"
        run("run", "--prompt", PROMPT, "--temperature", "0", "--max-tokens", "8", "--context", "64", "--chunk",
            chunk, "--report", str(rep))
        reps.append(json.loads(rep.read_text())["token_ids"])
    assert reps[0] == reps[1]


def test_capabilities_rejects_extra_argument():
    p = run("capabilities", "--json", "extra", check=False)
    assert p.returncode == 2 and "extra" in p.stderr


def test_capabilities_lists_chunk_for_serve():
    caps = json.loads(run("capabilities", "--json").stdout)
    flags = caps["serve"]["flags"]
    names = [f["name"] if isinstance(f, dict) else f for f in flags]
    assert "--chunk" in names, names
    assert WEFT_BIN
