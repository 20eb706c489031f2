// Package archtest has no code, only a test: imports_test.go checks the
// module's import rules (which package may import which) on the graph that
// `go list` reports. docs/ARCHITECTURE.md ("Packages and who may import
// whom") says the same in prose; a change to one changes the other.
// storerows_test.go keeps the catalog's sandbox and build rows out of the
// API layers.
package archtest
