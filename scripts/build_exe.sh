#!/usr/bin/env bash
# Build the one-file executable from build_exe.spec.
#
#   scripts/build_exe.sh [DIST_DIR [WORK_DIR]]
#
# The result is DIST_DIR/cnkispider (Linux) or DIST_DIR/cnkispider.exe (Windows, e.g. from Git
# Bash); DIST_DIR defaults to dist/, WORK_DIR (PyInstaller's build cache) to build/exe/.
# PyInstaller runs under $PYTHON: default .venv's python (set up by `make setup`), else python3.
# PyInstaller cannot cross-compile: the Windows .exe is built by a Windows Python, on Windows
# (.github/workflows/windows-exe.yml) or here under Wine (scripts/build_exe_windows.sh).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
DIST="${1:-$ROOT/dist}"
WORK="${2:-$ROOT/build/exe}"
if [[ -z "${PYTHON:-}" ]]; then
  if [[ -x "$ROOT/.venv/bin/python" ]]; then PYTHON="$ROOT/.venv/bin/python"; else PYTHON=python3; fi
fi

started=$SECONDS
"$PYTHON" -m PyInstaller --noconfirm --clean --log-level WARN \
  --distpath "$DIST" --workpath "$WORK" "$ROOT/build_exe.spec"
exe="$DIST/cnkispider"
[[ -f "$exe.exe" ]] && exe="$exe.exe"
echo "built $exe ($(du -h "$exe" | cut -f1)) in $((SECONDS - started)) s"
