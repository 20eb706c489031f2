package httpapi

import (
	"errors"
	"net/http"

	"github.com/spacesandbox/space/api/native"

	"github.com/spacesandbox/space/internal/egress/secrets"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/tenant"
)

// secretJSON is a secret as the API answers it: its binding and version,
// never its value.
func secretJSON(m secrets.Meta) native.Secret {
	return native.Secret{Name: ptr(m.Name), Host: ptr(m.Host), Port: opt(int(m.Port)), PathPrefix: opt(m.PathPrefix), Header: opt(m.Header),
		HeaderFormat: opt(m.HeaderFormat), Version: ptr(m.Version), UpdatedAt: ptr(m.UpdatedAt)}
}

// putSecret creates or rotates a secret. The answer, like every other,
// holds its binding and version, never its value.
func (s *Server) PutSecret(w http.ResponseWriter, r *http.Request, name string) {
	var req native.PutSecretJSONRequestBody
	if err := decodeJSON(w, r, &req, false); err != nil {
		writeError(w, r, err)
		return
	}
	if port := deref(req.Port); port < 0 || port > 65535 {
		writeError(w, r, errdefs.New(errdefs.ErrInvalidArgument, "port must be from 1 to 65535 (0: any)"))
		return
	}
	name, err := scopedName(r, name)
	if err != nil {
		writeError(w, r, err)
		return
	}
	m, err := s.secrets.Put(name, req.Value, secrets.Binding{
		Host: req.Host, Port: uint16(deref(req.Port)), PathPrefix: deref(req.PathPrefix), Header: deref(req.Header), HeaderFormat: deref(req.HeaderFormat),
	})
	if err != nil {
		writeError(w, r, secretError(err))
		return
	}
	m.Name = tenant.Bare(m.Name)
	writeJSON(w, http.StatusOK, secretJSON(m))
}

// listSecrets lists the caller's tenant's secrets (the admin's: every
// tenant's, another tenant's as "<tenant>/<name>").
func (s *Server) ListSecrets(w http.ResponseWriter, r *http.Request) {
	p := tenant.FromContext(r.Context())
	out := []native.Secret{}
	for _, m := range s.secrets.List() {
		if name, ok := tenant.Visible(p, m.Name); ok {
			m.Name = name
			out = append(out, secretJSON(m))
		}
	}
	writeJSON(w, http.StatusOK, map[string][]native.Secret{"secrets": out})
}

// scopedName is path value param as the name spaced keeps for the
// caller's tenant.
func scopedName(r *http.Request, name string) (string, error) {
	return tenant.Qualify(tenant.FromContext(r.Context()).Tenant, name)
}

func (s *Server) DeleteSecret(w http.ResponseWriter, r *http.Request, name string) {
	name, err := scopedName(r, name)
	if err == nil {
		err = s.secrets.Delete(name)
	}
	if err != nil {
		writeError(w, r, secretError(err))
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// secretError classes the store's errors; their messages never hold a value.
func secretError(err error) error {
	switch {
	case errors.Is(err, secrets.ErrInvalid):
		return errdefs.New(errdefs.ErrInvalidArgument, "%v", err)
	case errors.Is(err, secrets.ErrNotFound):
		return errdefs.New(errdefs.ErrNotFound, "%v", err)
	}
	return err
}
