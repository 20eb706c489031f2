package e2bcompat

import (
	"context"
	"net/http"
	"time"

	"github.com/spacesandbox/space/internal/webhook"
)

// E2B's lifecycle webhooks (/events/webhooks) onto package webhook: a
// tenant's registrations, each delivered that tenant's sandbox events.

// Webhooks is what the E2B layer needs of the webhook service.
type Webhooks interface {
	Register(ctx context.Context, spec webhook.Spec) (*webhook.Webhook, error)
	List(ctx context.Context) ([]*webhook.Webhook, error)
	Get(ctx context.Context, id string) (*webhook.Webhook, error)
	Update(ctx context.Context, id string, spec webhook.Spec) (*webhook.Webhook, error)
	Delete(ctx context.Context, id string) error
}

func (s *Server) webhookRoutes() []apiRoute {
	return []apiRoute{
		{"POST /events/webhooks", false, s.registerWebhook},
		{"GET /events/webhooks", false, s.listWebhooks},
		{"GET /events/webhooks/{id}", false, s.getWebhook},
		{"PATCH /events/webhooks/{id}", false, s.updateWebhook},
		{"DELETE /events/webhooks/{id}", false, s.deleteWebhook},
	}
}

// webhookJSON is a webhook as E2B's API answers it (never its secret).
type webhookJSON struct {
	ID        string    `json:"id"`
	TeamID    string    `json:"teamId"`
	Name      string    `json:"name"`
	CreatedAt time.Time `json:"createdAt"`
	Enabled   bool      `json:"enabled"`
	URL       string    `json:"url"`
	Events    []string  `json:"events"`
}

// webhookRequest is the body of a registration or an update: fields left
// out of an update stay as they are.
type webhookRequest struct {
	Name            *string   `json:"name"`
	URL             *string   `json:"url"`
	Enabled         *bool     `json:"enabled"`
	Events          *[]string `json:"events"`
	SignatureSecret *string   `json:"signatureSecret"`
}

func (b webhookRequest) spec() webhook.Spec {
	return webhook.Spec{Name: b.Name, URL: b.URL, Enabled: b.Enabled, Events: b.Events, Secret: b.SignatureSecret}
}

func toWebhookJSON(w *webhook.Webhook) webhookJSON {
	return webhookJSON{ID: w.ID, TeamID: w.Tenant, Name: w.Name, CreatedAt: w.CreatedAt, Enabled: w.Enabled, URL: w.URL, Events: w.Events}
}

// webhooks answers 501 when spaced runs without the webhook service.
func (s *Server) webhooks(w http.ResponseWriter) (Webhooks, bool) {
	if s.opts.Webhooks == nil {
		writeStatus(w, http.StatusNotImplemented, "webhooks are not available on this node")
		return nil, false
	}
	return s.opts.Webhooks, true
}

func (s *Server) registerWebhook(w http.ResponseWriter, r *http.Request) {
	hooks, ok := s.webhooks(w)
	if !ok {
		return
	}
	var body webhookRequest
	if err := decodeJSON(w, r, &body, false); err != nil {
		writeError(w, r, err)
		return
	}
	hook, err := hooks.Register(r.Context(), body.spec())
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, toWebhookJSON(hook))
}

func (s *Server) listWebhooks(w http.ResponseWriter, r *http.Request) {
	hooks, ok := s.webhooks(w)
	if !ok {
		return
	}
	list, err := hooks.List(r.Context())
	if err != nil {
		writeError(w, r, err)
		return
	}
	out := []webhookJSON{}
	for _, h := range list {
		out = append(out, toWebhookJSON(h))
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) getWebhook(w http.ResponseWriter, r *http.Request) {
	hooks, ok := s.webhooks(w)
	if !ok {
		return
	}
	hook, err := hooks.Get(r.Context(), r.PathValue("id"))
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, toWebhookJSON(hook))
}

func (s *Server) updateWebhook(w http.ResponseWriter, r *http.Request) {
	hooks, ok := s.webhooks(w)
	if !ok {
		return
	}
	var body webhookRequest
	if err := decodeJSON(w, r, &body, false); err != nil {
		writeError(w, r, err)
		return
	}
	hook, err := hooks.Update(r.Context(), r.PathValue("id"), body.spec())
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, toWebhookJSON(hook))
}

func (s *Server) deleteWebhook(w http.ResponseWriter, r *http.Request) {
	hooks, ok := s.webhooks(w)
	if !ok {
		return
	}
	if err := hooks.Delete(r.Context(), r.PathValue("id")); err != nil {
		writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusOK)
}
