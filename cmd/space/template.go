package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/spacesandbox/space/client"
)

func (a *app) templateCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "template",
		Short: "Build, list and delete templates",
		Args:  exactArgs(0),
		RunE:  func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(a.templateBuildCmd(), a.templateLsCmd(), a.templateRmCmd(), a.templateBuildsCmd(), a.templateLogsCmd(), a.templateCancelCmd())
	return cmd
}

func (a *app) templateBuildCmd() *cobra.Command {
	var (
		file, name string
		tags, args []string
		noCache    bool
		cpu, mem   int
		disk       int
		detach     bool
	)
	cmd := &cobra.Command{
		Use:   "build -t name[:tag] [-f Dockerfile] <context dir>",
		Short: "Build a template from a Dockerfile and a context directory",
		Long: "build uploads the context directory (without what .dockerignore excludes) and the\n" +
			"Dockerfile, and follows the build: each step runs in a sandbox, cached steps are not run\n" +
			"again. The Dockerfile's CMD/ENTRYPOINT is the template's start command, running when\n" +
			"its sandboxes start (ready when HEALTHCHECK passes or the first EXPOSEd port listens).\n\n" +
			"On a terminal the progress is drawn in place (the step running, step n of m, cached or\n" +
			"running, its last lines of output, the time so far); elsewhere the log's lines are\n" +
			"printed. Ctrl-C cancels the build on the server (asked first on a terminal; a second\n" +
			"Ctrl-C answers yes); -d returns at once, and `space template cancel <build>` cancels later.",
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, pos []string) error {
			if name == "" {
				return usagef("-t name[:tag] is required")
			}
			dir := pos[0]
			if file == "" {
				file = filepath.Join(dir, "Dockerfile")
			}
			df, err := os.ReadFile(file)
			if err != nil {
				return fmt.Errorf("read Dockerfile: %w", err)
			}
			buildArgs, err := parseKV("build-arg", args)
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			c := a.client()
			hash, err := a.uploadContext(ctx, c, dir)
			if err != nil {
				return err
			}
			b, err := c.StartBuild(ctx, client.BuildRequest{
				Name: name, Tags: tags, Dockerfile: string(df), BuildArgs: buildArgs, Context: hash,
				NoCache: noCache, CPU: cpu, MemoryMB: mem, DiskMB: disk,
			})
			if err != nil {
				return err
			}
			if detach {
				_, err := fmt.Fprintln(a.stdout, b.ID)
				return err
			}
			return a.followBuild(ctx, c, b, true)
		},
	}
	f := cmd.Flags()
	f.StringVarP(&file, "file", "f", "", "Dockerfile (default <context>/Dockerfile)")
	f.StringVarP(&name, "tag", "t", "", "template name[:tag]")
	f.StringArrayVar(&tags, "also-tag", nil, "another tag for the build (repeatable)")
	f.StringArrayVar(&args, "build-arg", nil, "build argument KEY=VALUE (repeatable)")
	f.BoolVar(&noCache, "no-cache", false, "run every step even if cached")
	f.IntVar(&cpu, "cpu", 0, "vCPUs of the build's sandboxes and of the template's (default: the daemon's)")
	f.IntVar(&mem, "memory", 0, "memory in MB (default: the daemon's)")
	f.IntVar(&disk, "disk", 0, "writable disk in MB (default: the daemon's)")
	f.BoolVarP(&detach, "detach", "d", false, "print the build's id and return at once")
	return cmd
}

// uploadContext uploads the context directory unless the daemon has it.
func (a *app) uploadContext(ctx context.Context, c *client.Client, dir string) (string, error) {
	up, err := c.UploadContext(ctx, dir)
	if err != nil {
		return "", err
	}
	if up.Uploaded {
		fmt.Fprintf(a.stderr, "uploaded context: %d files, %s\n", up.Files, humanBytes(up.Bytes))
	} else {
		fmt.Fprintf(a.stderr, "context %s already uploaded\n", up.Hash[:12])
	}
	return up.Hash, nil
}

