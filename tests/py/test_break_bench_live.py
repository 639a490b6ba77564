"""Adversarial tests of this session's additions, written by a tester: `weft bench --streams/--chunk`, the live
status line of `weft serve` on a terminal (and the weight-loading bar that shares it), the text access log with
hostile paths, and a chat request to a model without a chat template.

Known defects are strict xfails (they must flip when fixed); the rest are regression checks of defects fixed
here. Binary: $WEFT_BIN, else build-break/weft, else build-test/weft. Runs in about half a minute.
"""
import json
import os
import pty
import re
import signal
import socket
import struct
import subprocess
import threading
import time
from pathlib import Path

import fcntl
import httpx
import pytest
import termios

from test_break_api import SANITIZER_MARKS, WEFT, free_port

pytestmark = pytest.mark.skipif(WEFT is None, reason="no weft binary (set WEFT_BIN)")

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "data" / "fixtures"
ACCESS = re.compile(r"weft: [0-9a-f]{20} (GET|POST) (\S+) (\d{3}) prompt=\d+ completion=\d+ cached=\d+ \d+\.\dms")


def weft(*args, timeout=120, env=None):
    return subprocess.run([WEFT, *map(str, args)], capture_output=True, text=True, timeout=timeout, env=env,
                          errors="replace")


def table_row(stdout):
    """The data row of bench's markdown table, split into its cells."""
    rows = [r for r in stdout.splitlines() if r.startswith("| ") and not r.startswith("| model ")]
    assert len(rows) == 1, stdout
    return [c.strip() for c in rows[0].strip("|").split("|")]


