"""The bad-input suite of issue B on the embedded stories260K: every malformed or out-of-range request gets its
named OpenAI error object before any work is done, and the server then answers a good request exactly as
before (same `weft.token_sha`). Mostly through the official `openai` client (which sends what it is given);
raw httpx where the client cannot produce the bytes (malformed JSON, oversized bodies, other headers).

    WEFT_BIN=build-test/weft .venv/bin/python -m pytest -q tests/py/test_e2e_bad_input.py
"""

import threading
import time

import httpx
import openai
import pytest

from e2e_util import GREEDY, serving, sha_of

GOOD = dict(prompt="Once upon a time", max_tokens=12, **GREEDY)


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


@pytest.fixture(scope="module")
def good_sha(oai, model):
    return sha_of(oai.completions.create(model=model, **GOOD))


@pytest.fixture
def still_good(srv, oai, model, good_sha):
    """Called after a bad request: the server is healthy and the good request gives the same tokens."""
    def check(client=None, mdl=None):
        assert httpx.get(srv.base + "/health", timeout=10).status_code == 200
        r = (client or oai).completions.create(model=mdl or model, **GOOD)
        assert sha_of(r) == good_sha and r.choices[0].finish_reason == "length"
    return check


def assert_error(e, status, param=None, code=None, etype="invalid_request_error"):
    assert e.status_code == status, e
    assert e.type == etype and e.message, e.body
    if param is not None:
        assert e.param == param, e.body
    if code is not None:
        assert e.code == code, e.body


def raw_error(r, status):
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/json")
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"} and err["message"]
    return err


# ---- malformed bodies ----

@pytest.mark.parametrize("body", [b'{"prompt":', b"", b"[1,2]", b'"text"', b'{"prompt":"a","prompt":"b"}',
                                  b'{"prompt":"a\xff"}', b"\x00\x01"])
def test_malformed_json(srv, still_good, body):
    with srv.http() as h:
        for route in ("/v1/completions", "/v1/chat/completions"):
            err = raw_error(h.post(route, content=body, headers={"content-type": "application/json"}), 400)
            assert err["type"] == "invalid_request_error"
    still_good()


def test_body_over_limit_413(srv, still_good):
    """The default limit is 32 MiB (there is no flag to lower it): a 33 MiB body is refused with 413."""
    with srv.http() as h:
        r = h.post("/v1/completions", content=b" " * (33 << 20), headers={"content-type": "application/json"})
        err = raw_error(r, 413)
        assert err["code"] == "request_too_large"
    still_good()


# ---- wrong field types and values ----

WRONG = [
    ({"temperature": "hot"}, "temperature"), ({"max_tokens": "10"}, "max_tokens"), ({"max_tokens": -1}, "max_tokens"),
    ({"stream": "yes"}, "stream"), ({"stop": [1]}, "stop"), ({"stop": 5}, "stop"), ({"seed": "x"}, "seed"),
    ({"logit_bias": {"abc": 1}}, "logit_bias"), ({"logit_bias": {"512": 1}}, "logit_bias"),
    ({"logit_bias": [1]}, "logit_bias"), ({"n": 1.5}, "n"), ({"n": 0}, "n"), ({"n": 9}, "n"),
    ({"top_p": 2}, "top_p"), ({"top_p": -0.1}, "top_p"), ({"temperature": -1}, "temperature"),
    ({"top_k": 1.5}, "top_k"), ({"min_p": 2}, "min_p"), ({"presence_penalty": 3}, "presence_penalty"),
    ({"frequency_penalty": "a"}, "frequency_penalty"), ({"repetition_penalty": 0}, "repetition_penalty"),
    ({"logprobs": 21}, "logprobs"), ({"logprobs": "x"}, "logprobs"), ({"echo": "no"}, "echo"),
    ({"ignore_eos": 1}, "ignore_eos"), ({"stream_options": 1, "stream": True}, "stream_options"),
    ({"draft": "no"}, "draft"), ({"model": 5}, "model"),
]


@pytest.mark.parametrize("fields,param", WRONG, ids=[p + "-" + str(i) for i, (_, p) in enumerate(WRONG)])
def test_wrong_field(oai, model, still_good, fields, param):
    with pytest.raises(openai.BadRequestError) as ei:
        oai.completions.create(model=model, prompt="x", max_tokens=4, extra_body=fields)
    assert_error(ei.value, 400, param=param)
    still_good()


