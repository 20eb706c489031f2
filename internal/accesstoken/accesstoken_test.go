package accesstoken

import "testing"

func TestInterpreter(t *testing.T) {
	a, b := Interpreter("token-a"), Interpreter("token-b")
	if a == b || a == "token-a" || len(a) != 64 {
		t.Fatalf("Interpreter gave %q and %q", a, b)
	}
	if Interpreter("token-a") != a {
		t.Fatal("not deterministic")
	}
	// Pinned: templates keep the interpreter they were built with, so a
	// change here would lock spaced out of every existing one.
	if got := Interpreter("x"); got != "19ebbde91a8ed70cf1aa8f0d5e593a546dd47b872ad4a2ff18e1cb64f11b45e7" {
		t.Fatalf("Interpreter(x) = %s: the derivation changed", got)
	}
}