// followBuild shows a build's progress until it ends (a live display on
// a terminal, the log's lines elsewhere) and fails when the build does.
// With cancelable, Ctrl-C cancels the build on the server: asked first
// when stdin is a terminal (a second Ctrl-C answers yes), else at once,
// saying so; once it is being canceled, another Ctrl-C stops waiting for
// the end. Without, Ctrl-C stops following.
func (a *app) followBuild(ctx context.Context, c *client.Client, b *client.Build, cancelable bool) error {
	start := time.Now()
	var view buildView = &plainView{out: a.stdout, errOut: a.stderr, start: start}
	if fd, ok := terminalFD(a.stdout); ok {
		view = newTTYView(a.stdout, fd, b)
	}
	fmt.Fprintf(a.stderr, "build %s of %s\n", b.ID, b.Template)
	interrupts, stop := a.interrupts()
	defer stop()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	items := make(chan logItem)
	go streamBuildLog(ctx, c, b.ID, items)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	canceling := false
	for {
		select {
		case it := <-items:
			switch {
			case it.err != nil:
				view.clear()
				return it.err
			case it.end != nil:
				view.end(it.end)
				return a.buildEnded(it.end, time.Since(start))
			}
			view.entry(it.entry)
		case <-tick.C:
			view.tick()
		case <-interrupts:
			if !cancelable {
				view.clear()
				return exitError{130}
			}
			if canceling {
				view.clear()
				fmt.Fprintf(a.stderr, "stopped waiting; build %s is being canceled on the server\n", b.ID)
				return exitError{130}
			}
			if a.interactive() {
				view.clear()
				if !a.confirm(fmt.Sprintf("cancel build %s on the server? [y/N] ", b.ID), interrupts) {
					view.note("the build goes on (space template cancel %s stops it)", b.ID)
					continue
				}
			}
			if _, err := c.CancelBuild(context.WithoutCancel(ctx), b.ID); err != nil {
				view.note("space: cancel build %s: %v", b.ID, err)
				continue
			}
			canceling = true
			view.note("canceling build %s on the server (Ctrl-C again to stop waiting)", b.ID)
		}
	}
}

// logItem is what the log stream gives: an entry, the build's end, or an
// error that ends the follow.
type logItem struct {
	entry *client.LogEntry
	end   *client.Build
	err   error
}

