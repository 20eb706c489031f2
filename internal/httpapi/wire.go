package httpapi

import "github.com/spacesandbox/space/api/native"

// The generated wire types (api/native) make every field the spec does not
// require a pointer, so that a request can tell "left out" from "zero".
// These helpers fill them in answers and read them from requests, keeping
// the wire format of the hand-written structs they replaced: ptr for a
// field that is always present, opt for one left out when zero (what
// omitempty did), deref to read a request's field (zero when left out).

// ptr points at v: the field is present in the answer even when zero.
func ptr[T any](v T) *T { return &v }

// opt points at v, or is nil (the field left out) when v is zero.
func opt[T comparable](v T) *T {
	var zero T
	if v == zero {
		return nil
	}
	return &v
}

// optSlice points at s, or is nil when s is empty.
func optSlice[T any](s []T) *[]T {
	if len(s) == 0 {
		return nil
	}
	return &s
}

// optMap points at m, or is nil when m is empty.
func optMap[K comparable, V any](m map[K]V) *map[K]V {
	if len(m) == 0 {
		return nil
	}
	return &m
}

// deref reads a request's optional field: its value, or zero when left out.
func deref[T any](p *T) T {
	if p == nil {
		var zero T
		return zero
	}
	return *p
}

// optRest is a sandbox's rest state, left out when it was not asked for.
func optRest(rest string) *native.SandboxRest {
	if rest == "" {
		return nil
	}
	r := native.SandboxRest(rest)
	return &r
}
