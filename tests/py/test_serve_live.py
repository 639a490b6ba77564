"""The live one-line throughput status of `weft serve` (SPEC §2.1): drawn on a TTY, redrawn in place, never cutting
an access-log line, ended with a newline at shutdown; absent when stderr is redirected or with WEFT_NO_LIVE=1.

Each test starts its own server (embedded stories260K) on a free port, with stderr on a pseudo-terminal (pty) or
a pipe. Binary: $WEFT_BIN, else build-break/weft, else build-test/weft.
"""
import fcntl
import os
import pty
import re
import signal
import struct
import subprocess
import termios
import threading
import time

import httpx
import pytest

from test_break_api import SANITIZER_MARKS, WEFT, free_port

pytestmark = pytest.mark.skipif(WEFT is None, reason="no weft binary (set WEFT_BIN)")

RATE = r"(-|\d+\.\d[kM]?)"
STATUS = re.compile(r"req (\d+) queued (\d+) \| streams (\d+)/(\d+) \| decode " + RATE + r" tok/s \| prefill " + RATE
                    + r" tok/s \| KV (\d+\.\d)%(?: \| cache hit (\S+)/(\S+) tok)?(?: \| drafts (\d+)/(\d+)(?: \d+%)?)?")
ACCESS = re.compile(r"weft: [0-9a-f]{20} (GET|POST) (\S+) (\d{3}) prompt=\d+ completion=\d+ cached=\d+ \d+\.\dms")
# A status draw: after "\r" (a redraw in place) or a line end (redrawn under a log line), up to its erase.
DRAW = re.compile(r"(?:^|[\r\n])(req \d+ [^\r\n\x1b]*)\x1b\[K")
PARALLEL = 4


def rate(s):
    if s == "-":
        return None
    mult = {"k": 1e3, "M": 1e6}.get(s[-1], 1)
    return float(s.rstrip("kM")) * mult


def screen(raw):
    """The rows a terminal shows for raw output, and the unfinished last row: "\\r" goes to column 0, ESC [ K erases
    to the end of the row, "\\n" ends the row (the pty's ONLCR puts a "\\r" before it)."""
    rows, row, col, i = [], [], 0, 0
    while i < len(raw):
        if raw.startswith("\x1b[K", i):
            del row[col:]
            i += 3
            continue
        ch = raw[i]
        if ch == "\r":
            col = 0
        elif ch == "\n":
            rows.append("".join(row))
            row, col = [], 0
        else:
            if col < len(row):
                row[col] = ch
            else:
                row.append(ch)
            col += 1
        i += 1
    return rows, "".join(row)


