package openapicheck

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"regexp"
	"sort"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/spacesandbox/space/api/native"
	"github.com/spacesandbox/space/internal/e2bcompat/e2bapi"
	"github.com/spacesandbox/space/internal/errdefs"
)

// bodyOps are the operations of a spec that take a JSON body, sorted so
// an input means the same operation every run.
func bodyOps(spec *openapi3.T) []string {
	var ops []string
	for path, item := range spec.Paths.Map() {
		for method, op := range item.Operations() {
			if op.RequestBody != nil && op.RequestBody.Value != nil && op.RequestBody.Value.Content.Get(JSONType) != nil {
				ops = append(ops, method+" "+path)
			}
		}
	}
	sort.Strings(ops)
	return ops
}

// FuzzValidate feeds random bodies to the validator of every JSON-body
// operation of both specs (the native API's and E2B's), as the routes use
// it: it never panics, and it either lets the request through with its
// body unchanged or refuses it with a 4xx (400 invalid_argument naming
// what, 413 for a body over the bound), never anything else.
func FuzzValidate(f *testing.F) {
	nativeSpec, err := native.GetSwagger()
	if err != nil {
		f.Fatal(err)
	}
	e2bSpec, err := e2bapi.GetSwagger()
	if err != nil {
		f.Fatal(err)
	}
	specs := []*openapi3.T{nativeSpec, e2bSpec}
	ops := [][]string{bodyOps(nativeSpec), bodyOps(e2bSpec)}
	if len(ops[0]) < 20 || len(ops[1]) < 10 {
		f.Fatalf("only %d native and %d E2B operations with a JSON body", len(ops[0]), len(ops[1]))
	}
	for i, seed := range []string{
		`{}`, `{"templateID":"base","timeout":60}`, `{"template":"base","timeout_seconds":-1}`, `null`, `[]`, `"x"`,
		`{"name":"t","steps":[{"copy":{"src":["a"],"dest":"/b"}}]}`, `{"network":{"allow":[1]}}`, `{"cmd":"true","env":{"A":1}}`,
		`{"timeout":1e999}`, `{"a":{"b":{"c":[[[[{}]]]]}}}`, `{"quotas":{"sandboxes":-2}}`, ``, `{"x":`,
	} {
		f.Add(uint8(i%2), uint16(i*5), []byte(seed))
	}
	param := regexp.MustCompile(`\{[^}]+\}`)
	f.Fuzz(func(t *testing.T, which uint8, op uint16, body []byte) {
		spec := specs[int(which)%2]
		list := ops[int(which)%2]
		method, path, _ := bytes.Cut([]byte(list[int(op)%len(list)]), []byte(" "))
		var refused error
		var reached []byte
		h := Validate(Route{Spec: spec, Method: string(method), Path: string(path), MaxBody: 1 << 16,
			Fail: func(w http.ResponseWriter, r *http.Request, err error) { refused = err; w.WriteHeader(499) },
		}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			var err error
			if reached, err = readAll(r); err != nil {
				t.Fatal(err)
			}
		}))
		mux := http.NewServeMux()
		mux.Handle(string(method)+" "+string(path), h)
		url := param.ReplaceAllLiteralString(string(path), "p")
		req := httptest.NewRequest(string(method), url, bytes.NewReader(body))
		mux.ServeHTTP(httptest.NewRecorder(), req)
		switch {
		case refused != nil:
			status, _ := errdefs.HTTPStatus(refused)
			if status != http.StatusBadRequest && status != http.StatusRequestEntityTooLarge {
				t.Fatalf("%s %s refused %q with %d: %v", method, path, body, status, refused)
			}
		case !bytes.Equal(reached, body):
			t.Fatalf("%s %s: the handler read %q, the client sent %q", method, path, reached, body)
		case json.Valid(body) && len(body) > 1<<16:
			t.Fatalf("%s %s: a body over the bound was let through", method, path)
		}
	})
}

func readAll(r *http.Request) ([]byte, error) {
	var b bytes.Buffer
	_, err := b.ReadFrom(r.Body)
	return b.Bytes(), err
}
