# Sourced by the other scripts: where caches, the default model and the builds live.
: "${XDG_CACHE_HOME:=$HOME/.cache}"
export IMPRESS_CACHE_DIR="${IMPRESS_CACHE_DIR:-$XDG_CACHE_HOME/impress}"
export IMPRESS_DEFAULT_MODEL="${IMPRESS_DEFAULT_MODEL:-$IMPRESS_CACHE_DIR/models/SmolLM2-135M-Instruct.Q4_1.gguf}"
export IMPRESS_PYTHON="${IMPRESS_PYTHON:-$IMPRESS_CACHE_DIR/venv/bin/python}"
IMPRESS_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export IMPRESS_ROOT
export IMPRESS_JOBS="${IMPRESS_JOBS:-$(nproc)}"
