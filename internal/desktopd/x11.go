package desktopd

import (
	"errors"
	"fmt"
	"image"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jezek/xgb"
	"github.com/jezek/xgb/damage"
	"github.com/jezek/xgb/xproto"
	"github.com/jezek/xgb/xtest"

	"github.com/spacesandbox/space/internal/computeruse"
)

// X's core event types, as XTEST's FakeInput takes them.
const (
	keyPress      = 2
	keyRelease    = 3
	buttonPress   = 4
	buttonRelease = 5
	motionNotify  = 6
)

// display is one connection to the X server, made again when the server
// went away (the E2B Desktop SDK replaces the display when it asks for
// another screen size).
type display struct {
	// socket is the X server's Unix socket; a name starting with @ is an
	// abstract one (the template's Xvfb listens on nothing else).
	socket string

	mu   sync.Mutex
	conn *xgb.Conn
	root xproto.Window
	// keymap is the keyboard mapping read at connect: keysym to keycode
	// and the column (0 plain, 1 shifted).
	keymap  map[computeruse.Keysym]keyAt
	spare   []xproto.Keycode // keycodes with no keysym, for characters the map lacks
	perCode byte
	minCode xproto.Keycode
	shift   xproto.Keycode
	// frame is capture's image, reused while the screen keeps its size.
	frame *image.RGBA
	// damaged gets a value when the screen changed since watch was
	// last armed (the DAMAGE extension's report on the root window);
	// nil when the server has no DAMAGE.
	damaged chan struct{}
	watch   damage.Damage
	// screen is the root window's size as last read on a connection, so
	// that an action need not ask for it each time; the connection's
	// event reader forgets it when the root window is reconfigured.
	screen atomic.Pointer[screenOf]
}

// screenOf is the screen's size as read on conn.
type screenOf struct {
	conn *xgb.Conn
	size computeruse.Size
}

type keyAt struct {
	code    xproto.Keycode
	shifted bool
}

// connect (with d.mu held) makes the connection if there is none.
func (d *display) connect() error {
	if d.conn != nil {
		return nil
	}
	nc, err := net.DialTimeout("unix", d.socket, 5*time.Second)
	if err != nil {
		return fmt.Errorf("%w: %w", errNoDisplay, err)
	}
	c, err := xgb.NewConnNet(nc)
	if err != nil {
		nc.Close()
		return fmt.Errorf("%w: X handshake: %w", errNoDisplay, err)
	}
	if err := xtest.Init(c); err != nil {
		c.Close()
		return fmt.Errorf("X server has no XTEST: %w", err)
	}
	damaged := make(chan struct{}, 1)
	setup := xproto.Setup(c)
	root := setup.DefaultScreen(c).Root
	go d.drain(c, root, damaged)
	d.conn, d.root = c, root
	// The root window's ConfigureNotify says the screen changed size.
	if err := xproto.ChangeWindowAttributesChecked(c, root, xproto.CwEventMask, []uint32{xproto.EventMaskStructureNotify}).Check(); err != nil {
		d.drop()
		return fmt.Errorf("watch the screen's size: %w", err)
	}
	d.damaged = nil
	if d.watchDamage() == nil {
		d.damaged = damaged
	}
	if err := d.readKeymap(setup); err != nil {
		d.drop()
		return err
	}
	return nil
}

// drop forgets a connection that failed, so the next request makes another.
func (d *display) drop() {
	if d.conn != nil {
		d.conn.Close()
		d.conn = nil
	}
}

func (d *display) readKeymap(setup *xproto.SetupInfo) error {
	n := int(setup.MaxKeycode) - int(setup.MinKeycode) + 1
	m, err := xproto.GetKeyboardMapping(d.conn, setup.MinKeycode, byte(n)).Reply()
	if err != nil {
		return fmt.Errorf("read the keyboard mapping: %w", err)
	}
	d.keymap = map[computeruse.Keysym]keyAt{}
	d.spare = nil
	d.perCode, d.minCode = m.KeysymsPerKeycode, setup.MinKeycode
	per := int(m.KeysymsPerKeycode)
	for i := 0; i < n; i++ {
		code := xproto.Keycode(int(setup.MinKeycode) + i)
		syms := m.Keysyms[i*per : (i+1)*per]
		empty := true
		for col, s := range syms {
			if s == 0 {
				continue
			}
			empty = false
			if col > 1 {
				continue // other groups: not reachable with shift alone
			}
			k := computeruse.Keysym(s)
			if _, ok := d.keymap[k]; !ok {
				d.keymap[k] = keyAt{code: code, shifted: col == 1}
			}
		}
		if empty {
			d.spare = append(d.spare, code)
		}
	}
	sh, ok := d.keymap[0xffe1]
	if !ok {
		return errors.New("the keyboard mapping has no Shift_L")
	}
	d.shift = sh.code
	return nil
}

