package daemon

import (
	"context"
	"encoding/base64"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spacesandbox/space/internal/blobstore"
	"github.com/spacesandbox/space/internal/checkpoint"
	"github.com/spacesandbox/space/internal/config"
	"github.com/spacesandbox/space/internal/seal"
	"github.com/spacesandbox/space/internal/store"
)

// storage is what spaced keeps: the catalog (embedded, or PostgreSQL in a
// cluster), the keyring, the object store's repositories and this node's
// directories of images.
type storage struct {
	// catalog is all the node keeps; each part is handed it as the
	// groups or methods it declares (tenant.Store, volume's store.Volumes,
	// webhook.Catalog), see docs/ARCHITECTURE.md (store).
	catalog store.Catalog
	// watched is the catalog with its sandbox changes fed to watchers
	// (the console's live list, webhooks, the API's change feed): every
	// part that writes sandbox records (sandbox.Service) gets this one.
	watched *store.Watched
	// cluster is the catalog in cluster mode; nil with one node.
	cluster *store.Postgres
	keys    *seal.Keyring
	repos   *repos
	// imagesDir holds checkpoint images while they are made or restored.
	imagesDir string
	// hibernation keeps hibernated sandboxes' images on this node's disk,
	// whatever the object store: a wake must not wait for it.
	hibernation *checkpoint.Repo
}

// newStorage opens what spaced keeps. Its part closes the catalog.
func newStorage(ctx context.Context, cfg config.Config, log *slog.Logger) (_ *storage, err error) {
	catalog, err := openCatalog(ctx, cfg, log)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			catalog.Close()
		}
	}()
	s := &storage{catalog: catalog, watched: store.Watch(catalog), imagesDir: filepath.Join(cfg.DataDir, "images")}
	s.cluster, _ = catalog.(*store.Postgres)
	objects, err := openObjectStore(cfg, log)
	if err != nil {
		return nil, err
	}
	if s.keys, err = openKeyring(cfg); err != nil {
		return nil, err
	}
	if err := clearDir(s.imagesDir); err != nil {
		return nil, err
	}
	hibernationDir, err := blobstore.NewFS(filepath.Join(cfg.DataDir, "hibernation"))
	if err != nil {
		return nil, err
	}
	s.hibernation = checkpoint.NewRepo(hibernationDir, s.keys).WithLogger(log)
	if s.repos, err = openRepos(ctx, objects, s.keys, s.cluster, log); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *storage) part() part {
	return part{name: "catalog", stop: func(context.Context) error { return s.catalog.Close() }}
}

// openCatalog opens the cluster catalog when a database is configured, the
// node's embedded store otherwise.
func openCatalog(ctx context.Context, cfg config.Config, log *slog.Logger) (store.Catalog, error) {
	if cfg.DatabaseURL == "" {
		return store.OpenBolt(filepath.Join(cfg.DataDir, "state.db"))
	}
	octx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	pg, err := store.OpenPostgres(octx, cfg.DatabaseURL, cfg.NodeID)
	if err != nil {
		return nil, err
	}
	if before, after := pg.Migration(); before != after {
		log.Info("catalog schema migrated", "from", before, "to", after)
	}
	return pg, nil
}

// clearDir empties dir (which may be a mount point), making it if missing.
// Images left there by a crash mid-checkpoint or mid-restore are of no use:
// what was uploaded has no manifest and is swept from the store.
func clearDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("images dir: %w", err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("images dir: %w", err)
	}
	for _, e := range entries {
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return fmt.Errorf("clear images dir: %w", err)
		}
	}
	return nil
}

// openObjectStore opens the configured object store: S3 or a directory.
func openObjectStore(cfg config.Config, log *slog.Logger) (blobstore.Store, error) {
	if bucket, ok := strings.CutPrefix(cfg.ObjectStore, "s3://"); ok {
		return blobstore.NewS3(blobstore.S3Options{
			Logger:   log,
			Endpoint: cfg.S3Endpoint, Region: cfg.S3Region, Bucket: bucket,
			AccessKey: cfg.S3AccessKey, SecretKey: cfg.S3SecretKey,
		})
	}
	return blobstore.NewFS(cfg.ObjectStore)
}

// openKeyring opens (or creates) the platform key and loads the customer
// keys of the operator's key file, if any. Key material is never logged.
func openKeyring(cfg config.Config) (*seal.Keyring, error) {
	if err := os.MkdirAll(filepath.Dir(cfg.PlatformKeyFile), 0o700); err != nil {
		return nil, fmt.Errorf("key dir: %w", err)
	}
	keys, err := seal.OpenKeyring(cfg.PlatformKeyFile)
	if err != nil {
		return nil, err
	}
	if cfg.CustomerKeysFile == "" {
		return keys, nil
	}
	data, err := os.ReadFile(cfg.CustomerKeysFile)
	if err != nil {
		return nil, fmt.Errorf("customer keys file: %w", err)
	}
	for i, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		id, b64, ok := strings.Cut(line, " ")
		key, derr := base64.StdEncoding.DecodeString(strings.TrimSpace(b64))
		if !ok || derr != nil {
			return nil, fmt.Errorf("customer keys file line %d: want \"<key id> <base64 key>\"", i+1)
		}
		if err := keys.SetCustomerKey(id, key); err != nil {
			return nil, fmt.Errorf("customer keys file line %d: %w", i+1, err)
		}
	}
	return keys, nil
}

// repos are the object store's artifact repositories: checkpoints and
// snapshots, template layers and starts, volume backups.
type repos struct {
	checkpoints, templates, volumes *checkpoint.Repo
}

// openRepos makes the repositories. In cluster mode (pg not nil) they
// keep their manifests in the catalog too (lists read it, not the object
// store), brought up to date with the object store here.
func openRepos(ctx context.Context, objects blobstore.Store, keys *seal.Keyring, pg *store.Postgres, log *slog.Logger) (*repos, error) {
	r := &repos{
		checkpoints: checkpoint.NewRepo(objects, keys).WithLogger(log),
		templates:   checkpoint.NewRepoAt(objects, keys, "templates/").WithLogger(log),
		volumes:     checkpoint.NewRepoAt(objects, keys, "volumes/").WithLogger(log),
	}
	if pg == nil {
		return r, nil
	}
	for _, repo := range []*checkpoint.Repo{r.checkpoints, r.templates, r.volumes} {
		start := time.Now()
		n, err := repo.WithIndex(pg).Reindex(ctx)
		if err != nil {
			return nil, fmt.Errorf("index the object store's manifests: %w", err)
		}
		log.Info("manifests indexed in the catalog", "repository", repo.Prefix(), "manifests", n, "ms", time.Since(start).Milliseconds())
	}
	return r, nil
}
