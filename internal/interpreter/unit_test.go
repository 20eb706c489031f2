package interpreter

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spacesandbox/space/internal/interpreter/jupyter"
)

func TestNewResult(t *testing.T) {
	data := map[string]json.RawMessage{
		"text/plain": json.RawMessage(`"'quoted'"`), "text/html": json.RawMessage(`"<b>"`),
		"image/png": json.RawMessage(`"iVBO"`), "e2b/data": json.RawMessage(`{"a":[1]}`),
		"application/json": json.RawMessage(`[1,2]`), "application/vnd.x+json": json.RawMessage(`{"k":1}`),
	}
	b, err := encodeLine(newResult(data, true))
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	_ = json.Unmarshal(b, &got)
	want := `{"data":{"a":[1]},"extra":{"application/vnd.x+json":{"k":1}},"html":"<b>","is_main_result":true,"json":[1,2],"png":"iVBO","text":"quoted","type":"result"}`
	if b, _ := encodeLine(got); strings.TrimSpace(string(b)) != want {
		t.Errorf("result\n got %s\nwant %s", b, want)
	}
}

func TestStripQuotes(t *testing.T) {
	for in, want := range map[string]string{
		"'abc'": "abc", `"it's"`: "it's", "'": "'", "''": "", "abc": "abc", "'a\"": "'a\"", "42": "42",
	} {
		if got := stripQuotes(in); got != want {
			t.Errorf("stripQuotes(%q) = %q, want %q", in, got, want)
		}
	}
}

func stream(text string) *jupyter.Message {
	c, _ := json.Marshal(streamContent{Name: "stdout", Text: text})
	return &jupyter.Message{Header: jupyter.Header{MsgType: "stream"}, Content: c, Channel: jupyter.IOPub}
}

func TestOutputLimit(t *testing.T) {
	l := &outputLimit{max: 60}
	var kept []*jupyter.Message
	push := func(m *jupyter.Message) { kept = append(kept, m) }
	status := &jupyter.Message{Header: jupyter.Header{MsgType: "status"}, Channel: jupyter.IOPub}
	l.filter(stream("hello"), push) // 35 bytes of content
	l.filter(stream("ééééééééééé"), push)
	l.filter(stream("dropped"), push)
	l.filter(status, push)
	var types, texts []string
	for _, m := range kept {
		types = append(types, m.Type())
		if m.Type() == "stream" {
			var c streamContent
			_ = json.Unmarshal(m.Content, &c)
			texts = append(texts, c.Text)
		}
	}
	if got := strings.Join(types, " "); got != "stream stream "+truncatedType+" status" {
		t.Errorf("kept %s", got)
	}
	if len(texts) != 2 || texts[0] != "hello" || !strings.HasPrefix("ééééééééééé", texts[1]) || texts[1] == "" {
		t.Errorf("texts %q (cut on a rune boundary)", texts)
	}
}

// A kernel that cut its own output sends the marker: the execution's
// output ends there as if it had passed the limit (one marker, no result
// after it, errors and status still pass).
func TestOutputLimitKernelCut(t *testing.T) {
	l := &outputLimit{max: 1 << 20}
	var kept []string
	push := func(m *jupyter.Message) { kept = append(kept, m.Type()) }
	msg := func(typ string) *jupyter.Message {
		return &jupyter.Message{Header: jupyter.Header{MsgType: typ}, Content: json.RawMessage(`{}`), Channel: jupyter.IOPub}
	}
	l.filter(stream("kept"), push)
	l.filter(msg(truncatedType), push)
	l.filter(stream("dropped"), push)
	l.filter(msg(truncatedType), push)
	l.filter(msg("execute_result"), push)
	l.filter(msg("error"), push)
	l.filter(msg("status"), push)
	if got, want := strings.Join(kept, " "), "stream "+truncatedType+" error status"; got != want {
		t.Errorf("kept %s, want %s", got, want)
	}
}

