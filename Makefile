# edgewatch: the two Quick-start commands and the steps behind them.
#   make demo   set everything up and run the main job (the local playground)
#   make test   set everything up and run the whole suite
# Every install step lives here (a fresh machine must pass `make test`).

PYTHON ?= python3
VENV   := .venv
E2E_WORKERS ?= 2
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo test setup system-deps binaries node-binaries peers compare-peers compat scenarios image unit bench bench-lab bench-cache bench-coordinator bench-real bench-false-verdicts bench-detection fuzz clean-lab sbom e2e-one

demo: setup binaries
	$(VENV)/bin/edgewatch playground compare cut-and-kill --report-dir reports --plot reports/cut-and-kill.svg

# The unit and integration tests on two workers, one test module per worker at a time (pytest-xdist
# --dist loadfile: a module's fixtures, such as its control plane or its pool, stay in one process);
# then the end-to-end scenarios two at a time. Most integration and e2e tests wait on real
# timelines (about 40 % of one core each), and every control plane and lab takes its own ports,
# subnet and run folder, so two side by side on 2 cores keep their timings: measured from a fresh
# clone, the first part takes 16 min instead of 27.5 in one process. Both parts always run; either
# failing fails the target. TEST_WORKERS=1 runs the first part in one process.
# The scenarios marked ``alone`` (more than 12 nodes: pool-split-25) run after the others, by
# themselves: starting 25 nodes beside another scenario made the other's steps run a minute late.
TEST_WORKERS ?= 2
test: setup binaries node-binaries
	@rc=0; $(VENV)/bin/pytest -n $(TEST_WORKERS) --dist loadfile tests/unit tests/integration || rc=$$?; \
	$(VENV)/bin/pytest -n $(E2E_WORKERS) --dist load -m "not alone" tests/e2e || { r=$$?; [ $$rc -ne 0 ] || rc=$$r; }; \
	$(VENV)/bin/pytest -m alone tests/e2e || { r=$$?; [ $$rc -ne 0 ] || rc=$$r; }; \
	exit $$rc

# Every built-in scenario end to end, those make test leaves out included (tests/e2e/test_scenarios.py,
# OUTSIDE_MAKE_TEST: pool-split, whose split pool-split-25 plays at 25 nodes; coordinator-real-nodes,
# whose parts coordinator-pod and real-nodes play; mixed-cluster, whose uncovered node an integration
# test runs against the real apiserver).
scenarios: setup binaries node-binaries
	@rc=0; EDGEWATCH_E2E_ALL=1 $(VENV)/bin/pytest -n $(E2E_WORKERS) --dist load -m "not alone" tests/e2e || rc=$$?; \
	EDGEWATCH_E2E_ALL=1 $(VENV)/bin/pytest -m alone tests/e2e || { r=$$?; [ $$rc -ne 0 ] || rc=$$r; }; \
	exit $$rc

# Python 3.11+ virtualenv with the pinned dependencies (reinstalled when a pyproject.toml changes):
# the product (edgewatch, src/) and the lab beside it (edgewatch-lab, lab/: playground, runners, sim).
setup: system-deps $(STAMP)

$(STAMP): pyproject.toml lab/pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]' -e './lab[plot]'
	touch $(STAMP)

