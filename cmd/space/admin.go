package main

import (
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/spacesandbox/space/client"
)

// space admin: tenants, their API keys and quotas, and the audit log. It
// needs the admin key (spaced's configured key).
func (a *app) adminCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "admin",
		Short: "Manage tenants, their API keys and quotas, and read the audit log (admin key)",
		Long: "Every sandbox, template, snapshot, volume, secret and customer key belongs to the tenant\n" +
			"of the key that made it; a tenant's key sees only its own tenant's. The admin key\n" +
			"(spaced's configured key) sees all of them and alone runs these commands.",
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	tenant := &cobra.Command{Use: "tenant", Short: "Create, list and show tenants; set quotas", Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() }}
	tenant.AddCommand(a.tenantCreateCmd(), a.tenantLsCmd(), a.tenantQuotasCmd())
	key := &cobra.Command{Use: "key", Short: "Issue, list and revoke API keys", Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() }}
	key.AddCommand(a.keyCreateCmd(), a.keyLsCmd(), a.keyRevokeCmd())
	cmd.AddCommand(tenant, key, a.auditCmd())
	return cmd
}

func quotaFlags(cmd *cobra.Command, q *client.Quotas) {
	f := cmd.Flags()
	f.IntVar(&q.Sandboxes, "max-sandboxes", 0, "running sandboxes at once (0: the daemon's default, -1: no limit)")
	f.IntVar(&q.VCPU, "max-vcpu", 0, "vCPUs of its running sandboxes and builds")
	f.IntVar(&q.MemoryMB, "max-memory-mb", 0, "memory (MB) of its running sandboxes and builds")
	f.IntVar(&q.Builds, "max-builds", 0, "template builds queued or running at once")
	f.IntVar(&q.PausedSandboxes, "max-paused", 0, "paused sandboxes kept")
	f.IntVar(&q.PausedMB, "max-paused-mb", 0, "MiB their checkpoints take in the object store")
	f.IntVar(&q.Snapshots, "max-snapshots", 0, "snapshots kept")
	f.IntVar(&q.SnapshotMB, "max-snapshot-mb", 0, "MiB snapshots take in the object store")
	f.IntVar(&q.Templates, "max-templates", 0, "templates")
	f.IntVar(&q.TemplateMB, "max-template-mb", 0, "MiB of the builds templates' tags point at")
	f.Float64Var(&q.CreatesPerSecond, "creates-per-second", 0, "creates, resumes and forks per second")
	f.IntVar(&q.CreatesBurst, "creates-burst", 0, "burst above that rate")
}

func (a *app) tenantCreateCmd() *cobra.Command {
	var (
		name string
		q    client.Quotas
	)
	cmd := &cobra.Command{
		Use:   "create <id>",
		Short: "Make a tenant",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, pos []string) error {
			t, err := a.client().CreateTenant(cmd.Context(), pos[0], name, q)
			if err != nil {
				return err
			}
			_, err = fmt.Fprintln(a.stdout, t.ID)
			return err
		},
	}
	cmd.Flags().StringVar(&name, "name", "", "a name to show")
	quotaFlags(cmd, &q)
	return cmd
}

func (a *app) tenantLsCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "ls",
		Short: "List tenants with their usage and quotas",
		Args:  exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			ts, err := a.client().ListTenants(cmd.Context())
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSON(a.stdout, ts)
			}
			tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "TENANT\tSANDBOXES\tVCPU\tMEMORY MB\tBUILDS\tPAUSED\tSNAPSHOTS\tTEMPLATES\tCREATES/S")
			lim := func(n int) string {
				if n <= 0 {
					return "-"
				}
				return fmt.Sprint(n)
			}
			for _, t := range ts {
				u, q := client.Usage{}, t.EffectiveQuotas
				if t.Usage != nil {
					u = *t.Usage
				}
				fmt.Fprintf(tw, "%s\t%d/%s\t%d/%s\t%d/%s\t%d/%s\t%d/%s\t%d/%s\t%d/%s\t%g\n", t.ID, u.Sandboxes, lim(q.Sandboxes), u.VCPU, lim(q.VCPU),
					u.MemoryMB, lim(q.MemoryMB), u.Builds, lim(q.Builds), u.PausedSandboxes, lim(q.PausedSandboxes), u.Snapshots, lim(q.Snapshots),
					u.Templates, lim(q.Templates), q.CreatesPerSecond)
			}
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func (a *app) tenantQuotasCmd() *cobra.Command {
	var q client.Quotas
	cmd := &cobra.Command{
		Use:   "quotas <id>",
		Short: "Replace a tenant's quotas (flags not given go back to the daemon's defaults)",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, pos []string) error {
			t, err := a.client().SetQuotas(cmd.Context(), pos[0], q)
			if err != nil {
				return err
			}
			return writeJSON(a.stdout, t)
		},
	}
	quotaFlags(cmd, &q)
	return cmd
}

func (a *app) keyCreateCmd() *cobra.Command {
	var name string
	cmd := &cobra.Command{
		Use:   "create <tenant>",
		Short: "Issue an API key of a tenant and print it (the only time it is shown)",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, pos []string) error {
			k, err := a.client().IssueKey(cmd.Context(), pos[0], name)
			if err != nil {
				return err
			}
			_, err = fmt.Fprintln(a.stdout, k.Key)
			return err
		},
	}
	cmd.Flags().StringVar(&name, "name", "", "what the key is for")
	return cmd
}

func (a *app) keyLsCmd() *cobra.Command {
	var (
		tenant string
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "ls",
		Short: "List API keys by prefix (never the keys)",
		Args:  exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			ks, err := a.client().ListAPIKeys(cmd.Context(), tenant)
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSON(a.stdout, ks)
			}
			tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "KEY\tTENANT\tNAME\tCREATED\tREVOKED")
			for _, k := range ks {
				revoked := "-"
				if !k.RevokedAt.IsZero() {
					revoked = k.RevokedAt.Local().Format(time.DateTime)
				}
				fmt.Fprintf(tw, "%s…\t%s\t%s\t%s\t%s\n", k.ID, k.Tenant, k.Name, k.CreatedAt.Local().Format(time.DateTime), revoked)
			}
			return tw.Flush()
		},
	}
	cmd.Flags().StringVar(&tenant, "tenant", "", "one tenant's keys only")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func (a *app) keyRevokeCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "revoke <key-id>",
		Short: "Revoke an API key at once (its open streams and terminals end too)",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, pos []string) error {
			_, err := a.client().RevokeKey(cmd.Context(), pos[0])
			return err
		},
	}
}

func (a *app) auditCmd() *cobra.Command {
	var (
		f      client.AuditFilter
		since  time.Duration
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "audit",
		Short: "Print the state-changing API calls of a time window",
		Args:  exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if since > 0 {
				f.From = time.Now().Add(-since)
			}
			es, err := a.client().Audit(cmd.Context(), f)
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSON(a.stdout, es)
			}
			tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "TIME\tTENANT\tKEY\tCALL\tOBJECT\tSTATUS")
			for _, e := range es {
				obj := e.Object
				if e.Created != "" {
					obj = e.Created
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\n", e.Time.Local().Format(time.DateTime), e.Tenant, e.Key, e.Route, obj, e.Status)
			}
			return tw.Flush()
		},
	}
	fl := cmd.Flags()
	fl.DurationVar(&since, "since", time.Hour, "how far back")
	fl.StringVar(&f.Tenant, "tenant", "", "one tenant's calls only")
	fl.IntVar(&f.Limit, "limit", 0, "at most this many (default 1000)")
	fl.BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}
