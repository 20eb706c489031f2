// Package apitypes is the native API's wire types as the Go client sees
// them, generated from api/openapi.yaml by oapi-codegen (pinned in go.mod's
// tool directive) with client-friendly options: Go initialisms and plain
// values for optional fields. The client package aliases them under its
// own names. Edit the spec, then run go generate ./client/apitypes;
// api/native's TestGeneratedMatchesSpec fails while the two disagree.
package apitypes

//go:generate go tool oapi-codegen -config config.yaml ../../api/openapi.yaml
