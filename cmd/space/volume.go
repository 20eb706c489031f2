package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/spacesandbox/space/client"
)

func (a *app) volumeCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "volume",
		Short: "Make, list, fill and back up volumes (persistent storage sandboxes mount)",
		Long: "A volume is a named directory with a size limit on the daemon's node; it outlives the\n" +
			"sandboxes that mount it (space create --volume name:/path[:ro]). One sandbox at a time\n" +
			"may mount a volume read-write, beside any number read-only. A backup in the object\n" +
			"store can be restored as a volume on any node sharing the store.",
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(a.volumeCreateCmd(), a.volumeLsCmd(), a.volumeInfoCmd(), a.volumeRmCmd(),
		a.volumeCpCmd(), a.volumeFilesCmd(), a.volumeBackupCmd(), a.volumeBackupsCmd())
	return cmd
}

func (a *app) volumeCreateCmd() *cobra.Command {
	var (
		req    client.CreateVolumeRequest
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "create <name>",
		Short: "Make a volume (empty, or from a backup) and print its id",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, pos []string) error {
			req.Name = pos[0]
			v, err := a.client().CreateVolume(cmd.Context(), req)
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSON(a.stdout, v)
			}
			_, err = fmt.Fprintln(a.stdout, v.ID)
			return err
		},
	}
	f := cmd.Flags()
	f.IntVar(&req.SizeMB, "size", 0, "size limit in MB (default: the daemon's, or the backup's)")
	f.StringVar(&req.FromBackup, "from-backup", "", "fill it from this backup (space volume backups)")
	f.BoolVar(&asJSON, "json", false, "print the volume as JSON")
	return cmd
}

func (a *app) volumeLsCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "ls",
		Short: "List volumes",
		Args:  exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			vs, err := a.client().ListVolumes(cmd.Context())
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSON(a.stdout, vs)
			}
			tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tID\tSIZE\tUSED\tMOUNTED BY\tCREATED")
			for _, v := range vs {
				fmt.Fprintf(tw, "%s\t%s\t%d MB\t%s\t%s\t%s\n", v.Name, v.ID, v.SizeMB, humanBytes(v.UsedBytes), holders(v.Mounts), v.CreatedAt.Local().Format(time.DateTime))
			}
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func holders(ms []client.VolumeHolder) string {
	if len(ms) == 0 {
		return "-"
	}
	var out []string
	for _, m := range ms {
		mode := "rw"
		if m.ReadOnly {
			mode = "ro"
		}
		out = append(out, m.SandboxID+":"+mode)
	}
	return strings.Join(out, ",")
}

func (a *app) volumeInfoCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "info <volume>",
		Short: "Show a volume as JSON",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, pos []string) error {
			v, err := a.client().GetVolume(cmd.Context(), pos[0])
			if err != nil {
				return err
			}
			return writeJSON(a.stdout, v)
		},
	}
}

func (a *app) volumeRmCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "rm <volume>...",
		Short: "Delete volumes and their files (refused while a sandbox mounts one)",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, pos []string) error {
			for _, ref := range pos {
				if err := a.client().DeleteVolume(cmd.Context(), ref); err != nil {
					return err
				}
			}
			return nil
		},
	}
}

