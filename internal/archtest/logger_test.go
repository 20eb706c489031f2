package archtest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// globalLogging are log/slog's functions that log through, or replace, the
// process-wide default logger.
var globalLogging = map[string]bool{
	"Debug": true, "Info": true, "Warn": true, "Error": true, "Log": true, "LogAttrs": true,
	"DebugContext": true, "InfoContext": true, "WarnContext": true, "ErrorContext": true,
	"With": true, "Default": true, "SetDefault": true,
}

// globalLogCalls answers "file:line slog.X" for every call of globalLogging
// in the Go files (tests aside) under dir.
func globalLogCalls(t *testing.T, dir string) []string {
	t.Helper()
	return selectorUses(t, dir, "log/slog", false, func(name string) bool { return globalLogging[name] })
}

// TestNoGlobalLogger: no package logs through slog's process-wide default
// or replaces it; each part is handed its logger (spaced's main makes the
// one logger and passes it down).
func TestNoGlobalLogger(t *testing.T) {
	root := filepath.Join("..", "..")
	for _, dir := range []string{"internal", "cmd", "client", "api"} {
		for _, call := range globalLogCalls(t, filepath.Join(root, dir)) {
			t.Errorf("%s: log through an injected *slog.Logger instead", call)
		}
	}
}

// TestGlobalLoggerCheckCanFail: the check finds such a call (the positive
// control: a checker that found nothing anywhere would pass the test above).
func TestGlobalLoggerCheckCanFail(t *testing.T) {
	dir := t.TempDir()
	src := "package p\n\nimport l \"log/slog\"\n\nfunc f() { l.Info(\"x\"); _ = l.New(nil) }\n"
	if err := writeFile(filepath.Join(dir, "p.go"), src); err != nil {
		t.Fatal(err)
	}
	if got := globalLogCalls(t, dir); len(got) != 1 || !strings.HasSuffix(got[0], "l.Info") {
		t.Fatalf("found %v, want the one l.Info call", got)
	}
}

func writeFile(path, text string) error { return os.WriteFile(path, []byte(text), 0o644) }
