package sandbox

import (
	"context"
	"errors"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/runtime"
	"github.com/spacesandbox/space/internal/store"
)

// A running sandbox that nothing has reached for a while rests: it is
// frozen (runtime.IdleFreezer: the cgroup freezer over its sentry and gofer;
// its stubs, left out, wait on the sentry and take nothing), taking no CPU, and the next request of any kind thaws it before
// it is sent. Every request spaced sends into a sandbox, to its agent or to
// any other port, native or E2B, goes through one of the two transports of
// its instance (agentTransport, portTransport), and both hold the
// instance's rest while the request and its answer are open: that is the
// one place where activity is seen and a frozen sandbox is woken. What the
// sandbox does itself counts too: a connection or DNS question out through
// the egress gateway (Egress.ByAddr), and CPU use above busyCPU. A stream
// or an upgraded connection (a PTY, a websocket) holds it until it ends.
// What spaced asks of a sandbox for itself (its agent's log lines) neither
// counts nor wakes: withoutWaking. Its lifecycle calls (pause, fork,
// snapshot) wake it under the entry's lock (entry.wake); the freezer takes
// that lock, so it never freezes a sandbox in the middle of one. Metrics
// are read from the host's cgroups, which answer frozen.
//
// In the APIs a resting sandbox is running; Service.Rest tells the two
// apart for a client that asks.

// RestFrozen, RestHibernated and RestAwake are what Service.Rest reports.
const (
	RestFrozen     = "frozen"
	RestHibernated = "hibernated"
	RestAwake      = "awake"
)

// busyCPU is the share of one CPU above which a sandbox that nothing
// reaches is taken as working on its own (a build, a download, a job no
// client watches) rather than idle: the freezer leaves it running and
// counts it as active. An idle sandbox uses well under 1% (its kernel's
// timers, the agent).
const busyCPU = 0.10

// restTick is how often the freezer looks for idle sandboxes; a sandbox
// rests within its delay plus one tick.
var restTick = time.Second

// rest is the activity of one sandbox instance and whether it is frozen.
type rest struct {
	id string
	fr runtime.IdleFreezer

	mu sync.Mutex
	// holds counts the requests and streams open now; last is when the
	// last one began or ended.
	holds  int
	last   time.Time
	frozen bool
	// hibernated: the sandbox is not running but saved in image (its
	// hibernation on the node's disk, hibernate.go); deep makes and
	// restores such images. gone: the sandbox is being ended, and must
	// not be woken again.
	hibernated bool
	image      string
	// tally counts the service's hibernated sandboxes (Service.held).
	tally *atomic.Int64
	// restedAt is when it last went to rest (froze).
	restedAt time.Time
	deep     hibernator
	gone     bool
	// cpu is the sandbox's CPU time when the freezer last looked, at
	// cpuAt (busy).
	cpu   time.Duration
	cpuAt time.Time
	// lookedAt is when the reaper last asked the runtime whether the
	// sandbox still runs while it was frozen (lookIfDue).
	lookedAt time.Time
	// thawed is called after each thaw, with how long it took (metrics).
	thawed func(time.Duration)
	// beforeFreeze closes the instance's idle connections (connSet.dropIdle).
	beforeFreeze func()
}

// errFrozen is what a request that must not wake a sandbox gets.
var errFrozen = errdefs.New(errdefs.ErrUnavailable, "the sandbox is frozen at rest")

// errEnding is what a request to a sandbox being ended gets.
var errEnding = errdefs.New(errdefs.ErrNotFound, "the sandbox is ending")

// hibernator saves a stopped copy of a resting sandbox and brings it back
// in place (hibernate.go).
type hibernator interface {
	// hibernate checkpoints the (thawed) sandbox into an image on the
	// node's disk and frees what it held; it returns the image. On an
	// error the sandbox runs as before.
	hibernate(ctx context.Context) (image string, err error)
	// revive restores the sandbox from image in place and deletes the
	// image once it runs. On an error it stays hibernated in image.
	revive(ctx context.Context, image string) error
}

type noWakeKey struct{}

