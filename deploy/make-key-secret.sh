#!/usr/bin/env bash
# Print a Secret manifest holding a fresh 32-byte HMAC key for the agents' signed votes.
# Rotation: run it again with the old line kept as the second line (both accepted), roll the
# agents, then drop the old line.   Usage: deploy/make-key-secret.sh [key-id] | kubectl apply -f -
set -euo pipefail
id=${1:-k$(date +%Y%m%d%H%M%S)}
key=$(head -c 32 /dev/urandom | base64 | tr -d '\n')
cat <<YAML
apiVersion: v1
kind: Secret
metadata:
  name: edgewatch-keys
  namespace: edgewatch
type: Opaque
stringData:
  keys: |
    ${id}:${key}
YAML
