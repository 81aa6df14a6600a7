#!/usr/bin/env bash
# Fails when a file includes across the library layering the wrong way. Each library under
# common/ may include only itself and the libraries listed for it below (the arrows of
# docs/ARCHITECTURE.md, "Libraries and their layering"); the engine includes only `generation`
# (what it shares with the protocol, below both); the C++ client only the wire format and its
# sockets; and nothing under common/ or clients/cpp includes an engine header ("..." or <...>).
# Usage: check-layering.sh [SOURCE_DIR]
set -euo pipefail
cd "${1:-$(dirname "$0")/..}"

# library: the libraries it may include (besides itself).
declare -A allowed=(
  [generation]=""
  [cli]="protocol generation"
  [protocol]="generation"
  [config]="protocol generation"
  [transport]=""
  [messages]="protocol generation"
  [control]="config protocol generation"
  [observability]="protocol config transport"
  [security]="config observability transport"
  [runtime]="cli config control messages observability protocol security transport"
)
libraries="${!allowed[*]}"

bad=0
# check FOLDER OWNER ALLOWED...: every seqpipe/<library>/ include under FOLDER is OWNER or allowed.
check() {
  local folder=$1 owner=$2
  shift 2
  local line file included
  while IFS= read -r line; do
    file=${line%%:*}
    included=$(sed -E 's#.*[<"]seqpipe/([a-z_]+)/.*#\1#' <<<"$line")
    [[ " $libraries " == *" $included "* ]] || continue  # not a common library (engine, ...)
    [[ $included == "$owner" || " $* " == *" $included "* ]] && continue
    echo "$line: ${owner:-$folder} may not include seqpipe/$included/ (layering)" >&2
    bad=1
  done < <(grep -rnE '^#include [<"]seqpipe/[a-z_]+/' "$folder" --include='*.h' --include='*.cc' \
             --include='*.cu' --include='*.cuh' || true)
}

for library in $libraries; do
  [ -d "common/$library" ] || { echo "common/$library: missing" >&2; bad=1; continue; }
  check "common/$library" "$library" ${allowed[$library]}
done
# A source file straight under common/ belongs to no library.
if find common -maxdepth 1 -type f \( -name '*.h' -o -name '*.cc' \) | grep .; then
  echo "common/: sources belong in a library folder (common/<library>/)" >&2
  bad=1
fi
check engine "" generation
check clients/cpp "" protocol transport generation
# The engine is not a common library: the serving layers' libraries and the client reach it only
# through the services that link it.
if grep -rnE '^#include [<"]seqpipe/engine/' common clients/cpp --include='*.h' --include='*.cc'; then
  echo "common/, clients/cpp: may not include seqpipe/engine/ (what they share with the engine" \
    "lives in common/generation) (layering)" >&2
  bad=1
fi

if [ "$bad" = 0 ]; then echo "layering: ok ($libraries)"; fi
exit "$bad"