// withoutWaking marks requests spaced makes for itself (reading a
// sandbox's agent log): they fail at once on a frozen sandbox and do not
// count as activity, though one in flight keeps the sandbox from freezing
// until it ends.
func withoutWaking(ctx context.Context) context.Context {
	return context.WithValue(ctx, noWakeKey{}, true)
}

// restError is spaced's own answer to a request it did not send into the
// sandbox (the sandbox could not be woken, or is ending): it reaches the
// caller as it is, not as an error of the sandbox's agent.
type restError struct{ err error }

func (e restError) Error() string { return e.err.Error() }
func (e restError) Unwrap() error { return e.err }

// WakeError is the rest's own error in err's chain, if any: a request to
// a resting sandbox that spaced could not wake (the node's budget refused
// its restore, say) or that is ending. It is the caller's answer, with its
// class and message.
func WakeError(err error) (error, bool) {
	var re restError
	if errors.As(err, &re) {
		return re.err, true
	}
	return nil, false
}

// hold marks a request to the sandbox open, thawing the sandbox first if
// it is frozen; release marks it done.
func (r *rest) hold(ctx context.Context) (release func(), err error) {
	defer func() {
		if err != nil {
			err = restError{err}
		}
	}()
	quiet := ctx.Value(noWakeKey{}) != nil
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.gone {
		return nil, errEnding
	}
	if r.frozen || r.hibernated {
		if quiet {
			return nil, errFrozen
		}
		if err := r.wakeLocked(ctx); err != nil {
			return nil, err
		}
	}
	r.holds++
	if !quiet {
		r.last = time.Now()
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			r.mu.Lock()
			r.holds--
			if !quiet {
				r.last = time.Now()
			}
			r.mu.Unlock()
		})
	}, nil
}

func (r *rest) thawLocked(ctx context.Context) error {
	start := time.Now()
	if err := r.fr.ThawIdle(context.WithoutCancel(ctx), r.id); err != nil {
		return errdefs.Wrap(errdefs.ErrUnavailable, err, "could not wake sandbox %s", r.id)
	}
	r.frozen = false
	if r.thawed != nil {
		r.thawed(time.Since(start))
	}
	return nil
}

// wakeLocked brings a resting sandbox back: restored in place from its
// hibernation, or thawed.
func (r *rest) wakeLocked(ctx context.Context) error {
	if r.hibernated {
		if err := r.deep.revive(context.WithoutCancel(ctx), r.image); err != nil {
			return err
		}
		r.hibernated, r.image = false, ""
		r.count(-1)
		return nil
	}
	if r.frozen {
		return r.thawLocked(ctx)
	}
	return nil
}

// wake brings a resting sandbox back for a lifecycle call without counting
// it as activity: once the call is done the freezer may take it again.
func (r *rest) wake(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.gone {
		return errEnding
	}
	return r.wakeLocked(ctx)
}

// hibernateIfIdle hibernates the sandbox if it is frozen, nothing is open
// to it and nothing was for delay (<= 0: never). The caller holds the
// entry's lock.
func (r *rest) hibernateIfIdle(ctx context.Context, now time.Time, delay time.Duration) (bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.hibernateLocked(ctx, now, delay)
}

// hibernateEarly hibernates the sandbox now if it is frozen and nothing is
// open to it, unless a request or a wake holds its rest (the node is short
// of memory, admission.go). The caller holds the entry's lock.
func (r *rest) hibernateEarly(ctx context.Context) (bool, error) {
	if !r.mu.TryLock() {
		return false, nil
	}
	defer r.mu.Unlock()
	return r.hibernateLocked(ctx, time.Now(), time.Nanosecond)
}

// hibernatable reports whether the sandbox could be hibernated early
// (frozen, nothing open to it), and since when nothing reached it; a rest
// whose lock is held (a request, a wake: maybe the caller's own) is not.
func (r *rest) hibernatable() (time.Time, bool) {
	if !r.mu.TryLock() {
		return time.Time{}, false
	}
	defer r.mu.Unlock()
	return r.last, r.deep != nil && r.frozen && !r.hibernated && !r.gone && r.holds == 0
}

