// Package computeruse is the wire of the native computer-use API: the
// actions of the common computer-use tool schemas (a model's tool input as
// it comes: {"action": "left_click", "coordinate": [100, 200]}), what an
// action needs, and the key names an action may give. It is shared by
// spaced's client (internal/desktop) and the server inside a desktop
// sandbox (internal/desktopd, cmd/space-desktop), and imports nothing of
// either, so the server stays small.
package computeruse

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// Port is where space-desktop listens inside a sandbox.
const Port = 49990

// VNCUpgrade is the Upgrade protocol of space-desktop's GET /vnc: after
// its 101 answer the connection carries RFB (the VNC protocol) both ways.
// spaced turns it into the native API's WebSocket
// (/v1/sandboxes/{id}/desktop/vnc), which the console's viewer opens.
const VNCUpgrade = "rfb"

// MaxWait bounds wait and hold_key (seconds): an action is one request,
// not a way to hold a connection open.
const MaxWait = 60.0

// MaxScroll bounds scroll_amount (wheel clicks).
const MaxScroll = 100

// MaxTextRunes bounds what one type or key action sends.
const MaxTextRunes = 10000

// Action is one tool call. Fields an action does not use must be absent.
type Action struct {
	Action          string `json:"action"`
	Coordinate      []int  `json:"coordinate,omitempty"`
	StartCoordinate []int  `json:"start_coordinate,omitempty"`
	// Region is zoom's [x0, y0, x1, y1]: the part of the screen from the
	// top left corner (x0, y0) to the bottom right one (x1, y1).
	Region          []int    `json:"region,omitempty"`
	Text            *string  `json:"text,omitempty"`
	ScrollDirection string   `json:"scroll_direction,omitempty"`
	ScrollAmount    *int     `json:"scroll_amount,omitempty"`
	Duration        *float64 `json:"duration,omitempty"`
	// Screenshot asks for a screenshot taken after the action settles
	// (the screenshot action always has one).
	Screenshot bool `json:"screenshot,omitempty"`
}

// Point is a position on the screen, in pixels from its top left.
type Point struct {
	X int `json:"x"`
	Y int `json:"y"`
}

// Size is the screen's size in pixels.
type Size struct {
	Width  int `json:"width"`
	Height int `json:"height"`
}

// Result is the answer to an action.
type Result struct {
	Cursor Point `json:"cursor"`
	Screen Size  `json:"screen"`
	// Screenshot is a PNG, base64 (standard, padded) in JSON: the screen,
	// or zoom's region of it.
	Screenshot []byte `json:"screenshot,omitempty"`
}

// field names, for the messages.
const (
	fCoordinate      = "coordinate"
	fStartCoordinate = "start_coordinate"
	fText            = "text"
	fScrollDirection = "scroll_direction"
	fScrollAmount    = "scroll_amount"
	fDuration        = "duration"
	fRegion          = "region"
)

// kinds says, per action, which fields it needs and which it may have.
var kinds = map[string]struct{ need, may []string }{
	"key":             {need: []string{fText}},
	"type":            {need: []string{fText}},
	"mouse_move":      {need: []string{fCoordinate}, may: []string{fText}},
	"left_click":      {may: []string{fCoordinate, fText}},
	"right_click":     {may: []string{fCoordinate, fText}},
	"middle_click":    {may: []string{fCoordinate, fText}},
	"double_click":    {may: []string{fCoordinate, fText}},
	"triple_click":    {may: []string{fCoordinate, fText}},
	"left_click_drag": {need: []string{fStartCoordinate, fCoordinate}, may: []string{fText}},
	"left_mouse_down": {may: []string{fCoordinate}},
	"left_mouse_up":   {may: []string{fCoordinate}},
	"scroll":          {need: []string{fScrollDirection, fScrollAmount}, may: []string{fCoordinate, fText}},
	"hold_key":        {need: []string{fText, fDuration}},
	"wait":            {need: []string{fDuration}},
	"zoom":            {need: []string{fRegion}},
	"cursor_position": {},
	"screenshot":      {},
}

// Actions lists the action names, sorted, for messages.
func Actions() []string {
	return slices.Sorted(maps.Keys(kinds))
}

// present lists the optional fields a has.
func (a *Action) present() []string {
	var p []string
	if a.Coordinate != nil {
		p = append(p, fCoordinate)
	}
	if a.StartCoordinate != nil {
		p = append(p, fStartCoordinate)
	}
	if a.Text != nil {
		p = append(p, fText)
	}
	if a.ScrollDirection != "" {
		p = append(p, fScrollDirection)
	}
	if a.ScrollAmount != nil {
		p = append(p, fScrollAmount)
	}
	if a.Duration != nil {
		p = append(p, fDuration)
	}
	if a.Region != nil {
		p = append(p, fRegion)
	}
	return p
}

