//go:build tools

// Package tools pins the two SuperEdge commands that hack/binaries/build.sh superedge builds with
// `go build` (github.com/superedge/superedge/cmd/edge-health and cmd/edge-health-admission): the
// peer system issue 26 measures edgewatch against. It is never compiled (build tag "tools"); it
// keeps `go mod tidy` aware of the main packages.
package tools

import (
	_ "github.com/superedge/superedge/cmd/edge-health"
	_ "github.com/superedge/superedge/cmd/edge-health-admission"
)
