package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"connectrpc.com/connect"

	"github.com/spacesandbox/space/internal/errdefs"
)

// maxAgentMessage bounds how much of an agent's error message a caller
// sees.
const maxAgentMessage = 512

// fromAgent classifies an error from a sandbox's agent (a Connect error, or
// a failure to reach it). The agent is inside the sandbox, so its messages
// are shown only for the classes where they describe the caller's own
// request (a missing file, a bad argument).
func fromAgent(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, context.Canceled) {
		return err
	}
	if own, ok := WakeError(err); ok {
		return own
	}
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return errdefs.Wrap(errdefs.ErrUnavailable, err, "sandbox agent unreachable")
	}
	msg := truncate(ce.Message(), maxAgentMessage)
	switch ce.Code() {
	case connect.CodeNotFound:
		return errdefs.New(errdefs.ErrNotFound, "%s", msg)
	case connect.CodeInvalidArgument, connect.CodeOutOfRange, connect.CodeFailedPrecondition:
		return errdefs.New(errdefs.ErrInvalidArgument, "%s", msg)
	case connect.CodeAlreadyExists:
		return errdefs.New(errdefs.ErrAlreadyExists, "%s", msg)
	case connect.CodePermissionDenied:
		return errdefs.New(errdefs.ErrPermissionDenied, "%s", msg)
	case connect.CodeUnauthenticated:
		// The agent only says this about the Linux user named in the request:
		// spaced always sends the right token.
		return errdefs.New(errdefs.ErrInvalidArgument, "%s", msg)
	case connect.CodeResourceExhausted:
		return errdefs.New(errdefs.ErrResourceExhausted, "%s", msg)
	case connect.CodeUnavailable, connect.CodeDeadlineExceeded, connect.CodeCanceled:
		return errdefs.Wrap(errdefs.ErrUnavailable, err, "sandbox agent unavailable")
	}
	return errdefs.Wrap(errdefs.ErrUnavailable, err, "sandbox agent failed")
}

// fromAgentHTTP classifies a non-2xx answer of the agent's /files; the
// agent's JSON message is about the caller's own path.
func fromAgentHTTP(resp *http.Response) error {
	var body struct {
		Message string `json:"message"`
	}
	json.NewDecoder(io.LimitReader(resp.Body, 4096)).Decode(&body)
	msg := truncate(body.Message, maxAgentMessage)
	if msg == "" {
		msg = http.StatusText(resp.StatusCode)
	}
	switch resp.StatusCode {
	case http.StatusNotFound:
		return errdefs.New(errdefs.ErrNotFound, "%s", msg)
	case http.StatusBadRequest:
		return errdefs.New(errdefs.ErrInvalidArgument, "%s", msg)
	case http.StatusInsufficientStorage:
		return errdefs.New(errdefs.ErrNoSpace, "%s", msg)
	case http.StatusRequestedRangeNotSatisfiable:
		return errdefs.New(errdefs.ErrInvalidArgument, "range not satisfiable")
	}
	return errdefs.Wrap(errdefs.ErrUnavailable, fmt.Errorf("agent answered %d: %s", resp.StatusCode, msg), "sandbox agent failed")
}
