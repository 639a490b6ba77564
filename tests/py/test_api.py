"""SPEC §3 over HTTP, model-agnostic (any model weft serves; the built-in stories260K by default), with the
recurring bugs of peers.md §5 as regression tests."""

import socket
import threading
import time

import httpx
import pytest

from conftest import sse_events, stream_text

T0 = {"temperature": 0, "seed": 1}


def test_health_and_models(server, client, model_id):
    assert httpx.get(server.base + "/health").json() == {"status": "ok"}
    assert httpx.get(server.base + "/v1/health").status_code == 200
    m = client.get("/models").json()["data"][0]
    assert m["context_length"] > 0 and m["max_model_len"] == m["context_length"]
    r = client.get("/models", headers={"X-Request-Id": "abc-123"})
    assert r.headers["x-request-id"] == "abc-123"
    assert client.get("/models").headers.get("x-request-id")


def test_completion_shape(client, model_id):
    r = client.post("/completions", json={"model": model_id, "prompt": "Once upon a time", "max_tokens": 8, **T0})
    assert r.status_code == 200
    j = r.json()
    assert j["object"] == "text_completion" and j["choices"][0]["finish_reason"] in ("stop", "length")
    u = j["usage"]
    assert u["total_tokens"] == u["prompt_tokens"] + u["completion_tokens"]
    assert 1 <= u["completion_tokens"] <= 8 and "cached_tokens" in u["prompt_tokens_details"]
    w = j["weft"]
    assert len(w["token_sha"]) == 12 and isinstance(w["seed"], int)


@pytest.mark.parametrize("sampling", [T0, {"temperature": 1, "seed": 123}])
def test_stream_equals_nonstream(client, sampling):
    """peers #1/#2: no U+FFFD and no prompt echo in deltas; concatenated deltas equal the non-streamed text."""
    body = {"prompt": "Once upon a time", "max_tokens": 32, **sampling}
    text = client.post("/completions", json=body).json()["choices"][0]["text"]
    ev = sse_events(client.post("/completions", json={**body, "stream": True}))
    assert ev[-1] == "[DONE]"
    streamed = stream_text(ev)
    assert streamed == text and "\ufffd" not in streamed
    assert "Once upon a time" not in streamed


@pytest.mark.parametrize("opts,usage", [(None, False), ({}, False), ({"include_usage": False}, False),
                                        ({"include_usage": True}, True)])
def test_include_usage(client, opts, usage):
    """peers #5: exactly one usage chunk, last before [DONE], choices [] — or none at all."""
    body = {"prompt": "Once upon a time", "max_tokens": 8, "stream": True, **T0}
    if opts is not None:
        body["stream_options"] = opts
    ev = sse_events(client.post("/completions", json=body))
    with_usage = [i for i, e in enumerate(ev) if isinstance(e, dict) and e.get("usage")]
    if not usage:
        assert with_usage == []
        return
    assert with_usage == [len(ev) - 2] and ev[-2]["choices"] == []
    u = ev[-2]["usage"]
    assert u["total_tokens"] == u["prompt_tokens"] + u["completion_tokens"]
    finals = [c for e in ev if isinstance(e, dict) for c in e["choices"] if c.get("finish_reason")]
    assert len(finals) == 1


