#!/usr/bin/env bash
# Find, or else install, axe-core (Deque's accessibility engine, from the npm registry) for
# the console's browser tests (tests/test_console.py inject it with Playwright). Like
# scripts/ensure-chromium.sh, the tests run this step themselves; `make test` too.
#   1. LEDGER_AXE, if it names axe.min.js;
#   2. a copy installed earlier into .cache/axe-core/ of this repository;
#   3. `npm install axe-core@VERSION` into .cache/axe-core/ (gitignored).
# Prints the path of axe.min.js on stdout; exits 3 with what to do when none can be had.
set -euo pipefail
cd "$(dirname "$0")/.."
version="${LEDGER_AXE_VERSION:-4.10.3}"
dir="$PWD/.cache/axe-core"
js="$dir/node_modules/axe-core/axe.min.js"
say() { echo "axe-core: $*" >&2; }

if [ -n "${LEDGER_AXE:-}" ] && [ -f "$LEDGER_AXE" ]; then echo "$LEDGER_AXE"; exit 0; fi
if [ -f "$js" ] && grep -q "\"version\": \"$version\"" "$dir/node_modules/axe-core/package.json"; then
  echo "$js"; exit 0
fi
if ! command -v npm >/dev/null 2>&1; then
  say "npm is missing: install Node.js (Debian: sudo apt-get install npm), or set"
  say "LEDGER_AXE=/path/to/axe.min.js, then run the tests again."
  exit 3
fi
say "installing axe-core@$version into $dir (npm install)"
mkdir -p "$dir"
[ -f "$dir/package.json" ] || echo '{"private": true}' > "$dir/package.json"
if ! npm install --prefix "$dir" --no-audit --no-fund --no-save --loglevel=error \
     "axe-core@$version" >&2; then
  say "npm install axe-core@$version failed (no network? a registry set in ~/.npmrc?)"
  exit 3
fi
if [ -f "$js" ]; then echo "$js"; exit 0; fi
say "npm install finished but $js is missing"
exit 3
