// Wrapper module that builds SuperEdge's edge-health and edge-health-admission at v0.9.0 (the peer
// system issue 26 measures edgewatch against); hack/binaries/build.sh superedge builds it.
module edgewatch.dev/hack/superedge

go 1.26.7

require github.com/superedge/superedge v0.9.0

require (
	github.com/davecgh/go-spew v1.1.1 // indirect
	github.com/go-logr/logr v0.4.0 // indirect
	github.com/go-ping/ping v1.1.0 // indirect
	github.com/gogo/protobuf v1.3.2 // indirect
	github.com/golang/protobuf v1.5.2 // indirect
	github.com/google/go-cmp v0.5.8 // indirect
	github.com/google/gofuzz v1.1.0 // indirect
	github.com/google/uuid v1.3.0 // indirect
	github.com/googleapis/gnostic v0.5.5 // indirect
	github.com/imdario/mergo v0.3.12 // indirect
	github.com/inconshreveable/mousetrap v1.0.0 // indirect
	github.com/modern-go/concurrent v0.0.0-20180306012644-bacd9c7ef1dd // indirect
	github.com/spf13/cobra v1.1.3 // indirect
	github.com/spf13/pflag v1.0.5 // indirect
	golang.org/x/net v0.4.0 // indirect
	golang.org/x/oauth2 v0.0.0-20200107190931-bf48bf16ab8d // indirect
	golang.org/x/sync v0.1.0 // indirect
	golang.org/x/sys v0.3.0 // indirect
	golang.org/x/term v0.3.0 // indirect
	golang.org/x/text v0.5.0 // indirect
	golang.org/x/time v0.0.0-20210723032227-1f47c861a9ac // indirect
	google.golang.org/appengine v1.6.7 // indirect
	google.golang.org/protobuf v1.26.0 // indirect
	gopkg.in/inf.v0 v0.9.1 // indirect
	gopkg.in/yaml.v2 v2.4.0 // indirect
	gopkg.in/yaml.v3 v3.0.0-20210107192922-496545a6307b // indirect
	k8s.io/api v0.22.3 // indirect
	k8s.io/apimachinery v0.22.3 // indirect
	k8s.io/client-go v0.22.3 // indirect
	k8s.io/component-base v0.22.3 // indirect
	k8s.io/klog/v2 v2.9.0 // indirect
	k8s.io/utils v0.0.0-20210819203725-bdf08cb9a70a // indirect
	sigs.k8s.io/structured-merge-diff/v4 v4.1.2 // indirect
	sigs.k8s.io/yaml v1.2.0 // indirect
)

// v0.9.0 itself resolves reflect2 v1.0.1 and json-iterator v1.1.11. Built with Go >= 1.18, reflect2
// v1.0.1's map iterator (linked to the runtime's, whose layout changed) crashes json-iterator's map
// encoding: a nil-pointer SIGSEGV in reflect.mapiternext <- reflect2.(*UnsafeMapIterator).UnsafeNext
// <- jsoniter.(*sortKeysMapEncoder).Encode (checked with Go 1.26; apimachinery encodes YAML and
// pretty JSON through json-iterator). reflect2 v1.0.2 with json-iterator v1.1.12 are the fixed
// releases. No replace lines are needed: v0.9.0's graph builds as it is with this Go.
require (
	github.com/json-iterator/go v1.1.12 // indirect
	github.com/modern-go/reflect2 v1.0.2 // indirect
)
