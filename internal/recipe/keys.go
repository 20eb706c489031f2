package recipe

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
)

// Cache keys. A step's key names the image after it: the hash of its
// parent's key, the step as written (its Dockerfile line and force flag
// aside) and, for a COPY, the digest of the files it copies (not of the
// upload they came in, so an unrelated change elsewhere in a build context
// leaves the step cached). Equal keys mean equal images, so an unchanged
// step never runs again, on this node or on any node sharing the store.

// SourceKey is the key of a source's image, from its identity: a registry
// or archive image's manifest digest, or the key of a template's image.
func SourceKey(kind, identity string) string {
	return digest("space-source-v1", kind, identity)
}

// TenantKey is the key a tenant's build starts from on the image of key:
// its steps' layers are its own, so no tenant learns from a cache hit that
// another ran the same step.
func TenantKey(key, tenant string) string {
	return digest("space-tenant-v1", key, tenant)
}

// StepKey is the key of the image after step s on the image of parent;
// files is the digest of what a COPY copies ("" for other steps).
func StepKey(parent string, s Step, files string) string {
	s.Line, s.Force = 0, false
	if s.Copy != nil {
		c := *s.Copy
		c.Files = ""
		s.Copy = &c
	}
	b, _ := json.Marshal(s) // plain data: cannot fail
	return digest("space-step-v1", parent, string(b), files)
}

// StartKey is the key of a started template: the image, the start command
// and its ready check, and what the checkpoint depends on besides (the
// agent inside and the engine that restores it).
func StartKey(image string, st Start, agent, engine string) string {
	b, _ := json.Marshal(st)
	return digest("space-start-v1", image, string(b), agent, engine)
}

func digest(parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		h.Write([]byte(p))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil))
}