@pytest.mark.parametrize("prompt", [5, [1.5], [[1, 2], "a"], {"a": 1}, [None], True])
def test_wrong_prompt_shape(oai, model, still_good, prompt):
    with pytest.raises(openai.BadRequestError) as ei:
        oai.completions.create(model=model, prompt=prompt, max_tokens=4)
    assert_error(ei.value, 400, param="prompt")
    still_good()


def test_missing_prompt(srv, still_good):
    with srv.http() as h:
        err = raw_error(h.post("/v1/completions", json={"max_tokens": 4}), 400)
        assert err["param"] == "prompt"
    still_good()


def test_bad_request_while_streaming_is_json_before_the_stream(srv, oai, model, still_good):
    """Every check that can be made before a stream opens is made before it opens (a plain 400, no SSE)."""
    with srv.http() as h:
        r = h.post("/v1/completions", json={"prompt": "x", "top_p": 2, "stream": True})
        assert raw_error(r, 400)["param"] == "top_p"
    with pytest.raises(openai.BadRequestError):
        oai.completions.create(model=model, prompt="x", top_p=2, stream=True)
    still_good()


# ---- context, model, route ----

def test_max_tokens_over_context(srv, oai, model, still_good):
    """400 context_length_exceeded naming the window and the request, before any work (no prompt token is
    counted in /metrics)."""
    with srv.http() as h:
        n_prompt = h.post("/tokenize", json={"content": "Hello there"}).json()["count"]
    ctx = 512
    before = srv.metric("vllm:prompt_tokens_total")
    for mt in (ctx - n_prompt + 1, ctx, 10 ** 6):
        t0 = time.monotonic()
        with pytest.raises(openai.BadRequestError) as ei:
            oai.completions.create(model=model, prompt="Hello there", max_tokens=mt)
        assert time.monotonic() - t0 < 5
        assert_error(ei.value, 400, param="max_tokens", code="context_length_exceeded")
        assert str(ctx) in ei.value.message and str(n_prompt + mt) in ei.value.message
    with pytest.raises(openai.BadRequestError) as ei:  # the prompt alone fills the window
        oai.completions.create(model=model, prompt="go " * 600)
    assert_error(ei.value, 400, param="prompt", code="context_length_exceeded")
    assert srv.metric("vllm:prompt_tokens_total") == before
    ok = oai.completions.create(model=model, prompt="Hello there", max_tokens=ctx - n_prompt, stop=".",
                                temperature=0)  # exactly fills the window: accepted
    assert ok.choices[0].finish_reason == "stop"
    still_good()


def test_unknown_model_404_and_route(srv, oai, still_good):
    with pytest.raises(openai.NotFoundError) as ei:
        oai.completions.create(model="no-such-model", prompt="x", max_tokens=4)
    assert ei.value.status_code == 404 and ei.value.code == "model_not_found"
    with srv.http() as h:
        assert raw_error(h.get("/v1/nothing-here"), 404)
        assert raw_error(h.get("/v1/completions"), 405)
    still_good()


# ---- prompts: empty, out of vocabulary ----

def test_empty_prompt_rules(oai, model, still_good):
    """stories260K adds BOS: an empty text prompt is just BOS; a prompt with no token at all is a 400."""
    for p in ("", [""]):
        r = oai.completions.create(model=model, prompt=p, max_tokens=5, **GREEDY)
        assert r.usage.prompt_tokens == 1 and r.usage.completion_tokens >= 1
    for p in ([], [[]], [[1, 2], []]):
        with pytest.raises(openai.BadRequestError) as ei:
            oai.completions.create(model=model, prompt=p, max_tokens=5)
        assert_error(ei.value, 400, param="prompt")
    still_good()


@pytest.mark.parametrize("prompt", [[512], [1, 2, -1], [1, 2 ** 31], [[1, 2], [1, 600]]])
def test_token_ids_out_of_vocabulary(oai, model, still_good, prompt):
    with pytest.raises(openai.BadRequestError) as ei:
        oai.completions.create(model=model, prompt=prompt, max_tokens=4)
    assert_error(ei.value, 400, param="prompt")
    assert "vocabulary" in ei.value.message or "integer" in ei.value.message
    still_good()


