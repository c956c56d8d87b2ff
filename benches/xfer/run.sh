#!/usr/bin/env bash
# xfer benchmarks, each measured beside iperf3 in the same run (alternating,
# so both see the same machine state). Prints markdown tables.
#
# Usage: benches/xfer/run.sh [mem] [modes] [paced]   (default: all)
#        "mem" also gives hashing on vs off.
# Env:   REPS (5) repetitions per cell, median reported
#        SIZE (16G) bytes per xfer memory-to-memory run; T (4) iperf3 seconds
#        PACED_RUNS (5), PACED_SIZE (1G), PACED_RATE (400M), PACED_P (4)
# Needs: iperf3, jq; root for the veth/namespace rows (skipped otherwise).
set -euo pipefail
cd "$(dirname "$0")/../.."

REPS=${REPS:-5}
SIZE=${SIZE:-16G}
T=${T:-4}
PACED_RUNS=${PACED_RUNS:-5}
PACED_SIZE=${PACED_SIZE:-1G}
PACED_RATE=${PACED_RATE:-400M}
PACED_P=${PACED_P:-4}
SECTIONS=${*:-mem modes paced}

for t in iperf3 jq; do
    command -v $t >/dev/null || { echo "missing $t (apt-get install -y $t)" >&2; exit 1; }
done
cargo build --release -q -p xfer
XFER=$(pwd)/${CARGO_TARGET_DIR:-target}/release/xfer
TMP=$(mktemp -d /tmp/xferbench.XXXXXX)
NS_A="xferb-$$-a"
NS_B="xferb-$$-b"
PIDS=()

cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
    ip netns del "$NS_A" 2>/dev/null || true
    ip netns del "$NS_B" 2>/dev/null || true
    rm -rf "$TMP"
}
trap cleanup EXIT INT TERM

head -c 32 /dev/urandom | base64 > "$TMP/key"
mkdir -p "$TMP/root"

# Prefix to run a command on the client / server side of a path.
client_ns() { if [ "$1" = veth ]; then echo "ip netns exec $NS_A"; fi; }
server_ns() { if [ "$1" = veth ]; then echo "ip netns exec $NS_B"; fi; }
host_of() { if [ "$1" = veth ]; then echo 10.202.0.2; else echo 127.0.0.1; fi; }

PATHS=(loopback)
if [ "$(id -u)" = 0 ] && command -v ip >/dev/null; then
    ip netns add "$NS_A"
    ip netns add "$NS_B"
    ip link add xbva$$ netns "$NS_A" type veth peer name xbvb$$ netns "$NS_B"
    ip -n "$NS_A" addr add 10.202.0.1/24 dev xbva$$
    ip -n "$NS_B" addr add 10.202.0.2/24 dev xbvb$$
    for n in "$NS_A" "$NS_B"; do ip -n "$n" link set lo up; done
    ip -n "$NS_A" link set xbva$$ up
    ip -n "$NS_B" link set xbvb$$ up
    PATHS+=(veth)
else
    echo "(not root or no ip: veth rows skipped)" >&2
fi

