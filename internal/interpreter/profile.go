package interpreter

import (
	"embed"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
)

// The IPython startup file ships inside the binary, not in the template:
// the server calls functions it defines (the env helpers), so the two must
// change together, and a template then needs nothing but the binary and a
// Python with the wheels installed.
//
//go:embed startup/*.py
var startupFiles embed.FS

// writeProfile writes the kernels' IPython profile (IPYTHONDIR): the
// startup files in profile_default/startup, all owned by the kernel user
// (IPython writes into its profile).
func writeProfile(ipythonDir string, chown func(string) error) error {
	startup := filepath.Join(ipythonDir, "profile_default", "startup")
	if err := os.MkdirAll(startup, 0o755); err != nil {
		return fmt.Errorf("create IPython profile: %w", err)
	}
	for _, d := range []string{ipythonDir, filepath.Dir(startup), startup} {
		if err := chown(d); err != nil {
			return err
		}
	}
	entries, err := startupFiles.ReadDir("startup")
	if err != nil {
		return fmt.Errorf("read embedded startup files: %w", err)
	}
	for _, e := range entries {
		b, err := startupFiles.ReadFile("startup/" + e.Name())
		if err != nil {
			return fmt.Errorf("read embedded %s: %w", e.Name(), err)
		}
		p := filepath.Join(startup, e.Name())
		if err := os.WriteFile(p, b, 0o644); err != nil {
			return fmt.Errorf("write startup file: %w", err)
		}
	}
	return nil
}

// lookupUser returns the credential and home directory of a user named or
// numbered name.
func lookupUser(name string) (*syscall.Credential, string, error) {
	u, err := user.Lookup(name)
	if err != nil {
		if u, err = user.LookupId(name); err != nil {
			return nil, "", fmt.Errorf("kernel user %q: %w", name, err)
		}
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return nil, "", fmt.Errorf("kernel user %q: uid %q: %w", name, u.Uid, err)
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return nil, "", fmt.Errorf("kernel user %q: gid %q: %w", name, u.Gid, err)
	}
	cred := &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	if groups, err := u.GroupIds(); err == nil {
		for _, g := range groups {
			if n, err := strconv.ParseUint(g, 10, 32); err == nil {
				cred.Groups = append(cred.Groups, uint32(n))
			}
		}
	}
	return cred, u.HomeDir, nil
}
