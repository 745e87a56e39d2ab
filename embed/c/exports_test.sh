#!/usr/bin/env bash
# librelay.so exports exactly the functions relay_c.h declares: no C++ or
# Abseil symbol leaks out, and no declared function is missing.
set -uo pipefail
lib="$1" header="$2"
exported="$(nm -D --defined-only "$lib" | awk '$2 ~ /^[TtWwDdBbRr]$/ {sub(/@.*/, "", $3); print $3}' | sort -u)"
declared="$(grep -oE '\brelay_[a-z0-9_]+\(' "$header" | tr -d '(' | sort -u)"
status=0
extra="$(comm -23 <(echo "$exported") <(echo "$declared"))"
missing="$(comm -13 <(echo "$exported") <(echo "$declared"))"
if [[ -n "$extra" ]]; then
  echo "FAIL: exported but not in relay_c.h:"
  head -20 <<<"$extra"
  status=1
fi
if [[ -n "$missing" ]]; then
  echo "FAIL: declared in relay_c.h but not exported:"
  echo "$missing"
  status=1
fi
((status == 0)) && echo "ok: $(wc -l <<<"$exported") symbols, all declared in relay_c.h"
exit $status
