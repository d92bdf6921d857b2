#!/usr/bin/env bash
# Layout checks: fast, no build needed. Fails (exit 1) and prints every violation when:
#   - a folder includes a header of a folder it must not depend on. Dependencies point one way:
#       base <- {engine, store} <- pipeline <- chat <- {gui, app};  bench: what it measures;
#       tests: anything.
#     base/ includes only base/; engine/ only base/ and engine/; store/ only base/ and store/;
#     pipeline/ nothing of chat/, gui/, app/, bench/; chat/ nothing of gui/, app/, bench/;
#     gui/ nothing of app/, bench/; bench/ nothing of app/; app/serve/ (the server library)
#     nothing of bench/; no production folder anything of tests/. So app/ is included only by
#     app/ and tests/, and bench/ only by app/ (the executable's `impress bench`) and tests/;
#   - a CMake file other than app/'s and the tests' links impress_bench (the benchmarks reach the
#     program through the impress executable alone);
#   - a file points outside the repository (a folder beside the checkout, or a design or style
#     document that the repository does not contain);
#   - a hand-written source file (*.h, *.cpp, *.cu, *.cuh) is over MAX_FILE_LINES lines (800;
#     generated files excepted);
#   - a function in store/, pipeline/ or gui/worker* is over MAX_FUNCTION_LINES lines (120),
#     measured with lizard (pinned in scripts/requirements-reference.txt; setup.sh installs it);
#   - production code (every folder but tests/) takes a lock other than the annotated Mutex,
#     MutexLock and CondVar of base/mutex.h (std::mutex and its kin are invisible to
#     scripts/thread-safety.sh);
#   - production code outside base/sqlite.cpp includes sqlite3.h (base/sqlite.h is the one SQLite
#     layer; tests may reach below it).
# Usage: scripts/check-layout.sh   (from anywhere; checks the working tree, tracked and new files)
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$here/env.sh"
cd "$IMPRESS_ROOT"

max_file_lines=${MAX_FILE_LINES:-800}
max_function_lines=${MAX_FUNCTION_LINES:-120}
# Written by a generator (scripts/gen-unicode-tables.py), not by hand.
generated='^engine/tokenizer/unicode-tables\.cpp$'

n_bad=0
fail() {  # fail CHECK MESSAGE
  echo "[layout] $1: $2"
  n_bad=$((n_bad + 1))
}

# Files of the working tree: tracked and new (not ignored), that still exist.
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  mapfile -t all_files < <(git ls-files --cached --others --exclude-standard | sort -u |
    while read -r f; do [ -f "$f" ] && echo "$f"; done)
else
  mapfile -t all_files < <(find . -path ./.git -prune -o -path './build*' -prune -o -type f -print | sed 's|^\./||' | sort)
fi
sources=()
for f in "${all_files[@]}"; do
  case "$f" in *.h | *.cpp | *.cu | *.cuh) sources+=("$f") ;; esac
done