// keycode finds k's key, binding a spare keycode to it when the map has
// none (a character outside the layout), as xdotool does.
func (d *display) keycode(k computeruse.Keysym) (keyAt, error) {
	if at, ok := d.keymap[k]; ok {
		return at, nil
	}
	// Letters the layout has in their other case.
	if k >= 'A' && k <= 'Z' {
		if at, ok := d.keymap[k+0x20]; ok {
			return keyAt{code: at.code, shifted: true}, nil
		}
	}
	if len(d.spare) == 0 {
		return keyAt{}, fmt.Errorf("no free keycode to type keysym 0x%x", uint32(k))
	}
	// The last spare is reused round-robin: a long text of unusual
	// characters changes one key's mapping many times.
	code := d.spare[len(d.spare)-1]
	d.spare = append([]xproto.Keycode{code}, d.spare[:len(d.spare)-1]...)
	for kk, at := range d.keymap {
		if at.code == code {
			delete(d.keymap, kk)
		}
	}
	syms := make([]xproto.Keysym, d.perCode)
	syms[0] = xproto.Keysym(k)
	if d.perCode > 1 {
		syms[1] = xproto.Keysym(k)
	}
	if err := xproto.ChangeKeyboardMappingChecked(d.conn, 1, code, d.perCode, syms).Check(); err != nil {
		return keyAt{}, fmt.Errorf("bind keysym 0x%x: %w", uint32(k), err)
	}
	// Clients read the new mapping when its MappingNotify arrives; a key
	// sent before that would be read with the old one.
	d.sync()
	time.Sleep(20 * time.Millisecond)
	at := keyAt{code: code}
	d.keymap[k] = at
	return at, nil
}

// fake sends one input event. Only a button press waits for the server:
// with a press and its release handled in one go, GTK opened no menu on a
// right click and scrolled nothing on the wheel (TestDesktopNative/click
// and /type's scroll saw no pixel change), so a release always comes in a
// later batch than its press (a click waits on its own, see click).
// Everything else goes without a round trip of its own: the X server
// handles requests in order, so the motion before a press lands first,
// and the QueryPointer that ends an action sees all of it done.
func (d *display) fake(typ byte, detail byte, x, y int) error {
	if typ != buttonPress {
		d.send(typ, detail, x, y)
		return nil
	}
	return xtest.FakeInputChecked(d.conn, typ, detail, 0, d.root, int16(x), int16(y), 0).Check()
}

// send sends one input event without waiting for the server.
func (d *display) send(typ byte, detail byte, x, y int) {
	xtest.FakeInput(d.conn, typ, detail, 0, d.root, int16(x), int16(y), 0)
}

// drain reads c's events until it closes: every client gets MappingNotify
// when a key is bound, and xgb stops reading replies once its event
// queue is full. A damage report is passed on to damaged; a change of
// the root window's geometry makes the screen's size be read again.
func (d *display) drain(c *xgb.Conn, root xproto.Window, damaged chan<- struct{}) {
	for {
		ev, err := c.WaitForEvent()
		if ev == nil && err == nil {
			return
		}
		switch ev := ev.(type) {
		case damage.NotifyEvent:
			select {
			case damaged <- struct{}{}:
			default:
			}
		case xproto.ConfigureNotifyEvent:
			if ev.Window == root {
				d.screen.Store(nil)
			}
		}
	}
}