func (r *rest) hibernateLocked(ctx context.Context, now time.Time, delay time.Duration) (bool, error) {
	if r.deep == nil || !r.frozen || r.hibernated || r.gone || r.holds > 0 || delay <= 0 || now.Sub(r.last) < delay {
		return false, nil
	}
	// Checkpointing asks the sandbox's kernel, which answers nothing
	// frozen.
	if err := r.fr.ThawIdle(ctx, r.id); err != nil {
		return false, err
	}
	r.frozen = false
	image, err := r.deep.hibernate(ctx)
	if err != nil {
		r.last = now // not again at once; the freezer takes it next tick
		return false, err
	}
	r.hibernated, r.image = true, image
	r.count(1)
	return true, nil
}

// count adds delta to the service's count of hibernated sandboxes.
func (r *rest) count(delta int64) {
	if r.tally != nil {
		r.tally.Add(delta)
	}
}

// retire marks the sandbox as being ended: nothing wakes it again. It
// returns the image it is hibernated in ("" if none), which the caller
// deletes once the sandbox is torn down.
func (r *rest) retire() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.gone {
		return ""
	}
	r.gone = true
	if r.hibernated {
		r.count(-1)
		return r.image
	}
	return ""
}

// frozenLookEvery is how often the reaper asks the runtime whether a
// frozen sandbox still runs, rather than every tick: its processes cannot
// stop on their own in the freezer (they run nothing, and a frozen
// sandbox's memory does not grow), so only a death from outside is seen
// later, by this much at most: a kill on the host (under cgroup v2; v1
// holds even a SIGKILL until the thaw) or the host's OOM killer, which
// thaws its victim. Reading each frozen sandbox's runsc state every second
// was a third of what it still cost spaced.
const frozenLookEvery = 10 * time.Second

// lookIfDue calls look unless the sandbox is hibernated (no runtime
// sandbox then), with no hibernation or wake between; while it is frozen,
// only once per frozenLookEvery. It reports whether look ran.
func (r *rest) lookIfDue(now time.Time, look func()) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.hibernated {
		return false
	}
	if r.frozen {
		if now.Sub(r.lookedAt) < frozenLookEvery && !r.lookedAt.After(now) {
			return false
		}
		r.lookedAt = now
	}
	look()
	return true
}

// frozenSince reports when the sandbox was frozen, if it is frozen now
// (not hibernated: then there is nothing of it on the host to read). It
// never waits: while the rest's lock is held (a thaw, a hibernation or a
// wake in progress, which may itself be asking this through admission),
// it answers not frozen.
func (r *rest) frozenSince() (time.Time, bool) {
	if !r.mu.TryLock() {
		return time.Time{}, false
	}
	defer r.mu.Unlock()
	return r.restedAt, r.frozen
}

// freezeIfIdle freezes the sandbox if nothing is open to it and nothing
// was for delay (<= 0: never).
func (r *rest) freezeIfIdle(ctx context.Context, now time.Time, delay time.Duration) (bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.frozen || r.hibernated || r.gone || r.holds > 0 || delay <= 0 || now.Sub(r.last) < delay {
		return false, nil
	}
	if r.beforeFreeze != nil {
		r.beforeFreeze()
	}
	if err := r.fr.FreezeIdle(ctx, r.id); err != nil {
		r.last = now // not again at once
		return false, err
	}
	r.frozen, r.restedAt = true, now
	return true, nil
}

// touch counts something the sandbox itself did (a connection out) as
// activity.
func (r *rest) touch() {
	r.mu.Lock()
	r.last = time.Now()
	r.mu.Unlock()
}

func (r *rest) isFrozen() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.frozen
}

// restingSince reports when the sandbox went to rest, if it rests now
// (frozen or hibernated): nothing in it has changed since.
func (r *rest) restingSince() (time.Time, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.restedAt, r.frozen || r.hibernated
}

func (r *rest) isHibernated() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.hibernated
}

// tierNow is tier, unless the rest is changing (a freeze, a wake or a
// hibernation holds its lock): then false, without waiting for it.
func (r *rest) tierNow() (string, bool) {
	if !r.mu.TryLock() {
		return "", false
	}
	defer r.mu.Unlock()
	return r.tierLocked(), true
}

