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

func TestDesktop(t *testing.T) {
	a := Desktop("token-a")
	if a == Desktop("token-b") || a == Interpreter("token-a") || len(a) != 64 {
		t.Fatalf("Desktop gave %q", a)
	}
	// Pinned, as Interpreter is: templates keep the server they were built with.
	if got := Desktop("x"); got != "a04cbd51798d4d3f17420f487fe891201bac2b72e34ad1e7a4dc7249054082b2" {
		t.Fatalf("Desktop(x) = %s: the derivation changed", got)
	}
}
