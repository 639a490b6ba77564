"""Batched MTP drafting served (SPEC §4.3.3-4, §4.5 (b)): `weft serve --parallel 8` on fixtures with a draft head
drafts for all its decoding streams in one batched head call per round (src/core/lanes/rounds.c head_drafts,
the CPU backend's draft_many). 8 concurrent requests, greedy and seeded, each with the head drafting, give the
token_sha of the same request served alone and of it with "draft": false.

    WEFT_BIN=build-test/weft .venv/bin/python -m pytest -q tests/py/test_mtp_batch.py
"""

import random

import pytest

from e2e_util import FIXTURES, GREEDY, run_concurrently, serving, token_sha, weft_of

VOCAB = 1024


@pytest.fixture(scope="module", params=["qwen3_5_moe", "nemotron_h_moe"])
def mtp_server(request):
    path = FIXTURES / request.param
    if not (path / "model.safetensors").is_file():
        pytest.skip(f"fixture {path} is missing")
    with serving(path, "--parallel", "8") as s:
        s.oai = s.client()
        s.name = s.model_id()
        yield s


def _sha_drafted(r):
    w = weft_of(r)
    assert w["token_sha"] == token_sha(w["token_ids"])
    return w["token_sha"], w["drafted"]


def test_mtp_batched_concurrent_equals_solo_and_serial(mtp_server):
    rng = random.Random(5)
    reqs = []
    for i in range(8):
        kw = dict(model=mtp_server.name, prompt=[rng.randrange(VOCAB) for _ in range(rng.randrange(3, 30))],
                  max_tokens=rng.randrange(12, 32), extra_body={"ignore_eos": True})
        kw.update(GREEDY if i % 2 == 0 else {"temperature": 0.8, "top_p": 0.9, "seed": 11 + i})
        reqs.append(kw)
    create = mtp_server.oai.completions.create
    solo = [_sha_drafted(create(**kw)) for kw in reqs]
    together = run_concurrently([lambda kw=kw: _sha_drafted(create(**kw)) for kw in reqs])
    serial = [_sha_drafted(create(**{**kw, "extra_body": {"ignore_eos": True, "draft": False}})) for kw in reqs]
    for i, ((a, _), (b, _), (c, nd)) in enumerate(zip(solo, together, serial)):
        assert a == b == c, f"request {i}: solo, concurrent and serial replies differ"
        assert nd == 0
    assert sum(d for _, d in together) > 0, "the head proposed nothing"
