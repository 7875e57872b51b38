#!/usr/bin/env bash
# tests/system/prev-deb.sh [TAG] — print the path of the .deb of a previous release (default:
# the newest tag v* older than HEAD's Cargo.toml version; v0.1.0 is the first), building it
# once from the tag's sources and caching it outside the repo:
#   $SYS_CACHE_DIR/prev-deb/agentstore-<tag>-<commit>.deb
# The build is the tag's own packaging/build-deb.sh in a cached checkout
# ($SYS_CACHE_DIR/prev-deb/src-<tag>, with its own target/), so a second run costs nothing.
# Used by run.sh for the tests that say `# sys: prev-deb` (t_upgrade); SYS_PREV_DEB=FILE
# skips the build.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
cache=${SYS_CACHE_DIR:-/var/cache/agentstore-test}/prev-deb
tag=${1:-}
if [ -z "$tag" ]; then
    tag=$(git -C "$repo" tag --list 'v*' --sort=-version:refname --merged HEAD | head -n1)
fi
[ -n "$tag" ] || { echo "prev-deb: no release tag v* in $repo (git fetch --tags?)" >&2; exit 1; }
commit=$(git -C "$repo" rev-parse "$tag^{commit}")
out=$cache/agentstore-$tag-${commit:0:12}.deb
if [ -s "$out" ]; then
    echo "$out"
    exit 0
fi
mkdir -p "$cache"
src=$cache/src-$tag
if [ "$(cat "$src/.commit" 2>/dev/null)" != "$commit" ]; then
    rm -rf "$src"
    mkdir -p "$src"
    git -C "$repo" archive "$commit" | tar -x -C "$src"
    echo "$commit" >"$src/.commit"
fi
# Seed its target/ with this checkout's compiled release dependencies (same registry crates,
# same profile: cargo reuses them, and only the tag's own crate is compiled).
if [ ! -d "$src/target/release" ] && [ -d "$repo/target/release/deps" ]; then
    mkdir -p "$src/target/release"
    for d in deps build .fingerprint; do
        [ -d "$repo/target/release/$d" ] && cp -a --reflink=auto "$repo/target/release/$d" "$src/target/release/"
    done
    # Not this checkout's own crate: the tag's is built from its sources.
    rm -rf "$src"/target/release/deps/*agentstore* "$src"/target/release/.fingerprint/agentstore-*
fi
echo "prev-deb: building the $tag package from $commit in $src (once)" >&2
deb=$(cd "$src" && bash packaging/build-deb.sh | tail -n1)
[ -f "$deb" ] || { echo "prev-deb: $tag's build-deb.sh made no package" >&2; exit 1; }
cp "$deb" "$out.tmp"
mv "$out.tmp" "$out"
echo "$out"
