"""Adversarial tests of `weft serve` start-up options, API keys, access logs and signals, written by a tester.

Each test starts its own server (embedded stories260K) on a free port. Known defects are strict xfails (they must
flip when fixed); the rest are regression checks. Binary: $WEFT_BIN, else build-break/weft, else build-test/weft.
"""
import json
import os
import signal
import threading
import time
from pathlib import Path

import httpx
import pytest

from test_break_api import SANITIZER_MARKS, WEFT, Server, sse

pytestmark = pytest.mark.skipif(WEFT is None, reason="no weft binary (set WEFT_BIN)")


@pytest.fixture
def start(tmp_path):
    started = []

    def make(*args, env=None):
        s = Server(args, tmp_path / f"serve{len(started)}.log", env=env)
        started.append(s)
        return s

    yield make
    for s in started:
        s.stop(signal.SIGKILL)


def accepted(s):
    """Whether the server came up with these options (True) or refused them and exited (False, exit 2)."""
    if s.wait_ready():
        return True
    assert s.proc.returncode == 2, s.text()
    return False


# ---------------------------------------------------------------- regression checks (pass today)


def test_api_keys_accepted_forms(start, tmp_path):
    kf = tmp_path / "keys"
    kf.write_text("filekey\r\n# a comment\n")
    kf.chmod(0o600)
    s = start("--api-key", "k1", "--api-key-file", kf)
    assert s.wait_ready()
    u = s.base + "/v1/models"
    assert httpx.get(u).status_code == 401
    assert httpx.get(u, headers={"Authorization": "Bearer k1"}).status_code == 200
    assert httpx.get(u, headers={"x-api-key": "filekey"}).status_code == 200
    assert httpx.get(u, headers={"Authorization": "Bearer k"}).status_code == 401
    assert httpx.get(u, headers={"Authorization": "Bearer # a comment"}).status_code == 401
    assert httpx.get(s.base + "/health").status_code == 200
    assert httpx.get(s.base + "/metrics").status_code == 401
    assert s.stop() == 0


def test_api_key_file_mode_checked(start, tmp_path):
    kf = tmp_path / "keys"
    kf.write_text("k\n")
    kf.chmod(0o644)
    s = start("--api-key-file", kf)
    assert not accepted(s) and "chmod 600" in s.text()


def test_sigint_mid_stream_cancels_and_exits_0(start):
    s = start("--parallel", "1")
    assert s.wait_ready()
    got, first = {}, threading.Event()

    def streamer():
        with httpx.Client(timeout=60) as cl:
            with cl.stream("POST", s.base + "/v1/completions",
                           json={"prompt": "Once", "max_tokens": 500, "ignore_eos": True, "stream": True}) as r:
                lines = []
                for ln in r.iter_lines():
                    if ln:
                        lines.append(ln)
                        first.set()
                got["lines"] = lines

    def queued():
        try:
            got["queued"] = httpx.post(s.base + "/v1/completions", timeout=60, json={"prompt": "Twice", "max_tokens": 5})
        except httpx.HTTPError as e:  # the listener may already be closed
            got["queued"] = e

    t1 = threading.Thread(target=streamer)
    t1.start()
    assert first.wait(30)
    t2 = threading.Thread(target=queued)
    t2.start()
    time.sleep(0.1)  # let the second request queue behind the stream (--parallel 1)
    rc = s.stop(signal.SIGINT)
    t1.join()
    t2.join()
    assert rc == 0, s.text()[-2000:]
    assert not any(m in s.text() for m in SANITIZER_MARKS)
    lines = got["lines"]
    assert lines[-1] == "data: [DONE]"
    if '"cancelled"' in "".join(lines):  # cut by the signal: a cancelled chunk, then one error event naming shutdown
        assert '"finish_reason":"cancelled"' in lines[-3] and '"shutting_down"' in lines[-2]
    q = got["queued"]
    if isinstance(q, httpx.Response):
        assert q.status_code in (200, 503)
        if q.status_code == 503:
            assert q.headers.get("retry-after") and q.json()["error"]["code"] == "shutting_down"


@pytest.mark.parametrize("args", [("--max-tokens", "-1"), ("--threads", "-2"), ("--context", "-1"), ("--max-queue", "-1"),
                                  ("--parallel", "0"), ("--backend", "gpu")])
def test_bad_serve_counts_refused(start, args):
    s = start(*args)
    assert not accepted(s)
    assert s.text().count("\n") <= 1 and not any(m in s.text() for m in SANITIZER_MARKS)


# ---------------------------------------------------------------- defects (strict xfail)


def test_key_file_with_leading_blanks_shuts_down_cleanly(start, tmp_path):
    kf = tmp_path / "keys"
    kf.write_text("  key2  \n")
    kf.chmod(0o600)
    s = start("--api-key-file", kf)
    assert s.wait_ready()
    assert httpx.get(s.base + "/v1/models", headers={"Authorization": "Bearer key2"}).status_code == 200
    rc = s.stop()
    log = s.text()
    assert not any(m in log for m in SANITIZER_MARKS), log[-1500:]  # ASan: attempting free on address which was not malloc()-ed
    assert rc == 0


