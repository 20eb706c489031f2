package process

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"

	"github.com/spacesandbox/space/api/envd/process"
)

// readChunk is the most a single data event carries.
const readChunk = 32 << 10

// Errors the service maps to Connect codes.
var (
	ErrNotFound     = errors.New("not found")
	ErrInvalid      = errors.New("invalid argument")
	ErrPrecondition = errors.New("failed precondition")
	ErrExists       = errors.New("already exists")
)

// Proc is a process started by the Manager, running or recently exited.
type Proc struct {
	pid     uint32
	tag     *string
	key     string // idempotency key (Spec.Key), under the Manager's mu
	config  *process.ProcessConfig
	process *os.Process
	buf     *buffer

	writeMu sync.Mutex // serialises writes to stdin / the pty
	mu      sync.Mutex
	stdin   io.WriteCloser // nil when closed or not enabled
	pty     *os.File       // nil without a PTY or after exit
	exited  bool
	endedAt time.Time
	kill    *time.Timer
	done    chan struct{}
	hidden  bool // not in the registry (see Spec.Hidden)
	end     *process.ProcessEvent_EndEvent
}

// Pid is the process id.
func (p *Proc) Pid() uint32 { return p.pid }

// endEvent is how the process ended (nil until it has).
func (p *Proc) endEvent() *process.ProcessEvent_EndEvent {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.end
}

// Tag is the optional tag given at start.
func (p *Proc) Tag() *string { return p.tag }

// Config is the configuration the process was started with.
func (p *Proc) Config() *process.ProcessConfig { return p.config }

// Done is closed once the end event is buffered.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Running reports whether the process has not exited yet.
func (p *Proc) Running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return !p.exited
}

// Signal sends sig to the process group, so children of a shell die too. It
// does nothing once the process has exited: its pid may be reused.
func (p *Proc) Signal(sig syscall.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.exited {
		return nil
	}
	if err := syscall.Kill(-int(p.pid), sig); err != nil {
		if err := syscall.Kill(int(p.pid), sig); err != nil && !errors.Is(err, syscall.ESRCH) {
			return fmt.Errorf("signal %d: %w", p.pid, err)
		}
	}
	return nil
}

// errEnded is what input, resizes and stdin's close get once the process
// has exited: envd forgets a process when it ends, so it is not_found, even
// in the moment between its exit and its end event reaching a stream.
func (p *Proc) errEnded() error {
	return fmt.Errorf("%w: process with pid %d not found", ErrNotFound, p.pid)
}

// WriteStdin writes to the process's stdin, or its PTY when it has one.
func (p *Proc) WriteStdin(data []byte) error {
	p.mu.Lock()
	if p.exited {
		p.mu.Unlock()
		return p.errEnded()
	}
	w := p.stdin
	if p.pty != nil {
		w = p.pty
	}
	p.mu.Unlock()
	if w == nil {
		return fmt.Errorf("%w: stdin of process %d is not open", ErrPrecondition, p.pid)
	}
	p.writeMu.Lock()
	defer p.writeMu.Unlock()
	if _, err := w.Write(data); err != nil {
		return fmt.Errorf("write stdin of process %d: %w", p.pid, err)
	}
	return nil
}

// WritePTY writes to the process's PTY.
func (p *Proc) WritePTY(data []byte) error {
	p.mu.Lock()
	f, exited := p.pty, p.exited
	p.mu.Unlock()
	if exited {
		return p.errEnded()
	}
	if f == nil {
		return fmt.Errorf("%w: process %d has no pty", ErrPrecondition, p.pid)
	}
	return p.WriteStdin(data)
}

// CloseStdin closes stdin so the process reads EOF. With a PTY it sends EOT.
func (p *Proc) CloseStdin() error {
	p.mu.Lock()
	if p.pty != nil {
		p.mu.Unlock()
		return p.WriteStdin([]byte{4})
	}
	w := p.stdin
	p.stdin = nil
	p.mu.Unlock()
	if w == nil {
		return nil
	}
	p.writeMu.Lock()
	defer p.writeMu.Unlock()
	if err := w.Close(); err != nil {
		return fmt.Errorf("close stdin of process %d: %w", p.pid, err)
	}
	return nil
}

// Resize changes the PTY window size.
func (p *Proc) Resize(cols, rows uint32) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.exited {
		return p.errEnded()
	}
	if p.pty == nil {
		return fmt.Errorf("%w: error resizing tty: tty not assigned to process", ErrPrecondition) // envd's text
	}
	if err := pty.Setsize(p.pty, &pty.Winsize{Cols: uint16(cols), Rows: uint16(rows)}); err != nil {
		return fmt.Errorf("resize pty of process %d: %w", p.pid, err)
	}
	return nil
}

