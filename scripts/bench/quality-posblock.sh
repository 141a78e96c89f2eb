# The --position-blocks part of scripts/bench/quality (sourced by it, with
# sm, spec, dir, steps, windows and blocks set): one run per position-block
# size L, the causal LM once, a table per L and the closing line.

# The spec with position_block = L, data paths made absolute, to stdout,
# with steps = STEPS when given.  Below the window it draws its noise by
# the k-form (blocktrain.conf(5) [noise]), which lowered the bound most
# with position blocks; at the window it keeps the spec's draw.
qp_spec_for() {
	awk -v L="$1" -v S="${2:-}" -v n="$window" \
	    -v d="$(cd "$(dirname "$spec")" && pwd)" '
		/^[ \t]*(train|valid|test|clusters)[ \t]*=/ {
			split($0, kv, "=")
			v = kv[2]; gsub(/^[ \t]+|[ \t]+$/, "", v)
			if (v !~ /^\//) { sub(/=.*/, "= " d "/" v) }
		}
		/^[ \t]*position_block[ \t]*=/ { next }
		/^[ \t]*steps[ \t]*=/ && S != "" {
			print "steps = " S
			next
		}
		/^\[noise\]/ { noise = 1 }
		/^[ \t]*draw[ \t]*=/ && L < n {
			print "draw = kform"
			drew = 1
			next
		}
		/^[ \t]*count_tilt[ \t]*=/ && L < n { next }
		{ print }
		/^\[model\]/ { print "position_block = " L }
		END {
			if (L == n || drew)
				exit 0
			if (noise) {
				print "quality: the spec has a [noise] section " \
				    "without draw; add draw = to it" > "/dev/stderr"
				exit 1
			}
			print "\n[noise]\ndraw = kform"
		}
	' "$spec"
}

# GFLOP of one train step of a block of spec FILE, from shardmeter spec.
qp_gflop() {
	"$sm" spec "$1" | sed -n 's/^compute *\([0-9.]*\) GFLOP per train step.*/\1/p'
}

# The steps of the spec (or --steps) scaled to the compute of FILE, the
# spec with position_block = L: below the window a training row holds the
# window twice (the clean context and the noisy copy), so a step costs
# about twice as much, and such a run gets fewer steps, the same compute
# as the full-window blocks and the causal LM at the spec's steps.  At
# L = 1 (the next-byte form) a row is one window and the steps are the
# spec's.
qp_steps_for() {
	full=${steps#--steps }
	[ -n "$full" ] || full=$(sed -n 's/^[ \t]*steps[ \t]*=[ \t]*//p' "$spec" |
	    head -n 1)
	awk -v s="$full" -v a="$(qp_gflop "$spec")" -v b="$(qp_gflop "$1")" \
	    'BEGIN { n = int(s * a / b); print (n < 1 ? 1 : n) }'
}

# A number from eval's JSON: qp_json KEY
qp_json() {
	echo "$json" | sed -n "s/.*\"$1\":\([0-9.eE+-]*\).*/\1/p"
}

quality_position_blocks() {
	window=$("$sm" spec "$spec" | sed -n 's/.*window \([0-9]*\).*/\1/p')
	# the full window first: its run trains the causal LM at the spec's
	# steps, and gives the closing line's blocktrain_ce
	blocks="$window $(for L in $blocks; do [ "$L" = "$window" ] || echo "$L"; done)"
	mkdir -p "$dir"
	causal_dir=
	rows=$dir/position-blocks.txt
	: > "$rows"
	for L in $blocks; do
		d=$dir/L$L
		mkdir -p "$d"
		qp_spec_for "$L" > "$d/spec.conf"
		lsteps=$steps
		if [ "$L" != "$window" ]; then
			n=$(qp_steps_for "$d/spec.conf")
			qp_spec_for "$L" "$n" > "$d/spec.conf"
			lsteps=
		fi
		echo "== position_block = $L: $("$sm" spec "$d/spec.conf" | head -1)"
		"$sm" spec "$d/spec.conf" | grep '^compute'
		# shellcheck disable=SC2086
		"$sm" train --spec "$d/spec.conf" --dir "$d" --all $lsteps
		# shellcheck disable=SC2086
		"$sm" train --spec "$d/spec.conf" --dir "$d" --reference e2e $lsteps
		# the causal LM does not depend on L: trained once, in the
		# first L's run
		if [ -z "$causal_dir" ]; then
			# shellcheck disable=SC2086
			"$sm" train --spec "$d/spec.conf" --dir "$d" \
			    --reference causal $steps
			causal_dir=$d
		fi
		json=$("$sm" eval --spec "$d/spec.conf" --dir "$d" --split test \
		    --windows "$windows" --json 2>/dev/null)
		[ "$d" = "$causal_dir" ] && causal=$(qp_json causal_nats_per_byte)
		shares=$(echo "$json" | grep -o '"share":[0-9.eE+-]*' |
		    sed 's/"share"://' | awk '{ printf("%s%.4f", (NR > 1 ? " " : ""), $1) }')
		echo "$L $(qp_json blocktrain_nats_per_byte) $(qp_json e2e_nats_per_byte) $shares" >> "$rows"
	done
	echo
	echo "held-out bound on test, nats/byte, $windows windows; causal LM $causal"
	printf '%-6s %-11s %-8s %-8s %-11s %s\n' L traversals bound e2e \
	    to_causal "shares of the blocks"
	awk -v n="$window" -v c="$causal" '{
		sh = ""
		for (i = 4; i <= NF; i++) sh = sh (i > 4 ? " " : "") $i
		printf "%-6d %-11d %-8.4f %-8.4f %+-11.4f %s\n", $1, n / $1,
		    $2, $3, $2 - c, sh
	}' "$rows"
	awk -v n="$window" -v c="$causal" '
		$1 == n { full = $2 }
		$1 < n && (best == "" || $2 < best) { best = $2; bl = $1 }
		END {
			if (best == "") { best = full; bl = n }
			full = full == "" ? "none" : sprintf("%.4f", full)
			printf "blocktrain_ce=%s best_semi_ce=%.4f L=%d causal_ce=%.4f gap_to_causal=%.4f\n",
			    full, best, bl, c, best - c
		}' "$rows"
}
