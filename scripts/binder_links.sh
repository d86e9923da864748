#!/usr/bin/env bash
# Print the Binder links (Markdown badges) for this clone's GitHub repository, read from
# `git remote get-url origin` (or the first argument, "owner/name"). binder/ itself names
# no repository, so any fork works as it is.
set -euo pipefail
repo="${1:-}"
if [ -z "$repo" ]; then
  url="$(git -C "$(dirname "$0")/.." remote get-url origin 2>/dev/null || true)"
  repo="$(printf '%s' "$url" | sed -E -n 's#^(https://github\.com/|git@github\.com:)([^/]+/[^/]+)$#\2#p')"
  repo="${repo%.git}"
fi
if [ -z "$repo" ]; then
  echo "usage: bash scripts/binder_links.sh OWNER/NAME   (no GitHub remote 'origin' in this clone)" >&2
  exit 2
fi
base="https://mybinder.org/v2/gh/$repo/HEAD"
echo "[![Gallery in JupyterLab](https://mybinder.org/badge_logo.svg)]($base?urlpath=lab/tree/gallery/quickstart.ipynb)"
echo "[![Split/merge in Voilà](https://mybinder.org/badge_logo.svg)]($base?urlpath=voila/render/gallery/split_merge_mixture.ipynb)"
