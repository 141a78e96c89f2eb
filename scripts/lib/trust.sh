# Shell helpers for the scripts that start daemons (sourced, not run):
# identities, peer-list lines with ids, and curl as the operator pinned
# to a daemon's id.  Needs $sm (the shardmeter binary) set by the caller.

# sm_identity DIR: makes the daemon identity in DIR if missing, prints its id.
sm_identity() {
	"$sm" id --dir "$1" 2>/dev/null || "$sm" init --dir "$1" 2>/dev/null
}

# sm_client_id: the operator identity ($XDG_CONFIG_HOME/shardmeter), made
# if missing, printed.
sm_client_id() {
	"$sm" id --client 2>/dev/null || "$sm" init --client 2>/dev/null
}

# sm_client_dir: where that identity is.
sm_client_dir() {
	if [ -n "${XDG_CONFIG_HOME:-}" ] && [ "${XDG_CONFIG_HOME#/}" != "$XDG_CONFIG_HOME" ]; then
		echo "$XDG_CONFIG_HOME/shardmeter"
	else
		echo "$HOME/.config/shardmeter"
	fi
}

# sm_pin ID: curl's --pinnedpubkey for a peer id (sha256// and base64).
# Without a shardmeter to ask (launch --dry-run), the same from coreutils.
sm_pin() {
	"$sm" id --pin "$1" 2>/dev/null ||
		printf 'sha256//%s' "$(printf '%s====' "$1" | tr -d '-' | tr 'a-z' 'A-Z' |
			base32 -d 2>/dev/null | base64 -w0)"
}

# sm_curl ID IDENTITY-DIR curl-args...: curl over mutual TLS presenting the
# identity in IDENTITY-DIR, the server pinned to ID (no CA).
sm_curl() {
	_id=$1; _as=$2; shift 2
	curl --cert "$_as/cert.pem" --key "$_as/key.pem" --insecure \
		--pinnedpubkey "$(sm_pin "$_id")" --tlsv1.3 "$@"
}
