# SPDX-License-Identifier: Apache-2.0
"""docs/perf.md's charts from the raw bench JSON lines in docs/perf/ (see scripts/plot-perf).

Each chart reads flashcl-bench --json lines and the peer's lines of the same run (PyTorch SDPA on
the GPU, PyTorch's CPU SDPA on CPUs) and draws, per case, flashcl's figure
divided by the peer's: bars above 1.0 are faster than the peer."""
import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

RAW = Path("docs/perf")
OUT = RAW / "charts"
COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd"]


def lines(name):
    with open(RAW / name) as f:
        return [json.loads(l) for l in f if l.strip().startswith("{")]


def md_table(name, header_start):
    """The rows of the first markdown table in `name` whose header starts with header_start, as dicts."""
    rows, head = [], None
    for line in (RAW / name).read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if head is None:
            if line.startswith("| " + header_start):
                head = cells
            continue
        if not line.startswith("|") or cells[0] == head[0]:  # the table ended, or the next one starts
            break
        if not set(cells[0]) <= set("-"):
            rows.append(dict(zip(head, cells)))
    return rows


def bars(ax, labels, series, title, ylabel):
    """Grouped bars: series is [(name, [ratio per label])]; a line at 1.0 (the peer)."""
    width = 0.8 / len(series)
    for i, (name, values) in enumerate(series):
        xs = [j + (i - (len(series) - 1) / 2) * width for j in range(len(labels))]
        drawn = ax.bar(xs, [v if v is not None else 0 for v in values], width, label=name, color=COLORS[i])
        for rect, v in zip(drawn, values):
            if v is not None:
                ax.annotate(f"{v:.2f}", (rect.get_x() + rect.get_width() / 2, rect.get_height()), ha="center",
                            va="bottom", fontsize=7, xytext=(0, 1), textcoords="offset points")
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks(range(len(labels)))
    ax.set_xticklabels(labels, fontsize=8)
    ax.set_title(title, fontsize=10)
    ax.set_ylabel(ylabel, fontsize=8)


def panels_by_shape(flashcl_rows, peer_rows, op, paths, peer_extra, suptitle, out, note):
    """FlashAttention-style figure: one panel per (D, causal), x = sequence length, bars =
    flashcl per kernel path (and the other SDPA backend) over SDPA flash."""
    peer = {(r["d"], r["sq"], r["causal"], r["backend"]): r["tflops"] for r in peer_rows if r.get("op") == op}
    fig, axes = plt.subplots(2, 2, figsize=(12, 7.5))
    for ax, (d, causal) in zip(axes.flat, [(64, False), (64, True), (128, False), (128, True)]):
        seqs = sorted({r["sq"] for r in flashcl_rows if r.get("op") == op and r["d"] == d and r["causal"] == causal})
        series = []
        for path, name in paths:
            vals = []
            for s in seqs:
                mine = [r["tflops"] for r in flashcl_rows if r.get("op") == op and r["d"] == d and r["sq"] == s
                        and r["causal"] == causal and r.get(path[0]) == path[1]]
                ref = peer.get((d, s, causal, "flash"))
                vals.append(max(mine) / ref if mine and ref else None)
            series.append((name, vals))
        if peer_extra:
            series.append((f"SDPA {peer_extra}", [peer.get((d, s, causal, peer_extra), 0) / peer[(d, s, causal, "flash")]
                                                  if (d, s, causal, "flash") in peer else None for s in seqs]))
        bars(ax, [f"{s // 1024}k" if s >= 1024 else str(s) for s in seqs], series,
             f"head dim {d}, {'causal' if causal else 'not causal'}", "speed-up over SDPA flash")
    axes.flat[0].legend(fontsize=8)
    fig.suptitle(suptitle, fontsize=11)
    fig.text(0.5, 0.01, note, ha="center", fontsize=8)
    fig.tight_layout(rect=(0, 0.03, 1, 0.96))
    fig.savefig(OUT / out, dpi=90)
    plt.close(fig)


def h200_forward():
    """docs/perf/2026-12-02-h200-forward-v16.jsonl against -sdpa-fa-suite-v9.jsonl"""
    panels_by_shape(lines("2026-12-02-h200-forward-v16.jsonl"), lines("2026-12-02-h200-sdpa-fa-suite-v9.jsonl"),
                    "forward", [(("forward_path", "nvidia-wgmma"), "flashcl nvidia-wgmma"),
                                (("forward_path", "blocked"), "flashcl blocked (portable)")], "cudnn",
                    "NVIDIA H200, forward, F16, hidden 2048, batch x seqlen = 16k (v0.16.0-dev, 2026-12-02)",
                    "h200-forward.png", "x: sequence length. TFLOP/s on the wall clock over PyTorch SDPA's flash "
                    "backend in the same run; raw: docs/perf/2026-12-02-h200-forward-v16.jsonl, -sdpa-fa-suite-v9.jsonl")


