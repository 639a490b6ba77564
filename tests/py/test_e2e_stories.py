"""End to end on the embedded stories260K (SPEC §3–§5), through the official `openai` client as a user would:
completions (plain, streamed, usage, logprobs, n, echo, stop strings), chat refused by name (no template),
/tokenize + /detokenize, /v1/models, and the exact-decoding invariants of SPEC §4.3 observed over HTTP by
`weft.token_sha`: same seed → same tokens, concurrent == solo, drafted == serial, resumed == fresh.

    WEFT_BIN=build-test/weft .venv/bin/python -m pytest -q tests/py/test_e2e_stories.py
"""

import math

import openai
import pytest

from e2e_util import (GREEDY, completion_stream, extra, final_weft, run_concurrently, serving, sha_of,
                      token_sha, weft_of)

PROMPTS = ["Once upon a time", "The little dog", "Lily and Ben went to the park.", "One day, a big bird",
           "Tom had a red ball. He", "The sun was hot and", "Mia found a small box", "There was a fish"]


@pytest.fixture(scope="module")
def srv():
    with serving() as s:
        yield s


@pytest.fixture(scope="module")
def oai(srv):
    return srv.client()


@pytest.fixture(scope="module")
def model(srv):
    return srv.model_id()


def comp(oai, model, prompt, **kw):
    return oai.completions.create(model=model, prompt=prompt, **kw)


# ---- /v1/models, /tokenize, /detokenize ----

def test_models_fields(oai):
    models = oai.models.list().data
    assert len(models) == 1
    m = models[0]
    assert m.id == "stories260K" and m.object == "model" and m.owned_by
    assert extra(m, "context_length") == 512 and extra(m, "max_model_len") == 512


def test_tokenize_detokenize_round_trip(srv, oai, model):
    text = "Once upon a time, there was a cat named Tom."
    with srv.http() as h:
        plain = h.post("/tokenize", json={"content": text, "add_special_tokens": False}).json()
        with_bos = h.post("/v1/tokenize", json={"prompt": text}).json()
        assert plain["count"] == len(plain["tokens"]) > 0
        assert with_bos["tokens"] == [1] + plain["tokens"] and with_bos["count"] == plain["count"] + 1
        assert h.post("/detokenize", json={"tokens": plain["tokens"]}).json()["content"] == text
        assert h.post("/v1/detokenize", json={"tokens": with_bos["tokens"]}).json()["content"] == text
    # a token-id prompt is the same prompt as its text
    a = comp(oai, model, with_bos["tokens"], max_tokens=12, **GREEDY)
    b = comp(oai, model, text, max_tokens=12, **GREEDY)
    assert a.usage.prompt_tokens == b.usage.prompt_tokens == len(with_bos["tokens"])
    assert sha_of(a) == sha_of(b) and a.choices[0].text == b.choices[0].text


# ---- completions: shapes, streaming, usage ----

def test_completion_nonstreamed(oai, model):
    r = comp(oai, model, "Once upon a time", max_tokens=16, extra_body={"return_token_ids": True}, **GREEDY)
    assert r.object == "text_completion" and r.model == model and r.id
    assert len(r.choices) == 1 and r.choices[0].index == 0 and r.choices[0].finish_reason == "length"
    assert r.choices[0].text and "\ufffd" not in r.choices[0].text
    u = r.usage
    assert u.prompt_tokens == 5 and u.completion_tokens == 16 and u.total_tokens == 21
    assert u.prompt_tokens_details is not None and u.prompt_tokens_details.cached_tokens >= 0
    w = weft_of(r)
    assert len(w["token_ids"]) == 16 and w["token_sha"] == token_sha(w["token_ids"])
    assert isinstance(w["seed"], int) and w["rounds"] >= 1
    for k in ("prefill_seconds", "decode_seconds", "ttft_seconds"):
        assert w[k] >= 0, k


@pytest.mark.parametrize("sampling", [GREEDY, {"temperature": 1.0, "seed": 42},
                                      {"temperature": 0.8, "top_p": 0.9, "seed": 7, "extra_body": {"top_k": 40}}])
