# SPDX-License-Identifier: Apache-2.0
# Sourced by scripts/gpu-*-check.sh: the correctness grid on the GPU once per kernel path, so
# that a path that fails it is never timed. Uses $out (the output folder) and $passed.
#
# grid_pass NAME JOBS REGEX [ENV ...]: ctest -jJOBS -R REGEX over build/ under `env ENV ...`
# (NAME=VALUE assignments, or -u NAME to unset), its output in $out/ctest-NAME.txt; NAME joins
# $passed when every test passes (at once, without running, when SKIP_TESTS=1).
grid_pass() {
  local name=$1 jobs=$2 regex=$3
  shift 3
  if [[ "${SKIP_TESTS:-0}" == 1 ]]; then passed="$passed $name"; return; fi
  local start rc=0
  start=$(date +%s)
  env "$@" ctest --test-dir build --output-on-failure -j"$jobs" -R "$regex" > "$out/ctest-$name.txt" 2>&1 || rc=$?
  echo "ctest ($name) rc=$rc in $(( $(date +%s) - start )) s" | tee -a "$out/ctest-$name.txt"
  [[ $rc == 0 ]] && passed="$passed $name"
  return 0
}

# passed_among LIST: the names of LIST (space-separated) that are in $passed, in LIST's order.
passed_among() {
  local name kept=""
  for name in $1; do
    [[ " $passed " == *" $name "* ]] && kept="$kept $name"
  done
  echo "$kept"
}