// Validate checks a against a screen of the given size (zero: the size is
// not known here, so coordinates are checked only for sign) and says what
// is wrong in words a caller can act on.
func (a *Action) Validate(screen Size) error {
	k, ok := kinds[a.Action]
	if !ok {
		if a.Action == "" {
			return fmt.Errorf("action is required (one of %s)", strings.Join(Actions(), ", "))
		}
		return fmt.Errorf("unknown action %q (one of %s)", a.Action, strings.Join(Actions(), ", "))
	}
	for _, f := range k.need {
		if !slices.Contains(a.present(), f) {
			return fmt.Errorf("action %s needs %s", a.Action, f)
		}
	}
	for _, f := range a.present() {
		if !slices.Contains(k.need, f) && !slices.Contains(k.may, f) {
			return fmt.Errorf("action %s takes no %s", a.Action, f)
		}
	}
	if err := checkPoint(fCoordinate, a.Coordinate, screen); err != nil {
		return err
	}
	if err := checkPoint(fStartCoordinate, a.StartCoordinate, screen); err != nil {
		return err
	}
	if err := checkRegion(a.Region, screen); err != nil {
		return err
	}
	if a.Text != nil {
		t := *a.Text
		switch {
		case strings.ContainsRune(t, 0):
			return fmt.Errorf("text must not contain NUL")
		case len([]rune(t)) > MaxTextRunes:
			return fmt.Errorf("text is longer than %d characters", MaxTextRunes)
		case a.Action != "type" && strings.TrimSpace(t) == "" && a.Action != "key":
			// Modifiers held during a click or scroll, or hold_key's key.
			return fmt.Errorf("text must name a key for %s", a.Action)
		}
		if a.Action != "type" {
			if _, err := ParseKeys(t); err != nil {
				return fmt.Errorf("text: %w", err)
			}
		}
	}
	if a.ScrollDirection != "" {
		switch a.ScrollDirection {
		case "up", "down", "left", "right":
		default:
			return fmt.Errorf("scroll_direction must be up, down, left or right, not %q", a.ScrollDirection)
		}
	}
	if a.ScrollAmount != nil && (*a.ScrollAmount < 0 || *a.ScrollAmount > MaxScroll) {
		return fmt.Errorf("scroll_amount must be between 0 and %d, not %d", MaxScroll, *a.ScrollAmount)
	}
	if a.Duration != nil && (*a.Duration < 0 || *a.Duration > MaxWait || *a.Duration != *a.Duration) {
		return fmt.Errorf("duration must be between 0 and %g seconds, not %g", MaxWait, *a.Duration)
	}
	return nil
}

func checkPoint(name string, p []int, screen Size) error {
	if p == nil {
		return nil
	}
	if len(p) != 2 {
		return fmt.Errorf("%s must be [x, y], not %d numbers", name, len(p))
	}
	x, y := p[0], p[1]
	if x < 0 || y < 0 || (screen.Width > 0 && (x >= screen.Width || y >= screen.Height)) {
		if screen.Width > 0 {
			return fmt.Errorf("%s [%d, %d] is off the screen (%dx%d: x from 0 to %d, y from 0 to %d)",
				name, x, y, screen.Width, screen.Height, screen.Width-1, screen.Height-1)
		}
		return fmt.Errorf("%s [%d, %d] is off the screen (negative)", name, x, y)
	}
	return nil
}

// checkRegion checks zoom's region: four numbers, a rectangle of at least
// one pixel, on the screen when its size is known.
func checkRegion(r []int, screen Size) error {
	if r == nil {
		return nil
	}
	if len(r) != 4 {
		return fmt.Errorf("region must be [x0, y0, x1, y1], not %d numbers", len(r))
	}
	x0, y0, x1, y1 := r[0], r[1], r[2], r[3]
	if x0 < 0 || y0 < 0 || x0 >= x1 || y0 >= y1 {
		return fmt.Errorf("region [%d, %d, %d, %d] must have its top left corner (x0, y0) above and left of its bottom right one (x1, y1), all at least 0", x0, y0, x1, y1)
	}
	if screen.Width > 0 && (x1 > screen.Width || y1 > screen.Height) {
		return fmt.Errorf("region [%d, %d, %d, %d] goes off the screen (%dx%d: x1 at most %d, y1 at most %d)",
			x0, y0, x1, y1, screen.Width, screen.Height, screen.Width, screen.Height)
	}
	return nil
}
