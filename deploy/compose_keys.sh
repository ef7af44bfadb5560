#!/usr/bin/env bash
# Writes the files deploy/compose.secure.yaml mounts, into DIR (default
# deploy/keys, which git ignores):
#   caller-token        a caller's token (give it to the CLI: --token_file)
#   router/tokens       the callers' tokens file ("TOKEN *": every handler)
#   router/agent-token  the token the router presents to the agent
#   router/signing.pem  the router's Ed25519 private key (signs capabilities)
#   agent/tokens        the router's token by its digest ("sha256:HEX *")
#   agent/verify.pem    the router's public key (verifies capabilities)
# The containers run as 65532: run as root, the files are given to that
# user and are readable by no one else; otherwise they are left readable by
# everyone, and the script says so. An existing DIR is left alone.
set -euo pipefail
dir=${1:-$(cd "$(dirname "$0")" && pwd)/keys}
if [[ -e "$dir/router/signing.pem" ]]; then
  echo "compose_keys: $dir already holds keys; remove it to make new ones" >&2
  exit 1
fi
umask 077
mkdir -p "$dir/router" "$dir/agent"
caller=$(openssl rand -hex 24)
router=$(openssl rand -hex 24)
printf '%s\n' "$caller" > "$dir/caller-token"
printf '%s *\n' "$caller" > "$dir/router/tokens"
printf '%s\n' "$router" > "$dir/router/agent-token"
printf 'sha256:%s *\n' "$(printf %s "$router" | sha256sum | cut -d' ' -f1)" > "$dir/agent/tokens"
openssl genpkey -algorithm ed25519 -out "$dir/router/signing.pem" 2>/dev/null
openssl pkey -in "$dir/router/signing.pem" -pubout -out "$dir/agent/verify.pem"
if [[ $(id -u) -eq 0 ]]; then
  chown -R 65532:65532 "$dir/router" "$dir/agent"
else
  chmod -R a+rX "$dir/router" "$dir/agent"
  echo "compose_keys: not root, so $dir/router and $dir/agent are readable by every" \
       "user of this machine (the containers run as uid 65532)" >&2
fi
echo "compose_keys: wrote $dir (callers' token: $dir/caller-token)"
