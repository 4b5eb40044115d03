#!/usr/bin/env bash
# Runs the kernels over BSPlib and over MPI in alternating rounds and prints, per kernel, p
# and transport, the median of each figure of the BWNPB lines.
#
#   ./compare.sh [-c CLASS] [-r ROUNDS] [-p "1 2 4"] [-k "is ep cg mg ft"] [-o RAW]
#
# Transports: bsp-shm (bsprun, shared memory), bsp-udp (holefill over UDP), mpi-shm
# (Open MPI's ob1 over vader), mpi-tcp (ob1 over TCP on loopback). Each round runs every
# transport once, in an order rotated from round to round, so that a slow moment of a
# shared machine falls on all of them alike. The programs must be built (make CLASS=...).
set -euo pipefail
cd "$(dirname "$0")"

class=S rounds=5 ps="1 2 4" kernels="is ep cg mg ft" raw=""
while getopts c:r:p:k:o: opt; do
    case $opt in
    c) class=$OPTARG ;;
    r) rounds=$OPTARG ;;
    p) ps=$OPTARG ;;
    k) kernels=$OPTARG ;;
    o) raw=$OPTARG ;;
    *) sed -n '2,10p' "$0" >&2; exit 2 ;;
    esac
done

bsprun=${BSPRUN:-../../target/release/bsprun}
cores=$(nproc)
mpirun=(mpirun)
if mpirun --version 2>/dev/null | grep -q "Open MPI"; then
    [ "$(id -u)" = 0 ] && mpirun+=(--allow-run-as-root)
    mpirun+=(--oversubscribe --mca pml ob1)
fi
transports=(bsp-shm bsp-udp)
command -v mpirun >/dev/null && transports+=(mpi-shm mpi-tcp)
out=$(mktemp)
trap 'rm -f "$out"' EXIT

run() { # transport kernel p
    local prog="bin/$2.$class"
    case $1 in
    bsp-shm) env -u BULKWIRE_PROTOCOL -u BULKWIRE_TRANSPORT "$bsprun" -n "$3" "$prog.bsp" ;;
    bsp-udp) BULKWIRE_PROTOCOL=holefill BULKWIRE_TRANSPORT=udp "$bsprun" -n "$3" "$prog.bsp" ;;
    mpi-shm) "${mpirun[@]}" --mca btl self,vader -np "$3" "$prog.mpi" ;;
    mpi-tcp) "${mpirun[@]}" --mca btl self,tcp --mca btl_tcp_if_include lo -np "$3" "$prog.mpi" ;;
    esac
}

n=${#transports[@]}
for ((r = 0; r < rounds; r++)); do
    for k in $kernels; do
        for p in $ps; do
            for ((i = 0; i < n; i++)); do
                t=${transports[(i + r) % n]}
                line=$(run "$t" "$k" "$p" 2>/dev/null | grep '^BWNPB ' || true)
                [ -n "$line" ] || line="BWNPB kernel=${k^^} np=$p verified=failed"
                echo "$t round=$r $line" >>"$out"
            done
        done
    done
done
[ -n "$raw" ] && cp "$out" "$raw"

echo "class $class, $rounds rounds, $cores cores (p above $cores is oversubscribed); medians, and the"
echo "minimum time and communication time over the rounds"
printf '%-6s %3s %-8s %10s %10s %10s %10s %10s %10s %4s\n' kernel p transport time comm comp mops min-time min-comm ok
awk '
function field(k,   i, kv) { for (i = 2; i <= NF; i++) { split($i, kv, "="); if (kv[1] == k) return kv[2] } return "" }
{ key = field("kernel") " " field("np") " " $1; n[key]++; ok[key] += field("verified") == "1"
  t[key, n[key]] = field("time"); c[key, n[key]] = field("comm"); d[key, n[key]] = field("comp")
  m[key, n[key]] = field("mops") }
function least(a, key, cnt,   i, v) {
  v = a[key, 1] + 0; for (i = 2; i <= cnt; i++) if (a[key, i] + 0 < v) v = a[key, i] + 0; return v }
function median(a, key, cnt,   i, j, v, tmp) {
  for (i = 1; i <= cnt; i++) v[i] = a[key, i] + 0
  for (i = 2; i <= cnt; i++) { tmp = v[i]; for (j = i - 1; j >= 1 && v[j] > tmp; j--) v[j + 1] = v[j]; v[j + 1] = tmp }
  return cnt % 2 ? v[(cnt + 1) / 2] : (v[cnt / 2] + v[cnt / 2 + 1]) / 2 }
END { for (key in n) { split(key, f, " ")
        printf "%-6s %3s %-8s %10.4f %10.4f %10.4f %10.1f %10.4f %10.4f %2d/%d\n", f[1], f[2], f[3],
          median(t, key, n[key]), median(c, key, n[key]), median(d, key, n[key]), median(m, key, n[key]),
          least(t, key, n[key]), least(c, key, n[key]), ok[key], n[key] } }
' "$out" | sort -k1,1 -k2,2n -k3,3

# Ratios within a round (the BSP version over the MPI one on the comparable transport), then
# their median over the rounds: a slow moment of the machine hits both sides of a ratio.
echo
echo "BSP / MPI, per round, median over the rounds: shared memory (bsp-shm / mpi-shm) and"
echo "the network path (bsp-udp, holefill over UDP / mpi-tcp); \"-\" where MPI spent no time"
printf '%-6s %3s %12s %12s %12s %12s %6s\n' kernel p shm-time shm-comm net-time net-comm rounds
awk '
function field(k,   i, kv) { for (i = 2; i <= NF; i++) { split($i, kv, "="); if (kv[1] == k) return kv[2] } return "" }
function median(a, cnt,   i, j, tmp) {
  for (i = 2; i <= cnt; i++) { tmp = a[i]; for (j = i - 1; j >= 1 && a[j] > tmp; j--) a[j + 1] = a[j]; a[j + 1] = tmp }
  return cnt % 2 ? a[(cnt + 1) / 2] : (a[cnt / 2] + a[cnt / 2 + 1]) / 2 }
field("verified") == "1" { g = field("kernel") " " field("np"); r = field("round"); keys[g] = 1; rounds[g, r] = 1
  t[g, r, $1] = field("time"); c[g, r, $1] = field("comm") }
function ratio(g, what, a, b,   r, n, v, x, y) {
  n = 0
  for (r = 0; r < 1000; r++) {
    if (!((g, r) in rounds)) continue
    x = (what == "t" ? t[g, r, a] : c[g, r, a]); y = (what == "t" ? t[g, r, b] : c[g, r, b])
    if (x != "" && y != "" && y + 0 > 0) v[++n] = x / y
  }
  if (what == "t") cnt = n
  return n ? sprintf("%.2f", median(v, n)) : "-" }
END { for (g in keys) { split(g, f, " ")
        st = ratio(g, "t", "bsp-shm", "mpi-shm"); sc = ratio(g, "c", "bsp-shm", "mpi-shm")
        nt = ratio(g, "t", "bsp-udp", "mpi-tcp"); nc = ratio(g, "c", "bsp-udp", "mpi-tcp")
        printf "%-6s %3s %12s %12s %12s %12s %6d\n", f[1], f[2], st, sc, nt, nc, cnt } }
' "$out" | sort -k1,1 -k2,2n
