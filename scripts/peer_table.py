#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""One table of a GPU run: flashcl-bench lines of one op (JSON; forward, backward or decode, one
line per kernel path) against the PyTorch SDPA peer lines of the same shapes
(scripts/sdpa_peer.py), with the ratios.

  python3 scripts/peer_table.py bench.jsonl peer.jsonl [forward|backward|decode] [wall|span]

Columns: shape and dtype, then per flashcl path (and layout, when not bshd) TFLOP/s (decode: GB/s of K
and V read) and its check, then SDPA flash and cuDNN, then each flashcl path's ratio to SDPA
flash and to cuDNN. TFLOP/s use FlashAttention's convention (forward 4 b h s^2 d, backward 2.5
times that; halved when causal). The clock of both sides' figures: wall (default; flashcl's
call and fcl_finish, the peer's call and torch.cuda.synchronize, on the host clock: the peer's
ms_wall; peer files from before it have only their events, which are then used) or span
(flashcl's ms_span: the device clock between markers enqueued before and after the call, which
is what the peer's CUDA events around a call measure)."""
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


def column(r, path_of):
    """flashcl's column: the kernel path, plus the layout when it is not bshd (the peer's
    tensors are [B, H, S, D], so a bhsd column compares the same storage)."""
    layout = r.get("layout", "bshd")
    return r.get(path_of, "?") + ("" if layout == "bshd" else f" {layout}")


def rescaled(r, figure, ms_field):
    """r's figure (from its ms) on the clock of its field ms_field; None where not measured."""
    other = r.get(ms_field)
    return r[figure] * r["ms"] / other if other else None


def figure_of(r, figure, clock):
    """flashcl's figure on the chosen clock (its ms is the wall clock); None where that clock was
    not measured."""
    return r[figure] if clock == "wall" else rescaled(r, figure, "ms_span")


def peer_figure_of(r, figure, clock):
    """The peer's figure on the chosen clock (its ms is its CUDA events): its ms_wall where
    measured (wall), else its events."""
    wall = rescaled(r, figure, "ms_wall") if clock == "wall" else None
    return r[figure] if wall is None else wall


def cell(value, fmt):
    return "-" if value is None else fmt.format(value)


def key(r):
    return (r["d"], r["sq"], r["sk"], r["b"], r["hq"], r["hkv"], bool(r["causal"]), r.get("dtype", "f16"))


def main():
    op = sys.argv[3] if len(sys.argv) > 3 else "forward"
    clock = sys.argv[4] if len(sys.argv) > 4 else "wall"
    if clock not in ("wall", "span"):
        sys.exit(f"peer_table.py: clock {clock!r}: wall or span")
    path_of = f"{op}_path"
    unit, figure = ("GB/s", "gbps") if op == "decode" else ("TF/s", "tflops")
    ours = [r for r in load(sys.argv[1]) if r.get("op") == op]
    peers = load(sys.argv[2])
    paths = sorted({column(r, path_of) for r in ours})
    table = {}
    for r in ours:
        table.setdefault(key(r), {})[column(r, path_of)] = r
    peer = {}
    for r in peers:
        if r.get("op") == op and figure in r:
            k = key(r) if op != "decode" else key(dict(r, causal=True))  # flashcl's decode is causal (bottom-right)
            peer.setdefault(k, {})[r["backend"]] = peer_figure_of(r, figure, clock)
    ours_unit = unit if clock == "wall" else f"{unit} ({clock})"
    head = ["D", "Sq", "Sk", "B", "Hq", "Hkv", "causal", "dtype"] + [f"{p} {ours_unit}" for p in paths]
    head += [f"SDPA flash {unit}", f"SDPA cuDNN {unit}"]
    head += [f"{p} / flash" for p in paths] + [f"{p} / cuDNN" for p in paths]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for k in sorted(table):
        cells = [str(x) for x in k[:6]] + ["yes" if k[6] else "no", k[7]]
        ref = {b: peer.get(k, {}).get(b) for b in ("flash", "cudnn")}
        for p in paths:
            r = table[k].get(p)
            cells.append("-" if r is None else cell(figure_of(r, figure, clock), "{:.1f}") +
                         ("" if r.get("ok") else " (FAILED check)"))
        for b in ("flash", "cudnn"):
            cells.append("-" if ref[b] is None else f"{ref[b]:.1f}")
        for b in ("flash", "cudnn"):
            for p in paths:
                r = table[k].get(p)
                f = None if r is None or not ref[b] else figure_of(r, figure, clock)
                cells.append(cell(None if f is None else f / ref[b], "{:.3f}"))
        print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
