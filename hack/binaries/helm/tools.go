//go:build tools

// Package tools pins the helm command that hack/binaries/build.sh builds with `go build`
// (helm.sh/helm/v3/cmd/helm). It is never compiled (build tag "tools"); it keeps `go mod tidy`
// aware of the main package.
package tools

import (
	_ "helm.sh/helm/v3/cmd/helm"
)
