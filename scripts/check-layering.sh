#!/usr/bin/env bash
# Fails when a file includes across the library layering the wrong way. Each library under
# common/ may include only itself and the libraries listed for it below (the arrows of
# docs/ARCHITECTURE.md, "Layout"); the engine includes none of them; the C++ client only the
# wire format and its sockets. Usage: check-layering.sh [SOURCE_DIR]
set -euo pipefail
cd "${1:-$(dirname "$0")/..}"

# library: the libraries it may include (besides itself and the engine's public headers).
declare -A allowed=(
  [cli]="protocol"
  [protocol]=""
  [config]="protocol"
  [transport]="config"
  [messages]="protocol"
  [observability]="protocol config transport"
  [security]="config observability transport"
  [runtime]="cli config messages observability protocol security transport"
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
    included=$(sed -E 's#.*"seqpipe/([a-z_]+)/.*#\1#' <<<"$line")
    [[ " $libraries " == *" $included "* ]] || continue  # not a common library (engine, ...)
    [[ $included == "$owner" || " $* " == *" $included "* ]] && continue
    echo "$line: ${owner:-$folder} may not include seqpipe/$included/ (layering)" >&2
    bad=1
  done < <(grep -rnE '^#include "seqpipe/[a-z_]+/' "$folder" --include='*.h' --include='*.cc' \
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
check engine "" ""
check clients/cpp "" protocol transport

if [ "$bad" = 0 ]; then echo "layering: ok ($libraries)"; fi
exit "$bad"
