#!/usr/bin/env bash
# Builds the images when a container builder answers; otherwise runs each
# Dockerfile's build line (the RUN after "# ci: build") on the host, with
# the same environment and flags, writing to a temporary /out.
set -euo pipefail
cd "$(dirname "$0")/.."
files=(cmd/narwhal-core/Dockerfile cmd/narwhal-agent/Dockerfile)
if command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; then
  for f in "${files[@]}"; do
    name=$(basename "$(dirname "$f")")
    echo "docker build $f" >&2
    docker build -q -f "$f" -t "narwhal-ci/$name:ci" . >/dev/null
  done
  exit 0
fi
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for f in "${files[@]}"; do
  line=$(grep -A1 '^# ci: build' "$f" | sed -n 's/^RUN //p')
  [ -n "$line" ] || { echo "$f: no '# ci: build' RUN line" >&2; exit 1; }
  cmd=${line//\/out\//$out/}
  echo "no container builder: $f: $cmd" >&2
  eval "$cmd"
done
for b in narwhal-core narwhal-agent; do
  [ -x "$out/$b" ] || { echo "$b was not built" >&2; exit 1; }
done
# The core image is static and has no libc: its binary must not be dynamic.
if ldd "$out/narwhal-core" >/dev/null 2>&1; then
  echo "narwhal-core is dynamically linked; the distroless static image cannot run it" >&2
  exit 1
fi