// TestStreamStart: the text a cut stream message's first bytes hold, as
// ipykernel (spaces) and Deno (none) write it, cut anywhere.
func TestStreamStart(t *testing.T) {
	for _, tc := range []struct {
		content string
		n       int64
		name    string
		text    string
		nothing bool
	}{
		{content: `{"name": "stderr", "text": "abcdef`, n: 100, name: "stderr", text: "abcdef"},
		{content: `{"name":"stdout","text":"abcdef`, n: 3, name: "stdout", text: "abc"},
		{content: `{"name": "stdout", "text": "ab\ncd`, n: 3, name: "stdout", text: "ab"}, // the escape would pass n
		{content: `{"name": "stdout", "text": "ab\u00e9`, n: 100, name: "stdout", text: "abé"},
		{content: `{"name": "stdout", "text": "ab\u00`, n: 100, name: "stdout", text: "ab"},                 // an escape cut in its middle
		{content: "{\"name\": \"stdout\", \"text\": \"ab\xc3\xa9\xc3", n: 100, name: "stdout", text: "abé"}, // a character cut in its middle
		{content: `{"name": "stdout", "text": "whole"} junk`, n: 100, name: "stdout", text: "whole"},
		{content: `{"text": "first", "name": "stderr"`, n: 100, name: "stdout", text: "first"},
		{content: `{"name": "stdout", "te`, n: 100, nothing: true},
		{content: `{"name": "stdout", "text": "`, n: 100, nothing: true},
		{content: `{"name": "stdout", "text": "abc`, n: 0, nothing: true},
		{content: `["not", "an object"`, n: 100, nothing: true},
	} {
		m := &jupyter.Message{Header: jupyter.Header{MsgType: "stream"}, Content: json.RawMessage(tc.content), Cut: true}
		part := streamStart(m, tc.n)
		if tc.nothing {
			if part != nil {
				t.Errorf("%q: %s, want nothing", tc.content, part.Content)
			}
			continue
		}
		var c streamContent
		if part == nil || part.Cut || json.Unmarshal(part.Content, &c) != nil || c.Name != tc.name || c.Text != tc.text {
			t.Errorf("%q (n %d): %+v, want %s %q", tc.content, tc.n, part, tc.name, tc.text)
		}
	}
}

// TestOutputLimitCut: a message the connection cut ends the execution's
// output with the start of its text (a stream) or nothing (a display, an
// error), then the marker; nothing of the execution's output follows.
func TestOutputLimitCut(t *testing.T) {
	for _, tc := range []struct {
		typ, content, want string
	}{
		{"stream", `{"name": "stdout", "text": "abcdefghij`, "stream " + truncatedType},
		{"display_data", `{"data": {"text/html": "xxxx`, truncatedType},
		{"error", `{"traceback": ["xxxx`, truncatedType},
	} {
		l := &outputLimit{max: int64(len(stream("hello").Content)) + 9} // "hello", then 9 bytes
		var kept []string
		var texts []string
		push := func(m *jupyter.Message) {
			kept = append(kept, m.Type())
			var c streamContent
			if m.Type() == "stream" && json.Unmarshal(m.Content, &c) == nil {
				texts = append(texts, c.Text)
			}
		}
		l.filter(stream("hello"), push)
		l.filter(&jupyter.Message{Header: jupyter.Header{MsgType: tc.typ}, Content: json.RawMessage(tc.content), Cut: true, Channel: jupyter.IOPub}, push)
		l.filter(stream("dropped"), push)
		if got := strings.Join(kept[1:], " "); got != tc.want {
			t.Errorf("%s: kept %s, want %s", tc.typ, got, tc.want)
		}
		if tc.typ == "stream" && (len(texts) != 2 || texts[1] != "abcdefghi") {
			t.Errorf("texts %q", texts)
		}
	}
}

func TestKernelAddressSpace(t *testing.T) {
	for _, tc := range []struct{ total, want uint64 }{
		{0, 0},
		{512 << 20, minKernelAS},
		{1 << 30, 1<<30 - 128<<20},
		{8 << 30, 7 << 30},
	} {
		if got := KernelAddressSpace(tc.total); got != tc.want {
			t.Errorf("KernelAddressSpace(%d MiB) = %d MiB, want %d MiB", tc.total>>20, got>>20, tc.want>>20)
		}
	}
}

