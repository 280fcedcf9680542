#!/bin/sh
# Refresh the API docs' browser assets that c4 ships (so /docs and /redoc work offline):
# Swagger UI from npm's swagger-ui-dist (Apache-2.0) and ReDoc's standalone bundle from npm's
# redoc (MIT), at the pinned versions below, with their licence files. Run by a developer
# when bumping a version; the result is committed under controller/api/static/docs/. Never
# run at build or start-up time: the controller serves these files and fetches nothing.
set -eu
SWAGGER_UI=5.35.0
REDOC=2.5.4
dest=$(cd "$(dirname "$0")/.." && pwd)/controller/api/static/docs
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
npm pack --silent "swagger-ui-dist@$SWAGGER_UI" "redoc@$REDOC" >/dev/null
mkdir swagger redoc
tar xzf "swagger-ui-dist-$SWAGGER_UI.tgz" -C swagger
tar xzf "redoc-$REDOC.tgz" -C redoc
rm -rf "$dest" && mkdir -p "$dest"
for f in swagger-ui-bundle.js swagger-ui-bundle.js.LICENSE.txt swagger-ui.css favicon-32x32.png LICENSE NOTICE; do
  case $f in LICENSE|NOTICE) out="swagger-ui.$f";; *) out=$f;; esac
  cp "swagger/package/$f" "$dest/$out"
done
cp redoc/package/bundles/redoc.standalone.js redoc/package/bundles/redoc.standalone.js.LICENSE.txt "$dest/"
cp redoc/package/LICENSE "$dest/redoc.LICENSE"
printf 'swagger-ui-dist %s (Apache-2.0)\nredoc %s (MIT)\n' "$SWAGGER_UI" "$REDOC" > "$dest/VERSIONS"
echo "docs assets in $dest:"; ls -la "$dest"
