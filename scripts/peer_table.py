#!/usr/bin/env python3
"""One table of a GPU run: flashcl-bench lines of one op (JSON; forward or backward, one line
per kernel path) against the PyTorch SDPA peer lines of the same shapes (.devcarry/sdpa_peer.py),
with the ratios.

  python3 scripts/peer_table.py bench.jsonl peer.jsonl [forward|backward]

Columns: shape, then per flashcl path TFLOP/s and its check, then SDPA flash and cuDNN TFLOP/s,
then each flashcl path's ratio to SDPA flash. TFLOP/s use FlashAttention's convention
(forward 4 b h s^2 d, backward 2.5 times that; halved when causal)."""
import json
import sys


def load(path):
    rows = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line.startswith("{"):
                rows.append(json.loads(line))
    return rows


def key(r):
    return (r["d"], r["sq"], r["b"], r["hq"], bool(r["causal"]))


def main():
    op = sys.argv[3] if len(sys.argv) > 3 else "forward"
    path_of = f"{op}_path"
    ours = [r for r in load(sys.argv[1]) if r.get("op") == op]
    peers = load(sys.argv[2])
    paths = sorted({r.get(path_of, "?") for r in ours})
    table = {}
    for r in ours:
        table.setdefault(key(r), {})[r.get(path_of, "?")] = r
    peer = {}
    for r in peers:
        if r.get("op") == op and "tflops" in r:
            peer.setdefault(key(r), {})[r["backend"]] = r["tflops"]
    head = ["D", "S", "B", "H", "causal"] + [f"{p} TF/s" for p in paths] + ["SDPA flash", "SDPA cuDNN"]
    head += [f"{p} / flash" for p in paths]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for k in sorted(table):
        d, s, b, h, causal = k
        cells = [str(d), str(s), str(b), str(h), "yes" if causal else "no"]
        flash = peer.get(k, {}).get("flash")
        for p in paths:
            r = table[k].get(p)
            cells.append("-" if r is None else f"{r['tflops']:.1f}" + ("" if r.get("ok") else " (FAILED check)"))
        cells.append("-" if flash is None else f"{flash:.1f}")
        cudnn = peer.get(k, {}).get("cudnn")
        cells.append("-" if cudnn is None else f"{cudnn:.1f}")
        for p in paths:
            r = table[k].get(p)
            cells.append("-" if r is None or not flash else f"{r['tflops'] / flash:.3f}")
        print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
