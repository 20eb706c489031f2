package tenant

import (
	"strings"

	"github.com/spacesandbox/space/internal/errdefs"
)

// Secrets and customer keys are named per tenant: two tenants may each
// have a secret "github". Inside spaced the default tenant's names are as
// given and another tenant's are "<tenant>/<name>"; a name sent by a client
// never holds '/', so no tenant can name another's.

// Qualify returns the name spaced keeps for tenant t's name.
func Qualify(t, name string) (string, error) {
	if strings.Contains(name, "/") {
		return "", errdefs.New(errdefs.ErrInvalidArgument, "name %q holds '/': names have none", name)
	}
	if Of(t) == Default {
		return name, nil
	}
	return t + "/" + name, nil
}

// Visible returns the name p sees for qualified name q, and whether p may
// see it at all: its own tenant's names bare, and for the admin every
// other tenant's as "<tenant>/<name>".
func Visible(p Principal, q string) (string, bool) {
	t, name, scoped := strings.Cut(q, "/")
	if !scoped {
		t, name = Default, q
	}
	switch {
	case t == p.Tenant:
		return name, true
	case p.Admin:
		return q, true
	}
	return "", false
}

// Bare is the name a qualified name was given as (what a tenant sent).
func Bare(q string) string {
	if _, name, ok := strings.Cut(q, "/"); ok {
		return name
	}
	return q
}
