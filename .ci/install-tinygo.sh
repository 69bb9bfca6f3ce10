#!/usr/bin/env bash
# Installs TinyGo for building Go guests, from its source and Debian's LLVM 19, and prints the
# path of the `tinygo` command to use (the last line of stdout). Needs only Debian packages and
# the Go module proxy; runs offline once installed. `make tinygo` and `make test-tinygo` call it.
#
#   .ci/install-tinygo.sh            install if missing, print the tinygo command
#   TINYGO_DIR=dir .ci/install-tinygo.sh   install into dir instead of the default below
#   .ci/install-tinygo.sh --packages the Debian packages it needs, one a line (.ci/install-deps.sh
#                                    installs them with its own in one apt-get run)
#
# What it does, once (a later run only checks the stamp file and the Debian packages):
#   - apt-get installs LLVM/Clang/LLD 19, compiler-rt for wasm32, wasi-libc and binaryen
#     (needs root; as another user, install the packages listed below with sudo first);
#   - fetches the TinyGo source through the Go module proxy (the module cache is read-only, so
#     it is copied out) and builds it with `go build -tags llvm19` against Debian's LLVM;
#   - prepares TINYGOROOT: the module has no git submodules, so src/net is created empty (only
#     programs importing net need it), and TinyGo's C libraries for wasip1 are put, prebuilt,
#     where its library cache looks for them: Debian's wasi-libc without its dlmalloc.o (TinyGo
#     brings its own allocator) and Debian's compiler-rt builtins for wasm32;
#   - writes a `tinygo` wrapper that points TinyGo at that root and cache.
# Everything lands in one directory outside the source tree, by default
# ${XDG_CACHE_HOME:-~/.cache}/wasmstream-tinygo/v$VERSION; delete it to start afresh.
set -euo pipefail

VERSION=0.41.0
LLVM=19
DIR=${TINYGO_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/wasmstream-tinygo/v$VERSION}
STAMP="tinygo $VERSION llvm $LLVM layout 1"
PKGS=(llvm-$LLVM-dev libclang-$LLVM-dev clang-$LLVM lld-$LLVM libclang-rt-$LLVM-dev-wasm32 wasi-libc binaryen)

log() { echo "install-tinygo: $*" >&2; }

if [[ ${1:-} == --packages ]]; then
  printf '%s\n' "${PKGS[@]}"
  exit 0
fi

missing=()
for p in "${PKGS[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if ((${#missing[@]})); then
  if [[ $(id -u) != 0 ]]; then
    log "missing Debian packages: ${missing[*]}; install them (sudo apt-get install ${missing[*]}) and run this again"
    exit 1
  fi
  log "installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  # One install has been seen to fail with "dpkg: cannot stat"; a second try works.
  for try in 1 2 3; do
    if apt-get install -y -qq "${missing[@]}" >/dev/null; then break; fi
    if ((try == 3)); then log "apt-get install failed 3 times"; exit 1; fi
    log "apt-get install failed (try $try); retrying"
    sleep 5
  done
fi

installed() { [[ -x $DIR/tinygo && $(cat "$DIR/stamp" 2>/dev/null) == "$STAMP" ]]; }
if installed; then
  echo "$DIR/tinygo"
  exit 0
fi

# One install at a time (several checkouts may run make test at once); the second one waits
# and finds the first one's result.
mkdir -p "$(dirname "$DIR")"
exec 9>"$DIR.lock"
flock 9
if installed; then
  echo "$DIR/tinygo"
  exit 0
fi
# Start afresh, but never delete a directory this script did not make.
if [[ -e $DIR && ! -e $DIR/stamp && ! -e $DIR/.install-tinygo && -n $(ls -A "$DIR") ]]; then
  log "$DIR exists and is not a TinyGo install of this script; remove it or set TINYGO_DIR"
  exit 1
fi
command -v go >/dev/null || export PATH=/usr/local/go/bin:$PATH
log "building TinyGo $VERSION into $DIR"
rm -rf "$DIR"
mkdir -p "$DIR"
touch "$DIR/.install-tinygo" # marks it as ours while the stamp is not written yet
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# The source through the module proxy: ask for the version by name (a proxy may refuse to list
# versions). -mod=mod because there is no enclosing module to resolve it against.
src=$(cd "$tmp" && GOFLAGS=-mod=mod go mod download -json "github.com/tinygo-org/tinygo@v$VERSION" |
  sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
[[ -d $src ]] || { log "go mod download gave no source directory"; exit 1; }
root=$DIR/root
cp -R "$src" "$root"
chmod -R u+w "$root"
mkdir -p "$root/src/net"

# External tools (clang-19, wasm-ld-19) from PATH, libclang and LLVM linked dynamically. cgo
# compiles with the clang just installed (it brings libstdc++'s headers), not whatever gcc/g++
# the machine may lack.
(cd "$root" && CGO_ENABLED=1 CC=clang-$LLVM CXX=clang++-$LLVM go build -trimpath -tags llvm$LLVM -o bin/tinygo .)

# TinyGo's library cache: <cache>/tinygo/<library>-<triple>-<cpu>/lib.a (+ include/ for a libc),
# see LibraryPath in its compileopts/config.go. Prebuilt here, TinyGo never needs their sources.
cache=$DIR/cache/tinygo
libc=$cache/wasi-libc-wasm32-unknown-wasi-generic
rt=$cache/compiler-rt-wasm32-unknown-wasi-generic
mkdir -p "$libc" "$rt"
cp /usr/lib/wasm32-wasi/libc.a "$libc/lib.a"
chmod u+w "$libc/lib.a"
# dlmalloc.o would define malloc and free next to TinyGo's own.
if ar t "$libc/lib.a" | grep -qx dlmalloc.o; then ar d "$libc/lib.a" dlmalloc.o; fi
cp -R /usr/include/wasm32-wasi "$libc/include"
cp "/usr/lib/llvm-$LLVM/lib/clang/$LLVM/lib/wasi/libclang_rt.builtins-wasm32.a" "$rt/lib.a"

cat >"$DIR/tinygo" <<EOF
#!/bin/sh
# TinyGo $VERSION as installed by the wasmstream repository's .ci/install-tinygo.sh.
# TinyGo keeps its library cache in \$XDG_CACHE_HOME/tinygo; pin Go's own cache first so that
# moving XDG_CACHE_HOME does not move it.
command -v go >/dev/null 2>&1 || PATH=/usr/local/go/bin:\$PATH
GOCACHE=\${GOCACHE:-\$(go env GOCACHE)}
export PATH GOCACHE
export TINYGOROOT='$root'
export XDG_CACHE_HOME='$DIR/cache'
exec '$root/bin/tinygo' "\$@"
EOF
chmod +x "$DIR/tinygo"
"$DIR/tinygo" version >&2
echo "$STAMP" >"$DIR/stamp"
echo "$DIR/tinygo"
