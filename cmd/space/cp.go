package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
)

func (a *app) cpCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "cp SRC DST",
		Short: "Copy a file into or out of a sandbox",
		Long: "One side is ID:/path in a sandbox, the other a local path or - for stdin/stdout.\n" +
			"A sandbox path ending in / takes the local file's name. Files stream; nothing is held in memory.",
		Example: "  space cp ./data.csv sb-123:/home/user/\n  space cp sb-123:/tmp/out.log -\n  tar c . | space cp - sb-123:/tmp/src.tar",
		Args:    exactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			srcID, srcPath, srcRemote := splitRemote(args[0])
			dstID, dstPath, dstRemote := splitRemote(args[1])
			switch {
			case srcRemote && !dstRemote:
				return a.download(cmd.Context(), srcID, srcPath, args[1])
			case dstRemote && !srcRemote:
				return a.upload(cmd.Context(), args[0], dstID, dstPath)
			default:
				return usagef("exactly one of SRC and DST must be ID:/path")
			}
		},
	}
}

// splitRemote parses "ID:/path". A local path with a colon must contain a slash
// before it ("./a:b") to be read as local.
func splitRemote(arg string) (id, p string, ok bool) {
	id, p, ok = strings.Cut(arg, ":")
	if !ok || id == "" || strings.ContainsAny(id, `/\`) || p == "" {
		return "", "", false
	}
	return id, p, true
}

func (a *app) upload(ctx context.Context, local, id, remote string) error {
	var r io.Reader = a.stdin
	if local != "-" {
		f, err := os.Open(local)
		if err != nil {
			return err
		}
		defer f.Close()
		if fi, err := f.Stat(); err == nil && fi.IsDir() {
			return fmt.Errorf("%s is a directory (copy a tar archive instead)", local)
		}
		r = f
		if strings.HasSuffix(remote, "/") {
			remote += filepath.Base(local)
		}
	} else if strings.HasSuffix(remote, "/") {
		return usagef("uploading stdin needs a file name, not the directory %s", remote)
	}
	_, err := a.client().Upload(ctx, id, remote, r)
	return err
}

func (a *app) download(ctx context.Context, id, remote, local string) (err error) {
	body, err := a.client().Download(ctx, id, remote)
	if err != nil {
		return err
	}
	defer body.Close()
	if local == "-" {
		if _, err := io.Copy(a.stdout, body); err != nil {
			return fmt.Errorf("download %s: %w", remote, err)
		}
		return nil
	}
	if fi, err := os.Stat(local); err == nil && fi.IsDir() {
		local = filepath.Join(local, path.Base(remote))
	}
	f, err := os.Create(local)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			err = errors.Join(err, os.Remove(local))
		}
	}()
	if _, err := io.Copy(f, body); err != nil {
		return fmt.Errorf("download %s: %w", remote, err)
	}
	return nil
}