def wait_healthy(base, timeout=60):
    """Polls /health until it answers 200 (the model is loaded) or the timeout passes."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            if httpx.get(base + "/health", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            time.sleep(0.05)


# ---------------------------------------------------------------- weft bench


def test_bench_gen_len_1_has_no_decode_rate():
    # One generated token is drawn by the prefill: there is no decode step, so no rate (was "0.0").
    p = weft("bench", "--gen-len", "1", "--streams", "2", "--prompt-len", "8", "--repeat", "1")
    assert p.returncode == 0, p.stderr
    cells = table_row(p.stdout)
    assert cells[4:] == ["-", "-"], cells
    assert float(cells[3]) > 0


def bench_rss(tmp_path, chunk):
    """(stdout, peak RSS in KiB) of a bench run on the qwen3 fixture with a 64-token prompt."""
    out = tmp_path / f"out{chunk}"
    with open(out, "w") as f:
        p = subprocess.Popen([WEFT, "bench", FIXTURES / "qwen3", "--chunk", str(chunk), "--prompt-len", "64",
                              "--gen-len", "4", "--repeat", "1"], stdout=f, stderr=subprocess.DEVNULL)
        _, status, usage = os.wait4(p.pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    return out.read_text(), usage.ru_maxrss


def test_bench_chunk_over_prompt_is_capped(tmp_path):
    # --chunk 65536 on a 64-token prompt sized activations for 65536 rows (GiBs on a real model; ~4x the peak
    # memory here) and printed "chunks of 65536"; one forward of the whole prompt is what runs.
    out, big = bench_rss(tmp_path, 65536)
    assert "chunks of 64)" in out, out
    _, small = bench_rss(tmp_path, 64)
    assert big < small * 1.5, (small, big)


def test_bench_honours_context():
    p = weft("bench", "--context", "64", "--prompt-len", "128")
    assert p.returncode == 2 and "context 64" in p.stderr, p.stderr  # --context was accepted and ignored
    p = weft("bench", "--context", "40", "--prompt-len", "30", "--gen-len", "10", "--repeat", "1")
    assert p.returncode == 0, p.stderr


@pytest.mark.parametrize("args", [["--streams", "-1"], ["--streams", "abc"], ["--streams", "257"],
                                  ["--streams", "2.5"], ["--streams", "1e3"], ["--chunk", "100000"],
                                  ["--chunk", "-5"], ["--streams="], ["--prompt-len", "500", "--gen-len", "100"]])
def test_bench_bad_values_are_one_line_errors(args):
    p = weft("bench", *args)
    assert p.returncode == 2 and p.stdout == "", (p.stdout, p.stderr)
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("weft"), p.stderr


@pytest.mark.parametrize("fixture", ["qwen3_5", "qwen3_5_moe-mlx-q4g64", "nemotron_h", "nemotron_h_moe"])
def test_bench_hybrid_streams(fixture):
    p = weft("bench", FIXTURES / fixture, "--streams", "3", "--chunk", "7", "--prompt-len", "20", "--gen-len", "5",
             "--repeat", "1")
    assert p.returncode == 0, p.stderr
    assert not any(m in p.stderr for m in SANITIZER_MARKS), p.stderr
    cells = table_row(p.stdout)
    assert cells[0] == fixture and len(cells) == 6 and all(float(c) > 0 for c in cells[3:]), cells
    assert "chunks of 7" in p.stdout and "3 streams" in p.stdout


def test_bench_memory_refusal_names_bench_flags(tmp_path):
    # The planner's message names serve's --parallel/--context; bench says which of its own flags to lower.
    d = tmp_path / "bigctx"
    d.mkdir()
    for f in (FIXTURES / "qwen3").iterdir():
        (d / f.name).symlink_to(f)
    cfg = json.loads((FIXTURES / "qwen3" / "config.json").read_text())
    cfg["max_position_embeddings"] = 1 << 22
    (d / "config.json").unlink()
    (d / "config.json").write_text(json.dumps(cfg))
    p = weft("bench", d, "--streams", "256", "--prompt-len", "2000000", "--gen-len", "2", "--repeat", "1")
    assert p.returncode == 2, p.stderr
    assert "--streams" in p.stderr and "--prompt-len" in p.stderr, p.stderr
    p = weft("bench", "--backend", "bogus")  # not a memory problem: no such hint
    assert p.returncode == 2 and "--streams" not in p.stderr, p.stderr


# ---------------------------------------------------------------- serve on a terminal


def serve_on_pty(args, env_extra=None, cols=120):
    """`weft serve` with stderr on a pty; returns (proc, base, buf, reader thread, master fd)."""
    env = {k: v for k, v in os.environ.items() if k != "WEFT_NO_LIVE"}
    env["TERM"] = "xterm"
    env.update(env_extra or {})
    port = free_port()
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, cols, 0, 0))
    proc = subprocess.Popen([WEFT, "serve", *map(str, args), "--port", str(port)], stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=slave, env=env)
    os.close(slave)
    buf = bytearray()

    def rd():
        while True:
            try:
                d = os.read(master, 65536)
            except OSError:
                break
            if not d:
                break
            buf.extend(d)

    t = threading.Thread(target=rd, daemon=True)
    t.start()
    return proc, f"http://127.0.0.1:{port}", buf, t, master


def stop_pty(proc, t, master):
    proc.send_signal(signal.SIGINT)
    rc = proc.wait(60)
    t.join(10)
    os.close(master)
    return rc


def screen(raw):
    from test_serve_live import screen as _screen
    return _screen(raw)


def sparse_model(d, intermediate):
    """A llama checkpoint of zeros (sparse file) big enough that loading it takes a moment."""
    src = FIXTURES / "llama"
    cfg = json.loads((src / "config.json").read_text())
    cfg["intermediate_size"] = intermediate
    d.mkdir()
    (d / "config.json").write_text(json.dumps(cfg))
    H, V, I = cfg["hidden_size"], cfg["vocab_size"], intermediate
    kv = cfg["num_key_value_heads"] * cfg["head_dim"]
    shapes = {"lm_head.weight": [V, H], "model.embed_tokens.weight": [V, H], "model.norm.weight": [H]}
    for layer in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{layer}."
        shapes.update({p + "input_layernorm.weight": [H], p + "post_attention_layernorm.weight": [H],
                       p + "mlp.down_proj.weight": [H, I], p + "mlp.gate_proj.weight": [I, H],
                       p + "mlp.up_proj.weight": [I, H], p + "self_attn.q_proj.weight": [H, H],
                       p + "self_attn.k_proj.weight": [kv, H], p + "self_attn.v_proj.weight": [kv, H],
                       p + "self_attn.o_proj.weight": [H, H]})
    header, off = {"__metadata__": {"format": "pt"}}, 0
    for k, s in shapes.items():
        n = 2 * s[0] * (s[1] if len(s) > 1 else 1)
        header[k] = {"dtype": "BF16", "shape": s, "data_offsets": [off, off + n]}
        off += n
    hb = json.dumps(header).encode()
    hb += b" " * (-len(hb) % 8)
    with open(d / "model.safetensors", "wb") as f:
        f.write(struct.pack("<Q", len(hb)))
        f.write(hb)
        f.truncate(8 + len(hb) + off)


def test_loading_bar_never_shares_a_row_with_access_lines(tmp_path):
    # The listener answers /health (503) while the weights load; the loading bar was written straight to stderr,
    # so a probe's access line landed after it: "loading weights [####   ]  16%weft: ... GET /health 503 ...".
    sparse_model(tmp_path / "big", 1 << 20)  # ~0.8 GB of holes: a fresh file reads in a second or more
    proc, base, buf, t, master = serve_on_pty([tmp_path / "big", "--parallel", "1", "--threads", "1"])
    loading = 0
    end = time.monotonic() + 120
    while time.monotonic() < end and proc.poll() is None:
        try:
            code = httpx.get(base + "/health", timeout=2).status_code
            if code == 200:
                break
            loading += code == 503
        except httpx.HTTPError:
            pass
        time.sleep(0.01)
    rc = stop_pty(proc, t, master)
    raw = bytes(buf).decode(errors="replace")
    assert rc == 0, raw[-2000:]
    if loading == 0 or "loading weights" not in raw:
        pytest.skip("precondition lost: the weights loaded before any probe was answered")
    rows, tail = screen(raw)
    assert tail == "", tail
    for r in rows:
        assert "loading weights" not in r, f"the loading bar was left on a row: {r!r}"
        assert r.startswith("weft: ") or r.startswith("req "), f"unexpected row: {r!r}"
        if "GET /health" in r:
            assert ACCESS.fullmatch(r), f"access line cut or garbled: {r!r}"
    assert sum("GET /health 503" in r for r in rows) == loading


def test_term_dumb_gets_plain_lines():
    # A TTY without cursor control (Emacs shell buffers, TERM=dumb): "\033[K" would show as text.
    proc, base, buf, t, master = serve_on_pty(["--parallel", "2"], {"TERM": "dumb"})
    try:
        wait_healthy(base)
        assert httpx.post(base + "/v1/completions", json={"prompt": "Once", "max_tokens": 20}).status_code == 200
        time.sleep(1.2)  # ticks would have drawn
    finally:
        rc = stop_pty(proc, t, master)
    raw = bytes(buf).decode(errors="replace")
    assert rc == 0 and "\x1b" not in raw and "tok/s" not in raw, raw[-2000:]


def test_zero_width_terminal_status_fits_80_columns():
    # A pty that reports 0 columns (serial console, `docker run -t` before a resize) got an unbounded status
    # line (~120 characters), which wraps on a real terminal so that every redraw leaves a row behind.
    proc, base, buf, t, master = serve_on_pty(["--parallel", "2"], {"COLUMNS": ""}, cols=0)
    try:
        wait_healthy(base)
        httpx.post(base + "/v1/completions", json={"prompt": "Once", "max_tokens": 50})
        time.sleep(1.2)
    finally:
        rc = stop_pty(proc, t, master)
    raw = bytes(buf).decode(errors="replace")
    assert rc == 0
    draws = re.findall(r"(?:^|[\r\n])(req \d+ [^\r\n\x1b]*)\x1b\[K", raw)
    assert draws, raw[-2000:]
    assert max(len(d) for d in draws) <= 79, max(draws, key=len)


# ---------------------------------------------------------------- HTTP API


@pytest.fixture(scope="module")
def text_log_server(tmp_path_factory):
    log = tmp_path_factory.mktemp("log") / "serve.log"
    port = free_port()
    with open(log, "wb") as f:
        proc = subprocess.Popen([WEFT, "serve", "--port", str(port)], stdout=f, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    wait_healthy(base)
    yield port, base, log
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(60) == 0


def raw_get(port, path):
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(b"GET " + path + b" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        data = b""
        while True:
            k = s.recv(65536)
            if not k:
                break
            data += k
    return data.split(b"\r\n", 1)[0]


@pytest.mark.parametrize("path,escaped", [
    (b"/brk%FFa", b"/brk\\xffa"),                       # invalid UTF-8 (decoded by the server)
    (b"/brk\xfe\xffb", b"/brk\\xfe\\xffb"),              # invalid UTF-8 sent raw
    (b"/brk%C3c", b"/brk\\xc3c"),                       # a lead byte without its continuation
    (b"/brk%E2%80%AEd", b"/brk\\xe2\\x80\\xaed"),        # U+202E RIGHT-TO-LEFT OVERRIDE (reorders the line)
    (b"/brk%C2%9B31me", b"/brk\\xc2\\x9b31me"),          # U+009B, CSI of 8-bit terminals
    (b"/brk%E2%80%A8f", b"/brk\\xe2\\x80\\xa8f"),        # U+2028 LINE SEPARATOR
    (b"/brk%C3%A9g", "/brké".encode() + b"g"),          # plain non-ASCII text stays readable
])
def test_text_access_log_escapes_unsafe_bytes(text_log_server, path, escaped):
    port, _, log = text_log_server
    assert raw_get(port, path).startswith(b"HTTP/1.1 404")
    time.sleep(0.2)
    lines = [ln for ln in log.read_bytes().split(b"\n") if b" /brk" in ln]
    line = [ln for ln in lines if escaped in ln]
    assert line, lines[-3:]
    line[-1].decode("utf-8")  # the log stays valid UTF-8
    assert ACCESS.fullmatch(line[-1].decode()), line[-1]


def test_chat_without_template_names_the_fix(text_log_server):
    # stories260K has a tokenizer but no chat template: text prompts work, so "use a token-id prompt" was wrong.
    _, base, _ = text_log_server
    r = httpx.post(base + "/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}]})
    assert r.status_code == 400
    err = r.json()["error"]
    assert err["param"] == "messages" and "--chat-template" in err["message"], err
    assert "token-id" not in err["message"], err


# ---------------------------------------------------------------- former defects (regressions now)


def test_no_tokenizer_top_logprobs_keep_every_alternative():
    port = free_port()
    proc = subprocess.Popen([WEFT, "serve", FIXTURES / "qwen3", "--port", str(port)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(base)
        r = httpx.post(base + "/v1/completions", json={"prompt": [1, 2, 3], "max_tokens": 2, "logprobs": 3})
        assert r.status_code == 200, r.text
        lp = r.json()["choices"][0]["logprobs"]
        # three alternatives each, named token_id:N (vLLM's form); the drawn token is added when it is not
        # among them, as OpenAI and vLLM do
        assert all(len(t) >= 3 and all(k.startswith("token_id:") for k in t) for t in lp["top_logprobs"]), lp
        assert all(tok.startswith("token_id:") for tok in lp["tokens"]), lp
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)


def test_sigint_while_loading_stops_the_load(tmp_path):
    sparse_model(tmp_path / "big", 1 << 20)
    port = free_port()
    proc = subprocess.Popen([WEFT, "serve", tmp_path / "big", "--port", str(port)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    base = f"http://127.0.0.1:{port}"
    loading = False
    end = time.monotonic() + 60
    while time.monotonic() < end and not loading and proc.poll() is None:
        try:
            code = httpx.get(base + "/health", timeout=2).status_code
            loading = code == 503
            if code == 200:
                break
        except httpx.HTTPError:
            time.sleep(0.01)
    if not loading:
        proc.kill()
        proc.wait()
        pytest.skip("precondition lost: no /health probe was answered while loading")
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert "weft: serving" not in err, err  # it finished loading and started serving after being told to stop
