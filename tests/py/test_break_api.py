"""Adversarial tests of `weft serve`'s HTTP API on the embedded stories260K, written by a tester.

Covers peers.md §5's API bugs that apply to a text-completion model, request validation, streaming, concurrency
and cancellation. Known defects are strict xfails (they must flip when fixed); the rest are regression checks.
Binary: $WEFT_BIN, else build-break/weft, else build-test/weft. One server for the module; runs in ~20 s.
"""
import concurrent.futures as cf
import json
import os
import re
import signal
import socket
import subprocess
import time
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[2]


def _weft():
    for cand in (os.environ.get("WEFT_BIN"), ROOT / "build-break" / "weft", ROOT / "build-test" / "weft"):
        if cand and os.access(str(cand), os.X_OK):
            return str(cand)
    return None


WEFT = _weft()
pytestmark = pytest.mark.skipif(WEFT is None, reason="no weft binary (set WEFT_BIN)")
SANITIZER_MARKS = ("AddressSanitizer", "LeakSanitizer", "runtime error:")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, args, log, env=None):
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.log_path = log
        self.log = open(log, "wb")
        self.proc = subprocess.Popen([WEFT, "serve", *map(str, args), "--port", str(self.port)], stdout=self.log,
                                     stderr=subprocess.STDOUT, env=env)

    def wait_ready(self, timeout=60):
        """True once /health answers 200; False if the process exited first."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                return False
            try:
                if httpx.get(self.base + "/health", timeout=1).status_code == 200:
                    return True
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        raise RuntimeError("server did not become ready:\n" + self.text())

    def stop(self, sig=signal.SIGTERM):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        return self.proc.returncode

    def text(self):
        if not self.log.closed:
            self.log.flush()
        return Path(self.log_path).read_bytes().decode(errors="replace")


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    s = Server([], tmp_path_factory.mktemp("break_api") / "serve.log")
    assert s.wait_ready(), s.text()
    yield s
    rc = s.stop()
    log = s.text()
    assert rc == 0, log[-3000:]
    assert not any(m in log for m in SANITIZER_MARKS), log[-3000:]


@pytest.fixture
def c(srv):
    with httpx.Client(base_url=srv.base + "/v1", timeout=60) as cl:
        yield cl


def sse(resp):
    out = []
    for block in resp.text.split("\n\n"):
        for line in block.split("\n"):
            if line.startswith("data: "):
                p = line[6:]
                out.append(p if p == "[DONE]" else json.loads(p))
    return out


def joined(events, index=0, key="text"):
    return "".join((ch.get("delta", ch).get(key) or "") for e in events if isinstance(e, dict)
                   for ch in e.get("choices", []) if ch["index"] == index)


def running(srv):
    t = httpx.get(srv.base + "/metrics").text
    return int(re.search(r"^weft:num_requests_running (\d+)", t, re.M).group(1))


# ---------------------------------------------------------------- peers.md §5 checks (pass today)


@pytest.mark.parametrize("stop", [["DEFGHIJ"], ["girl"], [" was a", "little"], ["é", "\n"], ["🦙"]])
def test_stream_equals_nonstream_with_stop(c, stop):  # peers #3, #4
    b = {"prompt": "Once upon a time", "max_tokens": 40, "temperature": 1, "seed": 11, "stop": stop}
    ns = c.post("/completions", json=b).json()["choices"][0]
    ev = sse(c.post("/completions", json={**b, "stream": True}))
    assert joined(ev) == ns["text"]
    assert not any(s in ns["text"] for s in stop)
    fins = [ch["finish_reason"] for e in ev if isinstance(e, dict) for ch in e["choices"] if ch.get("finish_reason")]
    assert fins == [ns["finish_reason"]]


@pytest.mark.parametrize("opts,expect", [({"include_usage": True}, 1), ({}, 0), ({"include_usage": False}, 0), (None, 0)])
def test_include_usage_semantics(c, opts, expect):  # peers #5
    b = {"prompt": "Once", "max_tokens": 5, "stream": True, "temperature": 0}
    if opts is not None:
        b["stream_options"] = opts
    ev = sse(c.post("/completions", json=b))
    assert ev[-1] == "[DONE]"
    us = [i for i, e in enumerate(ev) if isinstance(e, dict) and e.get("usage")]
    assert len(us) == expect
    if expect:
        u = ev[us[0]]
        assert us[0] == len(ev) - 2 and u["choices"] == []
        assert u["usage"]["total_tokens"] == u["usage"]["prompt_tokens"] + u["usage"]["completion_tokens"] == 2 + 5


def test_n_accounting_and_stream_indices(c):  # peers #7
    b = {"prompt": "x", "n": 3, "max_tokens": 8, "ignore_eos": True, "temperature": 1, "seed": 7}
    r = c.post("/completions", json=b).json()
    assert [ch["index"] for ch in r["choices"]] == [0, 1, 2]
    assert r["usage"]["completion_tokens"] == 24
    ev = sse(c.post("/completions", json={**b, "stream": True}))
    fin = {}
    for e in ev:
        if isinstance(e, dict):
            for ch in e["choices"]:
                assert ch["index"] in (0, 1, 2)
                if ch.get("finish_reason"):
                    fin[ch["index"]] = fin.get(ch["index"], 0) + 1
    assert fin == {0: 1, 1: 1, 2: 1}
    assert [joined(ev, i) for i in range(3)] == [ch["text"] for ch in r["choices"]]


def test_completions_logprobs_lengths(c):  # peers #9
    lp = c.post("/completions", json={"prompt": "something", "logprobs": 1, "max_tokens": 3}).json()["choices"][0]["logprobs"]
    assert all(len(lp[k]) == 3 for k in ("tokens", "token_logprobs", "top_logprobs", "text_offset"))
    assert all(1 <= len(t) <= 2 for t in lp["top_logprobs"])


def test_logprobs_are_raw_whatever_the_bias(c):  # SPEC §5.1: logprobs of z before step 1
    b = {"prompt": "Once upon a time", "max_tokens": 1, "logprobs": 5, "temperature": 0}
    a = c.post("/completions", json=b).json()["choices"][0]["logprobs"]["top_logprobs"][0]
    z = c.post("/completions", json={**b, "logit_bias": {"300": 100}}).json()["choices"][0]["logprobs"]
    for tok, v in a.items():
        assert z["top_logprobs"][0][tok] == v
    assert z["token_logprobs"][0] < -5  # the forced token keeps its raw (low) logprob


@pytest.mark.parametrize("prompt", [[""], ""])
def test_empty_prompt_is_bos_only_and_server_survives(c, srv, prompt):  # peers #10
    r = c.post("/completions", json={"prompt": prompt, "max_tokens": 5})
    assert r.status_code == 200 and r.json()["usage"]["prompt_tokens"] == 1
    assert httpx.get(srv.base + "/health").status_code == 200


def test_empty_token_list_is_400_and_server_survives(c, srv):  # token ids are taken verbatim: no BOS added
    r = c.post("/completions", json={"prompt": [[]], "max_tokens": 5})
    assert r.status_code == 400 and r.json()["error"]["param"] == "prompt"
    assert c.post("/completions", json={"prompt": "Once", "max_tokens": 2}).status_code == 200


def test_max_tokens_zero_with_echo(c):  # peers #11 A
    r = c.post("/completions", json={"prompt": "Hi", "max_tokens": 0, "echo": True})
    assert r.status_code == 200 and r.json()["choices"][0]["text"] == "Hi"


def test_over_context_is_clean_400(c):  # peers #11 B
    r = c.post("/completions", json={"prompt": "a " * 10, "max_tokens": 512})
    e = r.json()["error"]
    assert r.status_code == 400 and e["code"] == "context_length_exceeded"
    assert "512" in e["message"] and "requested" in e["message"]


def test_disconnect_cancels_within_a_second(srv):  # peers #12
    with httpx.Client(timeout=30) as cl:
        with cl.stream("POST", srv.base + "/v1/completions",
                       json={"prompt": "Count", "max_tokens": 500, "n": 4, "ignore_eos": True, "stream": True}) as r:
            for line in r.iter_lines():
                if line.startswith("data:"):
                    break
    end = time.monotonic() + 1.0
    while running(srv) and time.monotonic() < end:
        time.sleep(0.02)
    assert running(srv) == 0


def test_concurrent_equals_solo_and_seed_in_burst(c, srv):  # peers #13, #14
    def one(i):
        r = httpx.post(srv.base + "/v1/completions", timeout=60,
                       json={"prompt": f"Repeat apple_{i}", "temperature": 0, "max_tokens": 48})
        return r.json()["weft"]["token_sha"]

    def seeded(_=None):
        r = httpx.post(srv.base + "/v1/completions", timeout=60,
                       json={"prompt": "Write a number:", "temperature": 1, "seed": 123, "max_tokens": 32})
        return r.json()["choices"][0]["text"]

    solo = [one(i) for i in range(8)]
    alone = seeded()
    with cf.ThreadPoolExecutor(32) as ex:
        conc = list(ex.map(one, list(range(8)) * 3))
        burst = list(ex.map(seeded, range(8)))
    assert conc == solo * 3
    assert burst == [alone] * 8


def test_streams_end_with_done_and_weft_object(c):
    ev = sse(c.post("/completions", json={"prompt": "Once", "max_tokens": 4, "stream": True}))
    assert ev[-1] == "[DONE]"
    last = [e for e in ev if isinstance(e, dict)][-1]
    assert last["choices"][0]["finish_reason"] == "length" and "token_sha" in last["weft"]


# ---------------------------------------------------------------- validation (pass today)


@pytest.mark.parametrize("field,value", [
    ("max_tokens", -1), ("max_tokens", "x"), ("temperature", -0.1), ("top_p", 1.5), ("top_k", 1.5), ("min_p", 2),
    ("seed", 1.5), ("stop", [5]), ("stop", [""]), ("n", 9), ("logprobs", 21), ("echo", "x"), ("stream", 1),
    ("logit_bias", {"99999": 1}), ("logit_bias", {"1": 101}), ("presence_penalty", 3), ("repetition_penalty", 0),
    ("prompt", [99999]), ("prompt", [[1.5]]), ("model", 5), ("stream_options", []),
])
def test_bad_field_is_400_naming_it(c, field, value):
    r = c.post("/completions", json={"prompt": "Once", "max_tokens": 2, field: value})
    assert r.status_code == 400, r.text
    e = r.json()["error"]
    assert e["type"] == "invalid_request_error" and e["param"] == field, e


@pytest.mark.parametrize("body", [b'{"prompt": "hi",', b"[1,2]", b"", b"null", b'{"prompt":"a\xff"}',
                                  b'{"prompt":"a","max_tokens":1,"max_tokens":2}', b'{"x":' + b"[" * 5000])
def test_malformed_bodies_are_400(c, srv, body):
    r = c.post("/completions", content=body)
    assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_request_error"
    assert httpx.get(srv.base + "/health").status_code == 200


def test_unknown_model_and_route(c, srv):
    r = c.post("/completions", json={"model": "gpt-4", "prompt": "a"})
    assert r.status_code == 404 and r.json()["error"]["code"] == "model_not_found"
    assert httpx.get(srv.base + "/v1/nothing").status_code == 404
    assert httpx.get(srv.base + "/v1/completions").status_code == 405


def test_body_over_limit_is_413(c):
    r = c.post("/completions", content=b'{"prompt":"' + b"a" * (33 << 20) + b'"}')
    assert r.status_code == 413


def test_tokenize_detokenize_roundtrip(srv):
    t = httpx.post(srv.base + "/tokenize", json={"content": "Once upon a time"}).json()
    assert t["tokens"][0] == 1 and t["count"] == len(t["tokens"])
    d = httpx.post(srv.base + "/v1/detokenize", json={"tokens": t["tokens"]}).json()
    assert d["content"] == "Once upon a time"
    assert httpx.post(srv.base + "/detokenize", json={"tokens": [512]}).status_code == 400


# ---------------------------------------------------------------- defects (strict xfail)


def test_text_offset_counts_characters(c):
    # seed 4 gives ', "Why don’t we have'; the token after '’' is at character 11, weft says 13
    ch = c.post("/completions", json={"prompt": "Nicky’s mom said", "max_tokens": 12, "temperature": 1, "seed": 4,
                                      "logprobs": 1}).json()["choices"][0]
    text, lp = ch["text"], ch["logprobs"]
    if text.isascii():
        pytest.skip("precondition lost: this seed no longer produces a non-ASCII character")
    offs = lp["text_offset"]
    assert offs[-1] < len(text)
    for tok, off in zip(lp["tokens"], offs):
        if "\ufffd" not in tok:
            assert text[off:off + len(tok)] == tok, (tok, off, text)


def test_top_p_zero_names_param(c):
    r = c.post("/completions", json={"prompt": "Once", "max_tokens": 2, "top_p": 0})
    assert r.status_code == 400
    assert r.json()["error"]["param"] == "top_p", r.text  # got param null, "top_p must be in (0, 1] (got 0)"


@pytest.mark.parametrize("field", ["seed", "max_tokens"])
def test_huge_integer_names_field(c, field):
    body = '{"prompt":"Once","%s":18446744073709551615}' % field
    r = c.post("/completions", content=body.encode())
    assert r.status_code == 400
    assert r.json()["error"]["param"] == field, r.text


def test_kv_cache_usage_metric_exported(c, srv):
    c.post("/completions", json={"prompt": "Once", "max_tokens": 2})
    assert "vllm:kv_cache_usage_perc" in httpx.get(srv.base + "/metrics").text