// Follow calls send with every buffered event whose seq is greater than after,
// then with live events until the end event has been sent. When nothing was
// sent for keepalive, it sends a keepalive event (Seq 0).
func (p *Proc) Follow(ctx context.Context, after uint64, keepalive time.Duration, send func(Event) error) error {
	if keepalive <= 0 {
		keepalive = 90 * time.Second
	}
	timer := time.NewTimer(keepalive)
	defer timer.Stop()
	last := after
	for {
		evs, ended, wake := p.buf.since(last)
		for _, e := range evs {
			if e.Seq > last+1 {
				e.Dropped = e.Seq - last - 1
			}
			if err := send(e); err != nil {
				return err
			}
			last = e.Seq
		}
		if ended {
			return nil
		}
		if len(evs) > 0 {
			timer.Reset(keepalive)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-wake:
		case <-timer.C:
			ka := &process.ProcessEvent{Event: &process.ProcessEvent_Keepalive{Keepalive: &process.ProcessEvent_KeepAlive{}}}
			if err := send(Event{Event: ka}); err != nil {
				return err
			}
			timer.Reset(keepalive)
		}
	}
}

// pump copies r into the buffer as data events until r fails.
func (p *Proc) pump(r *os.File, wrap func([]byte) *process.ProcessEvent_DataEvent) {
	chunk := make([]byte, readChunk)
	for {
		n, err := r.Read(chunk)
		if n > 0 {
			data := append([]byte(nil), chunk[:n]...)
			p.buf.add(&process.ProcessEvent{Event: &process.ProcessEvent_Data{Data: wrap(data)}}, n)
		}
		if err != nil {
			return
		}
	}
}

// wait reaps the process, runs reaped (the orphans it may have hidden),
// drains its output and buffers the end event.
func (p *Proc) wait(readers []*os.File, pumps *sync.WaitGroup, reaped func(), onExit func(*Proc)) {
	state, err := p.process.Wait()
	reaped()
	drain(readers, pumps)

	end := endEvent(state, err)
	p.mu.Lock()
	p.end = end
	p.exited = true
	p.endedAt = time.Now()
	if p.kill != nil {
		p.kill.Stop()
	}
	stdin, master := p.stdin, p.pty
	p.stdin, p.pty = nil, nil
	p.mu.Unlock()
	if stdin != nil {
		_ = stdin.Close()
	}
	if master != nil {
		_ = master.Close()
	}
	p.buf.add(&process.ProcessEvent{Event: &process.ProcessEvent_End{End: end}}, 0)
	close(p.done)
	onExit(p)
}

// drain waits for the pumps to read everything the exited process wrote. A
// background child may keep a pipe open forever, so once the pipes hold no
// unread bytes the read ends are closed, which stops the pumps.
func drain(readers []*os.File, pumps *sync.WaitGroup) {
	finished := make(chan struct{})
	go func() { pumps.Wait(); close(finished) }()
	grace := time.NewTimer(50 * time.Millisecond)
	defer grace.Stop()
	select {
	case <-finished:
	case <-grace.C:
		deadline := time.Now().Add(2 * time.Second)
		for time.Now().Before(deadline) && pending(readers) {
			select {
			case <-finished:
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
	for _, r := range readers {
		_ = r.Close()
	}
	select {
	case <-finished:
	case <-time.After(time.Second): // a read that Close cannot interrupt; let it leak
	}
}

// pending reports whether any reader still has unread bytes.
func pending(readers []*os.File) bool {
	for _, r := range readers {
		rc, err := r.SyscallConn()
		if err != nil {
			continue
		}
		n := 0
		_ = rc.Control(func(fd uintptr) {
			n, _ = unix.IoctlGetInt(int(fd), unix.TIOCINQ)
		})
		if n > 0 {
			return true
		}
	}
	return false
}

// endEvent describes how the process ended, the way envd does.
func endEvent(ps *os.ProcessState, waitErr error) *process.ProcessEvent_EndEvent {
	if ps == nil {
		msg := "unknown"
		if waitErr != nil {
			msg = waitErr.Error()
		}
		return &process.ProcessEvent_EndEvent{ExitCode: -1, Status: msg, Error: &msg}
	}
	end := &process.ProcessEvent_EndEvent{
		ExitCode: int32(ps.ExitCode()),
		Exited:   ps.Exited(),
		Status:   ps.String(),
	}
	if !ps.Success() {
		msg := ps.String()
		end.Error = &msg
	}
	return end
}
