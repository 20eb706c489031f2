// Package native is the native API's contract in Go, generated from
// api/openapi.yaml by oapi-codegen (pinned in go.mod's tool directive): its
// wire types, the ServerInterface that internal/httpapi implements, the
// router that binds and types every route's path and query parameters, and
// the spec itself (Spec) that the request validator reads. Edit the spec,
// then run go generate ./api/native; TestGeneratedMatchesSpec fails while
// the two disagree.
package native

//go:generate go tool oapi-codegen -config config.yaml ../openapi.yaml
