#!/usr/bin/env python3
"""Single-stream decode benchmark against a running `weft serve` (or any OpenAI-compatible server).

Each run streams one /v1/completions request and measures, on the client: TTFT (request sent → first
non-empty text delta) and decode tok/s ((completion_tokens − 1) / (last token − first token)); and, from the
server's `weft` object where present: ttft_seconds, prefill_seconds and decode tok/s ((n − 1) / decode_seconds,
as `weft run` reports it). Each run's prompt starts with a different run tag so that its prefill is cold (no
prompt-cache hit) unless --same-prompt is given. Prints one row per run and a median/min/max summary.

    weft serve --port 8080 &
    python3 tools/bench_decode.py --base-url http://127.0.0.1:8080 --runs 5 --max-tokens 128

Exit status: 0, or 1 when a request fails.
"""

import argparse
import json
import os
import statistics
import sys
import time

import httpx


def api_headers(key):
    return {"Authorization": f"Bearer {key}"} if key else {}


def default_key():
    return os.environ.get("WEFT_API_KEY", "").split(",")[0].strip() or os.environ.get("OPENAI_API_KEY") or None


def first_model(client):
    r = client.get("/v1/models")
    r.raise_for_status()
    return r.json()["data"][0]["id"]


def one_run(client, args, model, tag):
    prompt = args.prompt if args.same_prompt else f"[{tag}] {args.prompt}"
    body = {"model": model, "prompt": prompt, "max_tokens": args.max_tokens, "temperature": args.temperature,
            "stream": True, "stream_options": {"include_usage": True}, "ignore_eos": not args.stop_at_eos}
    if args.seed is not None:
        body["seed"] = args.seed
    t0 = time.perf_counter()
    t_first = t_last = None
    usage, weft, err = None, None, None
    with client.stream("POST", "/v1/completions", json=body) as r:
        if r.status_code != 200:
            r.read()
            raise RuntimeError(f"HTTP {r.status_code}: {r.text[:300]}")
        for line in r.iter_lines():
            if not line.startswith("data: "):
                continue
            data = line[6:]
            if data == "[DONE]":
                break
            ev = json.loads(data)
            if "error" in ev:
                err = ev["error"].get("message")
                continue
            now = time.perf_counter()
            for ch in ev.get("choices", []):
                if ch.get("text"):
                    t_first = t_first or now
                    t_last = now
            usage = ev.get("usage") or usage
            weft = ev.get("weft") or weft
    if err:
        raise RuntimeError(f"stream error: {err}")
    if not usage:
        raise RuntimeError("no usage chunk (the server ignored stream_options.include_usage)")
    n = usage["completion_tokens"]
    row = {"run": tag, "prompt_tokens": usage["prompt_tokens"],
           "cached_tokens": (usage.get("prompt_tokens_details") or {}).get("cached_tokens"),
           "completion_tokens": n, "ttft_ms": (t_first - t0) * 1e3 if t_first else None,
           "decode_tok_s": (n - 1) / (t_last - t_first) if t_first and t_last > t_first and n > 1 else None,
           "wall_s": time.perf_counter() - t0}
    if weft:
        for key in ("ttft", "prefill"):
            v = weft.get(f"{key}_seconds")
            row[f"server_{key}_ms"] = None if v is None else v * 1e3
        ds = weft.get("decode_seconds")
        row["server_decode_tok_s"] = (n - 1) / ds if ds and n > 1 else None
        row["token_sha"] = weft.get("token_sha")
    return row


def fmt(v, spec=".1f"):
    return "-" if v is None else format(v, spec)


def main(argv=None):
    head, _, rest = __doc__.partition("\n\n")
    ap = argparse.ArgumentParser(description=head, epilog=rest, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base-url", default="http://127.0.0.1:8080", help="server root (default %(default)s)")
    ap.add_argument("--api-key", default=default_key(), help="API key (default: $WEFT_API_KEY or $OPENAI_API_KEY)")
    ap.add_argument("--model", help="model id (default: the first of /v1/models)")
    ap.add_argument("--prompt", default="Once upon a time, there was a little robot who", help="prompt text")
    ap.add_argument("--max-tokens", type=int, default=128, help="tokens per run (default %(default)s)")
    ap.add_argument("--runs", type=int, default=5, help="measured runs (default %(default)s)")
    ap.add_argument("--warmup", type=int, default=1, help="unmeasured runs first (default %(default)s)")
    ap.add_argument("--temperature", type=float, default=0.0, help="sampling temperature (default greedy)")
    ap.add_argument("--seed", type=int, help="request seed")
    ap.add_argument("--stop-at-eos", action="store_true", help="let EOS end a run (default: ignore_eos)")
    ap.add_argument("--same-prompt", action="store_true", help="same prompt every run (prompt-cache hits)")
    ap.add_argument("--json", action="store_true", help="print the rows as JSON instead of a table")
    ap.add_argument("--timeout", type=float, default=600, help="seconds per request (default %(default)s)")
    args = ap.parse_args(argv)
    base = args.base_url.rstrip("/").removesuffix("/v1")
    with httpx.Client(base_url=base, headers=api_headers(args.api_key), timeout=args.timeout) as client:
        try:
            model = args.model or first_model(client)
            for w in range(args.warmup):
                one_run(client, args, model, f"warmup-{w}-{time.time_ns()}")
            rows = [one_run(client, args, model, f"run-{i}-{time.time_ns()}") for i in range(args.runs)]
        except (httpx.HTTPError, RuntimeError) as e:
            print(f"bench_decode: {e}", file=sys.stderr)
            return 1
    if args.json:
        print(json.dumps({"model": model, "rows": rows}, indent=1))
        return 0
    print(f"model {model}, {args.max_tokens} tokens/run, temperature {args.temperature}, base {base}")
    hdr = ("run", "prompt", "cached", "gen", "TTFT ms", "srv TTFT ms", "srv prefill ms", "decode tok/s",
           "srv decode tok/s", "token_sha")
    print("| " + " | ".join(hdr) + " |")
    print("|" + "---|" * len(hdr))
    for i, r in enumerate(rows):
        print(f"| {i} | {r['prompt_tokens']} | {fmt(r['cached_tokens'], 'd')} | {r['completion_tokens']} | "
              f"{fmt(r['ttft_ms'])} | {fmt(r.get('server_ttft_ms'))} | {fmt(r.get('server_prefill_ms'))} | "
              f"{fmt(r['decode_tok_s'])} | {fmt(r.get('server_decode_tok_s'))} | {r.get('token_sha', '-')} |")
    for key, label in (("ttft_ms", "TTFT ms"), ("decode_tok_s", "decode tok/s"),
                       ("server_decode_tok_s", "server decode tok/s")):
        vals = [r[key] for r in rows if r.get(key) is not None]
        if vals:
            print(f"{label}: median {statistics.median(vals):.1f}  min {min(vals):.1f}  max {max(vals):.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