// watchDamage asks the server to report when the screen changes: once
// each time its damage goes from none to some (armDamage empties it).
func (d *display) watchDamage() error {
	if err := damage.Init(d.conn); err != nil {
		return err
	}
	if _, err := damage.QueryVersion(d.conn, 1, 1).Reply(); err != nil {
		return err
	}
	id, err := damage.NewDamageId(d.conn)
	if err != nil {
		return err
	}
	if err := damage.CreateChecked(d.conn, id, xproto.Drawable(d.root), damage.ReportLevelNonEmpty).Check(); err != nil {
		return err
	}
	d.watch = id
	return nil
}

// armDamage forgets the screen's changes so far: the next change is
// reported again.
func (d *display) armDamage() {
	if d.damaged == nil {
		return
	}
	damage.Subtract(d.conn, d.watch, 0, 0)
	select {
	case <-d.damaged:
	default:
	}
}

// sync waits until the server has handled everything sent so far.
func (d *display) sync() error {
	_, err := xproto.GetInputFocus(d.conn).Reply()
	return err
}

// size is the screen's size: as last read on this connection, or read
// now (a round trip).
func (d *display) size() (computeruse.Size, error) {
	if s := d.screen.Load(); s != nil && s.conn == d.conn {
		return s.size, nil
	}
	g, err := xproto.GetGeometry(d.conn, xproto.Drawable(d.root)).Reply()
	if err != nil {
		return computeruse.Size{}, err
	}
	size := computeruse.Size{Width: int(g.Width), Height: int(g.Height)}
	d.screen.Store(&screenOf{conn: d.conn, size: size})
	return size, nil
}

func (d *display) cursor() (computeruse.Point, error) {
	p, err := xproto.QueryPointer(d.conn, d.root).Reply()
	if err != nil {
		return computeruse.Point{}, err
	}
	return computeruse.Point{X: int(p.RootX), Y: int(p.RootY)}, nil
}

// capture reads the whole screen into an RGBA image, d.frame: valid
// until the next capture.
func (d *display) capture(s computeruse.Size) (*image.RGBA, error) {
	setup := xproto.Setup(d.conn)
	depth := setup.DefaultScreen(d.conn).RootDepth
	bpp := 0
	for _, f := range setup.PixmapFormats {
		if f.Depth == depth {
			bpp = int(f.BitsPerPixel)
		}
	}
	if bpp != 32 || (depth != 24 && depth != 32) {
		return nil, fmt.Errorf("screen depth %d at %d bits per pixel: only 24/32 is read", depth, bpp)
	}
	if d.frame == nil || d.frame.Rect.Dx() != s.Width || d.frame.Rect.Dy() != s.Height {
		d.frame = image.NewRGBA(image.Rect(0, 0, s.Width, s.Height))
	}
	img := d.frame
	// In bands: one GetImage answer is bounded by the server's maximum
	// request size in some servers; 256 rows of 4096 pixels is 4 MiB.
	band := max(1, (4<<20)/(s.Width*4))
	for y0 := 0; y0 < s.Height; y0 += band {
		h := min(band, s.Height-y0)
		r, err := xproto.GetImage(d.conn, xproto.ImageFormatZPixmap, xproto.Drawable(d.root),
			0, int16(y0), uint16(s.Width), uint16(h), 0xffffffff).Reply()
		if err != nil {
			return nil, fmt.Errorf("read the screen: %w", err)
		}
		if len(r.Data) < s.Width*h*4 {
			return nil, fmt.Errorf("read the screen: %d bytes for %dx%d", len(r.Data), s.Width, h)
		}
		bgrxToRGBA(img.Pix[y0*img.Stride:(y0+h)*img.Stride], r.Data, setup.ImageByteOrder == xproto.ImageOrderMSBFirst)
	}
	return img, nil
}

// bgrxToRGBA converts X's 32-bit pixels (little-endian: B, G, R, pad) to
// opaque RGBA.
func bgrxToRGBA(dst, src []byte, msbFirst bool) {
	for i := 0; i+3 < len(dst) && i+3 < len(src); i += 4 {
		if msbFirst {
			dst[i], dst[i+1], dst[i+2] = src[i+1], src[i+2], src[i+3]
		} else {
			dst[i], dst[i+1], dst[i+2] = src[i+2], src[i+1], src[i]
		}
		dst[i+3] = 0xff
	}
}