// streamBuildLog sends build id's log to items until its end, resuming
// after a broken stream from the last entry it sent.
func streamBuildLog(ctx context.Context, c *client.Client, id string, items chan<- logItem) {
	send := func(it logItem) bool {
		select {
		case items <- it:
			return true
		case <-ctx.Done():
			return false
		}
	}
	var after uint64
	for {
		s, err := c.BuildLogs(ctx, id, after)
		if err != nil {
			if ctx.Err() == nil {
				send(logItem{err: err})
			}
			return
		}
		for {
			e, err := s.Next()
			if errors.Is(err, io.EOF) && s.End != nil {
				s.Close()
				send(logItem{end: s.End})
				return
			}
			if err != nil {
				break // the stream broke: resume from the last entry
			}
			if !send(logItem{entry: e}) {
				s.Close()
				return
			}
		}
		after = s.LastID
		s.Close()
		select {
		case <-ctx.Done():
			return
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// interrupts delivers Ctrl-C (os.Interrupt) while a build is followed.
func (a *app) interrupts() (<-chan os.Signal, func()) {
	if a.signals != nil {
		return a.signals, func() {}
	}
	ch := make(chan os.Signal, 2)
	signal.Notify(ch, os.Interrupt)
	return ch, func() { signal.Stop(ch) }
}

// interactive reports whether the CLI may ask (stdin and stderr are a
// terminal).
func (a *app) interactive() bool {
	_, ok := terminalFD(a.stderr)
	return ok && isTerminal(a.stdin)
}

// confirm asks a yes/no question on stderr and reads the answer from
// stdin; another interrupt meanwhile answers yes.
func (a *app) confirm(question string, interrupts <-chan os.Signal) bool {
	fmt.Fprint(a.stderr, question)
	answer := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(a.stdin).ReadString('\n')
		answer <- line
	}()
	select {
	case line := <-answer:
		line = strings.ToLower(strings.TrimSpace(line))
		return line == "y" || line == "yes"
	case <-interrupts:
		fmt.Fprintln(a.stderr)
		return true
	}
}

func (a *app) buildEnded(b *client.Build, took time.Duration) error {
	switch b.State {
	case client.BuildStateReady:
		fmt.Fprintf(a.stdout, "built %s:%s in %.1fs (%d of %d RUN/COPY steps cached), image %s\n",
			b.Template, strings.Join(b.Tags, ","), took.Seconds(), b.Cached, b.Layered, b.Image)
		return nil
	case client.BuildStateCanceled:
		return fmt.Errorf("build %s was canceled", b.ID)
	}
	if b.Error != nil {
		if b.Error.ExitCode != nil {
			return fmt.Errorf("build %s failed at step %d (exit code %d): %s", b.ID, b.Error.Step, *b.Error.ExitCode, b.Error.Message)
		}
		return fmt.Errorf("build %s failed at step %d: %s", b.ID, b.Error.Step, b.Error.Message)
	}
	return fmt.Errorf("build %s ended %s", b.ID, b.State)
}

func (a *app) templateLsCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "ls",
		Short: "List templates",
		Args:  exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			ts, err := a.client().ListTemplates(cmd.Context())
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSON(a.stdout, ts)
			}
			tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tTAGS\tSTORED\tLOCAL\tSANDBOXES\tUPDATED")
			for _, t := range ts {
				var tags []string
				for _, tag := range t.Tags {
					tags = append(tags, tag.Tag)
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\n", t.Name, strings.Join(tags, ","), humanBytes(t.Bytes), humanBytes(t.LocalBytes), t.Sandboxes, t.UpdatedAt.Local().Format(time.DateTime))
			}
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func (a *app) templateRmCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "rm <name>[:tag]...",
		Short: "Delete templates (or only a tag); images go once no sandbox uses them",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, names []string) error {
			c := a.client()
			for _, n := range names {
				var err error
				if name, tag, ok := strings.Cut(n, ":"); ok {
					err = c.DeleteTag(cmd.Context(), name, tag)
				} else {
					err = c.DeleteTemplate(cmd.Context(), n)
				}
				if err != nil {
					return err
				}
			}
			return nil
		},
	}
}

func (a *app) templateBuildsCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "builds [name]",
		Short: "List builds, newest first",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := ""
			if len(args) == 1 {
				name = args[0]
			}
			bs, err := a.client().ListBuilds(cmd.Context(), name)
			if err != nil {
				return err
			}
			tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "BUILD\tTEMPLATE\tTAGS\tSTATE\tSTEP\tCACHED\tCREATED")
			for _, b := range bs {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d/%d\t%d\t%s\n", b.ID, b.Template, strings.Join(b.Tags, ","), b.State, b.Step, b.Steps, b.Cached, b.CreatedAt.Local().Format(time.DateTime))
			}
			return tw.Flush()
		},
	}
}

func (a *app) templateLogsCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "logs <build>",
		Short: "Print a build's log, following it until the build ends",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c := a.client()
			b, err := c.GetBuild(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return a.followBuild(cmd.Context(), c, b, false)
		},
	}
}

func (a *app) templateCancelCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "cancel <build>",
		Short: "Cancel a queued or running build on the server and wait until it stopped",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			c := a.client()
			b, err := c.CancelBuild(ctx, args[0])
			if err != nil {
				return err
			}
			// A running build stops at once but records it a moment later.
			for deadline := time.Now().Add(time.Minute); !b.Done() && time.Now().Before(deadline); {
				time.Sleep(200 * time.Millisecond)
				if b, err = c.GetBuild(ctx, args[0]); err != nil {
					return err
				}
			}
			switch b.State {
			case client.BuildStateCanceled:
				fmt.Fprintf(a.stdout, "build %s canceled\n", b.ID)
				return nil
			case client.BuildStateReady, client.BuildStateFailed:
				return fmt.Errorf("build %s had already ended (%s): nothing to cancel", b.ID, b.State)
			}
			return fmt.Errorf("build %s is still %s after a minute", b.ID, b.State)
		},
	}
}

func humanBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1fG", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1fM", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1fK", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%dB", n)
}
