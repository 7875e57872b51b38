#!/usr/bin/env bash
# tests/system/prev-deb.sh [TAG] — print the path of the .deb of a previous release (default:
# the one tests/system/prev-release names, "TAG COMMIT"), building it once from its sources and
# caching it outside the repo:
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
pinned=""
if [ -z "$tag" ]; then
    read -r tag pinned < <(grep -v '^#' "$here/prev-release" | head -n1)
fi
[ -n "$tag" ] || { echo "prev-deb: no previous release named (tests/system/prev-release)" >&2; exit 1; }
# The tag when this clone has it (it must be the pinned commit), else the pinned commit itself:
# a CI clone carries the history but not always the tags.
if commit=$(git -C "$repo" rev-parse -q --verify "refs/tags/$tag^{commit}" 2>/dev/null); then
    if [ -n "$pinned" ] && [ "$commit" != "$pinned" ]; then
        echo "prev-deb: tag $tag is $commit here but tests/system/prev-release pins $pinned" >&2
        exit 1
    fi
elif [ -n "$pinned" ] && git -C "$repo" cat-file -e "$pinned^{commit}" 2>/dev/null; then
    commit=$pinned
else
    shallow=""
    [ "$(git -C "$repo" rev-parse --is-shallow-repository 2>/dev/null)" = true ] && shallow=" (this clone is shallow: git fetch --unshallow)"
    echo "prev-deb: the previous release $tag${pinned:+ (commit $pinned)} is not in $repo$shallow; fetch it (git fetch origin tag $tag) or give its package as SYS_PREV_DEB=FILE" >&2
    exit 1
fi
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
