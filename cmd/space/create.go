package main

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/spacesandbox/space/client"
)

func (a *app) createCmd() *cobra.Command {
	var (
		req       client.CreateSandboxRequest
		env, meta []string
		vols      []string
		asJSON    bool
	)
	cmd := &cobra.Command{
		Use:   "create",
		Short: "Create a sandbox and print its id",
		Args:  exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			var err error
			if req.Env, err = parseKV("env", env); err != nil {
				return err
			}
			if req.Metadata, err = parseKV("meta", meta); err != nil {
				return err
			}
			if req.Volumes, err = parseVolumes(vols); err != nil {
				return err
			}
			sb, err := a.client().CreateSandbox(cmd.Context(), req)
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSON(a.stdout, sb)
			}
			_, err = fmt.Fprintln(a.stdout, sb.ID)
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&req.Template, "template", "base", "template to start from")
	f.IntVar(&req.TimeoutSeconds, "timeout", 300, "seconds until the sandbox expires")
	f.IntVar(&req.CPU, "cpu", 0, "vCPUs (default: the daemon's)")
	f.IntVar(&req.MemoryMB, "memory", 0, "memory in MB (default: the daemon's)")
	f.IntVar(&req.DiskMB, "disk", 0, "writable disk in MB (default: the daemon's)")
	f.StringArrayVar(&env, "env", nil, "environment variable KEY=VALUE (repeatable)")
	f.StringArrayVar(&meta, "meta", nil, "metadata KEY=VALUE (repeatable)")
	f.StringArrayVar(&vols, "volume", nil, "mount a volume, name:/path or name:/path:ro (repeatable)")
	f.BoolVar(&asJSON, "json", false, "print the sandbox as JSON")
	return cmd
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
