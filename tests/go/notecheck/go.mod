module memory-ledger.test/notecheck

go 1.19

require golang.org/x/mod v0.0.0

// Debian's golang-golang-x-mod-dev; the test builds offline (GOPROXY=off, GOFLAGS=-mod=mod).
replace golang.org/x/mod => /usr/share/gocode/src/golang.org/x/mod