# --- 1. Include direction ---------------------------------------------------------------------
ours='base|engine|store|pipeline|chat|gui|app|bench|tests'
# forbidden FOLDER: the top-level folders FOLDER/ must not include from.
forbidden() {
  case "$1" in
    base) echo "engine store pipeline chat gui app bench tests" ;;
    engine) echo "store pipeline chat gui app bench tests" ;;
    store) echo "engine pipeline chat gui app bench tests" ;;
    pipeline) echo "chat gui app bench tests" ;;
    chat) echo "gui app bench tests" ;;
    gui) echo "app bench tests" ;;
    bench) echo "app tests" ;;
    app/serve) echo "bench tests" ;;
    app) echo "tests" ;;
    *) echo "" ;;
  esac
}
for f in "${sources[@]}"; do
  top=${f%%/*}
  case "$f" in app/serve/*) top=app/serve ;; esac
  banned=$(forbidden "$top")
  [ -n "$banned" ] || continue
  while IFS=: read -r line inc; do
    dep=${inc%%/*}
    for b in $banned; do
      if [ "$dep" = "$b" ]; then
        fail "include" "$f:$line includes \"$inc\" ($top/ must not depend on $b/)"
      fi
    done
  done < <(grep -nE "^[[:space:]]*#[[:space:]]*include[[:space:]]*[\"<]($ours)/" "$f" |
    sed -E 's/^([0-9]+):.*include[[:space:]]*["<]([^">]*)[">].*/\1:\2/')
done

# The benchmarks' library: linked by the executable (app/CMakeLists.txt) and the tests only.
for f in "${all_files[@]}"; do
  case "$f" in CMakeLists.txt | */CMakeLists.txt | *.cmake) ;; *) continue ;; esac
  case "$f" in app/CMakeLists.txt | tests/*) continue ;; esac
  while IFS= read -r hit; do
    fail "bench-link" "$f:${hit%%:*}: ${hit#*:} (only the impress executable and the tests link impress_bench)"
  done < <(grep -nE 'target_link_libraries\([[:space:]]*[^[:space:])]+[[:space:]][^)]*\bimpress_bench\b' "$f" |
    cut -c1-160)
done

# --- 2. Nothing points outside the repository -------------------------------------------------
# A sibling folder of the checkout (or an absolute path into one), then the names of design and
# style documents that live elsewhere (flagged only while the repository has no file of that name).
outside='\.\./shared\b|/shared/'
for doc in DESIGN.md STYLE.md; do
  if ! printf '%s\n' "${all_files[@]}" | grep -qE "(^|/)${doc//./\\.}$"; then
    outside="$outside|\\b${doc//./\\.}"
  fi
done
self="scripts/$(basename "${BASH_SOURCE[0]}")"
for f in "${all_files[@]}"; do
  [ "$f" = "$self" ] && continue
  while IFS= read -r hit; do
    fail "outside" "$f:${hit%%:*}: ${hit#*:}"
  done < <(grep -InE "$outside" "$f" 2>/dev/null | cut -c1-200)
done

# --- 3. File length ---------------------------------------------------------------------------
for f in "${sources[@]}"; do
  [[ "$f" =~ $generated ]] && continue
  n=$(wc -l <"$f")
  if ((n > max_file_lines)); then
    fail "file-size" "$f has $n lines (at most $max_file_lines: split it along its jobs)"
  fi
done

# --- 4. Function length (store/, pipeline/, gui/worker*) -------------------------------------
fn_files=()
for f in "${sources[@]}"; do
  case "$f" in store/* | pipeline/* | gui/worker*) fn_files+=("$f") ;; esac
done
lizard_python=""
for py in "$IMPRESS_PYTHON" python3; do
  if "$py" -c 'import lizard' >/dev/null 2>&1; then
    lizard_python=$py
    break
  fi
done
if [ -z "$lizard_python" ]; then
  fail "function-size" "lizard is not installed (bash scripts/setup.sh installs it into $IMPRESS_PYTHON)"
elif ((${#fn_files[@]})); then
  while IFS= read -r line; do
    fail "function-size" "$line"
  done < <("$lizard_python" - "$max_function_lines" "${fn_files[@]}" <<'PY'
import sys
import lizard

limit = int(sys.argv[1])
for path in sys.argv[2:]:
    for fn in lizard.analyze_file(path).function_list:
        n = fn.end_line - fn.start_line + 1
        if n > limit:
            print(f"{path}:{fn.start_line}: {fn.name} has {n} lines (at most {limit}: split it along its steps)")
PY
  )
fi

# --- 5. Locks: the annotated Mutex only (base/mutex.h wraps std::mutex for everyone) ----------
std_locks='std::(mutex|recursive_mutex|timed_mutex|shared_mutex|shared_timed_mutex|condition_variable|condition_variable_any|lock_guard|unique_lock|scoped_lock|shared_lock)\b'
for f in "${sources[@]}"; do
  case "$f" in tests/* | base/mutex.h) continue ;; esac
  while IFS= read -r hit; do
    fail "locks" "$f:${hit%%:*}: ${hit#*:} (use Mutex / MutexLock / CondVar of base/mutex.h, so the lock is checked)"
  done < <(grep -nE "$std_locks" "$f" | grep -vE '^[0-9]+:[[:space:]]*//' | cut -c1-160)
done

# --- 6. SQLite: only through base/sqlite.h --------------------------------------------------------
for f in "${sources[@]}"; do
  case "$f" in tests/* | base/sqlite.cpp) continue ;; esac
  while IFS= read -r hit; do
    fail "sqlite" "$f:${hit%%:*}: includes sqlite3.h (use base/sqlite.h, the one SQLite layer)"
  done < <(grep -nE '^[[:space:]]*#[[:space:]]*include[[:space:]]*[<"]sqlite3\.h[>"]' "$f")
done

if ((n_bad)); then
  echo "[layout] $n_bad violation(s)" >&2
  exit 1
fi
echo "[layout] ok: include direction, impress_bench linked by the executable only, no outside references, files <= $max_file_lines lines, functions <= $max_function_lines lines, annotated locks only, sqlite3.h only in base/sqlite.cpp"
