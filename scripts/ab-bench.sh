#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# A/B timing of two builds of flashcl on one device, interleaved, as docs/perf/history.md's "X
# against the previous version's library in the same call" figures are taken.
#   scripts/ab-bench.sh OLD_BUILD NEW_BUILD CASES_FILE
# OLD_BUILD and NEW_BUILD are build folders (each with libflashcl.so and tools/); CASES_FILE has
# one case a line ('#' starts a comment):
#   TAG [ENV=VALUE ...] flashcl-bench ARGS...      NEW_BUILD's flashcl-bench (--json --check-rows 0
#                                                  added) on OLD's library, then on NEW's
#   TAG [ENV=VALUE ...] gemm LAYOUT M N K          each build's own flashcl-gemm-bench (statically
#                                                  linked)
# Every case runs once per build per round (ROUNDS, default 2), the builds in turn. Output under
# $OUT (default ./ab-out): ab.jsonl (each case's flashcl-bench JSON line, or the GEMM's line as
# {"us": ...}, with "tag", "build" and "round" added), table.md (per tag: each build's times over
# the rounds and old / new, above 1 where NEW is faster), stderr.txt. Each build gets its own
# program cache folder, so neither reads the other's binaries. A case that fails or times out
# (CASE_TIMEOUT seconds, default 120) is listed with its exit status and left out of the table.
set -uo pipefail
[[ $# -eq 3 ]] || { sed -n '2,19p' "$0" >&2; exit 2; }
old=$(cd -- "$1" && pwd) new=$(cd -- "$2" && pwd) cases=$3
out=${OUT:-ab-out}
mkdir -p "$out"
: > "$out/ab.jsonl"
cache=$(mktemp -d)
trap 'rm -rf "$cache"' EXIT

# run_case ROUND BUILD_NAME BUILD_DIR TAG WORDS...: one case on one build, its line into ab.jsonl.
run_case() {
  local round=$1 name=$2 dir=$3 tag=$4
  shift 4
  local envs=() line rc
  while [[ $# -gt 0 && $1 == *=* ]]; do envs+=("$1"); shift; done
  if [[ ${1:-} == gemm ]]; then
    shift
    line=$(env "${envs[@]}" FLASHCL_CACHE_DIR="$cache/$name" timeout "${CASE_TIMEOUT:-120}" \
      "$dir/tools/flashcl-gemm-bench" "$@" 2>>"$out/stderr.txt" </dev/null)
    rc=$?
    line=$(sed -n 's/.*: \([0-9.]*\) us,.*/{"us":\1}/p' <<<"$line")
  else
    shift # the word flashcl-bench
    line=$(env "${envs[@]}" LD_LIBRARY_PATH="$dir" FLASHCL_CACHE_DIR="$cache/$name" timeout "${CASE_TIMEOUT:-120}" \
      "$new/tools/flashcl-bench" --json --check-rows 0 "$@" 2>>"$out/stderr.txt" </dev/null | head -n 1)
    rc=$?
  fi
  if [[ $rc -ne 0 || -z $line ]]; then
    echo "$tag $name round $round: exit $rc" | tee -a "$out/stderr.txt" >&2
    return
  fi
  echo "{\"tag\":\"$tag\",\"build\":\"$name\",\"round\":$round,${line#\{}" >> "$out/ab.jsonl"
}

for ((round = 1; round <= ${ROUNDS:-2}; round++)); do
  while read -r -a words; do
    [[ ${#words[@]} -eq 0 || ${words[0]} == \#* ]] && continue
    run_case "$round" old "$old" "${words[@]}"
    run_case "$round" new "$new" "${words[@]}"
  done < "$cases"
done

python3 - "$out/ab.jsonl" > "$out/table.md" <<'EOF'
import json, sys
times = {}
for text in open(sys.argv[1]):
    r = json.loads(text)
    ms = r["us"] / 1000 if "us" in r else r.get("ms")
    if ms is not None:
        times.setdefault(r["tag"], {}).setdefault(r["build"], []).append(ms)
def span(v):
    return f"{min(v):.4g}-{max(v):.4g}" if len(v) > 1 else f"{v[0]:.4g}"
print("| case | old ms | new ms | old / new |")
print("|---|---|---|---|")
for tag, t in times.items():
    o, n = t.get("old"), t.get("new")
    ratio = f"{min(o) / max(n):.3f}-{max(o) / min(n):.3f}" if o and n else "-"
    print(f"| {tag} | {span(o) if o else '-'} | {span(n) if n else '-'} | {ratio} |")
EOF
cat "$out/table.md"
