//go:build tools

// Package tools pins the control-plane commands built from k8s.io/kubernetes.
// It is never compiled (build tag "tools"); it keeps `go mod tidy` aware of
// the main packages that hack/binaries/build.sh builds with `go build`.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "k8s.io/kubernetes/cmd/kube-proxy"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
