#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Reports register hazards of wgmma products in a PTX file: between a wgmma.mma_async and the
wgmma.wait_group 0 that completes it, any other instruction that reads or writes one of its
accumulator registers, or writes one of its A registers (the products read and write them
asynchronously: PTX calls such an access undefined). Scans each entry's instructions in text
order, so both arms of a branch between a product and its wait are checked; a loop that returns
above a product before its wait is not followed. Exit status 1 when it finds any.

  python3 scripts/ptx-wgmma-hazards.py program.ptx
"""
import re
import sys

REG = re.compile(r"%[a-z]+[0-9]+")


def hazards(text):
    found, entry = [], "?"
    acc, a_regs, open_since = set(), set(), None
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.split("//")[0].strip()
        m = re.match(r"(?:\.visible\s+)?\.entry\s+(\w+)", line)
        if m:
            entry, acc, a_regs, open_since = m.group(1), set(), set(), None
            continue
        if not line or line.startswith(".") or line.endswith(":") or line in "{}":
            continue
        if "wgmma.mma_async" in line:
            lists = re.findall(r"\{([^{}]*)\}", line[line.index("wgmma.mma_async"):])
            acc |= set(REG.findall(lists[0]))
            if len(lists) > 1:
                a_regs |= set(REG.findall(lists[1]))
            open_since = open_since or n
            continue
        if "wgmma.wait_group" in line:
            if line.rstrip(";").split()[-1] == "0":
                acc, a_regs, open_since = set(), set(), None
            continue
        if "wgmma." in line or open_since is None:
            continue
        words = re.sub(r"^@!?%\w+\s+", "", line).split(None, 1)  # without its guard predicate
        regs = REG.findall(words[1]) if len(words) > 1 else []
        dest = regs[:1] if not words[0].startswith(("st.", "red.", "bar", "cp.")) else []
        touched = [r for r in regs if r in acc]
        written_a = [r for r in dest if r in a_regs]
        if touched or written_a:
            found.append(f"{entry}: line {n}: {line[:100]} touches {', '.join(touched + written_a)} "
                         f"(products in flight since line {open_since})")
    return found


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    with open(sys.argv[1], errors="replace") as f:
        found = hazards(f.read())
    for h in found:
        print(h)
    print(f"{len(found)} wgmma register hazard(s)")
    sys.exit(1 if found else 0)


if __name__ == "__main__":
    main()