def h200_backward():
    """docs/perf/2026-12-01-h200-backward-v7.jsonl against -sdpa-v7.jsonl"""
    panels_by_shape(lines("2026-12-01-h200-backward-v7.jsonl"), lines("2026-12-01-h200-sdpa-v7.jsonl"), "backward",
                    [(("op", "backward"), "flashcl nvidia-mma")], "cudnn",
                    "NVIDIA H200, backward, F16, hidden 2048, batch x seqlen = 16k (v0.11.0-dev, 2026-12-01)",
                    "h200-backward.png", "x: sequence length. TFLOP/s (2.5x the forward's FLOPs) over SDPA flash in "
                    "the same run; raw: docs/perf/2026-12-01-h200-backward-v7.jsonl, -sdpa-v7.jsonl")


def h200_decode():
    """docs/perf/2026-12-02-h200-decode-v16.jsonl against the peer columns of -decode-v16-tables.md"""
    mine = {(r["b"], r["sk"]): r for r in lines("2026-12-02-h200-decode-v16.jsonl") if r.get("op") == "decode"}
    peer = {(int(r["B"]), int(r["Sk"])): r for r in md_table("2026-12-02-h200-decode-v16-tables.md", "D | Sq")}
    keys = sorted(k for k in mine if k in peer)
    flash = [float(peer[k]["SDPA flash GB/s"]) for k in keys]
    series = [("flashcl (wall clock)", [mine[k]["gbps"] / f for k, f in zip(keys, flash)]),
              ("flashcl (device clock, span)", [mine[k]["gbps"] * mine[k]["ms"] / mine[k]["ms_span"] / f
                                                for k, f in zip(keys, flash)]),
              ("SDPA cuDNN", [float(peer[k]["SDPA cuDNN GB/s"]) / f for k, f in zip(keys, flash)])]
    fig, ax = plt.subplots(figsize=(12, 4.2))
    bars(ax, [f"B {b}\nL {sk // 1024}k" for b, sk in keys], series,
         "NVIDIA H200, decode: one query row, Hq 32, Hkv 8, D 128, F16 (v0.16.0-dev, 2026-12-02)",
         "speed-up over SDPA flash (GB/s)")
    ax.legend(fontsize=8)
    fig.text(0.5, 0.01, "K and V bytes read per second over SDPA flash (CUDA events) in the same run; raw: "
             "docs/perf/2026-12-02-h200-decode-v16.jsonl, -decode-v16-tables.md", ha="center", fontsize=8)
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    fig.savefig(OUT / "h200-decode.png", dpi=90)
    plt.close(fig)


def cpu():
    """docs/perf/2026-12-05-cpu-peer-xeon-v032-final1.md, -final2.md (from their -flashcl.jsonl, -torch.jsonl)"""
    runs = [md_table(f"2026-12-05-cpu-peer-xeon-v032-final{n}.md", "case") for n in (1, 2)]
    fig, ax = plt.subplots(figsize=(13, 4.8))
    series = [(f"{dev}, run {n + 1}", [float(r[f"PyTorch / {key}"]) for r in rows])
              for dev, key in (("PoCL", "PoCL"), ("Intel's runtime", "Intel")) for n, rows in enumerate(runs)]
    bars(ax, [r["case"].replace("prefill ", "prefill\n").replace("decode ", "decode\n") for r in runs[0]], series,
         "PyTorch CPU scaled_dot_product_attention time over flashcl's, same machine, same minutes",
         "speed-up over PyTorch")
    for t in ax.get_xticklabels():
        t.set_rotation(35)
        t.set_horizontalalignment("right")
    ax.legend(fontsize=8)
    fig.suptitle("CPUs: 2-core Xeon with AVX-512 and AMX (v0.32.0, 2026-12-05; PyTorch's bf16 runs on AMX)",
                 fontsize=11)
    fig.text(0.5, 0.01, "raw: docs/perf/2026-12-05-cpu-peer-xeon-v032-final1.md, -final2.md, and their "
             "-flashcl.jsonl, -torch.jsonl", ha="center", fontsize=8)
    fig.tight_layout(rect=(0, 0.04, 1, 0.95))
    fig.savefig(OUT / "cpu.png", dpi=90)
    plt.close(fig)


CHARTS = {"h200-forward.png": h200_forward, "h200-backward.png": h200_backward, "h200-decode.png": h200_decode,
          "cpu.png": cpu}


def main(argv):
    if "--list" in argv:
        for name, fn in CHARTS.items():
            print(f"{OUT / name}: {fn.__doc__}")
        return 0
    OUT.mkdir(exist_ok=True)
    for name, fn in CHARTS.items():
        fn()
        print("wrote", OUT / name)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
