#!/bin/sh
# Refresh the console's vendored front-end libraries (controller/console/static/vendor/).
# Run by hand when upgrading them (`make console-vendor`); the result is committed, so the
# package needs neither node nor the network at run time. Needs npm and the npm registry.
#
# Preact's hooks module imports the bare specifier "preact"; browsers resolve bare specifiers
# only through an import map, which the console's Content-Security-Policy would have to allow
# as an inline script. So the one import is rewritten to the vendored file's relative path,
# and source-map comments (the maps are not shipped) are dropped. Nothing else is changed.
set -eu
PREACT_VERSION=${PREACT_VERSION:-10.29.8}
HTM_VERSION=${HTM_VERSION:-3.1.1}
out=$(cd "$(dirname "$0")/.." && pwd)/controller/console/static/vendor
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
npm pack --silent "preact@$PREACT_VERSION" "htm@$HTM_VERSION" >/dev/null
mkdir preact htm
tar xzf "preact-$PREACT_VERSION.tgz" -C preact
tar xzf "htm-$HTM_VERSION.tgz" -C htm
mkdir -p "$out"
strip_map() { sed -e 's#//[#@] sourceMappingURL=.*$##' "$1"; }
strip_map preact/package/dist/preact.module.js > "$out/preact.module.js"
strip_map preact/package/hooks/dist/hooks.module.js | sed -e 's#from"preact"#from"./preact.module.js"#' > "$out/hooks.module.js"
strip_map htm/package/dist/htm.module.js > "$out/htm.module.js"
cp preact/package/LICENSE "$out/LICENSE-preact"
cp htm/package/LICENSE "$out/LICENSE-htm"
if grep -q 'from"preact"' "$out/hooks.module.js"; then echo "hooks import not rewritten" >&2; exit 1; fi
{
  echo "preact $PREACT_VERSION (dist/preact.module.js, hooks/dist/hooks.module.js), MIT"
  echo "htm $HTM_VERSION (dist/htm.module.js), Apache-2.0"
  echo "fetched with npm pack by scripts/console-vendor.sh; sha256:"
  (cd "$out" && sha256sum preact.module.js hooks.module.js htm.module.js)
} > "$out/VERSIONS"
echo "vendored into $out:"; cat "$out/VERSIONS"
