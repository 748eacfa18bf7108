#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The table of scripts/cpu-peer.sh: flashcl-bench lines (JSON, tagged with the case name) per
OpenCL implementation against scripts/cpu_peer.py's PyTorch lines of the same cases.

  python3 scripts/cpu_table.py bench.jsonl peer.jsonl
  python3 scripts/cpu_table.py --padded-args bench.jsonl CASE   cpu_peer.py's arguments for the
        padded batch of a varlen / packed case (the bench's seeded sequence lengths, regenerated;
        the backward for the backward ops)

Columns: case, shape, then per implementation flashcl's ms (decode: and GB/s, and its share of
the implementation's copy bandwidth), PyTorch's ms, and per implementation PyTorch's time over
flashcl's (above 1: flashcl is faster)."""
import json
import os
import sys

SEED_LENGTHS = 0x1E565EED  # tools/bench_pack.c
MASK = (1 << 64) - 1


def splitmix64(state):
    """tools/bench_util.c bench_rng_next: the next state and output."""
    state = (state + 0x9E3779B97F4A7C15) & MASK
    z = state
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return state, z ^ (z >> 31)


def bench_lengths(seqs, max_len):
    """The sequence lengths flashcl-bench packs for --seqs / --max-len."""
    state, out = SEED_LENGTHS, []
    for _ in range(seqs):
        state, z = splitmix64(state)
        out.append(1 + z % max_len)
    return out


def load(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.startswith("{")]


def padded_args(bench, case):
    r = next(r for r in bench if r.get("case") == case)
    lengths = bench_lengths(r["seqs"], r["max_len"])
    op = "backward" if r["op"].endswith("_backward") else "forward"
    return (f"--op {op} --dtype {r['dtype']} --b {len(lengths)} --sq {max(lengths)} --hq {r['hq']} "
            f"--hkv {r['hkv']} --d {r['d']} --lengths {','.join(map(str, lengths))}")


def shape(r):
    if r.get("seqs"):
        return f"{r['seqs']} seqs <= {r['max_len']}, H {r['hq']}, D {r['d']}, {r['dtype']}"
    s = f"B {r['b']} Sq {r['sq']} Sk {r['sk']} H {r['hq']}/{r['hkv']} D {r['d']} {r['dtype']}"
    return s + (" causal" if r.get("causal") and r["op"] != "decode" else "")


def main():
    if sys.argv[1] == "--padded-args":
        print(padded_args(load(sys.argv[2]), sys.argv[3]))
        return
    bench, peer = load(sys.argv[1]), load(sys.argv[2])
    copy = {r["device"]: r.get("gbps") for r in bench if r.get("op") == "copy"}
    read = {r["device"]: r.get("gbps") for r in bench if r.get("op") == "read"}
    platforms = list(dict.fromkeys(r["device"] for r in bench if r.get("case")))  # one column per device
    names = {r["device"]: r.get("platform", r["device"]) for r in bench if r.get("case")}
    short = {p: names[p].replace("Portable Computing Language", "PoCL").split("(")[0].split()[0] for p in platforms}
    head = ["case", "shape"] + [f"{short[p]} ms" for p in platforms] + ["PyTorch ms"]
    head += [f"PyTorch / {short[p]}" for p in platforms]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for case in dict.fromkeys(r["case"] for r in bench if r.get("case")):
        rows = {r["device"]: r for r in bench if r.get("case") == case}
        first = next(iter(rows.values()))
        theirs = next((r for r in peer if r.get("case") == case), {})
        cells = [case, shape(first)]
        for p in platforms:
            r = rows.get(p)
            if r is None:
                cells.append("-")
                continue
            cell = f"{r['ms']:.2f}" + ("" if r.get("ok", True) else " (check FAILED)")
            if r["op"] == "decode" and r.get("gbps"):
                share = f", {100 * r['gbps'] / copy[p]:.0f}% of copy" if copy.get(p) else ""
                share += f", {100 * r['gbps'] / read[p]:.0f}% of read" if read.get(p) else ""
                cell += f" ({r['gbps']:.1f} GB/s{share})"
            cells.append(cell)
        torch_ms = theirs.get("ms")
        cells.append(f"{torch_ms:.2f}" if torch_ms else theirs.get("error", "-"))
        for p in platforms:
            r = rows.get(p)
            cells.append(f"{torch_ms / r['ms']:.2f}" if torch_ms and r else "-")
        print("| " + " | ".join(cells) + " |")
    if copy:
        print("\ncopy bandwidth (GB/s, read + write): " + ", ".join(f"{short[p]} {v:.1f}" for p, v in copy.items()
                                                                   if v and p in short))
    print(f"\nPOCL_AFFINITY={os.environ.get('POCL_AFFINITY') or '(unset)'} (docs/API.md, \"CPUs\")")


if __name__ == "__main__":
    main()