def test_n_limits(oai, model, still_good):
    r = oai.completions.create(model=model, prompt="x", n=8, max_tokens=3, temperature=1, seed=3)
    assert [c.index for c in r.choices] == list(range(8))
    for n in (0, 9):
        with pytest.raises(openai.BadRequestError) as ei:
            oai.completions.create(model=model, prompt="x", n=n, max_tokens=3)
        assert_error(ei.value, 400, param="n")
    # a list prompt is a batch: 3 prompts x n=3 are 9 choices, prompt-major
    r = oai.completions.create(model=model, prompt=["a", "b", "c"], n=3, max_tokens=3, temperature=1, seed=3,
                               extra_body={"ignore_eos": True})
    assert [c.index for c in r.choices] == list(range(9)) and r.usage.completion_tokens == 27
    assert len(r.model_extra["weft"]["choices"]) == 9
    still_good()


def test_tokenize_bad_input(srv, still_good):
    with srv.http() as h:
        assert raw_error(h.post("/tokenize", content=b"{"), 400)
        assert raw_error(h.post("/tokenize", json={"content": 5}), 400)
        assert raw_error(h.post("/detokenize", json={"tokens": [1, 99999]}), 400)
        assert raw_error(h.post("/detokenize", json={"tokens": "abc"}), 400)
    still_good()


# ---- API keys ----

def test_api_keys(still_good):
    with serving(None, "--api-key", "sk-one", "--api-key", "sk-two") as s:
        model = httpx.get(s.base + "/v1/models", headers={"Authorization": "Bearer sk-two"}).json()["data"][0]["id"]
        assert httpx.get(s.base + "/health").status_code == 200  # always open
        for headers in ({}, {"Authorization": "Bearer sk-three"}, {"x-api-key": "sk-on"}, {"Authorization": "sk-one"}):
            r = httpx.post(s.base + "/v1/completions", json={"prompt": "x", "max_tokens": 2}, headers=headers)
            assert raw_error(r, 401)["type"] == "authentication_error"
        with pytest.raises(openai.AuthenticationError) as ei:
            s.client(api_key="wrong").completions.create(model=model, **GOOD)
        assert ei.value.status_code == 401
        good = s.client(api_key="sk-one").completions.create(model=model, **GOOD)  # Bearer
        r = httpx.post(s.base + "/v1/completions", json={"model": model, **GOOD}, headers={"x-api-key": "sk-two"},
                       timeout=120)
        assert r.status_code == 200 and r.json()["weft"]["token_sha"] == sha_of(good)
    still_good()


# ---- full queue ----

def test_full_queue_503(still_good):
    """--parallel 1 --max-queue 1: one running, one waiting, the third gets 503 server_busy with Retry-After;
    the waiting one then runs normally."""
    with serving(None, "--parallel", "1", "--max-queue", "1", "--context", "4096") as s:
        oai = s.client()
        model = s.model_id()
        ref = sha_of(oai.completions.create(model=model, **GOOD))
        waiting = {}
        with httpx.stream("POST", s.base + "/v1/completions", timeout=120,
                          json={"prompt": "Count", "max_tokens": 4000, "ignore_eos": True, "stream": True}) as slow:
            lines = slow.iter_lines()
            assert next(line for line in lines if line.startswith("data: "))
            t = threading.Thread(target=lambda: waiting.update(r=oai.completions.create(model=model, **GOOD)))
            t.start()
            deadline = time.monotonic() + 10
            while s.metric("vllm:num_requests_waiting") != 1 and time.monotonic() < deadline:
                time.sleep(0.01)
            assert s.metric("vllm:num_requests_waiting") == 1
            r = httpx.post(s.base + "/v1/completions", json={"prompt": "x", "max_tokens": 2}, timeout=30)
            err = raw_error(r, 503)
            assert err["code"] == "server_busy" and int(r.headers["retry-after"]) >= 1
            with pytest.raises(openai.APIStatusError) as ei:
                oai.completions.create(model=model, prompt="x", max_tokens=2)
            assert ei.value.status_code == 503
        t.join(60)  # the slow stream is closed: the waiting request runs
        assert sha_of(waiting["r"]) == ref
        assert sha_of(oai.completions.create(model=model, **GOOD)) == ref
    still_good()
