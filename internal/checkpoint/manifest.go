package checkpoint

import (
	"cmp"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/seal"
)

// ManifestVersion is the manifest format Save writes. Load reads it and
// version 1, whose artifacts are whole files (version 2 added parts).
const ManifestVersion = 2

// Kinds of artifact set.
const (
	KindCheckpoint = "checkpoint" // memory, processes and disk of a paused sandbox
	KindSnapshot   = "snapshot"   // a sandbox's writable disk layer
	// A template build's artifacts: one step's layer, an uploaded file set
	// (build context), and a started template's checkpoint.
	KindLayer = "layer"
	KindFiles = "files"
	KindStart = "start"
	// KindVolume is a backup of a volume's files (package volume).
	KindVolume = "volume"
)

// MetaImage is the Meta key naming the template image a checkpoint or
// snapshot was taken on (a resume or a restore needs that image).
const MetaImage = "template_image"

var kinds = map[string]bool{KindCheckpoint: true, KindSnapshot: true, KindLayer: true, KindFiles: true, KindStart: true, KindVolume: true}

// Manifest describes a stored checkpoint or snapshot. It is stored in plain
// JSON (listing needs no key); everything secret goes into Sealed.
type Manifest struct {
	Version        int               `json:"version"` // ManifestVersion; set by Save
	ID             string            `json:"id"`
	Kind           string            `json:"kind"` // one of the Kind constants
	SandboxID      string            `json:"sandbox_id"`
	Template       string            `json:"template,omitempty"`
	CreatedAt      time.Time         `json:"created_at"` // Save sets it to now if zero
	RuntimeVersion string            `json:"runtime_version,omitempty"`
	Limits         Limits            `json:"limits"`
	Network        json.RawMessage   `json:"network,omitempty"` // the sandbox's policy, opaque here
	Meta           map[string]string `json:"meta,omitempty"`
	Parent         string            `json:"parent,omitempty"` // base of an incremental snapshot
	KeyID          string            `json:"key_id,omitempty"` // customer key; "" = platform key
	Artifacts      []Artifact        `json:"artifacts"`        // filled by Save, sorted by name
	// Sealed is the caller's secret (access token, env) encrypted under the
	// manifest's key, with the manifest's digest as associated data: opening
	// it also proves the manifest was not altered. Filled by Save.
	Sealed *Sealed `json:"sealed"`
	// Bytes is the total stored size of the artifacts and Took the time
	// their upload took. Filled by Save.
	Bytes int64         `json:"bytes"`
	Took  time.Duration `json:"took_ns"`
}

// Limits are the sandbox's resource limits when it was checkpointed.
type Limits struct {
	CPU          int `json:"cpu"`
	MemoryMB     int `json:"memory_mb"`
	DiskMB       int `json:"disk_mb"`
	MaxProcesses int `json:"max_processes"`
}

// Artifact is one file of the set, stored encrypted under its own data key.
type Artifact struct {
	Name       string          `json:"name"`
	Size       int64           `json:"size"` // stored (encrypted) bytes
	PlainSize  int64           `json:"plain_size"`
	SHA256     string          `json:"sha256"` // of the stored bytes, hex
	WrappedKey seal.WrappedKey `json:"wrapped_key"`
	// File and Offset place a part of a large file: the artifact holds
	// PlainSize bytes of File from Offset. Empty File: the artifact is the
	// whole file Name.
	File   string `json:"file,omitempty"`
	Offset int64  `json:"offset,omitempty"`
}

// target is the file of the image the artifact is (part of).
func (a Artifact) target() string {
	if a.File != "" {
		return a.File
	}
	return a.Name
}

// Sealed is an encrypted blob and its wrapped data key.
type Sealed struct {
	Data       []byte          `json:"data"`
	WrappedKey seal.WrappedKey `json:"wrapped_key"`
}

const (
	maxIDLen   = 128
	maxNameLen = 128
	// maxManifest bounds what Get reads: a manifest is a few KiB.
	maxManifest = 1 << 20
)

// validName accepts ids and artifact names that are safe as one object key
// element and as a file name: 1..max bytes of A-Z a-z 0-9 . _ -, not
// starting with a dot.
func validName(what, s string, max int) error {
	ok := s != "" && len(s) <= max && s[0] != '.' && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-')
	}) < 0
	if !ok {
		return errdefs.New(errdefs.ErrInvalidArgument,
			"%s %q is invalid: use 1 to %d characters of A-Z a-z 0-9 . _ -, not starting with a dot", what, s, max)
	}
	return nil
}