def test_streamed_equals_nonstreamed(oai, model, sampling):
    for prompt in PROMPTS[:4]:
        kw = dict(max_tokens=24, **sampling)
        full = comp(oai, model, prompt, **kw)
        text, chunks = completion_stream(oai, model=model, prompt=prompt, **kw)
        assert text == full.choices[0].text, prompt
        assert "\ufffd" not in text and prompt not in text
        assert final_weft(chunks)["token_sha"] == sha_of(full)
        finals = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
        assert finals == [full.choices[0].finish_reason]
        assert all(c.usage is None for c in chunks)


@pytest.mark.parametrize("opts", ["absent", None, {}, {"include_usage": False}, {"include_usage": True}])
def test_include_usage(oai, model, opts):
    """SPEC §3 / peers #5: with include_usage true exactly one extra final chunk carries usage and choices [];
    absent, {} or false: no chunk carries usage."""
    kw = dict(model=model, prompt="The little dog", max_tokens=10, **GREEDY)
    ref = comp(oai, **kw).usage
    if opts != "absent":
        kw["stream_options"] = opts
    _, chunks = completion_stream(oai, **kw)
    with_usage = [i for i, c in enumerate(chunks) if c.usage is not None]
    if not (isinstance(opts, dict) and opts.get("include_usage")):
        assert with_usage == []
        return
    assert with_usage == [len(chunks) - 1], "the usage chunk must be the single last chunk"
    last = chunks[-1]
    assert last.choices == []
    u = last.usage
    assert u.total_tokens == u.prompt_tokens + u.completion_tokens
    assert (u.prompt_tokens, u.completion_tokens) == (ref.prompt_tokens, ref.completion_tokens)
    assert u.prompt_tokens_details is not None and u.prompt_tokens_details.cached_tokens >= 0
    assert sum(1 for c in chunks for ch in c.choices if ch.finish_reason) == 1


def test_chat_is_a_named_400(oai, model):
    for stream in (False, True):
        with pytest.raises(openai.BadRequestError) as ei:
            oai.chat.completions.create(model=model, messages=[{"role": "user", "content": "Hi"}], stream=stream,
                                        max_tokens=4)
        e = ei.value
        assert e.status_code == 400 and e.param == "messages" and e.type == "invalid_request_error"
        assert "chat template" in e.message


# ---- logprobs, n, echo ----

def test_logprobs(oai, model):
    r = comp(oai, model, "Tom had a red ball. He", max_tokens=8, logprobs=3, extra_body={"ignore_eos": True},
             **GREEDY)
    lp = r.choices[0].logprobs
    n = r.usage.completion_tokens
    assert n == 8
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == len(lp.text_offset) == n
    assert "".join(lp.tokens) == r.choices[0].text
    assert lp.text_offset[0] == 0 and lp.text_offset == sorted(lp.text_offset)
    for tok, l, top in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs):
        assert l <= 0 and 3 <= len(top) <= 4
        assert sum(math.exp(v) for v in top.values()) <= 1 + 1e-5
        assert l == max(top.values()) and top[tok] == l  # greedy: the chosen token is the most likely one
    # streamed: one logprobs entry per counted token (peers #6), the same values
    _, chunks = completion_stream(oai, model=model, prompt="Tom had a red ball. He", max_tokens=8, logprobs=3,
                                  stream_options={"include_usage": True}, extra_body={"ignore_eos": True}, **GREEDY)
    toks = [t for c in chunks for ch in c.choices if ch.logprobs for t in ch.logprobs.token_logprobs]
    assert toks == lp.token_logprobs and chunks[-1].usage.completion_tokens == len(toks)


