// Package reaper is the agent's PID 1 mode: a tiny init that runs the real
// agent as a child, reaps every orphaned zombie, restarts the child when it
// dies and forwards SIGTERM/SIGINT to it.
//
// The server must not be PID 1 itself: reaping with wait4(-1) there would
// steal exit statuses from os/exec, which waits for its own children.
package reaper

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"
)

// Options configure Run.
type Options struct {
	// Path and Args start the child (Args[0] is argv[0]).
	Path string
	Args []string
	// Env is the child's environment.
	Env    []string
	Logger *slog.Logger
	// MinBackoff and MaxBackoff bound the delay between restarts.
	MinBackoff, MaxBackoff time.Duration
}

// Run supervises the child until it exits after SIGTERM or SIGINT, and returns
// the exit code to use.
func Run(opts Options) int {
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	if opts.MinBackoff <= 0 {
		opts.MinBackoff = 100 * time.Millisecond
	}
	if opts.MaxBackoff <= 0 {
		opts.MaxBackoff = 5 * time.Second
	}
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, syscall.SIGCHLD, syscall.SIGTERM, syscall.SIGINT)

	var (
		child       *os.Process
		started     time.Time
		stopping    bool
		backoff     = opts.MinBackoff
		restart     <-chan time.Time
		stopTimeout <-chan time.Time
	)
	start := func() {
		p, err := os.StartProcess(opts.Path, opts.Args, &os.ProcAttr{
			Env:   opts.Env,
			Files: []*os.File{os.Stdin, os.Stdout, os.Stderr},
		})
		if err != nil {
			log.Error("start agent child", "err", err)
			restart = time.After(backoff)
			backoff = min(backoff*2, opts.MaxBackoff)
			return
		}
		child, started = p, time.Now()
		log.Info("agent child started", "pid", p.Pid)
	}
	start()
	for {
		select {
		case sig := <-sigs:
			switch sig {
			case syscall.SIGCHLD:
				if exited, status := reapAll(child); exited {
					log.Warn("agent child exited", "pid", child.Pid, "status", describe(status))
					child = nil
					if stopping {
						return exitCode(status)
					}
					if time.Since(started) > 10*time.Second {
						backoff = opts.MinBackoff
					}
					restart = time.After(backoff)
					backoff = min(backoff*2, opts.MaxBackoff)
				}
			default:
				stopping = true
				if child == nil {
					return 0
				}
				_ = child.Signal(sig)
				stopTimeout = time.After(10 * time.Second)
			}
		case <-restart:
			restart = nil
			if !stopping {
				start()
			}
		case <-stopTimeout:
			if child != nil {
				_ = child.Signal(syscall.SIGKILL)
			}
		}
	}
}

// reapAll collects every zombie; it reports whether child was among them.
func reapAll(child *os.Process) (bool, syscall.WaitStatus) {
	var (
		found  bool
		status syscall.WaitStatus
	)
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil || pid <= 0 {
			return found, status
		}
		if child != nil && pid == child.Pid {
			found, status = true, ws
		}
	}
}

func describe(ws syscall.WaitStatus) string {
	if ws.Signaled() {
		return fmt.Sprintf("signal: %v", ws.Signal())
	}
	return fmt.Sprintf("exit status %d", ws.ExitStatus())
}

func exitCode(ws syscall.WaitStatus) int {
	if ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ws.ExitStatus()
}
