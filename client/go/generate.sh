#!/usr/bin/env bash
# Generates the Go stubs of proto/tensorops/v1 into tensorops/v1 below OUT_DIR (default: this
# folder, where the committed stubs live) with protoc, protoc-gen-go and protoc-gen-go-grpc.
#
#   client/go/generate.sh            regenerate the committed stubs (also: go generate ./...)
#   client/go/generate.sh OUT_DIR    generate elsewhere (the up-to-date check diffs the two)
#
# The committed stubs come from Debian 12's protoc 3.21.12, protoc-gen-go 1.28.1 and
# protoc-gen-go-grpc 1.0 (grpc-go 1.33.3); other versions write other version comments.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${1:-$here}"
module=tensorops/client/go
mkdir -p "$out"
protoc -I "$here/../../proto" \
  --go_out="$out" --go_opt=module="$module" \
  --go-grpc_out="$out" --go-grpc_opt=module="$module" \
  "$here"/../../proto/tensorops/v1/*.proto
