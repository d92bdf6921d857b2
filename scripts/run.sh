#!/usr/bin/env bash
# The main job: set up, build, and start IMPRESS with the default model and a sample document.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
bash "$here/setup.sh"
bash "$here/build.sh" build
source "$here/env.sh"
exec "$IMPRESS_ROOT/build/bin/impress" chat --doc "$IMPRESS_ROOT/assets/docs/gpl-3.0.txt" "$@"
