// Package keepalive reads the interval at which streams send keepalive
// messages when nothing else went out.
package keepalive

import (
	"net/http"
	"strconv"
	"time"
)

// Default is envd's interval when the client sends no header.
const Default = 90 * time.Second

// Header is the request header E2B SDKs use to ask for an interval in seconds.
const Header = "Keepalive-Ping-Interval"

// Interval returns the interval requested in h, or Default.
func Interval(h http.Header) time.Duration {
	v := h.Get(Header)
	if v == "" {
		return Default
	}
	n, err := strconv.ParseFloat(v, 64)
	if err != nil || n <= 0 {
		return Default
	}
	d := time.Duration(n * float64(time.Second))
	if d < 10*time.Millisecond {
		d = 10 * time.Millisecond
	}
	return d
}
