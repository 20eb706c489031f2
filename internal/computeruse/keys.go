package computeruse

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// Keysym is an X keysym (X11/keysymdef.h).
type Keysym uint32

// Chord is keys pressed together, in order, and released in reverse
// ("ctrl+shift+t").
type Chord []Keysym

// keysyms are the key names an action may give, as xdotool takes them
// (X's keysym names) and the spellings models use besides (Enter, Esc,
// PageDown, ArrowUp, cmd). Lookups are case-insensitive; a single
// character is its own key.
var keysyms = map[string]Keysym{
	"return": 0xff0d, "enter": 0xff0d, "kp_enter": 0xff8d,
	"tab": 0xff09, "iso_left_tab": 0xfe20,
	"escape": 0xff1b, "esc": 0xff1b,
	"backspace": 0xff08, "delete": 0xffff, "del": 0xffff, "insert": 0xff63,
	"home": 0xff50, "end": 0xff57,
	"page_up": 0xff55, "prior": 0xff55, "pageup": 0xff55,
	"page_down": 0xff56, "next": 0xff56, "pagedown": 0xff56,
	"left": 0xff51, "up": 0xff52, "right": 0xff53, "down": 0xff54,
	"arrowleft": 0xff51, "arrowup": 0xff52, "arrowright": 0xff53, "arrowdown": 0xff54,
	"space": 0x20, "print": 0xff61, "pause": 0xff13, "menu": 0xff67,
	"caps_lock": 0xffe5, "num_lock": 0xff7f, "scroll_lock": 0xff14,
	"shift": 0xffe1, "shift_l": 0xffe1, "shift_r": 0xffe2,
	"ctrl": 0xffe3, "control": 0xffe3, "control_l": 0xffe3, "control_r": 0xffe4, "ctrl_l": 0xffe3, "ctrl_r": 0xffe4,
	"alt": 0xffe9, "alt_l": 0xffe9, "alt_r": 0xffea, "option": 0xffe9,
	"super": 0xffeb, "super_l": 0xffeb, "super_r": 0xffec, "win": 0xffeb, "cmd": 0xffeb, "command": 0xffeb, "meta": 0xffeb,
	"minus": '-', "equal": '=', "plus": '+', "comma": ',', "period": '.', "slash": '/', "backslash": '\\',
	"semicolon": ';', "apostrophe": '\'', "quotedbl": '"', "grave": '`', "asciitilde": '~',
	"bracketleft": '[', "bracketright": ']', "braceleft": '{', "braceright": '}',
	"parenleft": '(', "parenright": ')', "less": '<', "greater": '>', "question": '?',
	"exclam": '!', "at": '@', "numbersign": '#', "dollar": '$', "percent": '%',
	"asciicircum": '^', "ampersand": '&', "asterisk": '*', "underscore": '_', "bar": '|', "colon": ':',
	"kp_add": 0xffab, "kp_subtract": 0xffad, "kp_multiply": 0xffaa, "kp_divide": 0xffaf,
}

func init() {
	for i := 1; i <= 24; i++ {
		keysyms[fmt.Sprintf("f%d", i)] = Keysym(0xffbe + i - 1)
	}
	for i := 0; i <= 9; i++ {
		keysyms[fmt.Sprintf("kp_%d", i)] = Keysym(0xffb0 + i)
	}
}

// modifiers are the keysyms a chord may hold while others are pressed.
var modifiers = map[Keysym]bool{0xffe1: true, 0xffe2: true, 0xffe3: true, 0xffe4: true, 0xffe9: true, 0xffea: true, 0xffeb: true, 0xffec: true}

// IsModifier says whether k is a shift, control, alt or super key.
func IsModifier(k Keysym) bool { return modifiers[k] }

// RuneKeysym is the keysym that types r: Latin-1 is its own code, other
// characters are 0x1000000 + their code point (X's Unicode keysyms), and
// the control characters a text has are their keys.
func RuneKeysym(r rune) (Keysym, error) {
	switch {
	case r == '\n' || r == '\r':
		return 0xff0d, nil
	case r == '\t':
		return 0xff09, nil
	case r == '\b':
		return 0xff08, nil
	case r < 0x20 || r == 0x7f || r == utf8.RuneError:
		return 0, fmt.Errorf("character %U cannot be typed", r)
	case r < 0x100:
		return Keysym(r), nil
	case r > 0x10ffff:
		return 0, fmt.Errorf("character %U cannot be typed", r)
	}
	return Keysym(0x1000000 + r), nil
}

// KeyName is the keysym of one key name (case-insensitive), or of a single
// character.
func KeyName(name string) (Keysym, error) {
	if k, ok := keysyms[strings.ToLower(name)]; ok {
		return k, nil
	}
	if utf8.RuneCountInString(name) == 1 {
		r, _ := utf8.DecodeRuneInString(name)
		if r > 0x20 {
			return RuneKeysym(r)
		}
	}
	return 0, fmt.Errorf("unknown key %q (X key names like Return, ctrl, Page_Down, F5, or one character)", name)
}

// ParseKeys reads what a key action's text says, as xdotool's key takes
// it: chords separated by spaces ("ctrl+a Delete"), each keys joined by +
// ("ctrl+shift+t"; "ctrl+plus" for the + key itself).
func ParseKeys(text string) ([]Chord, error) {
	fields := strings.Fields(text)
	if len(fields) == 0 {
		return nil, fmt.Errorf("no key given")
	}
	var out []Chord
	for _, f := range fields {
		var c Chord
		parts := strings.Split(f, "+")
		if f == "+" {
			parts = []string{"+"}
		}
		for _, p := range parts {
			if p == "" {
				return nil, fmt.Errorf("empty key in %q", f)
			}
			k, err := KeyName(p)
			if err != nil {
				return nil, err
			}
			c = append(c, k)
		}
		out = append(out, c)
	}
	return out, nil
}
