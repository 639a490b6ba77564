"""The benchmark and check clients of tools/ run against `weft serve` on the embedded stories260K: the
concurrency benchmark's --alone and --serial checks pass at levels 1, 4 and 16 (issue B), the decode and
prefill benchmarks print their tables, and each exits non-zero where it must.

    WEFT_BIN=build-test/weft .venv/bin/python -m pytest -q tests/py/test_e2e_tools.py
"""

import subprocess
import sys

import pytest

from e2e_util import ROOT, serving


@pytest.fixture(scope="module")
def srv():
    with serving() as s:
        yield s


def tool(name, *args, timeout=300):
    return subprocess.run([sys.executable, str(ROOT / "tools" / name), *args], capture_output=True, text=True,
                          timeout=timeout)


@pytest.mark.parametrize("name", ["bench_decode.py", "bench_concurrency.py", "bench_prefill.py"])
def test_help(name):
    p = tool(name, "--help")
    assert p.returncode == 0
    for flag in ("--base-url", "--api-key", "--model"):
        assert flag in p.stdout


def test_concurrency_alone_and_serial(srv):
    p = tool("bench_concurrency.py", "--base-url", srv.base, "--levels", "1,4,16", "--requests", "16",
             "--max-tokens", "8:32", "--alone", "--serial")
    assert p.returncode == 0, p.stdout + p.stderr
    rows = [line for line in p.stdout.splitlines() if line.startswith("| ") and line[2].isdigit()]
    assert [r.split("|")[1].strip() for r in rows] == ["1", "4", "16"]
    for r in rows:
        cells = [c.strip() for c in r.strip("|").split("|")]
        assert cells[-2:] == ["ok", "ok"] and int(cells[2]) > 0


def test_decode(srv):
    p = tool("bench_decode.py", "--base-url", srv.base + "/v1", "--runs", "2", "--max-tokens", "16", "--model",
             "stories260K")
    assert p.returncode == 0, p.stdout + p.stderr
    assert "decode tok/s: median" in p.stdout and "TTFT ms: median" in p.stdout
    p = tool("bench_decode.py", "--base-url", srv.base, "--runs", "1", "--model", "nope")
    assert p.returncode == 1 and "404" in p.stderr


def test_prefill(srv):
    p = tool("bench_prefill.py", "--base-url", srv.base, "--sizes", "128,400")
    assert p.returncode == 0, p.stdout + p.stderr
    rows = [line for line in p.stdout.splitlines() if line.startswith("| ") and line[2].isdigit()]
    assert [r.split("|")[1].strip() for r in rows] == ["128", "400"]
    assert all(r.split("|")[3].strip() == "0" for r in rows), "cold prefill came from the prompt cache"
    p = tool("bench_prefill.py", "--base-url", srv.base, "--sizes", "2k")
    assert p.returncode == 1 and "--context" in p.stderr
