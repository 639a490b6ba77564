#!/usr/bin/env python3
"""Table of a bench/cpu/device_run.sh results directory: per model and test, the median over rounds of
llama.cpp's mean and best repetition and of weft's best repetition (weft bench reports the best of --repeat),
and weft / llama.cpp on the best-vs-best medians.   usage: summarize.py OUT_DIR

weft's lines of one round come in the order of the (prompt, gen) pairs device_run.sh passed, which are the
i-th smallest pp and tg lengths llama-bench ran for that model."""
import glob
import json
import os
import re
import statistics
import sys


def main(d):
    llama, weft = {}, {}
    for f in sorted(glob.glob(os.path.join(d, "llama_*_*.json"))):
        name = re.match(r"llama_(.+)_\d+\.json$", os.path.basename(f)).group(1)
        try:
            entries = json.load(open(f))
        except (OSError, ValueError):
            continue
        for e in entries:
            test = f"pp{e['n_prompt']}" if e["n_prompt"] else f"tg{e['n_gen']}"
            r = llama.setdefault((name, test), {"mean": [], "best": []})
            r["mean"].append(e["avg_ts"])
            r["best"].append(max(e["samples_ts"]))
    for f in sorted(glob.glob(os.path.join(d, "weft_*_*.md"))):
        name = re.match(r"weft_(.+)_\d+\.md$", os.path.basename(f)).group(1)
        pp = sorted({int(t[2:]) for (n, t) in llama if n == name and t.startswith("pp")})
        tg = sorted({int(t[2:]) for (n, t) in llama if n == name and t.startswith("tg")})
        lines = [l for l in open(f) if re.match(r"\|[^|]+\|[^|]+\| \d+ \| [\d.]+ \| [\d.]+ \|", l)]
        for j, line in enumerate(lines):
            pf, dc = (float(x) for x in re.findall(r"\| ([\d.]+) \| ([\d.]+) \|\s*$", line)[0])
            if j < len(pp):
                weft.setdefault((name, f"pp{pp[j]}"), []).append(pf)
            if j < len(tg):
                weft.setdefault((name, f"tg{tg[j]}"), []).append(dc)
    print("| model | test | llama.cpp mean (t/s) | llama.cpp best (t/s) | weft best (t/s) | weft / llama.cpp |")
    print("|---|---|---:|---:|---:|---:|")
    for key in sorted(llama):
        lm, lb = statistics.median(llama[key]["mean"]), statistics.median(llama[key]["best"])
        w = statistics.median(weft[key]) if key in weft else float("nan")
        print(f"| {key[0]} | {key[1]} | {lm:.1f} | {lb:.1f} | {w:.1f} | {w / lb:.2f}× |")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
