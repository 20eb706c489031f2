package template

import (
	"io"
	"math"
	"sync"

	"github.com/spacesandbox/space/internal/admission"
	"github.com/spacesandbox/space/internal/errdefs"
)

// What a tenant's input may take of the node's disk. An upload is bounded
// by SPACE_TEMPLATE_MAX_UPLOAD, but a file set is a tar, gzip or not, and a
// small gzip (or a sparse entry) expands to far more than it weighs: what
// a build reads out of one is bounded as it is read, by MaxContext, and
// what it writes out of it (a COPY's parts) is charged to the build's
// tenant, whose builds together may hold no more than MaxContext at once.
// Every large write on the host (an upload, a COPY's parts) is also
// refused when it would take the filesystem below its floor.

// DefaultMaxContext is MaxContext when none is set.
const DefaultMaxContext = 1 << 30

// guardEvery is how often (in bytes written) the free disk is read again.
const guardEvery = 8 << 20

// diskGuard is a writer to the node's disk that refuses to take the
// filesystem of dir below floor: the free space is read before the first
// write and again every guardEvery bytes, and must leave a chunk's room
// above the floor.
type diskGuard struct {
	w     io.Writer
	dir   string
	floor int64
	left  int64
}

func (s *Service) guardDisk(w io.Writer) *diskGuard {
	return &diskGuard{w: w, dir: s.art.work, floor: s.cfg.DiskFloor}
}

func (g *diskGuard) Write(p []byte) (int, error) {
	if int64(len(p)) > g.left {
		if err := checkDisk(g.dir, g.floor, max(guardEvery, int64(len(p)))); err != nil {
			return 0, err
		}
		g.left = guardEvery
	}
	n, err := g.w.Write(p)
	g.left -= int64(n)
	return n, err
}

// AdmitUpload refuses (507) an upload of n bytes the node's disk cannot
// take above its floor: the API layers ask it on a declared length before
// the body is read. An upload takes its size twice while it is stored (the
// local copy, and the object store's, which is a directory of this node by
// default).
func (s *Service) AdmitUpload(n int64) error {
	return checkDisk(s.art.work, s.cfg.DiskFloor, min(n, math.MaxInt64/2)*2)
}

// checkDisk refuses (507) a write of need bytes into dir's filesystem that
// would leave less than floor free; floor 0 is the node's default floor
// (admission's: 5% of the filesystem, at most 2 GiB).
func checkDisk(dir string, floor, need int64) error {
	free, total, err := admission.ReadDisk(dir)
	if err != nil {
		return err
	}
	if floor <= 0 {
		floor = admission.DiskFloor(total)
	}
	if free-need < floor {
		return errdefs.New(errdefs.ErrNoSpace, "the node's disk is too full to take this: %d MiB free, and %d MiB stay free for the host", free>>20, floor>>20)
	}
	return nil
}

// contextBytes is what each tenant's builds hold of expanded file sets on
// the node now.
type contextBytes struct {
	mu   sync.Mutex
	held map[string]int64
}

// charge is what one COPY charged to its tenant's expanded bytes, refused
// past max; release gives it all back.
type charge struct {
	c       *contextBytes
	tenant  string
	max     int64
	charged int64
}

func (c *contextBytes) charge(tenant string, max int64) *charge {
	return &charge{c: c, tenant: tenant, max: max}
}

func (ch *charge) take(n int64) error {
	ch.c.mu.Lock()
	defer ch.c.mu.Unlock()
	if ch.c.held == nil {
		ch.c.held = map[string]int64{}
	}
	if held := ch.c.held[ch.tenant]; held+n > ch.max {
		return errdefs.New(errdefs.ErrTooLarge, "the uploaded files this tenant's builds are copying expand to more than %d bytes on the node (%d held now; SPACE_TEMPLATE_MAX_CONTEXT)", ch.max, held)
	}
	ch.c.held[ch.tenant] += n
	ch.charged += n
	return nil
}

func (ch *charge) release() {
	ch.c.mu.Lock()
	defer ch.c.mu.Unlock()
	if ch.c.held[ch.tenant] -= ch.charged; ch.c.held[ch.tenant] <= 0 {
		delete(ch.c.held, ch.tenant)
	}
	ch.charged = 0
}

// held is what tenant's builds hold now.
func (c *contextBytes) heldBy(tenant string) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.held[tenant]
}

// chargedWriter writes to w what ch may take.
type chargedWriter struct {
	ch *charge
	w  io.Writer
}

func (c chargedWriter) Write(p []byte) (int, error) {
	if err := c.ch.take(int64(len(p))); err != nil {
		return 0, err
	}
	return c.w.Write(p)
}

// copyBounds are what a COPY may take of the node while it expands its
// file set: max bytes read out of it per pass, what it writes charged to
// its tenant, and no write below the disk floor.
type copyBounds struct {
	max    int64
	charge *charge
	guard  func(io.Writer) io.Writer
}

func (s *Service) copyBounds(tenant string) copyBounds {
	return copyBounds{
		max:    s.cfg.MaxContext,
		charge: s.contexts.charge(tenant, s.cfg.MaxContext),
		guard:  func(w io.Writer) io.Writer { return s.guardDisk(w) },
	}
}

// expandLimit fails a file set's expanded stream past max bytes.
type expandLimit struct {
	r    io.Reader
	left int64
	max  int64
}

func (e *expandLimit) Read(p []byte) (int, error) {
	if e.left < 0 {
		return 0, tooExpanded(e.max)
	}
	if int64(len(p)) > e.left+1 {
		p = p[:e.left+1]
	}
	n, err := e.r.Read(p)
	if e.left -= int64(n); e.left < 0 {
		return n, tooExpanded(e.max)
	}
	return n, err
}

func tooExpanded(max int64) error {
	return errdefs.New(errdefs.ErrTooLarge, "the uploaded files expand to more than %d bytes (SPACE_TEMPLATE_MAX_CONTEXT): a build context must be smaller unpacked", max)
}
