package template

import (
	"context"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/store"
	"github.com/spacesandbox/space/internal/tenant"
)

// Templates belong to the tenant whose key built them first. The default
// tenant's templates (the admin's: base, code-interpreter-v1, ...) are the
// platform's: every tenant may see and use them, only the admin changes
// them. Another tenant's template answers as an unknown one. Names are one
// namespace, as E2B's aliases are: a name another tenant holds is taken.

// visible reports whether ctx's principal may see and use templates of
// tenant owner.
func visible(ctx context.Context, owner string) bool {
	return tenant.FromContext(ctx).Owns(owner) || tenant.Of(owner) == tenant.Default
}

// template returns template name as ctx's principal may see it; change
// says the caller means to change it, which only its owner may.
func (s *Service) template(ctx context.Context, name string, change bool) (*store.Template, error) {
	t, err := s.store.GetTemplate(ctx, name)
	if err != nil {
		return nil, err
	}
	p := tenant.FromContext(ctx)
	switch {
	case p.Owns(t.Tenant):
		return t, nil
	case !visible(ctx, t.Tenant):
		return nil, errdefs.New(errdefs.ErrNotFound, "template %q not found", name)
	case change:
		return nil, errdefs.New(errdefs.ErrPermissionDenied, "template %q is the platform's: only the admin key changes it", name)
	}
	return t, nil
}

// build returns build id if ctx's principal may see it (its own tenant's
// builds, or the platform's for the admin).
func (s *Service) build(ctx context.Context, id string) (*store.Build, error) {
	b, err := s.store.GetBuild(ctx, id)
	if err != nil {
		return nil, err
	}
	if !tenant.FromContext(ctx).Owns(b.Tenant) {
		return nil, errdefs.New(errdefs.ErrNotFound, "build %q not found", id)
	}
	return b, nil
}

// claimName checks that ctx's principal may build template name: it is
// new, or its own.
func (s *Service) claimName(ctx context.Context, name string) (*store.Template, error) {
	t, err := s.store.GetTemplate(ctx, name)
	if err != nil {
		return nil, err
	}
	p := tenant.FromContext(ctx)
	switch {
	case p.Owns(t.Tenant):
		return t, nil
	case tenant.Of(t.Tenant) == tenant.Default:
		return nil, errdefs.New(errdefs.ErrPermissionDenied, "template %q is the platform's: only the admin key builds it; choose another name", name)
	}
	return nil, errdefs.New(errdefs.ErrAlreadyExists, "template name %q is taken: choose another name", name)
}

// filesKey is what file set hash is stored as for ctx's tenant: each
// tenant's uploads are its own (an E2B hash is only a name, so a shared one
// could be filled by another tenant first, and a present one would tell
// that someone uploaded those files).
func filesKey(ctx context.Context, hash string) string {
	if t := tenant.FromContext(ctx).Tenant; t != tenant.Default {
		return t + "-" + hash
	}
	return hash
}
