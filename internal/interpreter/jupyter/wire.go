// Package jupyter is the client side of the Jupyter messaging protocol
// (version 5) over ZeroMQ, as much of it as the code interpreter needs to
// drive one kernel: the connection file, signed messages, and a Client with
// the shell, control and iopub channels whose messages are routed to the
// request they answer.
package jupyter

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Version is the protocol version our headers carry (ipykernel 7 speaks 5.3).
const Version = "5.3"

// delimiter separates the routing identities from the signed message.
var delimiter = []byte("<IDS|MSG>")

// Header is a message header; a message's parent header is the header of
// the request it answers.
type Header struct {
	MsgID    string `json:"msg_id"`
	Session  string `json:"session"`
	Username string `json:"username"`
	Date     string `json:"date"`
	MsgType  string `json:"msg_type"`
	Version  string `json:"version"`
}

// Message is one Jupyter message. Content stays raw: each receiver decodes
// only the message types it handles.
type Message struct {
	Header       Header
	ParentHeader Header
	Metadata     json.RawMessage
	Content      json.RawMessage
	Channel      string // Shell, Control or IOPub: where it arrived
	// Cut says the message was over the Client's frame limit: Content
	// (or Metadata) holds only its first bytes, not valid JSON. Its
	// signature was checked over the whole message as it arrived.
	Cut bool
}

// Type is the message type.
func (m *Message) Type() string { return m.Header.MsgType }

// Parent is the msg_id of the request the message answers ("" if none).
func (m *Message) Parent() string { return m.ParentHeader.MsgID }

// signer signs and verifies with the connection's key (HMAC-SHA256 over the
// four JSON frames, as the connection file's signature_scheme says).
type signer struct{ key []byte }

func (s signer) sign(frames ...[]byte) []byte {
	if len(s.key) == 0 {
		return nil // an empty key turns signing off, per the protocol
	}
	mac := hmac.New(sha256.New, s.key)
	for _, f := range frames {
		mac.Write(f)
	}
	sum := mac.Sum(nil)
	out := make([]byte, hex.EncodedLen(len(sum)))
	hex.Encode(out, sum)
	return out
}

// encode builds the frames of a new request of type msgType.
func (s signer) encode(session, msgType string, content any) (msgID string, frames [][]byte, err error) {
	msgID = NewID()
	h, err := json.Marshal(Header{
		MsgID: msgID, Session: session, Username: "space", MsgType: msgType, Version: Version,
		Date: time.Now().UTC().Format(time.RFC3339Nano),
	})
	if err != nil {
		return "", nil, fmt.Errorf("encode header: %w", err)
	}
	c, err := json.Marshal(content)
	if err != nil {
		return "", nil, fmt.Errorf("encode %s content: %w", msgType, err)
	}
	parent, meta := []byte("{}"), []byte("{}")
	return msgID, [][]byte{delimiter, s.sign(h, parent, meta, c), h, parent, meta, c}, nil
}

var errBadSignature = errors.New("bad message signature")

// decode parses a received message. Routing identities and topics come
// before the delimiter in varying number (iopub topics, none at all for
// some kernels), so it is searched for rather than assumed at an index.
func (s signer) decode(frames [][]byte) (*Message, error) {
	cut, signed := false, false
	if n := len(frames); n > 0 {
		if cut, signed = trailer(frames[n-1]); cut {
			frames = frames[:n-1]
		}
	}
	i := 0
	for i < len(frames) && !bytes.Equal(frames[i], delimiter) {
		i++
	}
	if len(frames) < i+6 {
		return nil, fmt.Errorf("short message: %d frames, delimiter at %d", len(frames), i)
	}
	sig, h, p, md, c := frames[i+1], frames[i+2], frames[i+3], frames[i+4], frames[i+5]
	switch {
	case cut && !signed:
		return nil, errBadSignature
	case !cut && len(s.key) > 0 && !hmac.Equal(sig, s.sign(h, p, md, c)):
		return nil, errBadSignature
	}
	m := &Message{Metadata: md, Content: c, Cut: cut}
	if err := json.Unmarshal(h, &m.Header); err != nil {
		return nil, fmt.Errorf("decode header: %w", err)
	}
	if err := json.Unmarshal(p, &m.ParentHeader); err != nil {
		return nil, fmt.Errorf("decode parent header: %w", err)
	}
	return m, nil
}

// NewID returns a random version-4 UUID, the form Jupyter ids take.
func NewID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on Linux
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}
