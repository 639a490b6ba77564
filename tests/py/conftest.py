"""pytest harness for weft's OpenAI-compatible HTTP API (SPEC §3).

Starts `$WEFT_BIN serve [$WEFT_MODEL] --port <free port> $WEFT_SERVE_ARGS`, waits until GET /health answers
200, runs the tests, then sends SIGTERM and expects exit status 0. Without WEFT_BIN the suite is skipped.

    WEFT_BIN=build/weft /tmp/venv/bin/python -m pytest tests/py -q
    WEFT_BIN=build-server/test_server_fakeserve /tmp/venv/bin/python -m pytest tests/py -q   # fake model

Environment: WEFT_BIN (binary), WEFT_MODEL (model path; default: the built-in stories260K), WEFT_SERVE_ARGS
(extra serve options, shell-split), WEFT_START_TIMEOUT (seconds to wait for /health, default 120).
"""

import json
import os
import shlex
import signal
import socket
import subprocess
import time

import httpx
import pytest


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class WeftServer:
    """One `weft serve` process on a free loopback port."""

    def __init__(self, binary, log_path, extra=()):
        self.port = _free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        model = os.environ.get("WEFT_MODEL")
        self.cmd = [binary, "serve"] + ([model] if model else []) + ["--host", "127.0.0.1", "--port", str(self.port)]
        self.cmd += shlex.split(os.environ.get("WEFT_SERVE_ARGS", "")) + list(extra)
        self.log_path = log_path
        self.proc = None

    def start(self):
        self.log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(self.cmd, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + float(os.environ.get("WEFT_START_TIMEOUT", "120"))
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"weft serve exited with {self.proc.returncode}:\n{self.log_tail()}")
            try:
                if httpx.get(self.base + "/health", timeout=1).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        self.stop(signal.SIGKILL)
        raise RuntimeError(f"/health did not answer 200 in time:\n{self.log_tail()}")

    def stop(self, sig=signal.SIGTERM, timeout=60):
        """Signals the server and returns its exit status."""
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else None
        self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            return None
        finally:
            self.log.close()

    def log_tail(self, n=4000):
        try:
            with open(self.log_path, "rb") as f:
                return f.read()[-n:].decode(errors="replace")
        except OSError:
            return ""


@pytest.fixture(scope="session")
def weft_bin():
    b = os.environ.get("WEFT_BIN")
    if not b or not os.access(b, os.X_OK):
        pytest.skip("WEFT_BIN is not set to an executable weft binary")
    return b


@pytest.fixture(scope="session")
def server(weft_bin, tmp_path_factory):
    s = WeftServer(weft_bin, tmp_path_factory.mktemp("weft") / "serve.log").start()
    yield s
    rc = s.stop()
    assert rc == 0, f"weft serve exited with {rc} on SIGTERM:\n{s.log_tail()}"


@pytest.fixture
def make_server(weft_bin, tmp_path_factory):
    """Starts extra servers with their own options; stops them after the test."""
    started = []

    def make(*extra):
        s = WeftServer(weft_bin, tmp_path_factory.mktemp("weft") / "serve.log", extra).start()
        started.append(s)
        return s

    yield make
    for s in started:
        s.stop()


@pytest.fixture
def client(server):
    with httpx.Client(base_url=server.base + "/v1", timeout=120) as c:
        yield c


@pytest.fixture(scope="session")
def model_id(server):
    return httpx.get(server.base + "/v1/models").json()["data"][0]["id"]


def sse_events(resp):
    """The `data:` payloads of a streamed reply: dicts, and the final "[DONE]" string."""
    out = []
    for block in resp.text.split("\n\n"):
        for line in block.split("\n"):
            if line.startswith("data: "):
                payload = line[6:]
                out.append(payload if payload == "[DONE]" else json.loads(payload))
    return out


def stream_text(events, key="text", index=0):
    """Concatenated deltas of one choice (completions: key "text"; chat: "content" / "reasoning_content")."""
    parts = []
    for ev in events:
        if not isinstance(ev, dict):
            continue
        for ch in ev.get("choices", []):
            if ch["index"] != index:
                continue
            src = ch.get("delta", ch)
            if src.get(key):
                parts.append(src[key])
    return "".join(parts)