func TestVMHeap(t *testing.T) {
	for _, tc := range []struct{ addrSpace, want uint64 }{
		{0, 0},
		{minKernelAS, 256},   // Deno's least
		{896 << 20, 384},     // code-interpreter-v1: 1 GiB
		{7 << 30, 7<<9 - 64}, // 8 GiB
	} {
		if got := vmHeapMiB(tc.addrSpace); got != tc.want {
			t.Errorf("vmHeapMiB(%d MiB) = %d MiB, want %d MiB", tc.addrSpace>>20, got, tc.want)
		}
	}
}

func TestReadLimits(t *testing.T) {
	dir := t.TempDir()
	write := func(name, s string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	if got := readLimit(write("v2", "max\n")); got != 0 {
		t.Errorf("max: %d", got)
	}
	if got := readLimit(write("v2b", "536870912\n")); got != 512<<20 {
		t.Errorf("limit: %d", got)
	}
	if got := readLimit(write("v1", "9223372036854771712\n")); got != 0 {
		t.Errorf("v1 unlimited: %d", got)
	}
	if got := memTotal(write("meminfo", "MemTotal:        1048576 kB\nMemFree: 1 kB\n")); got != 1<<30 {
		t.Errorf("MemTotal: %d", got)
	}
	if SandboxMemory() == 0 {
		t.Error("no memory size found on this machine")
	}
}

func TestStateFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "state.json")
	f := &stateFile{path: p}
	if _, _, err := f.get(); err == nil {
		t.Fatal("missing file read")
	}
	write := func(s string) {
		tmp := p + ".tmp"
		if err := os.WriteFile(tmp, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, p); err != nil {
			t.Fatal(err)
		}
	}
	write(`{"token":"a","env_vars":{"K":"1"},"default_user":"user"}`)
	s1, v1, err := f.get()
	if err != nil || s1.Token != "a" || s1.EnvVars["K"] != "1" {
		t.Fatalf("%+v %v", s1, err)
	}
	if _, v, _ := f.get(); v != v1 {
		t.Error("version changed without a change")
	}
	write(`{"token":"b","env_vars":{"K":"1"}}`)
	s2, v2, _ := f.get()
	if s2.Token != "b" || v2 == v1 {
		t.Errorf("replaced file not seen: %+v v%d", s2, v2)
	}
	// Same contents written again (a new Init with the same values): the
	// version, which tells the kernels to resync their env, stays.
	time.Sleep(10 * time.Millisecond)
	write(`{"token":"b","env_vars":{"K":"1"}}`)
	if _, v3, _ := f.get(); v3 != v2 {
		t.Errorf("version %d after an identical rewrite, want %d", v3, v2)
	}
}

func TestEnvCall(t *testing.T) {
	got := envCall("set_env", map[string]string{"A": `x'"\` + "\n"})
	want := `__import__('_space_interpreter').set_env("{\"A\":\"x'\\\"\\\\\\n\"}")`
	if got != want {
		t.Errorf("envCall\n got %s\nwant %s", got, want)
	}
}

func TestKernelEnv(t *testing.T) {
	env := kernelEnv([]string{"PATH=/bin", "HOME=/root", "IPYTHONDIR=/x", "A=b"}, "/run/ip", "/home/user")
	got := strings.Join(env, " ")
	for _, want := range []string{"PATH=/bin", "A=b", "IPYTHONDIR=/run/ip", "HOME=/home/user", "MALLOC_ARENA_MAX=2", "LANG=C.UTF-8"} {
		if !strings.Contains(got, want) {
			t.Errorf("env %q lacks %s", got, want)
		}
	}
	for _, bad := range []string{"HOME=/root", "IPYTHONDIR=/x"} {
		if strings.Contains(got, bad) {
			t.Errorf("env %q keeps %s", got, bad)
		}
	}
}

// The per-cell costs the server drops (quick flushes) are dropped in its
// kernels, and kept with PlainKernels.
func TestQuickFlush(t *testing.T) {
	code := map[string]any{"code": "import sys\n(get_ipython().kernel._execute_sleep, type(sys.stdout).flush.__name__)"}
	quick := startServer(t, Config{})
	plain := startServer(t, Config{PlainKernels: true})
	for _, tc := range []struct {
		s    *testServer
		want string
	}{
		{quick, "(0.0, '_space_flush')"},
		{plain, "(0.0005, 'flush')"},
	} {
		if got := tc.s.execute(t, code).mainText(); got != tc.want {
			t.Errorf("got %s, want %s", got, tc.want)
		}
	}
}
