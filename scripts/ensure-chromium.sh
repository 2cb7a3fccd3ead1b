#!/usr/bin/env bash
# Find, or else install, the headless Chromium that the browser test of the HTML audit
# report drives through Playwright (tests/test_audit_report.py). `make test` runs this and
# passes the path it prints to the tests as LEDGER_CHROMIUM. Playwright's own browser
# download is never used. In order:
#   1. LEDGER_CHROMIUM, if it names an executable;
#   2. chromium / chromium-browser / google-chrome on PATH, or Debian's /usr/lib/chromium;
#   3. a copy unpacked earlier into .cache/chromium/ of this repository;
#   4. as root with apt-get: `apt-get install chromium` (Debian's package);
#   5. otherwise, or when the package is installed but hidden: Debian's chromium packages
#      fetched with `apt-get download` (no root needed) and unpacked into .cache/chromium/
#      (the libraries it links against must be on the system: `ldd` is checked).
# Prints the executable's path on stdout; exits 3 with what to do when none can be had.
set -euo pipefail
cd "$(dirname "$0")/.."
cache="$PWD/.cache/chromium"
say() { echo "chromium: $*" >&2; }

usable() {  # an executable that starts and reports its version
  [ -n "${1:-}" ] && [ -f "$1" ] && [ -x "$1" ] && "$1" --headless --no-sandbox --version >/dev/null 2>&1
}

found() {
  local c
  for c in "${LEDGER_CHROMIUM:-}" "$(command -v chromium || true)" \
           "$(command -v chromium-browser || true)" "$(command -v google-chrome || true)" \
           /usr/lib/chromium/chromium "$cache/usr/lib/chromium/chromium"; do
    if usable "$c"; then echo "$c"; return 0; fi
  done
  return 1
}

if found; then exit 0; fi

if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 \
   && ! dpkg-query -W -f='${Status}' chromium 2>/dev/null | grep -q "install ok installed"; then
  say "not found; installing Debian's chromium package with apt-get"
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -qq chromium >/dev/null 2>&1 \
    || { apt-get update -qq && apt-get install -y -qq chromium >/dev/null; } || true
  if found; then exit 0; fi
fi

if command -v apt-get >/dev/null 2>&1 && command -v dpkg-deb >/dev/null 2>&1; then
  say "not found; unpacking Debian's chromium packages into $cache (apt-get download)"
  debs="$(mktemp -d "${TMPDIR:-/tmp}/ledger-chromium-XXXXXX")"
  trap 'rm -rf "$debs"' EXIT
  if (cd "$debs" && apt-get download -qq chromium chromium-common >/dev/null 2>&1); then
    rm -rf "$cache" && mkdir -p "$cache"
    for deb in "$debs"/*.deb; do dpkg-deb -x "$deb" "$cache"; done
    missing="$(ldd "$cache/usr/lib/chromium/chromium" 2>/dev/null | grep 'not found' || true)"
    if [ -n "$missing" ]; then
      say "the unpacked chromium needs libraries this system lacks:"; echo "$missing" >&2
    elif usable "$cache/usr/lib/chromium/chromium"; then
      echo "$cache/usr/lib/chromium/chromium"; exit 0
    fi
  else
    say "apt-get download chromium failed (run 'apt-get update' first?)"
  fi
fi

say "no usable Chromium. Install one (Debian/Ubuntu: sudo apt-get install chromium) or set"
say "LEDGER_CHROMIUM=/path/to/chromium, then run make test again."
exit 3