def test_stop_string_not_leaked(client):
    """peers #3/#4: a stop string taken from the reply itself; streamed == non-streamed, no prefix shown."""
    base = {"prompt": "Once upon a time", "max_tokens": 48, "ignore_eos": True, **T0}
    full = client.post("/completions", json=base).json()["choices"][0]["text"]
    if len(full) < 12:
        pytest.skip("reply too short to pick a stop string")
    stop = full[len(full) // 2:len(full) // 2 + 3]
    body = {**base, "stop": [stop]}
    j = client.post("/completions", json=body).json()
    text = j["choices"][0]["text"]
    assert text == full[:full.index(stop)] and j["choices"][0]["finish_reason"] == "stop"
    ev = sse_events(client.post("/completions", json={**body, "stream": True}))
    assert stream_text(ev) == text


def test_n_choices(client):
    """peers #7: n=3 → indexes 0..2, completion_tokens counts every choice, each finishes once when streamed."""
    body = {"prompt": "x", "n": 3, "max_tokens": 8, "ignore_eos": True, "temperature": 1, "seed": 7}
    j = client.post("/completions", json=body).json()
    assert [c["index"] for c in j["choices"]] == [0, 1, 2]
    assert j["usage"]["completion_tokens"] == 24
    assert [c["seed"] for c in j["weft"]["choices"]] == [7, 8, 9]
    # each choice carries its own engine statistics; the top level is choice 0's (SPEC §3)
    for c in j["weft"]["choices"]:
        assert c["rounds"] >= 1 and 0 <= c["accepted"] <= c["drafted"], c
    assert {k: j["weft"][k] for k in ("rounds", "drafted", "accepted")} == {
        k: j["weft"]["choices"][0][k] for k in ("rounds", "drafted", "accepted")}
    ev = sse_events(client.post("/completions", json={**body, "stream": True}))
    fins = [c["index"] for e in ev if isinstance(e, dict) for c in e["choices"] if c.get("finish_reason")]
    assert sorted(fins) == [0, 1, 2]


def test_logprobs_completions(client):
    """peers #9: logprobs=1 gives tokens/token_logprobs/top_logprobs/text_offset of the reply's length."""
    j = client.post("/completions", json={"prompt": "something", "logprobs": 1, "max_tokens": 3,
                                          "ignore_eos": True, **T0}).json()
    lp = j["choices"][0]["logprobs"]
    n = j["usage"]["completion_tokens"]
    for k in ("tokens", "token_logprobs", "top_logprobs", "text_offset"):
        assert len(lp[k]) == n
    assert all(1 <= len(t) <= 2 for t in lp["top_logprobs"])


@pytest.mark.parametrize("body,param", [
    ({"prompt": "x", "top_p": 2}, "top_p"), ({"prompt": "x", "n": 9}, "n"), ({"prompt": "x", "n": 0}, "n"),
    ({"prompt": "x", "logprobs": 21}, "logprobs"), ({"prompt": "x", "temperature": "hot"}, "temperature"),
    ({"prompt": "x", "logit_bias": {"abc": 1}}, "logit_bias"), ({"prompt": 5}, "prompt"),
    ({"prompt": "x", "stop": [1]}, "stop"), ({"prompt": [10 ** 9]}, "prompt"),
])
def test_bad_fields(client, body, param):
    r = client.post("/completions", json=body)
    assert r.status_code == 400
    e = r.json()["error"]
    assert e["type"] == "invalid_request_error" and e["param"] == param and e["message"]


def test_errors(server, client):
    r = client.post("/completions", content=b"{\"prompt\":", headers={"content-type": "application/json"})
    assert r.status_code == 400 and set(r.json()["error"]) == {"message", "type", "param", "code"}
    r = client.post("/completions", json={"prompt": "x", "model": "no-such-model"})
    assert r.status_code == 404 and r.json()["error"]["code"] == "model_not_found"
    assert client.get("/nothing-here").status_code == 404
    ctx = client.get("/models").json()["data"][0]["context_length"]
    r = client.post("/completions", json={"prompt": "Hi", "max_tokens": ctx})
    assert r.status_code == 400 and r.json()["error"]["code"] == "context_length_exceeded"
    assert str(ctx) in r.json()["error"]["message"]
    r = client.post("/completions", content=b"x" * (33 << 20), headers={"content-type": "application/json"})
    assert r.status_code == 413


def test_edge_prompts_keep_server_alive(server, client):
    """peers #10/#11: empty prompt, echo with max_tokens 0; the server stays healthy."""
    r = client.post("/completions", json={"prompt": [""], "max_tokens": 5})
    assert r.status_code in (200, 400)
    r = client.post("/completions", json={"prompt": "Hi", "max_tokens": 0, "echo": True})
    assert r.status_code in (200, 400)
    if r.status_code == 200:
        assert r.json()["choices"][0]["text"] == "Hi"
    assert httpx.get(server.base + "/health").status_code == 200


def test_token_prompt_and_tokenize(server, client):
    toks = httpx.post(server.base + "/tokenize", json={"content": "Hello world"}).json()
    assert toks["count"] == len(toks["tokens"]) > 0
    text = httpx.post(server.base + "/detokenize", json={"tokens": toks["tokens"]}).json()["content"]
    assert "Hello world" in text
    a = client.post("/completions", json={"prompt": toks["tokens"], "max_tokens": 8, **T0}).json()
    b = client.post("/completions", json={"prompt": "Hello world", "max_tokens": 8, **T0}).json()
    assert a["weft"]["token_sha"] == b["weft"]["token_sha"]


def test_seed_reproducible_under_load(client):
    """peers #13/#14: a seeded reply is the same alone and inside a burst of other requests."""
    body = {"prompt": "Write a number:", "temperature": 1, "seed": 123, "max_tokens": 16, "return_token_ids": True}
    alone = client.post("/completions", json=body).json()["weft"]["token_ids"]
    results = [None] * 8

    def one(i):
        b = body if i == 3 else {"prompt": f"Story {i}:", "temperature": 1, "max_tokens": 16}
        results[i] = client.post("/completions", json=b).json()

    ts = [threading.Thread(target=one, args=(i,)) for i in range(8)]
    [t.start() for t in ts]
    [t.join() for t in ts]
    assert results[3]["weft"]["token_ids"] == alone


def _metric(server, name):
    for line in httpx.get(server.base + "/metrics").text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    return None


def test_disconnect_cancels(server, client):
    """peers #12: closing the socket after the first chunk ends the generation within a second."""
    ctx = client.get("/models").json()["data"][0]["context_length"]
    body = b'{"prompt":"Count to 100000","max_tokens":%d,"ignore_eos":true,"stream":true}' % (ctx - 32)
    s = socket.create_connection(("127.0.0.1", server.port), timeout=30)
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
    got = b""
    while b"data: " not in got:
        chunk = s.recv(4096)
        assert chunk, got.decode(errors="replace")
        got += chunk
    assert got.startswith(b"HTTP/1.1 200"), got.decode(errors="replace")
    s.close()
    deadline = time.monotonic() + 1.0
    running = None
    while time.monotonic() < deadline:
        running = _metric(server, "vllm:num_requests_running")
        if running == 0:
            break
        time.sleep(0.02)
    assert running == 0
    assert _metric(server, "weft:client_disconnections_total") >= 1


def test_metrics_names(server):
    text = httpx.get(server.base + "/metrics").text
    for name in ("vllm:num_requests_running", "vllm:prompt_tokens_total", "vllm:generation_tokens_total",
                 "vllm:time_to_first_token_seconds_bucket", "vllm:e2e_request_latency_seconds_count",
                 "weft:client_disconnections_total", "weft:prompt_tokens_cached_total"):
        assert name in text


def test_api_keys(make_server):
    s = make_server("--api-key", "k1", "--api-key", "k2")
    assert httpx.get(s.base + "/health").status_code == 200
    r = httpx.get(s.base + "/v1/models")
    assert r.status_code == 401 and r.json()["error"]["type"] == "authentication_error"
    assert httpx.get(s.base + "/v1/models", headers={"Authorization": "Bearer k2"}).status_code == 200
    assert httpx.get(s.base + "/v1/models", headers={"x-api-key": "k1"}).status_code == 200
    assert httpx.get(s.base + "/v1/models", headers={"Authorization": "Bearer k3"}).status_code == 401
    assert httpx.get(s.base + "/metrics").status_code == 401


def test_shutdown_ends_streams(make_server):
    """SIGTERM: a running stream ends with finish_reason cancelled, an error event and [DONE]; exit 0."""
    s = make_server()
    ctx = httpx.get(s.base + "/v1/models").json()["data"][0]["context_length"]
    events = []

    def read():
        with httpx.stream("POST", s.base + "/v1/completions", timeout=60,
                          json={"prompt": "Count", "max_tokens": ctx - 32, "ignore_eos": True, "stream": True}) as r:
            for line in r.iter_lines():
                if line.startswith("data: "):
                    events.append(line[6:])

    t = threading.Thread(target=read)
    t.start()
    deadline = time.monotonic() + 30
    while not events and time.monotonic() < deadline:
        time.sleep(0.01)
    assert s.stop() == 0
    t.join(30)
    assert events[-1] == "[DONE]"
    assert any('"finish_reason":"cancelled"' in e for e in events)
    assert any(e.startswith('{"error"') for e in events)