def test_n_choices(oai, model):
    """n=3: three choices with indexes 0..2, choice i is the request with seed+i (SPEC §3, §5.3)."""
    kw = dict(model=model, prompt="The sun was hot and", max_tokens=12, temperature=1.5, seed=11,
              extra_body={"ignore_eos": True})
    r = oai.completions.create(n=3, **kw)
    assert [c.index for c in r.choices] == [0, 1, 2]
    assert r.usage.completion_tokens == 36
    w = weft_of(r)
    assert [c["index"] for c in w["choices"]] == [0, 1, 2]
    assert [c["seed"] for c in w["choices"]] == [11, 12, 13]
    assert w["token_sha"] == w["choices"][0]["token_sha"]
    for i in range(3):
        single = oai.completions.create(**{**kw, "seed": 11 + i})
        assert single.choices[0].text == r.choices[i].text
        assert sha_of(single) == w["choices"][i]["token_sha"]
    # streamed: each index finishes once, per-index text equals the non-streamed choice
    chunks = list(oai.completions.create(n=3, stream=True, **kw))
    texts = {0: "", 1: "", 2: ""}
    finished = []
    for c in chunks:
        for ch in c.choices:
            texts[ch.index] += ch.text
            if ch.finish_reason:
                finished.append(ch.index)
    assert sorted(finished) == [0, 1, 2]
    assert [texts[i] for i in range(3)] == [c.text for c in r.choices]


def test_echo(oai, model):
    plain = comp(oai, model, "Mia found a small box", max_tokens=10, **GREEDY)
    echoed = comp(oai, model, "Mia found a small box", max_tokens=10, echo=True, **GREEDY)
    assert echoed.choices[0].text == "Mia found a small box" + plain.choices[0].text
    assert sha_of(echoed) == sha_of(plain)
    zero = comp(oai, model, "Mia found a small box", max_tokens=0, echo=True, **GREEDY)
    assert zero.choices[0].text == "Mia found a small box" and zero.usage.completion_tokens == 0


# ---- stop strings ----

def _reply_tokens(oai, model, prompt, n):
    r = comp(oai, model, prompt, max_tokens=n, logprobs=0, extra_body={"ignore_eos": True, "return_token_ids": True},
             **GREEDY)
    return r.choices[0].text, r.choices[0].logprobs.tokens, weft_of(r)["token_ids"]