// volumeCpCmd copies one file between the local machine and a volume:
// "<volume>:<path>" names the volume side, "-" stdin or stdout.
func (a *app) volumeCpCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "cp <src> <dst>",
		Short: "Copy a file into or out of a volume (<volume>:<path> names the volume side; - is stdin/stdout)",
		Args:  exactArgs(2),
		RunE: func(cmd *cobra.Command, pos []string) error {
			src, dst := pos[0], pos[1]
			ctx, c := cmd.Context(), a.client()
			if vol, p, ok := strings.Cut(src, ":"); ok && !strings.Contains(dst, ":") {
				rc, err := c.ReadVolumeFile(ctx, vol, p)
				if err != nil {
					return err
				}
				defer rc.Close()
				var w io.Writer = a.stdout
				if dst != "-" {
					f, err := os.Create(dst)
					if err != nil {
						return err
					}
					defer f.Close()
					w = f
				}
				_, err = io.Copy(w, rc)
				return err
			}
			vol, p, ok := strings.Cut(dst, ":")
			if !ok {
				return usagef("one side must be <volume>:<path>")
			}
			var r io.Reader = a.stdin
			if src != "-" {
				f, err := os.Open(src)
				if err != nil {
					return err
				}
				defer f.Close()
				r = f
			}
			_, err := c.WriteVolumeFile(ctx, vol, p, r, 0)
			return err
		},
	}
}

func (a *app) volumeFilesCmd() *cobra.Command {
	var depth int
	cmd := &cobra.Command{
		Use:   "files <volume> [path]",
		Short: "List the files of a volume",
		Args:  cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, pos []string) error {
			p := "/"
			if len(pos) == 2 {
				p = pos[1]
			}
			es, err := a.client().ListVolumeFiles(cmd.Context(), pos[0], p, depth)
			if err != nil {
				return err
			}
			tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
			for _, e := range es {
				name := e.Path
				if e.Target != "" {
					name += " -> " + e.Target
				}
				fmt.Fprintf(tw, "%s\t%04o\t%d:%d\t%s\t%s\n", e.Type, e.Mode, e.UID, e.GID, humanBytes(e.Size), name)
			}
			return tw.Flush()
		},
	}
	cmd.Flags().IntVar(&depth, "depth", 1, "levels to list")
	return cmd
}

func (a *app) volumeBackupCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "backup <volume>",
		Short: "Back a volume up to the object store and print the backup's id",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, pos []string) error {
			b, err := a.client().BackupVolume(cmd.Context(), pos[0])
			if err != nil {
				return err
			}
			_, err = fmt.Fprintln(a.stdout, b.ID)
			return err
		},
	}
}

func (a *app) volumeBackupsCmd() *cobra.Command {
	var (
		asJSON bool
		rm     bool
	)
	cmd := &cobra.Command{
		Use:   "backups [volume]",
		Short: "List backups (of one volume name); with --rm, delete the backups named",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, pos []string) error {
			c := a.client()
			if rm {
				if len(pos) != 1 {
					return usagef("--rm takes one backup id")
				}
				return c.DeleteVolumeBackup(cmd.Context(), pos[0])
			}
			var vol string
			if len(pos) == 1 {
				vol = pos[0]
			}
			bs, err := c.ListVolumeBackups(cmd.Context(), vol)
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSON(a.stdout, bs)
			}
			tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tVOLUME\tSIZE\tFILES\tSTORED\tCREATED")
			for _, b := range bs {
				fmt.Fprintf(tw, "%s\t%s\t%d MB\t%d\t%s\t%s\n", b.ID, b.Volume, b.SizeMB, b.Files, humanBytes(b.Bytes), b.CreatedAt.Local().Format(time.DateTime))
			}
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	cmd.Flags().BoolVar(&rm, "rm", false, "delete the backup named (its id) instead")
	return cmd
}

// parseVolumes turns --volume name:/path[:ro] flags into mounts.
func parseVolumes(specs []string) ([]client.VolumeMount, error) {
	var out []client.VolumeMount
	for _, s := range specs {
		parts := strings.Split(s, ":")
		if len(parts) < 2 || len(parts) > 3 || parts[0] == "" || parts[1] == "" || len(parts) == 3 && parts[2] != "ro" && parts[2] != "rw" {
			return nil, usagef("--volume %q: want name:/path or name:/path:ro", s)
		}
		out = append(out, client.VolumeMount{Name: parts[0], Path: parts[1], ReadOnly: len(parts) == 3 && parts[2] == "ro"})
	}
	return out, nil
}
