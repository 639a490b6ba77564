#!/usr/bin/env python3
"""Cold-prefill benchmark against a running `weft serve`: exact token-id prompts of 2k/8k/32k tokens.

Each run sends one /v1/completions request whose prompt is a list of N token ids (max_tokens 1, greedy),
fresh for every run (random ids drawn from the ids of a tokenized sample text, or from 0..--vocab−1 when the
model has no tokenizer), so nothing comes from the prompt cache. Reports the server's prefill time
(`weft.prefill_seconds`: admission → first token) as prefill tok/s over the uncached prompt tokens, and the
client's wall time. The server's --context must hold N + 1 tokens; larger sizes are refused up front.

    weft serve MODEL --context 33000 --port 8080 &
    python3 tools/bench_prefill.py --sizes 2k,8k,32k --runs 2

Exit status: 0; 1 when a request fails or a size does not fit the server's context.
"""

import argparse
import os
import random
import sys
import time

import httpx

SAMPLE = ("Once upon a time, in a small village by the sea, there lived an old fisherman and his clever "
          "granddaughter. Every morning they sailed out past the lighthouse, counted the gulls, mended the nets and "
          "told each other stories about whales, storms, stars, numbers 0123456789 and faraway cities.")


def default_key():
    return os.environ.get("WEFT_API_KEY", "").split(",")[0].strip() or os.environ.get("OPENAI_API_KEY") or None


def parse_size(s):
    s = s.strip().lower()
    return int(float(s[:-1]) * 1024) if s.endswith("k") else int(s)


def id_pool(client, vocab):
    """Token ids known to be valid: the sample text tokenized by the server, else 0..vocab-1."""
    r = client.post("/tokenize", json={"content": SAMPLE, "add_special_tokens": False})
    if r.status_code == 200 and r.json().get("tokens"):
        return sorted(set(r.json()["tokens"]))
    return list(range(vocab))


def main(argv=None):
    head, _, rest = __doc__.partition("\n\n")
    ap = argparse.ArgumentParser(description=head, epilog=rest, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base-url", default="http://127.0.0.1:8080", help="server root (default %(default)s)")
    ap.add_argument("--api-key", default=default_key(), help="API key (default: $WEFT_API_KEY or $OPENAI_API_KEY)")
    ap.add_argument("--model", help="model id (default: the first of /v1/models)")
    ap.add_argument("--sizes", default="2k,8k,32k", help="prompt lengths in tokens, k = 1024 (default %(default)s)")
    ap.add_argument("--runs", type=int, default=1, help="runs per size (default %(default)s)")
    ap.add_argument("--vocab", type=int, default=1000,
                    help="ids 0..VOCAB-1 when the model has no tokenizer (default %(default)s)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the random prompts (default %(default)s)")
    ap.add_argument("--timeout", type=float, default=3600, help="seconds per request (default %(default)s)")
    args = ap.parse_args(argv)
    sizes = [parse_size(s) for s in args.sizes.split(",") if s.strip()]
    base = args.base_url.rstrip("/").removesuffix("/v1")
    headers = {"Authorization": f"Bearer {args.api_key}"} if args.api_key else {}
    rng = random.Random(args.seed ^ time.time_ns())
    with httpx.Client(base_url=base, headers=headers, timeout=args.timeout) as client:
        try:
            m = client.get("/v1/models").raise_for_status().json()["data"][0]
            model = args.model or m["id"]
            ctx = m.get("context_length") or m.get("max_model_len")
            too_long = [n for n in sizes if ctx and n + 1 > ctx]
            if too_long:
                print(f"bench_prefill: sizes {too_long} do not fit the server's context of {ctx} tokens: restart "
                      f"weft serve with --context {max(too_long) + 1} or more", file=sys.stderr)
                return 1
            pool = id_pool(client, args.vocab)
            print(f"model {model}, context {ctx}, base {base}")
            hdr = ("tokens", "run", "cached", "prefill s", "prefill tok/s", "wall s", "wall tok/s")
            print("| " + " | ".join(hdr) + " |")
            print("|" + "---|" * len(hdr))
            for n in sizes:
                for run in range(args.runs):
                    prompt = [rng.choice(pool) for _ in range(n)]
                    t0 = time.perf_counter()
                    r = client.post("/v1/completions", json={"model": model, "prompt": prompt, "max_tokens": 1,
                                                             "temperature": 0})
                    wall = time.perf_counter() - t0
                    if r.status_code != 200:
                        raise RuntimeError(f"HTTP {r.status_code} at {n} tokens: {r.text[:300]}")
                    j = r.json()
                    u = j["usage"]
                    cached = (u.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
                    pf = (j.get("weft") or {}).get("prefill_seconds")
                    fresh = u["prompt_tokens"] - cached
                    print(f"| {u['prompt_tokens']} | {run} | {cached} | {'-' if pf is None else f'{pf:.3f}'} | "
                          f"{'-' if not pf else f'{fresh / pf:.1f}'} | {wall:.3f} | {fresh / wall:.1f} |", flush=True)
        except (httpx.HTTPError, RuntimeError) as e:
            print(f"bench_prefill: {e}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
