package computeruse

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestValidate(t *testing.T) {
	screen := Size{Width: 1024, Height: 768}
	for _, tc := range []struct {
		body string
		want string // "" for valid; else a part of the error
	}{
		{`{"action":"left_click","coordinate":[100,200]}`, ""},
		{`{"action":"left_click"}`, ""},
		{`{"action":"left_click","coordinate":[0,0],"text":"shift"}`, ""},
		{`{"action":"left_click","coordinate":[1023,767]}`, ""},
		{`{"action":"left_click","coordinate":[1024,0]}`, "off the screen (1024x768"},
		{`{"action":"left_click","coordinate":[0,768]}`, "off the screen"},
		{`{"action":"mouse_move","coordinate":[-1,0]}`, "off the screen"},
		{`{"action":"mouse_move","coordinate":[1]}`, "must be [x, y]"},
		{`{"action":"mouse_move"}`, "needs coordinate"},
		{`{"action":"type","text":"hi"}`, ""},
		{`{"action":"type","text":""}`, ""},
		{`{"action":"type"}`, "needs text"},
		{`{"action":"type","text":"a\u0000b"}`, "NUL"},
		{`{"action":"type","text":"hi","coordinate":[1,1]}`, "takes no coordinate"},
		{`{"action":"key","text":"ctrl+s"}`, ""},
		{`{"action":"key","text":"ctrl+a Delete"}`, ""},
		{`{"action":"key","text":"ctrl+bogus"}`, `unknown key "bogus"`},
		{`{"action":"key","text":"ctrl+"}`, "empty key"},
		{`{"action":"key","text":"  "}`, "no key"},
		{`{"action":"scroll","coordinate":[5,5],"scroll_direction":"down","scroll_amount":3}`, ""},
		{`{"action":"scroll","scroll_direction":"down"}`, "needs scroll_amount"},
		{`{"action":"scroll","scroll_direction":"sideways","scroll_amount":1}`, "scroll_direction must be"},
		{`{"action":"scroll","scroll_direction":"up","scroll_amount":101}`, "scroll_amount must be between"},
		{`{"action":"left_click_drag","start_coordinate":[1,1],"coordinate":[50,50]}`, ""},
		{`{"action":"left_click_drag","coordinate":[50,50]}`, "needs start_coordinate"},
		{`{"action":"left_click_drag","start_coordinate":[1,1],"coordinate":[5000,50]}`, "coordinate [5000, 50] is off"},
		{`{"action":"hold_key","text":"shift","duration":1}`, ""},
		{`{"action":"hold_key","text":"shift"}`, "needs duration"},
		{`{"action":"wait","duration":0.5}`, ""},
		{`{"action":"wait","duration":61}`, "duration must be between"},
		{`{"action":"wait","duration":-1}`, "duration must be between"},
		{`{"action":"zoom","region":[0,0,1024,768]}`, ""},
		{`{"action":"zoom","region":[100,200,101,201]}`, ""},
		{`{"action":"zoom"}`, "needs region"},
		{`{"action":"zoom","region":[0,0,10]}`, "must be [x0, y0, x1, y1]"},
		{`{"action":"zoom","region":[10,0,10,5]}`, "top left corner"},
		{`{"action":"zoom","region":[0,9,5,3]}`, "top left corner"},
		{`{"action":"zoom","region":[-1,0,5,5]}`, "top left corner"},
		{`{"action":"zoom","region":[0,0,1025,768]}`, "goes off the screen (1024x768"},
		{`{"action":"zoom","region":[0,0,5,769]}`, "goes off the screen"},
		{`{"action":"zoom","region":[0,0,5,5],"coordinate":[1,1]}`, "takes no coordinate"},
		{`{"action":"left_click","region":[0,0,5,5]}`, "takes no region"},
		{`{"action":"cursor_position"}`, ""},
		{`{"action":"screenshot"}`, ""},
		{`{"action":"screenshot","text":"x"}`, "takes no text"},
		{`{"action":"teleport"}`, `unknown action "teleport"`},
		{`{}`, "action is required"},
	} {
		var a Action
		if err := json.Unmarshal([]byte(tc.body), &a); err != nil {
			t.Fatalf("%s: %v", tc.body, err)
		}
		err := a.Validate(screen)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.body, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: got %v, want an error with %q", tc.body, err, tc.want)
		}
	}
}

// Without a screen size (spaced's check before the sandbox's), only the
// sign of a coordinate is checked.
func TestValidateUnknownScreen(t *testing.T) {
	a := Action{Action: "mouse_move", Coordinate: []int{5000, 5000}}
	if err := a.Validate(Size{}); err != nil {
		t.Fatal(err)
	}
	a.Coordinate = []int{-5, 0}
	if err := a.Validate(Size{}); err == nil {
		t.Fatal("negative coordinate passed")
	}
}

func TestParseKeys(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []Chord
	}{
		{"Return", []Chord{{0xff0d}}},
		{"enter", []Chord{{0xff0d}}},
		{"ctrl+s", []Chord{{0xffe3, 's'}}},
		{"CTRL+SHIFT+t", []Chord{{0xffe3, 0xffe1, 't'}}},
		{"ctrl+a Delete", []Chord{{0xffe3, 'a'}, {0xffff}}},
		{"Page_Down", []Chord{{0xff56}}},
		{"PageUp", []Chord{{0xff55}}},
		{"F1", []Chord{{0xffbe}}},
		{"F12", []Chord{{0xffc9}}},
		{"super", []Chord{{0xffeb}}},
		{"cmd+c", []Chord{{0xffeb, 'c'}}},
		{"alt+Tab", []Chord{{0xffe9, 0xff09}}},
		{"ctrl+plus", []Chord{{0xffe3, '+'}}},
		{"+", []Chord{{'+'}}},
		{"A", []Chord{{'A'}}},
		{"é", []Chord{{0xe9}}},
		{"☃", []Chord{{0x1002603}}},
		{"Escape", []Chord{{0xff1b}}},
		{"BackSpace", []Chord{{0xff08}}},
		{"space", []Chord{{0x20}}},
	} {
		got, err := ParseKeys(tc.in)
		if err != nil {
			t.Errorf("%q: %v", tc.in, err)
			continue
		}
		if !equalChords(got, tc.want) {
			t.Errorf("%q: got %x, want %x", tc.in, got, tc.want)
		}
	}
	for _, bad := range []string{"", "ctrl+", "nosuchkey", "ctrl++", "F99"} {
		if got, err := ParseKeys(bad); err == nil {
			t.Errorf("%q parsed as %x", bad, got)
		}
	}
}

func TestRuneKeysym(t *testing.T) {
	for r, want := range map[rune]Keysym{'a': 'a', 'Z': 'Z', ' ': 0x20, '~': '~', 'é': 0xe9, '\n': 0xff0d, '\t': 0xff09, '€': 0x10020ac, '☃': 0x1002603} {
		if got, err := RuneKeysym(r); err != nil || got != want {
			t.Errorf("%q: got %x %v, want %x", r, got, err, want)
		}
	}
	for _, r := range []rune{0, 0x1b, 0x7f} {
		if _, err := RuneKeysym(r); err == nil {
			t.Errorf("%U typed", r)
		}
	}
}

func equalChords(a, b []Chord) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if len(a[i]) != len(b[i]) {
			return false
		}
		for j := range a[i] {
			if a[i][j] != b[i][j] {
				return false
			}
		}
	}
	return true
}
