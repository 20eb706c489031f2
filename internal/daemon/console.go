package daemon

import (
	"fmt"

	"github.com/spacesandbox/space/internal/console"
	"github.com/spacesandbox/space/internal/tenant"
)

// consoleKeys is the tenant service as the console judges keys (the
// console imports nothing of spaced: it speaks the public API).
type consoleKeys struct{ *tenant.Service }

func (k consoleKeys) Who(key string) (console.Who, error) {
	p, err := k.Principal(key)
	if err != nil {
		// Principal's one error is "unauthenticated".
		return console.Who{}, fmt.Errorf("%w: %v", console.ErrWrongKey, err)
	}
	return console.Who{Tenant: p.Tenant, KeyID: p.Key, Admin: p.Admin}, nil
}