# The network lab needs nftables and iproute2, the clock-skew fault libfaketime, from Debian's
# packages (root). The arm64 image (make image) is made from Debian's arm64 packages, so apt knows
# the architecture arm64 (its package lists fetched once), and it is run under qemu-user
# (qemu-user-static: tests/integration/test_image_arm64.py).
FAKETIME := /usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1
system-deps:
	@command -v nft >/dev/null && command -v ip >/dev/null && [ -e $(FAKETIME) ] || { \
	  echo "installing nftables, iproute2 and libfaketime (Debian packages)"; \
	  apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q nftables iproute2 libfaketime >/dev/null; }
	@[ "$$(dpkg --print-architecture)" = arm64 ] || dpkg --print-foreign-architectures | grep -qx arm64 && \
	  ls /var/lib/apt/lists/*_binary-arm64_Packages* >/dev/null 2>&1 || { \
	  echo "adding the architecture arm64 to apt (the arm64 image's Debian packages)"; \
	  dpkg --add-architecture arm64 && apt-get update -q >/dev/null; }
	@command -v qemu-aarch64-static >/dev/null || { \
	  echo "installing qemu-user-static (Debian package; runs the arm64 image's smoke test)"; \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -q qemu-user-static >/dev/null || { \
	  apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q qemu-user-static >/dev/null; }; }

# etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubectl, kube-proxy from the Go module proxy,
# cached in ~/.cache/edgewatch (the first build takes about 5-10 minutes on 2 cores); and CoreDNS with its
# kubernetes plugin (the pool-cache scenario's cluster DNS; about 2 minutes the first time); and helm
# (charts/edgewatch's lint and render in tests/integration/test_chart.py; about 1-3 minutes the first time);
# and promtool with the Prometheus server, one build into one folder (promtool: the alert rules' check and
# unit tests in tests/integration/test_alerts.py; prometheus: the playground's --prometheus; about 5-10
# minutes the first time).
binaries:
	@bash hack/binaries/build.sh >/dev/null
	@bash hack/binaries/build-coredns.sh >/dev/null
	@bash hack/binaries/build.sh helm >/dev/null
	@bash hack/binaries/build.sh promtool >/dev/null

# What a real lab node (a pool's real_nodes) runs besides the kubelet: containerd, runc (cgo,
# libseccomp), the CNI plugins and pause, from the Go module proxy and the k8s.io/kubernetes module
# (about 1 minute warm, 5 cold; gcc and libseccomp-dev come from Debian's packages).
node-binaries:
	@command -v gcc >/dev/null && [ -e /usr/include/seccomp.h ] || { \
	  echo "installing gcc and libseccomp-dev (Debian packages)"; \
	  apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q gcc libc6-dev libseccomp-dev >/dev/null; }
	@bash hack/binaries/build-node.sh

# The peer systems of docs/peers.md's comparison: SuperEdge v0.9.0's edge-health and edge-health-admission
# from the Go module proxy, cached in ~/.cache/edgewatch (a few minutes the first time), then the tests
# marked `peers` (make test runs them too, as its smoke run of the comparison's build).
peers: setup
	@bash hack/binaries/build.sh superedge >/dev/null
	$(VENV)/bin/pytest -m peers tests

# docs/lab.md's comparison table: each scenario on edgewatch, SuperEdge v0.9.0's edge-health and stock Kubernetes,
# one after the other in the same lab (edgewatch playground compare --systems ...): one report and
# one timeline per system in reports/peers/ (about 12 minutes per scenario). pool-split is the split
# 3|2 with the minority cut off, flaky-link 30 % loss on two nodes. tests/e2e/test_superedge.py is
# make test's smoke run of the SuperEdge side.
PEER_SCENARIOS ?= cut-and-kill node-failure cloud-partition pool-split flaky-link pool-split-25
compare-peers: setup binaries
	@bash hack/binaries/build.sh superedge >/dev/null
	@mkdir -p reports/peers; rc=0; for s in $(PEER_SCENARIOS); do \
	  $(VENV)/bin/edgewatch playground compare $$s --systems edgewatch,superedge,stock --no-live \
	    --report-dir reports/peers --plot reports/peers/$$s.svg > reports/peers/$$s.log 2>&1 \
	    && echo "$$s: done (reports/peers/$$s*.json)" || { rc=1; echo "$$s: FAILED, see reports/peers/$$s.log"; }; \
	done; $(VENV)/bin/edgewatch playground table $(PEER_SCENARIOS) --report-dir reports/peers \
	  > reports/peers/table.md && echo "the table: reports/peers/table.md" || rc=1; exit $$rc

# The oldest Kubernetes edgewatch supports (README, "Which clusters it runs on"), measured: its
# control plane, kubelet and kube-proxy built from the Go module proxy through the wrapper module
# hack/binaries/kube-minimum (cached beside the current version's; about 5 minutes the first time),
# then the core scenarios run on them, each with its own expectations, as `make test` runs them on
# the current version: reports in reports/compat/<version>/ (about 15 minutes). `make test` runs
# tests/integration/test_minimum_version.py, the smoke run of this target's inputs (the wrapper
# module resolves, the scenarios exist, the README and the chart name the same minimum).
COMPAT_SCENARIOS ?= node-failure cut-and-kill cloud-partition real-nodes uninstall
compat: setup binaries node-binaries
	@assets=$$(bash hack/binaries/build.sh minimum) || exit 1; \
	version=$$("$$assets/kube-apiserver" --version | awk '{print $$2}'); out=reports/compat/$$version; \
	mkdir -p $$out; rc=0; \
	for s in $(COMPAT_SCENARIOS); do \
	  echo "== $$s on Kubernetes $$version"; \
	  KUBEBUILDER_ASSETS=$$assets $(VENV)/bin/edgewatch playground run $$s --no-live --report $$out/$$s.json \
	    > $$out/$$s.log 2>&1 && echo "   passed ($$out/$$s.json)" || { rc=1; echo "   FAILED: see $$out/$$s.log"; }; \
	done; exit $$rc

# edgewatch's image (and pause) as OCI archives, built here offline from this checkout, Debian's
# Python and PyPI's wheels (edgewatch_lab.testing.images; the Dockerfile stays the user-facing recipe):
# one archive for linux/amd64 and linux/arm64 (an OCI image index, arm64 from Debian's arm64 packages
# and PyPI's aarch64 wheels; about 30 s cold with pip's and apt's downloads, nothing warm); prints
# its path, then pause's (the lab's nodes import the host-platform archive ensure_images builds).
IMAGE_PLATFORMS ?= linux/amd64,linux/arm64
image: setup node-binaries
	$(PY) -m edgewatch_lab.testing.images --platforms $(IMAGE_PLATFORMS) --pause "$$(bash hack/binaries/build-node.sh 2>/dev/null)/pause"

unit: setup
	$(VENV)/bin/pytest tests/unit

# docs/scaling.md's tables (the simulator: detection, false verdicts under loss, cost, splits for groups of
# 5, 50, 200 and 1,000; about 10 minutes), then one real agent process in groups of 50 and 1,000 on
# the real control plane (about 5 minutes), then the cloud API load at 50 and 1,000 nodes (about 10
# minutes).
bench: setup binaries
	$(VENV)/bin/edgewatch sim --json reports/sim.json
	$(PY) bench/agent_process.py 50 1000
	$(PY) bench/api_scale.py 50 1000 | tee reports/api_scale.jsonl

# CPU and RSS of one pool as shipped (agents as pods in namespaces), for pools of 10 and 15 nodes.
bench-lab: setup binaries
	$(PY) bench/lab_cost.py 10 15

# The pool cache's uplink saving: cloud watch bytes with and without it, pools of 5 and 20, under churn
# (200 Services x 10 endpoints; about 16 minutes).
bench-cache: setup binaries
	$(PY) bench/pool_cache.py 5 20

# The pool coordinator pod's RSS and CPU (program + etcd) under its pool's load, pools of 5 and 20, and its recovery time.
bench-coordinator: setup binaries
	$(PY) bench/coordinator_pod.py 5 20 --recovery

# What a real lab node costs and how many fit: pools of 1, 4 and 8 real nodes (kubelet, containerd,
# runc, kube-proxy, the agent and two pods each) idle for 90 s (about 10 minutes).
bench-real: setup binaries node-binaries
	$(PY) bench/real_nodes.py 1 4 8 | tee reports/real_nodes.jsonl

# False UNHEALTHY verdicts of live nodes at 10 % and 30 % loss per node over 1,000 simulated groups of
# 8 to 1,000 nodes per loss level, and a kill at that loss in each, the loss-aware failure detector
# beside the fixed count it replaced (many hours on 2 cores; docs/scaling.md's figure, about half an
# hour: make bench-false-verdicts FV_SEEDS=60 FV_SIZES=8,100).
FV_SEEDS ?= 1000
FV_SIZES ?= 8,1000
bench-false-verdicts: setup
	$(VENV)/bin/edgewatch sim-sweep --seeds $(FV_SEEDS) --sizes $(FV_SIZES) --rules loss-aware,fixed --json reports/false-verdicts.json

# Kill -> failed over 20 kills at random phases of the kubelet's Lease renewal, one pool of 6 as
# shipped, each kill's phase recorded (about 25 minutes).
bench-detection: setup binaries
	$(PY) bench/detection_phases.py --kills 20 --json reports/detection-phases.json

# Fuzz every parser reachable from the network or the API (20,000 inputs each; about 10 minutes).
fuzz: setup
	$(PY) hack/fuzz.py 20000

# Remove network namespaces and control planes left by a crashed run.
clean-lab: setup
	$(PY) -m edgewatch_lab.testing.netlab cleanup
	$(PY) -c "from edgewatch_lab.testing.realnode import cleanup_stale; print(cleanup_stale())"
	$(PY) -c "from edgewatch_lab.testing.controlplane import ControlPlane; print(ControlPlane.cleanup_stale())"

# The image's SBOMs, one per platform (CycloneDX JSON, by cyclonedx-py from the image's own Python packages; edgewatch_lab.testing.sbom), written next to the image archive and checked against pyproject.toml's pins; prints their paths.
sbom: setup node-binaries
	@archive="$$($(PY) -m edgewatch_lab.testing.images --platforms $(IMAGE_PLATFORMS) --pause "$$(bash hack/binaries/build-node.sh 2>/dev/null)/pause" | head -n1)" && [ -n "$$archive" ] && $(PY) -m edgewatch_lab.testing.sbom "$$archive"

# One built-in scenario's e2e test alone, as make test runs it: make e2e-one SCENARIO=coordinator-pod
SCENARIO ?= coordinator-pod
e2e-one: setup binaries node-binaries
	EDGEWATCH_E2E_ONLY=$(SCENARIO) $(VENV)/bin/pytest tests/e2e/test_scenarios.py
