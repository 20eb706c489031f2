//go:build !unix

package main

// watchResize does nothing where there is no SIGWINCH.
func watchResize(func()) (stop func()) { return func() {} }
