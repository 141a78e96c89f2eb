# Runs a bench again inside a network namespace of its own whose loopback
# is shaped like a link (sourced, not run): there plain and TLS transfers
# are held to the link's rate instead of racing memcpy on bare loopback.

# sm_shaped NAME MBIT SCRIPT ARGS...: when not yet inside one, makes the
# namespace (MTU 1500, tc tbf at MBIT Mbit/s), runs SCRIPT ARGS there with
# SM_SHAPED=1, removes the namespace and exits with SCRIPT's status;
# inside one, or with MBIT empty, returns and the caller goes on.
sm_shaped() {
	_name=$1 _rate=$2 _script=$3
	shift 3
	[ -n "$_rate" ] && [ -z "${SM_SHAPED:-}" ] || return 0
	_ns=sm$_name$$
	ip netns add "$_ns" || { echo "$_name: --rate needs ip netns (root)" >&2; exit 1; }
	trap 'ip netns del "$_ns" 2>/dev/null || true' EXIT INT TERM
	# a burst of at least one timer tick's bytes at the rate, so that tbf
	# reaches it at 10 Gbit/s too
	_burst=$(( _rate * 1000000 / 8 / 250 ))
	[ "$_burst" -ge 65536 ] || _burst=65536
	ip netns exec "$_ns" sh -c "ip link set lo mtu 1500 up &&
	    tc qdisc add dev lo root tbf rate ${_rate}mbit burst $_burst latency 200ms" ||
		{ echo "$_name: cannot shape the namespace's loopback" >&2; exit 1; }
	echo "== in network namespace $_ns: loopback shaped to $_rate Mbit/s (tbf, MTU 1500)"
	_rc=0
	ip netns exec "$_ns" env SM_SHAPED=1 "$_script" "$@" || _rc=$?
	exit "$_rc"
}
