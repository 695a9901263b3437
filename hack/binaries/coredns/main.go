// A CoreDNS with only what a node's cluster DNS needs in the lab: the kubernetes plugin (Services
// and EndpointSlices, here read through the agent's node-local pool cache), errors, log, health,
// ready and bind. Same code as upstream's coredns binary (coremain.Run), fewer plugins compiled in:
// upstream documents this as the way to choose plugins at build time (plugin.cfg / Directives).
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/ready"
)

func init() {
	// The plugin chain's order, as upstream's generated zdirectives.go orders these six.
	dnsserver.Directives = []string{"bind", "ready", "health", "errors", "log", "kubernetes"}
}

func main() {
	coremain.Run()
}
