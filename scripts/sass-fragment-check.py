#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Checks the wgmma backward's register allocation in NVIDIA's machine code (SASS).

The tensor-core backward's wgmma form (cl/nvidia/attention_backward_mma.cl) keeps the K and V
fragments (dK/dV kernel) or the Q and dO fragments (dQ kernel) in registers for the whole loop:
every tile's S and dP products read them as their A operands. The products of the gradients
(dV += P^T dO, dK += dS^T Q, dQ += dS K) take other A fragments, built per tile. If the
register allocator gives both sets the same registers, every tile after a work-group's first
multiplies the previous tile's P or dS instead of K and V. CUDA 13.0's ptxas did that to the
64-row dK/dV tiles at padded head dim 64 (history "v0.42.0"), which is what
wgmma_keep_fragments prevents.

Input: PTX files, or flashcl program-cache binaries holding NVIDIA's PTX (the NVIDIA OpenCL
driver's own compiler output, e.g. $FLASHCL_CACHE_DIR/*.clbin after a GPU run). Each is
assembled with ptxas for sm_90a and disassembled with cuobjdump (CUDA toolkit; without one, the
PyPI wheels nvidia-cuda-cuobjdump and nvidia-cuda-nvdisasm: put their bin folders on PATH).
One line per kernel with wgmma products: the A registers of its S/dP products, of its gradient
products, and "ok" or "SHARED" where the two sets meet. Exit status 1 when any kernel shares.

  scripts/sass-fragment-check.py /tmp/fclcache/*.clbin
"""
import os
import re
import subprocess
import sys
import tempfile

KERNELS = ("attention_backward_dkdv", "attention_backward_dq")
HGMMA = re.compile(r"HGMMA\.\S+ R\d+, R(\d+), gdesc\[[^\]]*\](\.tnspB)?")


def ptx_text(path):
    """The PTX in a PTX file or a cache binary (from its first comment line to the first NUL)."""
    data = open(path, "rb").read()
    start = data.find(b"//")
    if start < 0 or b".target" not in data:
        return None
    return data[start:].split(b"\0")[0].decode("utf-8", "replace")


def functions(sass):
    """Maps each function name of a cuobjdump listing to its lines."""
    out, name = {}, None
    for line in sass.splitlines():
        m = re.search(r"Function : (\S+)", line)
        if m:
            name = m.group(1)
            out[name] = []
        elif name:
            out[name].append(line)
    return out


def a_registers(lines):
    """The first registers of the A quads of the products that read B by row (S, dP) and of
    those that read it transposed (the gradients)."""
    rows, trans = set(), set()
    for line in lines:
        m = HGMMA.search(line)
        if m:
            (trans if m.group(2) else rows).add(int(m.group(1)))
    return rows, trans


def check(path, tmp):
    ptx = ptx_text(path)
    if ptx is None or "wgmma.mma_async" not in ptx or "attention_backward" not in ptx:
        return []
    src = os.path.join(tmp, "k.ptx")
    cubin = os.path.join(tmp, "k.cubin")
    with open(src, "w") as f:
        f.write(ptx)
    subprocess.run(["ptxas", "-arch=sm_90a", src, "-o", cubin], check=True, capture_output=True)
    sass = subprocess.run(["cuobjdump", "-sass", cubin], check=True, capture_output=True, text=True).stdout
    results = []
    for name, lines in functions(sass).items():
        if name not in KERNELS:
            continue
        rows, trans = a_registers(lines)
        if not rows:
            continue
        quads = lambda regs: {r + i for r in regs for i in range(4)}
        shared = quads(rows) & quads(trans)
        results.append((name, sorted(rows), sorted(trans), shared))
    return results


def main():
    if len(sys.argv) < 2:
        sys.stderr.write(__doc__)
        return 2
    bad = 0
    with tempfile.TemporaryDirectory() as tmp:
        for path in sys.argv[1:]:
            for name, rows, trans, shared in check(path, tmp):
                bad += bool(shared)
                print("%s %s: S/dP A R%s | gradients A R%s | %s" % (
                    os.path.basename(path), name, ",R".join(map(str, rows)), ",R".join(map(str, trans)),
                    "SHARED R%s" % ",R".join(map(str, sorted(shared))) if shared else "ok"))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