// restingNow counts the live sandboxes resting in the freezer and
// hibernated now, for the gauges. One whose rest is changing at that
// moment is not counted: a scrape does not wait on a wake.
func (s *Service) restingNow() (frozen, hibernated int) {
	for _, e := range s.live.all() {
		r := e.rest()
		if r == nil {
			continue
		}
		switch tier, ok := r.tierNow(); {
		case !ok:
		case tier == RestFrozen:
			frozen++
		case tier == RestHibernated:
			hibernated++
		}
	}
	return frozen, hibernated
}

// tier is RestFrozen, RestHibernated or RestAwake.
func (r *rest) tier() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.tierLocked()
}

// tierLocked is tier, r.mu held.
func (r *rest) tierLocked() string {
	switch {
	case r.hibernated:
		return RestHibernated
	case r.frozen:
		return RestFrozen
	}
	return RestAwake
}

// idleSince reports when the sandbox was last reached, and whether
// something is open to it now.
func (r *rest) idleSince() (time.Time, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.last, r.holds > 0
}

// attachRest gives live entry e's instance a rest, if the runtime can
// freeze sandboxes; frozen says the runtime holds it frozen already, image
// that it is hibernated in that image (each found so after a restart).
func (s *Service) attachRest(e *entry, frozen bool, image string) {
	fr, ok := s.rt.(runtime.IdleFreezer)
	if !ok || e.agent == nil {
		return
	}
	r := &rest{id: e.rec.ID, fr: fr, last: time.Now(), frozen: frozen, thawed: s.metrics.thawed, beforeFreeze: e.agent.conns.dropIdle, tally: &s.hibernatedNow}
	if h := s.hibernatorOf(e); h != nil {
		r.deep = h
		if image != "" {
			r.hibernated, r.image = true, image
			r.count(1)
		}
	}
	e.agent.conns.rest.Store(r)
}

// rest is the rest of e's running instance (nil: it has none).
func (e *entry) rest() *rest {
	if e.agent == nil {
		return nil
	}
	return e.agent.conns.rest.Load()
}

// wake thaws e's sandbox if it rests frozen; the caller holds e.mu, for a
// call that needs the sandbox's kernel to answer (a pause, a checkpoint).
func (e *entry) wake(ctx context.Context) error {
	if r := e.rest(); r != nil {
		return r.wake(ctx)
	}
	return nil
}

// idleFreezeOf is the delay after which rec's sandbox rests (<= 0: never):
// its own, or the node's default.
func (s *Service) idleFreezeOf(rec *store.Sandbox) time.Duration {
	switch {
	case rec.IdleFreeze < 0:
		return 0
	case rec.IdleFreeze > 0:
		return rec.IdleFreeze
	}
	return s.cfg.IdleFreeze
}

// Rest reports whether running sandbox id is frozen or hibernated at
// rest, or awake.
func (s *Service) Rest(id string) (string, error) {
	e, ok := s.live.entry(id)
	if !ok {
		return "", s.notRunning(id)
	}
	if r := e.rest(); r != nil {
		return r.tier(), nil
	}
	return RestAwake, nil
}

// RunRest freezes idle running sandboxes every restTick until ctx ends.
func (s *Service) RunRest(ctx context.Context) {
	if _, ok := s.rt.(runtime.IdleFreezer); !ok {
		return
	}
	t := time.NewTicker(restTick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.freezeIdle(ctx, time.Now())
		}
	}
}

func (s *Service) freezeIdle(ctx context.Context, now time.Time) {
	for _, e := range s.live.all() {
		rec := e.record()
		delay := s.idleFreezeOf(rec)
		r := e.rest()
		if rec.State != store.StateRunning || rec.Build != "" || delay <= 0 || r == nil {
			continue
		}
		if r.isFrozen() {
			s.hibernateIdle(ctx, e, r, now)
			continue
		}
		if last, busy := r.idleSince(); busy || now.Sub(last) < delay || r.isHibernated() {
			continue
		}
		if s.busy(ctx, r, now) {
			continue
		}
		// A lifecycle call (pause, kill, fork, snapshot) holds the lock:
		// the sandbox is not idle then, and is looked at again next tick.
		if !e.mu.TryLock() {
			continue
		}
		if e.mayRest() {
			froze, err := r.freezeIfIdle(ctx, now, delay)
			if err != nil {
				s.log.Warn("freeze idle sandbox", "sandbox", rec.ID, "err", err)
			} else if froze {
				s.metrics.froze()
			}
		}
		e.mu.Unlock()
	}
}

