package interpreter

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"time"
)

// The NDJSON lines of POST /execute, as the E2B SDKs read them: they act
// on stdout, stderr, result, error and number_of_executions, and ignore
// any other type (keepalive, end_of_execution, unexpected_end_of_execution).

type streamLine struct {
	Type      string `json:"type"` // stdout | stderr
	Text      string `json:"text"`
	Timestamp string `json:"timestamp"`
}

type errorLine struct {
	Type      string `json:"type"` // error
	Name      string `json:"name"`
	Value     string `json:"value"`
	Traceback string `json:"traceback"`
}

type countLine struct {
	Type           string `json:"type"` // number_of_executions
	ExecutionCount int    `json:"execution_count"`
}

type markerLine struct {
	Type string `json:"type"` // keepalive | end_of_execution | unexpected_end_of_execution
}

// resultLine holds exactly E2B's keys: the JS SDK copies any other
// top-level key into a result's extra. Values pass through as the kernel
// sent them (base64 images, strings, JSON objects and lists).
type resultLine struct {
	Type         string                     `json:"type"` // result
	Text         *string                    `json:"text,omitempty"`
	HTML         json.RawMessage            `json:"html,omitempty"`
	Markdown     json.RawMessage            `json:"markdown,omitempty"`
	SVG          json.RawMessage            `json:"svg,omitempty"`
	PNG          json.RawMessage            `json:"png,omitempty"`
	JPEG         json.RawMessage            `json:"jpeg,omitempty"`
	PDF          json.RawMessage            `json:"pdf,omitempty"`
	LaTeX        json.RawMessage            `json:"latex,omitempty"`
	JSON         json.RawMessage            `json:"json,omitempty"`
	JavaScript   json.RawMessage            `json:"javascript,omitempty"`
	Data         json.RawMessage            `json:"data,omitempty"`
	Chart        json.RawMessage            `json:"chart,omitempty"`
	Extra        map[string]json.RawMessage `json:"extra,omitempty"`
	IsMainResult bool                       `json:"is_main_result"`
}

// newResult maps a display bundle's MIME types onto a result line.
func newResult(data map[string]json.RawMessage, main bool) resultLine {
	r := resultLine{Type: "result", IsMainResult: main}
	fields := map[string]*json.RawMessage{
		"text/html": &r.HTML, "text/markdown": &r.Markdown, "image/svg+xml": &r.SVG,
		"image/png": &r.PNG, "image/jpeg": &r.JPEG, "application/pdf": &r.PDF,
		"text/latex": &r.LaTeX, "application/json": &r.JSON,
		"application/javascript": &r.JavaScript, "e2b/data": &r.Data, "e2b/chart": &r.Chart,
	}
	for mime, v := range data {
		if mime == "text/plain" {
			var s string
			if json.Unmarshal(v, &s) == nil {
				s = stripQuotes(s)
				r.Text = &s
			}
			continue
		}
		if f, ok := fields[mime]; ok {
			*f = v
			continue
		}
		if r.Extra == nil {
			r.Extra = map[string]json.RawMessage{}
		}
		r.Extra[mime] = v
	}
	return r
}

// stripQuotes removes the quotes of a string's repr, as E2B's server does:
// a cell ending in 'abc' has the text abc.
func stripQuotes(s string) string {
	if len(s) >= 2 && (s[0] == '\'' && s[len(s)-1] == '\'' || s[0] == '"' && s[len(s)-1] == '"') {
		return s[1 : len(s)-1]
	}
	return s
}

// lineSink is where an execution's lines go: straight to the client
// (lineWriter, /execute) or into an execution's log (/executions).
type lineSink interface {
	write(v any)
	// gone reports a client that went away: the cell is interrupted.
	gone() bool
}

// lineWriter writes NDJSON lines to an HTTP response, each flushed at
// once. After the first failed write (the client went away, or stopped
// reading for writeTimeout) it drops everything and reports gone.
type lineWriter struct {
	w      http.ResponseWriter
	rc     *http.ResponseController
	failed bool
}

// writeTimeout bounds one line's write: a client that stops reading must
// not hold the context (and its kernel) forever.
const writeTimeout = 30 * time.Second

func newLineWriter(w http.ResponseWriter) *lineWriter {
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	lw := &lineWriter{w: w, rc: http.NewResponseController(w)}
	// Headers now: the JS SDK's request timer runs until they arrive, and
	// an execution may wait for the context behind another one.
	if err := lw.rc.Flush(); err != nil {
		lw.failed = true
	}
	return lw
}

func (lw *lineWriter) gone() bool { return lw.failed }

func (lw *lineWriter) write(v any) {
	if lw.failed {
		return
	}
	lw.writeRaw(mustEncodeLine(v))
}

// writeRaw writes lines already encoded, then flushes once.
func (lw *lineWriter) writeRaw(lines ...[]byte) {
	if lw.failed {
		return
	}
	for _, b := range lines {
		_ = lw.rc.SetWriteDeadline(time.Now().Add(writeTimeout))
		if _, err := lw.w.Write(b); err != nil {
			lw.failed = true
			return
		}
	}
	if err := lw.rc.Flush(); err != nil {
		lw.failed = true
	}
}

// mustEncodeLine is encodeLine, with an error line in place of a value
// that does not encode.
func mustEncodeLine(v any) []byte {
	b, err := encodeLine(v)
	if err != nil {
		b, _ = encodeLine(errorLine{Type: "error", Name: "SerializationError", Value: err.Error()})
	}
	return b
}

// encodeLine is v as one JSON line. HTML stays as it is (no \u003c):
// results carry whole HTML tables.
func encodeLine(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil { // Encode ends the line with \n
		return nil, err
	}
	return buf.Bytes(), nil
}

// joinTraceback joins a traceback's frames with newlines (E2B joins with
// nothing, which glues frames onto one line; the SDKs treat it as text).
func joinTraceback(tb []string) string { return strings.Join(tb, "\n") }
