package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
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
	cmd.AddCommand(a.templateBuildCmd(), a.templateLsCmd(), a.templateRmCmd(), a.templateBuildsCmd(), a.templateLogsCmd())
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
			"its sandboxes start (ready when HEALTHCHECK passes or the first EXPOSEd port listens).",
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
			return a.followBuild(ctx, c, b)
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

// followBuild prints a build's log as it runs, each step's header line
// with its number and state, the end of each step's output, and the
// elapsed time; it fails when the build does.
func (a *app) followBuild(ctx context.Context, c *client.Client, b *client.Build) error {
	start := time.Now()
	fmt.Fprintf(a.stderr, "build %s of %s\n", b.ID, b.Template)
	var after uint64
	for {
		s, err := c.BuildLogs(ctx, b.ID, after)
		if err != nil {
			return err
		}
		for {
			e, err := s.Next()
			if errors.Is(err, io.EOF) && s.End != nil {
				s.Close()
				return a.buildEnded(s.End, time.Since(start))
			}
			if err != nil {
				break // the stream broke: resume from the last entry
			}
			a.printLog(e, time.Since(start))
		}
		after = s.LastID
		s.Close()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		time.Sleep(500 * time.Millisecond)
	}
}

func (a *app) printLog(e *client.LogEntry, elapsed time.Duration) {
	if e.Level == "debug" {
		return
	}
	if strings.HasPrefix(e.Message, "[") || e.Step == 0 && strings.HasPrefix(e.Message, "FROM ") || strings.HasPrefix(e.Message, "start command") {
		fmt.Fprintf(a.stdout, "%6.1fs #%d %s\n", elapsed.Seconds(), e.Step, e.Message)
		return
	}
	fmt.Fprintf(a.stdout, "%6.1fs #%d   %s\n", elapsed.Seconds(), e.Step, e.Message)
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
			return a.followBuild(cmd.Context(), c, b)
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
