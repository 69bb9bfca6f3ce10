#!/usr/bin/env bash
# Installs the Debian packages `make test` needs, if any is missing, and TinyGo (through
# .ci/install-tinygo.sh). `make test` runs it first, so the README's test command works on a
# fresh Debian machine as root; as another user it names the packages to install and fails.
#
#   rustc cargo libstd-rust-dev-wasm32   the Rust SDK and the Rust examples (wasm32 std)
#   wabt                                 wat2wasm for the hand-written .wat fixtures
#   kcat                                 the third-party Kafka client of the interop test
#   chromium                             the dashboard's browser test (e2e TestBinaryDashboard)
#   LLVM 19, wasi-libc, binaryen, …      TinyGo's (.ci/install-tinygo.sh --packages)
#
# Every missing package is installed in one apt-get run (one index update, one round of dpkg
# triggers). Then TinyGo is built from source (.ci/install-tinygo.sh, minutes on a fresh 2-core
# machine) unless --no-tinygo is given: `make test` passes it and starts that build in the
# background beside the tests, since only test-tinygo needs it.
set -euo pipefail
cd "$(dirname "$0")/.."

build_tinygo=1
if [[ ${1:-} == --no-tinygo ]]; then build_tinygo=0; fi

mapfile -t tinygo_pkgs < <(.ci/install-tinygo.sh --packages)
pkgs=(rustc cargo libstd-rust-dev-wasm32 wabt kcat chromium "${tinygo_pkgs[@]}")
missing=()
for p in "${pkgs[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if ((${#missing[@]})); then
  if [[ $(id -u) != 0 ]]; then
    echo "install-deps: missing Debian packages: ${missing[*]}; install them (sudo apt-get install ${missing[*]}) and run again" >&2
    exit 1
  fi
  echo "install-deps: installing ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  # One install has been seen to fail with "dpkg: cannot stat"; a second try works.
  for try in 1 2 3; do
    if apt-get install -y -qq "${missing[@]}" >/dev/null; then break; fi
    echo "install-deps: apt-get install failed (try $try); retrying" >&2
    sleep 5
  done
  for p in "${missing[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || { echo "install-deps: $p did not install" >&2; exit 1; }; done
fi
# TinyGo for the TinyGo guests, built once from source.
if ((build_tinygo)); then .ci/install-tinygo.sh >/dev/null; fi
