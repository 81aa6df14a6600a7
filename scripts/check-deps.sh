#!/bin/sh
# The dependency check (scripts/check-deps.py says what it checks; --help for its options).
exec python3 "$(dirname "$0")/check-deps.py" "$@"
