// seccompgen is its own module: it imports gvisor.dev/gvisor, which SPACE
// itself does not. scripts/install-deps.sh runs it against a copy of the
// gVisor source it builds runsc from (a replace directive it adds), at
// the version it pins.
module github.com/spacesandbox/space/scripts/seccompgen

go 1.24

require gvisor.dev/gvisor v0.0.0-20260905035102-160fafc42237
