package httpapi

import (
	"bytes"
	"encoding/json"
	"net/http"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/spacesandbox/space/api/native"
)

// FuzzContract feeds any operation of api/openapi.yaml a fuzzed path
// parameter, query string and body through the generated router and the
// spec's validator to the handlers. Whatever comes in: no 5xx, every
// refusal is the JSON error body, and a body the validator let through is
// never one the handler's decoder calls unknown or mistyped (the
// validator and the handlers' types read the same contract).
func FuzzContract(f *testing.F) {
	spec, err := native.GetSwagger()
	if err != nil {
		f.Fatal(err)
	}
	var ops []string // "METHOD path", sorted so an input means the same operation every run
	for path, item := range spec.Paths.Map() {
		for method := range item.Operations() {
			if fuzzed.MatchString(path) && !strings.HasSuffix(path, "/events") {
				ops = append(ops, method+" "+path)
			}
		}
	}
	sort.Strings(ops)
	if len(ops) < 30 {
		f.Fatalf("only %d operations to fuzz: the allow list no longer matches the spec", len(ops))
	}
	for i, seed := range []struct{ param, query, body string }{
		{"sb1", "", `{}`},
		{"5", "path=/tmp&depth=2", `{"cmd":"true"}`},
		{"a b", "limit=-1", `{"timeout_seconds":-1}`},
		{"x", "after=abc", `{"memory_mb":"lots","tempalte":1}`},
		{"0", "state=zombie", `{"signal":"SIGHUP"}`},
		{"k", "", `{"name":"v","quotas":{"sandboxes":1,"x":2}}`},
		{"k", "", `{"steps":[{"copy":{"src":"a","dest":"/b"}}],"name":"t"}`},
		{"k", "", `null`},
		{"k", "", `[{}]`},
		{"k", "", `{"network":{"allow":[1]}}`},
	} {
		f.Add(uint16(i*7), seed.param, seed.query, []byte(seed.body))
	}
	h := fuzzServer(f)
	param := regexp.MustCompile(`\{[^}]+\}`)
	decoderWords := regexp.MustCompile(`json: unknown field|must be [a-z0-9.\[\]]+, not `)
	f.Fuzz(func(t *testing.T, op uint16, value, query string, body []byte) {
		method, path, _ := bytes.Cut([]byte(ops[int(op)%len(ops)]), []byte(" "))
		url := param.ReplaceAllLiteralString(string(path), escapePath(value)) + "?" + query
		req, err := http.NewRequest(string(method), url, bytes.NewReader(body))
		if err != nil {
			return // not a request a client could send
		}
		rec := serve(h, req)
		checkAnswer(t, string(method)+" "+url, rec)
		if rec.Code == http.StatusBadRequest {
			var e errorBody
			if jsonErr := jsonUnmarshal(rec.Body.Bytes(), &e); jsonErr == nil && decoderWords.MatchString(e.Error.Message) && validJSON(body) {
				t.Fatalf("%s %s: the validator let through a body the handler refuses: %s\n%s", method, url, e.Error.Message, body)
			}
		}
	})
}

// fuzzed are the routes fuzzServer serves in full. It has no runtime, no
// checkpoint store, no templates, volumes or audit log (a nil service
// panics, which the recovery answers 500), so the routes that reach those
// are left to their own tests, as are the streams that last until the
// client leaves.
var fuzzed = regexp.MustCompile(`^/(healthz|v1/sandboxes(/\{id\}(/(timeout|network|commands.*|code.*|contexts.*|files(/(list|stat|mkdir|move))?))?)?|v1/(secrets|keys|usage|admin/(tenants|keys|nodes|pools)).*)$`)

// escapePath makes v one path segment (the router would otherwise route
// a "/" in it elsewhere).
func escapePath(v string) string {
	var b bytes.Buffer
	for _, c := range []byte(v) {
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.' {
			b.WriteByte(c)
		} else {
			b.WriteString("%" + "0123456789ABCDEF"[c>>4:c>>4+1] + "0123456789ABCDEF"[c&15:c&15+1])
		}
	}
	if b.Len() == 0 {
		return "x"
	}
	return b.String()
}

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }

func validJSON(b []byte) bool { return json.Valid(b) }
