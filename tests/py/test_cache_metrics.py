"""Prompt-cache memory stays within its budget (issue D): the /metrics gauges weft:prompt_cache_bytes and
weft:prompt_cache_budget_bytes, read after every request while distinct prompts push the cache into eviction;
replies stay those of a server without a cache (resumed == fresh)."""
import re

import httpx


def gauge(base, name):
    text = httpx.get(base + "/metrics", timeout=10).text
    m = re.search(rf"^weft:{name} (\S+)$", text, re.M)
    assert m, name
    return float(m.group(1))


def complete(base, prompt):
    r = httpx.post(base + "/v1/completions", json={"prompt": prompt, "max_tokens": 8, "temperature": 0.7,
                                                   "seed": 3}, timeout=60)
    assert r.status_code == 200, r.text
    body = r.json()
    return body["weft"]["token_sha"], body["usage"]["prompt_tokens_details"]["cached_tokens"]


def test_cache_budget_never_exceeded_and_replies_unchanged(make_server):
    budget_gib = 0.0001  # ~107 KB: a few stories260K snapshots, so eviction happens
    cached = make_server("--prompt-cache-gib", str(budget_gib))
    plain = make_server("--prompt-cache-gib", "0")
    prompts = [f"Once upon a time there was a {w} who liked to {v}." for w in ("cat", "dog", "bird", "fox")
               for v in ("run", "sing", "jump")]
    hits = 0
    for p in [q for q in prompts for _ in (0, 1)]:  # each prompt twice in a row: the resend resumes
        sha, n_cached = complete(cached.base, p)
        assert sha == complete(plain.base, p)[0]
        hits += n_cached > 0
        used, budget = gauge(cached.base, "prompt_cache_bytes"), gauge(cached.base, "prompt_cache_budget_bytes")
        assert budget == int(budget_gib * (1 << 30)) and used <= budget
    assert hits >= len(prompts) // 2
