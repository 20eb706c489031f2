package desktopd

import (
	"context"
	"fmt"
	"time"

	"github.com/jezek/xgb/damage"

	"github.com/spacesandbox/space/internal/computeruse"
)

// An action's screenshot is taken once the programs the input went to
// have drawn their answer (the X server has handled the input itself by
// then: a round trip). With the DAMAGE extension (Xvfb has it), that is
// when the screen has not changed for settleQuiet since it last did, or
// when it did not change at all within Settle, and at most settleMax
// after the action (a blinking caret or an animation never stops);
// without it, Settle.
const (
	Settle      = 150 * time.Millisecond
	settleQuiet = 50 * time.Millisecond
	settleMax   = time.Second
)

// settle waits for the screen to settle after an action; the action was
// preceded by armDamage.
func (d *display) settle(ctx context.Context) error {
	if d.damaged == nil {
		return sleep(ctx, Settle.Seconds())
	}
	limit := time.NewTimer(settleMax)
	defer limit.Stop()
	wait := time.NewTimer(Settle)
	defer wait.Stop()
	for {
		select {
		case <-d.damaged:
			// Arm again (changes from before this are already known), then
			// wait for the next change or for quiet.
			damage.Subtract(d.conn, d.watch, 0, 0)
			wait.Reset(settleQuiet)
		case <-wait.C:
			return nil
		case <-limit.C:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// buttons, as X numbers them: 4-7 are the wheel.
const (
	btnLeft    = 1
	btnMiddle  = 2
	btnRight   = 3
	wheelUp    = 4
	wheelDown  = 5
	wheelLeft  = 6
	wheelRight = 7
)

// perform runs a (validated) on the display, with d.mu held. A click
// reads the cursor itself (see click) and returns it; for every other
// action cursor is nil and the caller reads it once the action is done.
func (d *display) perform(ctx context.Context, a *computeruse.Action) (cursor *computeruse.Point, err error) {
	if a.Coordinate != nil && a.Action != "left_click_drag" {
		if err := d.fake(motionNotify, 0, a.Coordinate[0], a.Coordinate[1]); err != nil {
			return nil, err
		}
	}
	var held []computeruse.Keysym
	if a.Text != nil && a.Action != "type" && a.Action != "key" && a.Action != "hold_key" {
		// Modifiers held while clicking or scrolling ("shift" on a click).
		chords, _ := computeruse.ParseKeys(*a.Text)
		for _, c := range chords {
			held = append(held, c...)
		}
		if err := d.keys(held, true); err != nil {
			return nil, err
		}
		defer d.keys(held, false)
	}
	switch a.Action {
	case "left_click":
		return d.click(btnLeft, 1)
	case "right_click":
		return d.click(btnRight, 1)
	case "middle_click":
		return d.click(btnMiddle, 1)
	case "double_click":
		return d.click(btnLeft, 2)
	case "triple_click":
		return d.click(btnLeft, 3)
	case "left_mouse_down":
		return nil, d.fake(buttonPress, btnLeft, 0, 0)
	case "left_mouse_up":
		return nil, d.fake(buttonRelease, btnLeft, 0, 0)
	case "left_click_drag":
		s, e := a.StartCoordinate, a.Coordinate
		if err := d.fake(motionNotify, 0, s[0], s[1]); err != nil {
			return nil, err
		}
		if err := d.fake(buttonPress, btnLeft, 0, 0); err != nil {
			return nil, err
		}
		// Through a midpoint, each motion handled before the next: some
		// programs start a drag only on motion with the button down, not
		// on a jump to the end (and a client may merge motions that come
		// in one batch).
		for _, p := range [][2]int{{(s[0] + e[0]) / 2, (s[1] + e[1]) / 2}, {e[0], e[1]}} {
			if err := d.fake(motionNotify, 0, p[0], p[1]); err != nil {
				return nil, err
			}
			if err := d.sync(); err != nil {
				return nil, err
			}
		}
		return nil, d.fake(buttonRelease, btnLeft, 0, 0)
	case "scroll":
		b := map[string]byte{"up": wheelUp, "down": wheelDown, "left": wheelLeft, "right": wheelRight}[a.ScrollDirection]
		return d.click(b, *a.ScrollAmount)
	case "key":
		chords, err := computeruse.ParseKeys(*a.Text)
		if err != nil {
			return nil, err
		}
		for _, c := range chords {
			if err := d.keys(c, true); err != nil {
				return nil, err
			}
			if err := d.keys(c, false); err != nil {
				return nil, err
			}
		}
	case "hold_key":
		chords, err := computeruse.ParseKeys(*a.Text)
		if err != nil {
			return nil, err
		}
		var all []computeruse.Keysym
		for _, c := range chords {
			all = append(all, c...)
		}
		if err := d.keys(all, true); err != nil {
			return nil, err
		}
		err = sleep(ctx, *a.Duration)
		if rerr := d.keys(all, false); err == nil {
			err = rerr
		}
		return nil, err
	case "type":
		return nil, d.typeText(*a.Text)
	case "wait":
		return nil, sleep(ctx, *a.Duration)
	case "mouse_move", "cursor_position", "screenshot", "zoom":
	default:
		return nil, fmt.Errorf("action %q is not implemented", a.Action)
	}
	return nil, nil
}

func sleep(ctx context.Context, seconds float64) error {
	t := time.NewTimer(time.Duration(seconds * float64(time.Second)))
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// click presses and releases button n times at the cursor, and returns
// where the cursor is. Each release comes in a later batch than its press
// (see fake): an earlier press is checked, and between the last press and
// its release the cursor is read, a round trip that also ends the click's
// wait. The last release is sent without a wait for it: the X server
// handles this connection's requests in order, so anything asked of the
// screen next (an action, a screenshot, the settle of this one) comes
// after it, and a click answers without waiting for the programs the
// release wakes (xfdesktop redraws on both).
func (d *display) click(button byte, n int) (*computeruse.Point, error) {
	if n == 0 {
		return nil, nil // no click (a scroll of 0): the caller reads the cursor
	}
	for range n - 1 {
		if err := d.fake(buttonPress, button, 0, 0); err != nil {
			return nil, err
		}
		d.send(buttonRelease, button, 0, 0)
	}
	d.send(buttonPress, button, 0, 0)
	p, err := d.cursor()
	if err != nil {
		return nil, err
	}
	d.send(buttonRelease, button, 0, 0)
	return &p, nil
}

// keys presses (in order) or releases (in reverse) ks. A keysym on its
// key's shifted level is pressed with Shift.
func (d *display) keys(ks []computeruse.Keysym, down bool) error {
	typ := byte(keyPress)
	if !down {
		typ = keyRelease
		ks = reversed(ks)
	}
	for _, k := range ks {
		at, err := d.keycode(k)
		if err != nil {
			return err
		}
		if at.shifted && down {
			if err := d.fake(keyPress, byte(d.shift), 0, 0); err != nil {
				return err
			}
		}
		if err := d.fake(typ, byte(at.code), 0, 0); err != nil {
			return err
		}
		if at.shifted && !down {
			if err := d.fake(keyRelease, byte(d.shift), 0, 0); err != nil {
				return err
			}
		}
	}
	return nil
}

func (d *display) typeText(text string) error {
	for _, r := range text {
		k, err := computeruse.RuneKeysym(r)
		if err != nil {
			return err
		}
		at, err := d.keycode(k)
		if err != nil {
			return err
		}
		if at.shifted {
			if err := d.fake(keyPress, byte(d.shift), 0, 0); err != nil {
				return err
			}
		}
		if err := d.fake(keyPress, byte(at.code), 0, 0); err != nil {
			return err
		}
		if err := d.fake(keyRelease, byte(at.code), 0, 0); err != nil {
			return err
		}
		if at.shifted {
			if err := d.fake(keyRelease, byte(d.shift), 0, 0); err != nil {
				return err
			}
		}
	}
	return nil
}

func reversed(ks []computeruse.Keysym) []computeruse.Keysym {
	out := make([]computeruse.Keysym, len(ks))
	for i, k := range ks {
		out[len(ks)-1-i] = k
	}
	return out
}