// decodeManifest parses and checks a stored manifest.
func decodeManifest(b []byte) (*Manifest, error) {
	var probe struct {
		Version int `json:"version"`
	}
	if err := json.Unmarshal(b, &probe); err != nil {
		return nil, errdefs.Wrap(errdefs.ErrFailedPrecondition, err, "manifest is damaged: not JSON")
	}
	if probe.Version != 1 && probe.Version != ManifestVersion {
		return nil, errdefs.New(errdefs.ErrFailedPrecondition,
			"manifest format version %d is not supported (this build reads version %d): upgrade spaced", probe.Version, ManifestVersion)
	}
	var m Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, errdefs.Wrap(errdefs.ErrFailedPrecondition, err, "manifest is damaged: it does not decode")
	}
	if err := m.check(); err != nil {
		return nil, err
	}
	return &m, nil
}

// check validates what Load relies on: names that become keys and paths,
// and a complete record.
func (m *Manifest) check() error {
	damaged := func(format string, args ...any) error {
		return errdefs.New(errdefs.ErrFailedPrecondition, "manifest of checkpoint %q is damaged: "+format, append([]any{m.ID}, args...)...)
	}
	if err := validName("checkpoint id", m.ID, maxIDLen); err != nil {
		return damaged("%s", errdefs.PublicMessage(err))
	}
	if !kinds[m.Kind] {
		return damaged("kind %q is not known", m.Kind)
	}
	if m.Sealed == nil || m.Sealed.WrappedKey.KeyID != m.KeyID {
		return damaged("its sealed section is missing or under another key")
	}
	seen := map[string]bool{}
	parts := map[string][]Artifact{} // by file
	for _, a := range m.Artifacts {
		if err := validName("artifact name", a.Name, maxNameLen); err != nil {
			return damaged("%s", errdefs.PublicMessage(err))
		}
		if seen[a.Name] {
			return damaged("artifact %q is listed twice", a.Name)
		}
		seen[a.Name] = true
		if a.Size < 0 || a.PlainSize < 0 || len(a.SHA256) != 64 || a.WrappedKey.KeyID != m.KeyID {
			return damaged("the entry of artifact %q is malformed", a.Name)
		}
		if a.File == "" {
			if a.Offset != 0 {
				return damaged("artifact %q has an offset but no file", a.Name)
			}
			continue
		}
		if m.Version < 2 {
			return damaged("artifact %q is a part, which version %d has not", a.Name, m.Version)
		}
		if err := validName("artifact file", a.File, maxNameLen); err != nil {
			return damaged("%s", errdefs.PublicMessage(err))
		}
		parts[a.File] = append(parts[a.File], a)
	}
	// The parts of a file cover it once, in order, from its start; and no
	// file is both whole and in parts.
	for file, ps := range parts {
		if seen[file] {
			return damaged("file %q is listed both whole and in parts", file)
		}
		slices.SortFunc(ps, func(a, b Artifact) int { return cmp.Compare(a.Offset, b.Offset) })
		var next int64
		for _, p := range ps {
			if p.Offset != next {
				return damaged("the parts of file %q do not cover it: %q starts at %d, not %d", file, p.Name, p.Offset, next)
			}
			next += p.PlainSize
		}
	}
	return nil
}

// digest hashes the manifest without its wrapped keys and sealed data: the
// part that Sealed authenticates. Wrapped keys are left out so that Rewrap
// can replace them; each is authenticated by its own KEK.
func (m *Manifest) digest() ([]byte, error) {
	c := *m
	c.Sealed = nil
	c.Artifacts = make([]Artifact, len(m.Artifacts))
	for i, a := range m.Artifacts {
		a.WrappedKey = seal.WrappedKey{}
		c.Artifacts[i] = a
	}
	b, err := json.Marshal(&c)
	if err != nil {
		return nil, fmt.Errorf("encode manifest: %w", err)
	}
	sum := sha256.Sum256(b)
	return sum[:], nil
}

// Associated data binds each ciphertext to its place: an artifact to its
// checkpoint and name, the sealed blob to the whole manifest.
func artifactAD(id, name string) []byte {
	return []byte("space/checkpoint/v1/artifact\x00" + id + "\x00" + name)
}

func sealedAD(id string, digest []byte) []byte {
	return append([]byte("space/checkpoint/v1/sealed\x00"+id+"\x00"), digest...)
}
