#!/usr/bin/env bash
# Shows that the suite can fail: runs tests against broken inputs and requires every one of them
# to FAIL (not pass, not skip).
#   1. The default model replaced by a corrupt file (its first 4 KiB): the pipeline and
#      model-loader tests on the default model load it once per suite, and a failed load must
#      fail each test (a fatal failure in SetUpTestSuite would make GoogleTest skip them).
#   2. A reference python that is killed by a signal: the tests comparing with the Python
#      reference must fail, not skip as if python were missing.
#   scripts/check-tests-fail.sh [BUILD_DIR]   (default: build; the tests must be built)
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$here/env.sh"
dir=${1:-build}
case "$dir" in /*) ;; *) dir="$IMPRESS_ROOT/$dir" ;; esac
work=$(mktemp -d "${TMPDIR:-/tmp}/impress-check-fail.XXXXXX")
trap 'rm -rf "$work"' EXIT

# Runs the ctest selection $2 with the environment in $1 ("VAR=value ..."); every selected test
# must have failed. Prints the verdict per test.
expect_all_fail() {
  local what=$1 env_assign=$2 pattern=$3
  local junit="$work/junit.xml"
  rm -f "$junit"
  echo "--- $what: ctest -R '$pattern' must fail every test"
  # shellcheck disable=SC2086
  if env $env_assign ctest --test-dir "$dir" -R "$pattern" --output-junit "$junit" >"$work/ctest.log" 2>&1; then
    echo "FAIL: ctest passed with $what"
    cat "$work/ctest.log"
    return 1
  fi
  "$IMPRESS_PYTHON" - "$junit" <<'EOF'
import sys
import xml.etree.ElementTree as ET
cases = list(ET.parse(sys.argv[1]).iter("testcase"))
bad = [c.get("name") + " -> " + c.get("status", "?") for c in cases if c.get("status") != "fail"]
print(f"    {len(cases)} tests selected, {len(cases) - len(bad)} failed as they must")
for b in bad:
    print("    NOT FAILED: " + b)
sys.exit(1 if bad or not cases else 0)
EOF
}

head -c 4096 "$IMPRESS_DEFAULT_MODEL" >"$work/corrupt.gguf"
expect_all_fail "a corrupt default model" "IMPRESS_DEFAULT_MODEL=$work/corrupt.gguf" \
  '^(PipelineOnModel|DefaultModel)\.'

# The tests start python through system(), i.e. under `sh -c`. A shell that waits for its child
# (dash) turns the child's SIGKILL into exit status 137; the interpreter dying of a signal shows
# as a signal only where the shell execs it. So the stand-in kills that waiting shell too, and the
# caller sees the signal itself either way.
cat >"$work/killed-python" <<'SH'
#!/bin/sh
case "$(cat /proc/$PPID/comm)" in sh | dash | bash) kill -KILL "$PPID" ;; esac
kill -KILL $$
SH
chmod +x "$work/killed-python"
expect_all_fail "a reference python killed by SIGKILL" "IMPRESS_PYTHON=$work/killed-python" \
  '^(HfFolders\.|DefaultModel\.WeightsMatchTheGgufPythonPackage)'
echo "=== broken inputs fail the tests that depend on them"