class Served:
    """`weft serve` with stderr on a pty ("pty") or a pipe ("pipe"); collects everything it writes there."""

    def __init__(self, stderr, env_extra=None):
        env = {k: v for k, v in os.environ.items() if k != "WEFT_NO_LIVE"}
        env["TERM"] = "xterm"  # a terminal with cursor control, whatever the runner's TERM (dumb gets plain lines)
        env.update(env_extra or {})
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.buf = bytearray()
        args = [WEFT, "serve", "--port", str(self.port), "--parallel", str(PARALLEL)]
        if stderr == "pty":
            master, slave = pty.openpty()
            fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 200, 0, 0))  # 200 columns
            self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=slave,
                                         env=env)
            os.close(slave)
            self.fd = master
        else:
            self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                         stderr=subprocess.PIPE, env=env)
            self.fd = self.proc.stderr.fileno()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        while True:
            try:
                d = os.read(self.fd, 65536)
            except OSError:  # EIO: the pty's last writer closed it
                break
            if not d:
                break
            self.buf.extend(d)

    def wait_ready(self, timeout=60):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            assert self.proc.poll() is None, self.text()
            try:
                if httpx.get(self.base + "/health", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        raise AssertionError("server did not become ready:\n" + self.text())

    def stop(self, sig=signal.SIGTERM):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            rc = self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = self.proc.wait()
        self.reader.join(10)
        if self.proc.stderr is None:
            os.close(self.fd)
        else:
            self.proc.stderr.close()
        return rc

    def text(self):
        return bytes(self.buf).decode(errors="replace")


@pytest.fixture
def served():
    started = []

    def make(stderr, env_extra=None):
        s = Served(stderr, env_extra)
        started.append(s)
        s.wait_ready()
        return s

    yield make
    for s in started:
        if s.proc.poll() is None:
            s.stop(signal.SIGKILL)


def load(base, seconds, clients=2, max_tokens=200):
    """Completions from `clients` threads for about `seconds` (at least one each); returns how many answered 200."""
    ok = []

    def client(k):
        end = time.monotonic() + seconds
        with httpx.Client(timeout=60) as cl:
            while True:
                body = {"prompt": "Once upon a time", "max_tokens": max_tokens, "ignore_eos": True}
                if k == 1:  # one client streams
                    body["stream"] = True
                    with cl.stream("POST", base + "/v1/completions", json=body) as r:
                        lines = [ln for ln in r.iter_lines() if ln]
                        ok.append(r.status_code == 200 and lines[-1] == "data: [DONE]")
                else:
                    ok.append(cl.post(base + "/v1/completions", json=body).status_code == 200)
                if time.monotonic() >= end:
                    break

    ts = [threading.Thread(target=client, args=(k,)) for k in range(clients)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert all(ok)
    return len(ok)


def completion_lines(rows):
    return [r for r in rows if ACCESS.fullmatch(r) and "POST /v1/completions 200" in r]


def test_live_status_on_tty(served):
    s = served("pty")
    n = load(s.base, 2.0)
    time.sleep(1.2)  # idle ticks: the rates fall back to 0
    rc = s.stop(signal.SIGINT)
    raw = s.text()
    assert rc == 0, raw[-3000:]
    assert not any(m in raw for m in SANITIZER_MARKS)

    draws = DRAW.findall(raw)
    assert len(draws) >= 5, raw[-3000:]  # about 3.2 s at one draw per 0.5 s, plus redraws under log lines
    parsed = []
    for d in draws:
        m = STATUS.fullmatch(d)
        assert m, f"status line not in the expected form: {d!r}"
        parsed.append(m)
    for m in parsed:
        req, queued, used, par = (int(m.group(i)) for i in range(1, 5))
        assert par == PARALLEL and 0 <= used <= par and queued >= 0 and req >= 0
        assert 0.0 <= float(m.group(7)) <= 100.0
        if m.group(10) is not None:
            assert 0 <= int(m.group(10)) <= int(m.group(11))  # accepted <= drafted
    decode = [rate(m.group(5)) for m in parsed if rate(m.group(5)) is not None]
    prefill = [rate(m.group(6)) for m in parsed if rate(m.group(6)) is not None]
    assert max(decode) > 0 and max(prefill) > 0, draws
    assert any(int(m.group(3)) >= 1 and int(m.group(1)) >= 1 for m in parsed), draws  # work was seen in flight
    assert rate(parsed[-1].group(5)) == 0.0 and parsed[-1].group(1) == "0"  # idle at the end, nothing in flight

    rows, tail = screen(raw)
    assert tail == "", f"the status line was not ended with a newline: {tail!r}"
    # One status row stays on screen, the final one, last; every other row is a whole log line.
    assert STATUS.fullmatch(rows[-1]), rows[-5:]
    for r in rows[:-1]:
        assert not STATUS.search(r) and "tok/s" not in r, f"status text left on a log row: {r!r}"
        assert r.startswith("weft: "), f"unexpected row: {r!r}"
        if "prompt=" in r:
            assert ACCESS.fullmatch(r), f"access line cut or garbled: {r!r}"
    assert len(completion_lines(rows)) == n
    assert "weft: SIGINT received, shutting down" in rows


@pytest.mark.parametrize("mode", ["pipe", "no_live"])
def test_no_status_when_redirected_or_disabled(served, mode):
    s = served("pipe") if mode == "pipe" else served("pty", {"WEFT_NO_LIVE": "1"})
    n = load(s.base, 1.2, max_tokens=50)
    time.sleep(0.8)  # ticks would have happened
    rc = s.stop()
    raw = s.text()
    assert rc == 0, raw[-3000:]
    assert "\x1b" not in raw and "tok/s" not in raw and not DRAW.search(raw), raw[-2000:]
    if mode == "pipe":
        assert "\r" not in raw  # the bytes are plain lines
    rows, tail = screen(raw)
    assert tail == ""
    assert all(r.startswith("weft: ") for r in rows), rows
    assert len(completion_lines(rows)) == n
