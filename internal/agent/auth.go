package agent

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"
)

// TokenHeader carries the access token on every request but GET /health.
const TokenHeader = "X-Access-Token"

var connectErrors = connect.NewErrorWriter()

// requireToken rejects requests without the current token. /files also
// accepts a signed URL instead of the header. Without any token everything
// but /health is refused: there is no open mode.
func requireToken(st *stateStore, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/health" && (r.Method == http.MethodGet || r.Method == http.MethodHead) {
			next.ServeHTTP(w, r)
			return
		}
		token := st.token()
		err := checkToken(r, token, time.Now())
		if err == nil {
			next.ServeHTTP(w, r)
			return
		}
		if isRPC(r.URL.Path) && connectErrors.IsSupported(r) {
			_ = connectErrors.Write(w, r, connect.NewError(connect.CodeUnauthenticated, err))
			return
		}
		writeJSONError(w, http.StatusUnauthorized, err.Error())
	})
}

// isRPC reports whether path is one of our Connect procedures.
func isRPC(path string) bool {
	for _, prefix := range []string{"/process.Process/", "/filesystem.Filesystem/", "/spaceagent.v1.Agent/"} {
		if strings.HasPrefix(path, prefix) {
			return true
		}
	}
	return false
}

// checkToken checks r's access token, or its /files URL signature, with
// envd's texts (WithAuthorization and validateSigning).
func checkToken(r *http.Request, token string, now time.Time) error {
	if token == "" {
		return errors.New("agent has no access token yet")
	}
	files := r.URL.Path == "/files"
	if got := r.Header.Get(TokenHeader); got != "" {
		if equal(got, token) {
			return nil
		}
		if files {
			return errors.New("access token present in header but does not match")
		}
		return errUnauthorized
	}
	if files {
		return checkSignature(r, token, now)
	}
	return errUnauthorized
}

var errUnauthorized = errors.New("unauthorized access, please provide a valid access token or method signing if supported")

// checkSignature verifies an envd signed /files URL: the signature first,
// then its expiry, as envd does (so a tampered expired URL is "invalid").
func checkSignature(r *http.Request, token string, now time.Time) error {
	q := r.URL.Query()
	if !q.Has("signature") {
		return errors.New("missing signature query parameter")
	}
	op := "read"
	if r.Method == http.MethodPost || r.Method == http.MethodPut {
		op = "write"
	}
	exp := q.Get("signature_expiration")
	want := Signature(q.Get("path"), op, q.Get("username"), token, exp)
	if !equal(q.Get("signature"), want) {
		return errors.New("invalid signature")
	}
	if exp != "" {
		n, err := strconv.ParseInt(exp, 10, 64)
		if err != nil {
			return errors.New("invalid signature")
		}
		if n < now.Unix() {
			return errors.New("signature is already expired")
		}
	}
	return nil
}

// Signature computes envd's /files URL signature; expiration is unix seconds
// or empty for none. op is "read" or "write".
func Signature(path, op, username, token, expiration string) string {
	parts := []string{path, op, username, token}
	if expiration != "" {
		parts = append(parts, expiration)
	}
	sum := sha256.Sum256([]byte(strings.Join(parts, ":")))
	return "v1_" + base64.RawStdEncoding.EncodeToString(sum[:])
}

func equal(a, b string) bool {
	return subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1
}
