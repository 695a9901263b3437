//go:build tools

// Package tools pins the commands that hack/binaries/build.sh builds with `go build`:
// github.com/prometheus/prometheus/cmd/promtool (`promtool check rules` / `test rules` on
// deploy/monitoring's alert rules in tests/integration/test_alerts.py) and cmd/prometheus (the
// playground's `--prometheus`). It is never compiled (build tag "tools"); it keeps `go mod tidy`
// aware of the main packages.
package tools

import (
	_ "github.com/prometheus/prometheus/cmd/prometheus"
	_ "github.com/prometheus/prometheus/cmd/promtool"
)