declare -A XPORT IPORT
for p in "${PATHS[@]}"; do
    h=$(host_of "$p")
    # shellcheck disable=SC2046
    $(server_ns "$p") "$XFER" serve --listen "$h:0" --root "$TMP/root" --key-file "$TMP/key" \
        >"$TMP/xsrv-$p.out" 2>"$TMP/xsrv-$p.err" &
    PIDS+=($!)
    ip=$((5201 + ${#PIDS[@]}))
    # shellcheck disable=SC2046
    $(server_ns "$p") iperf3 -s -p $ip >/dev/null 2>&1 &
    PIDS+=($!)
    IPORT[$p]=$ip
    for _ in $(seq 100); do grep -q listening "$TMP/xsrv-$p.out" && break; sleep 0.05; done
    XPORT[$p]=$(sed -n 's/.*listening on .*:\([0-9]*\)$/\1/p' "$TMP/xsrv-$p.out")
done
sleep 0.5 # iperf3 prints nothing we could wait on

# xfer goodput in Gbit/s: xfer_gbps PATH ARGS...
xfer_gbps() {
    local p=$1; shift
    # shellcheck disable=SC2046
    $(client_ns "$p") "$XFER" send --key-file "$TMP/key" --no-progress --json "$TMP/x.json" "$@" \
        "$(host_of "$p"):${XPORT[$p]}" --discard >/dev/null 2>"$TMP/x.err" || { cat "$TMP/x.err" >&2; return 1; }
    jq '.run.bytes * 8 / .run.completion_time / 1e9' "$TMP/x.json"
}
iperf_gbps() {
    local p=$1 n=$2
    # shellcheck disable=SC2046
    $(client_ns "$p") iperf3 -c "$(host_of "$p")" -p "${IPORT[$p]}" -P "$n" -t "$T" -J >"$TMP/i.json"
    jq '.end.sum_received.bits_per_second / 1e9' "$TMP/i.json"
}
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
fmt() { printf '%.2f' "$1"; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.1f %%", 100*a/b}'; }

echo "Machine: $(nproc) cores, kernel $(uname -r), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
echo "Date: $(date -u +%FT%TZ); load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "xfer $SIZE mem:->discard per run, iperf3 -t $T; median of $REPS alternating runs"
echo

if [[ " $SECTIONS " == *" mem "* ]]; then
    echo "### Memory to memory (stripe): xfer with and without hashing vs iperf3 -P N"
    echo
    echo "| path | streams | iperf3 Gbit/s | xfer --no-hash Gbit/s | xfer (hashing) Gbit/s | no-hash / iperf3 | hashing / iperf3 | hashing on / off |"
    echo "|---|---|---|---|---|---|---|---|"
    for p in "${PATHS[@]}"; do
        for n in 1 4 8; do
            : >"$TMP/a"; : >"$TMP/b"; : >"$TMP/c"
            for _ in $(seq "$REPS"); do
                iperf_gbps "$p" "$n" >>"$TMP/a"
                xfer_gbps "$p" -P "$n" --no-hash "mem:$SIZE" >>"$TMP/b"
                xfer_gbps "$p" -P "$n" "mem:$SIZE" >>"$TMP/c"
            done
            a=$(median <"$TMP/a"); b=$(median <"$TMP/b"); c=$(median <"$TMP/c")
            echo "| $p | $n | $(fmt "$a") | $(fmt "$b") | $(fmt "$c") | $(ratio "$b" "$a") | $(ratio "$c" "$a") | $(ratio "$c" "$b") |"
        done
    done
    echo
fi

if [[ " $SECTIONS " == *" modes "* ]]; then
    echo "### Streaming vs striping (hashing on)"
    echo
    echo "| path | streams | iperf3 Gbit/s | stripe Gbit/s | stream Gbit/s | stream / stripe |"
    echo "|---|---|---|---|---|---|"
    for p in "${PATHS[@]}"; do
        for n in 4 8; do
            : >"$TMP/a"; : >"$TMP/b"; : >"$TMP/c"
            for _ in $(seq "$REPS"); do
                iperf_gbps "$p" "$n" >>"$TMP/a"
                xfer_gbps "$p" -P "$n" --mode stripe "mem:$SIZE" >>"$TMP/b"
                xfer_gbps "$p" -P "$n" --mode stream "mem:$SIZE" >>"$TMP/c"
            done
            a=$(median <"$TMP/a"); b=$(median <"$TMP/b"); c=$(median <"$TMP/c")
            echo "| $p | $n | $(fmt "$a") | $(fmt "$b") | $(fmt "$c") | $(ratio "$c" "$b") |"
        done
    done
    echo
fi

if [[ " $SECTIONS " == *" paced "* ]]; then
    p=loopback
    bytes=$(numfmt --from=iec "$PACED_SIZE")
    rate=$(numfmt --from=si "$PACED_RATE")
    ideal=$(awk -v b="$bytes" -v r="$rate" 'BEGIN {printf "%.4f", b*8/r}')
    per=$(awk -v r="$rate" -v n="$PACED_P" 'BEGIN {printf "%d", r/n}')
    echo "### Paced: $PACED_SIZE at $PACED_RATE (-P $PACED_P, $p), $PACED_RUNS runs; ideal $ideal s"
    echo
    echo "| run | xfer completion s | iperf3 --fq-rate completion s |"
    echo "|---|---|---|"
    : >"$TMP/a"; : >"$TMP/b"
    for r in $(seq "$PACED_RUNS"); do
        xfer_gbps "$p" -P "$PACED_P" --rate "$PACED_RATE" "mem:$PACED_SIZE" >/dev/null
        x=$(jq .run.completion_time "$TMP/x.json")
        echo "$x" >>"$TMP/b"
        iperf3 -c 127.0.0.1 -p "${IPORT[$p]}" -P "$PACED_P" --fq-rate "$per" -n "$bytes" -J >"$TMP/i.json"
        i=$(jq .end.sum_received.seconds "$TMP/i.json")
        echo "$i" >>"$TMP/a"
        echo "| $r | $(printf '%.4f' "$x") | $(printf '%.4f' "$i") |"
    done
    stats() {
        awk -v ideal="$ideal" '{s+=$1; q+=$1*$1; if (NR==1||$1<mn) mn=$1; if (NR==1||$1>mx) mx=$1}
            END {m=s/NR; sd=sqrt(q/NR-m*m); if (sd!=sd) sd=0;
                 printf "mean %.4f s, stdev %.4f s, spread (max-min)/mean %.3f %%, mean vs ideal %+.3f %%",
                        m, sd, 100*(mx-mn)/m, 100*(m-ideal)/ideal}'
    }
    echo
    echo "- xfer: $(stats <"$TMP/b")"
    echo "- iperf3: $(stats <"$TMP/a")"
    echo
fi
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