// busy reports whether r's sandbox used more than busyCPU since the
// freezer last looked (a tick ago), and if so counts that as activity. The
// first look, or one after a long gap, only takes a reading: the sandbox
// is looked at again next tick.
func (s *Service) busy(ctx context.Context, r *rest, now time.Time) bool {
	ur, ok := s.rt.(runtime.UsageReader)
	if !ok {
		return false
	}
	u, err := ur.Usage(ctx, r.id)
	if err != nil {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	prev, prevAt := r.cpu, r.cpuAt
	r.cpu, r.cpuAt = u.CPU, now
	span := now.Sub(prevAt)
	if prevAt.IsZero() || span > 3*restTick || span <= 0 {
		return true
	}
	if float64(u.CPU-prev) > busyCPU*float64(span) {
		r.last = now
		return true
	}
	return false
}

// heldBody releases its request's hold on the sandbox when the answer is
// closed.
type heldBody struct {
	io.ReadCloser
	release func()
}

func (b heldBody) Close() error {
	err := b.ReadCloser.Close()
	b.release()
	return err
}

// heldConn is heldBody for the answer to an upgrade (a websocket): the
// connection itself, which the proxy writes to as well.
type heldConn struct {
	io.ReadWriteCloser
	release func()
}

func (c heldConn) Close() error {
	err := c.ReadWriteCloser.Close()
	c.release()
	return err
}

func holdBody(body io.ReadCloser, release func()) io.ReadCloser {
	if rwc, ok := body.(io.ReadWriteCloser); ok {
		return heldConn{ReadWriteCloser: rwc, release: release}
	}
	return heldBody{ReadCloser: body, release: release}
}

// maxIdleFreeze and maxIdleHibernate bound a sandbox's own idle delays.
const (
	maxIdleFreeze    = 24 * time.Hour
	maxIdleHibernate = 7 * 24 * time.Hour
)

// checkIdleDelay refuses a sandbox's own idle delay (what: freeze,
// hibernate) outside 1s..max; 0 (the node's) and negative (never) pass.
func checkIdleDelay(what string, d, max time.Duration) error {
	if d > max || (d > 0 && d < time.Second) {
		return errdefs.New(errdefs.ErrInvalidArgument, "idle %s delay %s must be between 1s and %s (or never)", what, d, max)
	}
	return nil
}

// mayRest says whether e's sandbox may go to a deeper rest now: running,
// not being ended, no disk snapshot being taken. The caller holds e.mu.
func (e *entry) mayRest() bool {
	return e.rec.State == store.StateRunning && e.rec.Ending == "" && !e.snapshotting
}

// SetIdleFreeze changes how long running sandbox id may go unreached
// before it rests (0: the node's default, < 0: never), and, if hibernate
// is set, before it is hibernated. A resting sandbox is woken if it may no
// longer rest as it does.
func (s *Service) SetIdleFreeze(ctx context.Context, id string, d time.Duration, hibernate *time.Duration) (*Sandbox, error) {
	if err := checkIdleDelay("freeze", d, maxIdleFreeze); err != nil {
		return nil, err
	}
	if hibernate != nil {
		if err := checkIdleDelay("hibernate", *hibernate, maxIdleHibernate); err != nil {
			return nil, err
		}
	}
	sb, err := s.updateRunning(ctx, id, "idle freeze", func(rec *store.Sandbox) bool {
		changed := rec.IdleFreeze != d
		rec.IdleFreeze = d
		if hibernate != nil && rec.IdleHibernate != *hibernate {
			rec.IdleHibernate, changed = *hibernate, true
		}
		return changed
	})
	if err != nil {
		return nil, err
	}
	if e, ok := s.live.entry(id); ok && (s.idleFreezeOf(e.record()) <= 0 || (s.idleHibernateOf(e.record()) <= 0 && e.rest() != nil && e.rest().isHibernated())) {
		e.mu.Lock()
		err = e.wake(ctx)
		e.mu.Unlock()
	}
	return sb, err
}
