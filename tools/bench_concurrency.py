#!/usr/bin/env python3
"""Concurrency benchmark and exact-decoding check against a running `weft serve`.

At each level L (e.g. 1,4,16) it sends the same K requests with at most L in flight and reports the aggregate
decode throughput (completion tokens of all K / wall time) and the request latencies. The K requests are a fixed
mix (--mix-seed): different prompts and lengths, greedy and seeded sampling, some with top-p/top-k. Checks, by
`weft.token_sha` (SPEC §5.4):
  --alone   each reply equals the same request served alone (SPEC §4.3: concurrent == solo)
  --serial  each reply equals the same request with "draft": false (drafted == serial)
The references are made once (sequentially, before the levels) and every level is compared with them.

    weft serve --port 8080 &
    python3 tools/bench_concurrency.py --levels 1,4,16 --requests 16 --alone --serial

Exit status: 0; 1 when a request fails or any comparison differs.
"""

import argparse
import concurrent.futures as cf
import os
import random
import statistics
import sys
import time

import httpx

PROMPTS = ["Once upon a time", "The little dog ran to the", "Lily and Ben went to the park. They",
           "One day, a big bird", "Tom had a red ball. He", "The sun was hot and the children",
           "Mia found a small box under her bed.", "There was a fish who wanted to fly."]


def default_key():
    return os.environ.get("WEFT_API_KEY", "").split(",")[0].strip() or os.environ.get("OPENAI_API_KEY") or None


def make_requests(model, k, max_lo, max_hi, mix_seed, token_prompts, vocab):
    """The fixed request mix: request i alternates greedy / seeded, its length is drawn in [max_lo, max_hi]."""
    rng = random.Random(mix_seed)
    reqs = []
    for i in range(k):
        if token_prompts:
            prompt = [rng.randrange(vocab) for _ in range(rng.randrange(4, 48))]
        else:
            prompt = PROMPTS[i % len(PROMPTS)] + ("" if i < len(PROMPTS) else f" ({i})")
        body = {"model": model, "prompt": prompt, "max_tokens": rng.randint(max_lo, max_hi),
                "ignore_eos": i % 3 != 2}
        if i % 2 == 0:
            body["temperature"] = 0
        else:
            body.update(temperature=0.8, seed=rng.randrange(1 << 31))
            if i % 4 == 1:
                body.update(top_p=0.9, top_k=40)
        reqs.append(body)
    return reqs


def send(client, body):
    t0 = time.perf_counter()
    r = client.post("/v1/completions", json=body)
    dt = time.perf_counter() - t0
    if r.status_code != 200:
        raise RuntimeError(f"HTTP {r.status_code}: {r.text[:300]}")
    j = r.json()
    w = j.get("weft") or {}
    return {"sha": w.get("token_sha"), "tokens": j["usage"]["completion_tokens"], "latency": dt,
            "drafted": w.get("drafted", 0), "accepted": w.get("accepted", 0)}


def run_level(client, reqs, level):
    t0 = time.perf_counter()
    with cf.ThreadPoolExecutor(max_workers=level) as ex:
        res = list(ex.map(lambda b: send(client, b), reqs))
    return res, time.perf_counter() - t0


def compare(name, got, ref, reqs, level):
    bad = [i for i, (g, r) in enumerate(zip(got, ref)) if g["sha"] != r["sha"]]
    for i in bad:
        print(f"MISMATCH {name} at level {level}: request {i} {reqs[i]} gave {got[i]['sha']}, reference "
              f"{ref[i]['sha']}", file=sys.stderr)
    return len(bad)


def main(argv=None):
    head, _, rest = __doc__.partition("\n\n")
    ap = argparse.ArgumentParser(description=head, epilog=rest, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base-url", default="http://127.0.0.1:8080", help="server root (default %(default)s)")
    ap.add_argument("--api-key", default=default_key(), help="API key (default: $WEFT_API_KEY or $OPENAI_API_KEY)")
    ap.add_argument("--model", help="model id (default: the first of /v1/models)")
    ap.add_argument("--levels", default="1,4,16", help="concurrency levels (default %(default)s)")
    ap.add_argument("--requests", type=int, default=16, help="requests per level, K (default %(default)s)")
    ap.add_argument("--max-tokens", default="16:64", help="reply length range LO:HI (default %(default)s)")
    ap.add_argument("--mix-seed", type=int, default=1, help="seed of the request mix (default %(default)s)")
    ap.add_argument("--token-prompts", action="store_true",
                    help="random token-id prompts (for models without a tokenizer)")
    ap.add_argument("--vocab", type=int, default=1000, help="id range of --token-prompts (default %(default)s)")
    ap.add_argument("--alone", action="store_true", help="compare each reply with the request served alone")
    ap.add_argument("--serial", action="store_true", help='compare each reply with the request with "draft": false')
    ap.add_argument("--no-draft", action="store_true", help='send the measured requests with "draft": false')
    ap.add_argument("--timeout", type=float, default=1200, help="seconds per request (default %(default)s)")
    args = ap.parse_args(argv)
    levels = [int(x) for x in args.levels.split(",") if x.strip()]
    lo, _, hi = args.max_tokens.partition(":")
    lo, hi = int(lo), int(hi or lo)
    base = args.base_url.rstrip("/").removesuffix("/v1")
    headers = {"Authorization": f"Bearer {args.api_key}"} if args.api_key else {}
    limits = httpx.Limits(max_connections=max(levels + [1]) + 4, max_keepalive_connections=max(levels + [1]) + 4)
    mismatches = 0
    with httpx.Client(base_url=base, headers=headers, timeout=args.timeout, limits=limits) as client:
        try:
            model = args.model or client.get("/v1/models").raise_for_status().json()["data"][0]["id"]
            reqs = make_requests(model, args.requests, lo, hi, args.mix_seed, args.token_prompts, args.vocab)
            if args.no_draft:
                reqs = [{**b, "draft": False} for b in reqs]
            alone = [send(client, b) for b in reqs] if args.alone else None
            serial = [send(client, {**b, "draft": False}) for b in reqs] if args.serial else None
            print(f"model {model}, {len(reqs)} requests per level, max_tokens {lo}..{hi}, base {base}")
            hdr = ("level", "requests", "tokens", "wall s", "agg tok/s", "latency p50 s", "latency max s",
                   "drafted/accepted", "alone", "serial")
            print("| " + " | ".join(hdr) + " |")
            print("|" + "---|" * len(hdr))
            for level in levels:
                res, wall = run_level(client, reqs, level)
                toks = sum(r["tokens"] for r in res)
                lat = [r["latency"] for r in res]
                a = compare("alone", res, alone, reqs, level) if alone else None
                s = compare("serial", res, serial, reqs, level) if serial else None
                mismatches += (a or 0) + (s or 0)
                da = f"{sum(r['drafted'] for r in res)}/{sum(r['accepted'] for r in res)}"
                print(f"| {level} | {len(res)} | {toks} | {wall:.2f} | {toks / wall:.1f} | "
                      f"{statistics.median(lat):.3f} | {max(lat):.3f} | {da} | "
                      f"{'-' if a is None else ('ok' if a == 0 else f'{a} differ')} | "
                      f"{'-' if s is None else ('ok' if s == 0 else f'{s} differ')} |", flush=True)
        except (httpx.HTTPError, RuntimeError) as e:
            print(f"bench_concurrency: {e}", file=sys.stderr)
            return 1
    if mismatches:
        print(f"bench_concurrency: {mismatches} replies differ from their reference", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
