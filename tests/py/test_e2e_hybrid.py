"""The hybrid fixtures end to end (tests/data/fixtures/{qwen3_5,qwen3_5_moe,nemotron_h,nemotron_h_moe}: tiny
random-weight checkpoints with recurrent layers — Gated DeltaNet, Mamba-2 — and MoE, no tokenizer). Token-id
prompts only; replies have empty text and carry `weft.token_ids` (SPEC §3). Checked over HTTP with the openai
client: the greedy reply equals HF transformers' (golden.json), 8 concurrent requests each equal their solo
run, a prompt resumed from the prompt cache (recurrent states included) equals a fresh prefill, drafted ==
serial, and text prompts / chat get a named 400.

    WEFT_BIN=build-test/weft .venv/bin/python -m pytest -q tests/py/test_e2e_hybrid.py
"""

import json
import random

import openai
import pytest

from e2e_util import FIXTURES, GREEDY, run_concurrently, serving, token_sha, weft_of

NAMES = ["qwen3_5", "qwen3_5_moe", "nemotron_h", "nemotron_h_moe"]
VOCAB = 1024


@pytest.fixture(scope="module", params=NAMES)
def hybrid(request):
    path = FIXTURES / request.param
    if not (path / "model.safetensors").is_file():
        pytest.skip(f"fixture {path} is missing")
    with serving(path) as s:
        s.golden = json.loads((path / "golden.json").read_text())
        s.oai = s.client()
        s.name = s.model_id()
        yield s


def ids_of(r):
    w = weft_of(r)
    assert r.choices[0].text == "" and w["token_sha"] == token_sha(w["token_ids"])
    return w["token_ids"]


def test_greedy_equals_transformers(hybrid):
    g = hybrid.golden
    r = hybrid.oai.completions.create(model=hybrid.name, prompt=g["prompt_ids"], max_tokens=len(g["greedy_ids"]),
                                      extra_body={"ignore_eos": True}, **GREEDY)
    assert ids_of(r) == g["greedy_ids"]
    assert r.usage.prompt_tokens == len(g["prompt_ids"]) and r.usage.completion_tokens == len(g["greedy_ids"])


def _requests(name, k, seed):
    rng = random.Random(seed)
    out = []
    for i in range(k):
        kw = dict(model=name, prompt=[rng.randrange(VOCAB) for _ in range(rng.randrange(3, 40))],
                  max_tokens=rng.randrange(4, 28), extra_body={"ignore_eos": i % 2 == 0})
        kw.update(GREEDY if i % 2 == 0 else {"temperature": 0.9, "seed": 77 + i})
        out.append(kw)
    return out


def test_8_concurrent_equal_solo(hybrid):
    reqs = _requests(hybrid.name, 8, 1)
    solo = [ids_of(hybrid.oai.completions.create(**kw)) for kw in reqs]
    together = run_concurrently([lambda kw=kw: ids_of(hybrid.oai.completions.create(**kw)) for kw in reqs])
    for i, (a, b) in enumerate(zip(solo, together)):
        assert a == b, f"request {i} differs when served with 7 others"


def test_prompt_cache_resumed_equals_fresh(hybrid):
    """A 600-token prompt (past the first 512-token cache boundary), fresh; then its first 560 tokens alone;
    then the full prompt again, now resumed from the cache (KV rows + recurrent states)."""
    rng = random.Random(NAMES.index(hybrid.name))
    prompt = [rng.randrange(VOCAB) for _ in range(600)]
    kw = dict(model=hybrid.name, max_tokens=12, extra_body={"ignore_eos": True}, temperature=0.8, seed=5)
    fresh = hybrid.oai.completions.create(prompt=prompt, **kw)
    assert fresh.usage.prompt_tokens_details.cached_tokens == 0
    hybrid.oai.completions.create(prompt=prompt[:560], **kw)
    resumed = hybrid.oai.completions.create(prompt=prompt, **kw)
    assert resumed.usage.prompt_tokens_details.cached_tokens >= 512
    assert ids_of(resumed) == ids_of(fresh)


def test_drafted_equals_serial(hybrid):
    # a repetitive prompt so that copy drafts have something to propose
    prompt = [5, 6, 7, 8, 9] * 8
    for sampling in (GREEDY, {"temperature": 0.7, "seed": 3}):
        kw = dict(model=hybrid.name, prompt=prompt, max_tokens=24, **sampling)
        d = hybrid.oai.completions.create(**kw, extra_body={"ignore_eos": True})
        s = hybrid.oai.completions.create(**kw, extra_body={"ignore_eos": True, "draft": False})
        assert ids_of(d) == ids_of(s)


def test_text_prompt_and_chat_are_named_400(hybrid):
    for prompt in ("hello", ["a", "b"]):
        with pytest.raises(openai.BadRequestError) as ei:
            hybrid.oai.completions.create(model=hybrid.name, prompt=prompt, max_tokens=4)
        assert ei.value.param == "prompt" and "tokenizer" in ei.value.message
    with pytest.raises(openai.BadRequestError) as ei:
        hybrid.oai.chat.completions.create(model=hybrid.name, messages=[{"role": "user", "content": "hi"}])
    assert ei.value.param == "messages" and "tokenizer" in ei.value.message
    with pytest.raises(openai.BadRequestError) as ei:
        hybrid.oai.completions.create(model=hybrid.name, prompt=[1, VOCAB], max_tokens=4)
    assert ei.value.param == "prompt"
    # and the server still serves token ids
    assert len(ids_of(hybrid.oai.completions.create(model=hybrid.name, prompt=[1, 2, 3], max_tokens=3,
                                                    extra_body={"ignore_eos": True}))) == 3