def test_stop_string_across_tokens(oai, model):
    """A stop string that starts inside one token and ends inside another: the text stops before it, the
    counted tokens end with the one that completed it, and the stream shows no prefix of it (peers #3)."""
    prompt = "Once upon a time"
    full, toks, ids = _reply_tokens(oai, model, prompt, 48)
    assert "".join(toks) == full
    ends = [sum(len(t) for t in toks[:k + 1]) for k in range(len(toks))]
    j = next(k for k in range(len(toks) // 3, len(toks) - 3) if len(toks[k]) >= 2 and len(toks[k + 2]) >= 2)
    start = ends[j] - 1  # the last character of token j ...
    stop = full[start:ends[j + 1] + 1]  # ... through token j+1, and the first character of token j+2
    at = full.index(stop)
    done_by = next(k for k in range(len(toks)) if ends[k] >= at + len(stop))
    kw = dict(max_tokens=48, stop=[stop], extra_body={"ignore_eos": True, "return_token_ids": True}, **GREEDY)
    r = comp(oai, model, prompt, **kw)
    assert r.choices[0].text == full[:at] and r.choices[0].finish_reason == "stop"
    assert r.usage.completion_tokens == done_by + 1
    assert weft_of(r)["token_ids"] == ids[:done_by + 1] and sha_of(r) == token_sha(ids[:done_by + 1])
    text, chunks = completion_stream(oai, model=model, prompt=prompt, **kw)
    assert text == full[:at]
    assert final_weft(chunks)["token_sha"] == sha_of(r)


def test_stop_newline_keeps_tail(oai, model):
    """peers #4: the text before a "\\n" stop arrives streamed as it does non-streamed."""
    prompt = "Once upon a time"
    full, _, _ = _reply_tokens(oai, model, prompt, 80)
    assert "\n" in full, "the reference reply needs a newline"
    kw = dict(max_tokens=80, stop=["\n", "zzzq"], extra_body={"ignore_eos": True}, **GREEDY)
    r = comp(oai, model, prompt, **kw)
    assert r.choices[0].text == full[:full.index("\n")] and r.choices[0].finish_reason == "stop"
    assert completion_stream(oai, model=model, prompt=prompt, **kw)[0] == r.choices[0].text


def test_stop_prefix_ruled_out_is_released(oai, model):
    """Held-back text whose stop never completes is released: nothing lost, finish_reason length."""
    prompt = "Once upon a time"
    full, toks, _ = _reply_tokens(oai, model, prompt, 32)
    last = toks[-1]
    stop = full[-len(last) - 2:] + "\u00a7never"  # the reply's tail is a prefix of this stop string
    kw = dict(max_tokens=32, stop=stop, extra_body={"ignore_eos": True}, **GREEDY)
    r = comp(oai, model, prompt, **kw)
    assert r.choices[0].text == full and r.choices[0].finish_reason == "length"
    assert completion_stream(oai, model=model, prompt=prompt, **kw)[0] == full


# ---- exact decoding invariants (SPEC §4.3) ----

def test_seed_reproducible(oai, model):
    kw = dict(model=model, prompt="Write a number:", temperature=1.0, max_tokens=24,
              extra_body={"return_token_ids": True, "ignore_eos": True})
    a = oai.completions.create(seed=123, **kw)
    b = oai.completions.create(seed=123, **kw)
    assert sha_of(a) == sha_of(b) and a.choices[0].text == b.choices[0].text
    assert weft_of(a)["seed"] == 123
    others = {sha_of(oai.completions.create(seed=s, **kw)) for s in (1, 2, 3, 4)}
    assert len(others | {sha_of(a)}) > 1, "different seeds never changed the reply at temperature 1"
    # without a seed: derived from the prompt (§5.3), so the same prompt gives the same reply
    c = oai.completions.create(**kw)
    d = oai.completions.create(**kw)
    assert weft_of(c)["seed"] == weft_of(d)["seed"] and sha_of(c) == sha_of(d)


def test_seeded_alone_equals_inside_burst(oai, model):
    """peers #14: a seeded request is the same alone and inside a burst of 8 unseeded ones."""
    body = dict(model=model, prompt="Write a number:", temperature=1.0, seed=123, max_tokens=32,
                extra_body={"return_token_ids": True, "ignore_eos": True})
    alone = oai.completions.create(**body)
    fns = [lambda i=i: oai.completions.create(model=model, prompt=f"Story {i}:", temperature=1.0,
                                              max_tokens=16 + 4 * i) for i in range(8)]
    fns.insert(4, lambda: oai.completions.create(**body))
    res = run_concurrently(fns)
    assert weft_of(res[4])["token_ids"] == weft_of(alone)["token_ids"]
    assert res[4].choices[0].text == alone.choices[0].text


def _mixed_requests(model, k):
    """k requests: greedy and seeded, different prompts and lengths, some streamed."""
    out = []
    for i in range(k):
        kw = dict(model=model, prompt=PROMPTS[i % len(PROMPTS)], max_tokens=8 + (i * 7) % 41,
                  extra_body={"ignore_eos": i % 3 == 0})
        if i % 2:
            kw.update(temperature=0.9, seed=1000 + i, top_p=0.95 if i % 4 == 1 else 1.0)
        else:
            kw.update(GREEDY)
        out.append((kw, i % 4 == 3))
    return out


def _send(oai, kw, stream):
    if stream:
        text, chunks = completion_stream(oai, **kw)
        return text, final_weft(chunks)["token_sha"]
    r = oai.completions.create(**kw)
    return r.choices[0].text, sha_of(r)


def test_16_concurrent_equal_solo(oai, model):
    """SPEC §4.3.3 / peers #13: each of 16 concurrent requests returns the tokens it gets alone."""
    reqs = _mixed_requests(model, 16)
    solo = [_send(oai, kw, st) for kw, st in reqs]
    together = run_concurrently([lambda kw=kw, st=st: _send(oai, kw, st) for kw, st in reqs])
    for i, (a, b) in enumerate(zip(solo, together)):
        assert a == b, f"request {i} ({reqs[i][0]}) differs when served with 15 others"


def test_drafted_equals_serial(oai, model):
    """SPEC §4.3.4: copy drafts never change a reply: each equals its "draft": false run."""
    drafted = accepted = 0
    for i, prompt in enumerate(PROMPTS[:6]):
        kw = dict(model=model, prompt=prompt, max_tokens=96, extra_body={"ignore_eos": True})
        kw.update(GREEDY if i % 2 == 0 else {"temperature": 0.7, "seed": 50 + i})
        d = oai.completions.create(**kw)
        s = oai.completions.create(**{**kw, "extra_body": {"ignore_eos": True, "draft": False}})
        assert sha_of(d) == sha_of(s) and d.choices[0].text == s.choices[0].text, prompt
        assert weft_of(s)["drafted"] == 0
        drafted += weft_of(d)["drafted"]
        accepted += weft_of(d)["accepted"]
    assert drafted > 0 and accepted > 0, "no draft was proposed or kept: the comparison proved nothing"


@pytest.mark.parametrize("pen", [{"frequency_penalty": -1.0}, {"presence_penalty": 1.0}, {"repetition_penalty": 1.3},
                                 {"logit_bias": {"13": 3.0}}])
def test_drafted_equals_serial_with_penalties(oai, model, pen):
    """Penalties and logit_bias are applied per row in verify, counting the drafts before the row (SPEC §5.1):
    drafted replies still equal serial ones."""
    for sampling in (GREEDY, {"temperature": 0.8, "seed": 3}):
        kw = dict(model=model, prompt="Once upon a time", max_tokens=120, **sampling)
        d = oai.completions.create(**kw, extra_body={"ignore_eos": True, **pen})
        s = oai.completions.create(**kw, extra_body={"ignore_eos": True, "draft": False, **pen})
        assert sha_of(d) == sha_of(s), (pen, sampling, weft_of(d))
    if "frequency_penalty" in pen:  # a negative frequency penalty makes the reply repeat: drafts are kept
        assert weft_of(d)["accepted"] > 0


# ---- prompt cache (SPEC §4.4, peers #15) ----

LONG = ("Kip the frog had a blue hat. There was a little girl named Lily. She loved to play outside in the park "
        "with her friends. One day, she saw a big red ball under a tree. She ran to the ball and picked it up. "
        "Her friend Ben came to play with her. They threw the ball high in the sky and laughed. Then the sun went "
        "down and it was time to go home. Lily said goodbye to Ben and walked home with her mom. ")


@pytest.fixture(scope="module")
def nocache():
    with serving(None, "--prompt-cache-gib", "0") as s:
        yield s


def test_prompt_cache_resumed_equals_fresh(oai, model, nocache):
    base = LONG + "The end of the story about Kip."
    longer = base + " The next day, Lily went back to the park."
    kw = dict(max_tokens=24, extra_body={"ignore_eos": True})
    first = comp(oai, model, base, **kw, **GREEDY)
    assert first.usage.prompt_tokens > 100
    assert first.usage.prompt_tokens_details.cached_tokens == 0
    again = comp(oai, model, base, **kw, **GREEDY)
    assert again.usage.prompt_tokens_details.cached_tokens > 0
    assert sha_of(again) == sha_of(first) and again.choices[0].text == first.choices[0].text
    ext = comp(oai, model, longer, temperature=0.8, seed=9, **kw)
    assert ext.usage.prompt_tokens_details.cached_tokens >= first.usage.prompt_tokens - 1
    # the same requests on a server without a prompt cache
    nc = nocache.client()
    nmodel = nocache.model_id()
    cold = nc.completions.create(model=nmodel, prompt=base, **kw, **GREEDY)
    cold2 = nc.completions.create(model=nmodel, prompt=base, **kw, **GREEDY)
    cold_ext = nc.completions.create(model=nmodel, prompt=longer, temperature=0.8, seed=9, **kw)
    assert sha_of(cold) == sha_of(cold2) == sha_of(first)
    assert sha_of(cold_ext) == sha_of(ext)
    assert cold2.usage.prompt_tokens_details.cached_tokens == 0
    assert cold_ext.usage.prompt_tokens_details.cached_tokens == 0


def test_concurrent_equal_solo_without_prompt_cache(nocache):
    """concurrent == solo also when every prompt is prefilled from scratch."""
    oai = nocache.client()
    reqs = _mixed_requests(nocache.model_id(), 8)
    solo = [_send(oai, kw, st) for kw, st in reqs]
    together = run_concurrently([lambda kw=kw, st=st: _send(oai, kw, st) for kw, st in reqs])
    assert solo == together