def test_key_ring_bounds(start, tmp_path):
    kf = tmp_path / "keys"
    kf.write_text("".join(f"key{i}\n" for i in range(64)))
    kf.chmod(0o600)
    s = start("--api-key-file", kf, env={**os.environ, "WEFT_API_KEY": ","})
    up = accepted(s)
    if up:
        assert httpx.get(s.base + "/v1/models", headers={"Authorization": "Bearer key63"}).status_code == 200
        assert s.stop() == 0
    log = s.text()
    assert not any(m in log for m in SANITIZER_MARKS), log[-1500:]  # UBSan: index 64 out of bounds for 'char *[64]'


@pytest.mark.parametrize("how", ["flag", "env", "file"])
def test_empty_api_key_does_not_open_the_server(start, tmp_path, how):
    kf = tmp_path / "keys"
    kf.write_text("\n\n")
    kf.chmod(0o600)
    args = {"flag": ("--api-key", ""), "env": (), "file": ("--api-key-file", kf)}[how]
    env = {**os.environ, "WEFT_API_KEY": ","} if how == "env" else None
    s = start(*args, env=env)
    if accepted(s):  # either refuse to start, or serve with auth on (and then no key can pass)
        assert httpx.get(s.base + "/v1/models").status_code == 401


@pytest.mark.parametrize("args", [
    ("--prompt-cache-gib", "-1"),   # becomes a 17592186043392 MiB budget (negative double cast to size_t)
    ("--prompt-cache-gib", "nan"),
    ("--log-format", "xml"),
    ("--shutdown-grace", "-1"),
    ("--max-queue", "-1"),
])
def test_invalid_serve_option_refused(start, args):
    s = start(*args)
    assert not accepted(s), s.text()[:300]


def test_json_access_log_stays_json(start):
    s = start("--log-format", "json")
    assert s.wait_ready()
    httpx.get(s.base + '/v1/x%22%2C%22status%22%3A200%0Aforged')
    s.stop()
    lines = [ln for ln in s.text().splitlines() if not ln.startswith("weft: ")]
    assert lines
    for ln in lines:
        json.loads(ln)


def test_text_access_log_cannot_be_forged(start):
    s = start()
    assert s.wait_ready()
    httpx.get(s.base + "/v1/x%0Aweft:%20FORGED%20200")
    s.stop()
    assert not any(ln.startswith("weft: FORGED") for ln in s.text().splitlines())


def test_template_error_message_not_doubled(start, tmp_path):
    t = tmp_path / "t.jinja"
    t.write_text('{% for m in messages %}{% if loop.index0 > 0 and m.role == messages[loop.index0 - 1].role %}'
                 '{{ raise_exception("roles must alternate") }}{% endif %}{{ m.role }}: {{ m.content }}\n'
                 '{% endfor %}assistant:')
    s = start("--chat-template", t)
    assert s.wait_ready()
    msgs = [{"role": "system", "content": "s"}, {"role": "assistant", "content": "a"}, {"role": "assistant", "content": "b"}]
    for stream in (False, True):
        r = httpx.post(s.base + "/v1/chat/completions", json={"messages": msgs, "max_tokens": 3, "stream": stream})
        assert r.status_code == 400 and "roles must alternate" in r.text  # a clean 400 before the stream opens
    ok = httpx.post(s.base + "/v1/chat/completions", json={"messages": msgs[:2], "max_tokens": 3})
    assert ok.status_code == 200  # the template is not poisoned
    assert "chat template: chat template" not in r.json()["error"]["message"]


def test_empty_token_prompt_message_is_true(start):
    s = start()
    assert s.wait_ready()
    assert httpx.post(s.base + "/v1/completions", json={"prompt": "", "max_tokens": 1}).json()["usage"]["prompt_tokens"] == 1
    r = httpx.post(s.base + "/v1/completions", json={"prompt": [[]], "max_tokens": 1})
    assert r.status_code == 400
    assert "adds no BOS" not in r.json()["error"]["message"]


def test_multi_choice_request_on_small_queue(start):
    s = start("--parallel", "1", "--max-queue", "2")
    assert s.wait_ready()
    r = httpx.post(s.base + "/v1/completions", json={"prompt": "a", "max_tokens": 300, "n": 4, "ignore_eos": True},
                   timeout=60)
    # an idle server must either serve it (queueing choices) or say it can never fit (400 naming n); a 503 with
    # Retry-After ("3 requests running or queued (limit 3)") invites retries that can never succeed
    assert r.status_code in (200, 400), r.text
    if r.status_code == 400:
        assert r.json()["error"]["param"] == "n"


def test_banner_names_mtp_drafts(start):
    fixture = Path(__file__).resolve().parents[1] / "data" / "fixtures" / "qwen3_5"  # has an mtp.* head
    s = start(fixture)
    assert s.wait_ready()
    j = httpx.post(s.base + "/v1/completions", json={"prompt": list(range(1, 50)), "max_tokens": 20, "temperature": 0,
                                                      "ignore_eos": True}).json()
    assert j["weft"]["drafted"] > 0  # the head proposes drafts on a prompt copy drafts cannot match
    banner = next(ln for ln in s.text().splitlines() if "serving" in ln)
    assert "mtp" in banner.lower(), banner
