#!/bin/sh
# MPI_Allreduce and MPI_Bcast at p = 2 (or $P) through bulkwire's MPI (on MPI_COMM_WORLD,
# which goes through the collectives layer, and on a reordered communicator, which runs the
# MPI layer's own schedules), through bulkwire.h (the baseline) and through Open MPI when
# its mpicc and mpirun are installed. Every variant runs once per round, rounds
# alternate ($ROUNDS, default 7); the table has each variant's median time per call in
# microseconds and its ratio to bulkwire.h's median.
#
#   cargo build --release -p bulkwire-capi -p bulkwire-tools
#   sh crates/mpi/bench/coll.sh
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
rel="$root/target/release"
out=${TMPDIR:-/tmp}/bwmpi-coll-bench
mkdir -p "$out"
P=${P:-2}
ROUNDS=${ROUNDS:-7}
libs="-lpthread -ldl -lm -lrt -lgcc_s"
cc -std=c11 -O2 -I"$root/crates/mpi/include" "$here/coll.c" "$rel/libbulkwire.a" $libs -o "$out/mpi"
cc -std=c11 -O2 -DUSE_BW -I"$root/crates/capi/include" "$here/coll.c" "$rel/libbulkwire.a" $libs -o "$out/bw"
ompi=""
if command -v mpicc >/dev/null 2>&1 && command -v mpirun >/dev/null 2>&1; then
    mpicc -std=c11 -O2 "$here/coll.c" -o "$out/ompi" && ompi=yes
fi
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
printf '%-10s %8s %12s %12s %12s %12s\n' op bytes variant us_median ratio rounds
for op in allreduce bcast; do
    for bytes in 8 65536; do
        iters=10000
        [ "$bytes" -gt 8 ] && iters=1000
        : >"$out/t.bw"; : >"$out/t.world"; : >"$out/t.sched"; : >"$out/t.ompi"
        r=0
        while [ $r -lt "$ROUNDS" ]; do
            "$rel/bsprun" -n "$P" "$out/bw" $op $bytes $iters >>"$out/t.bw"
            "$rel/bsprun" -n "$P" "$out/mpi" $op $bytes $iters >>"$out/t.world"
            "$rel/bsprun" -n "$P" "$out/mpi" $op $bytes $iters sched >>"$out/t.sched"
            if [ -n "$ompi" ]; then
                mpirun --allow-run-as-root --oversubscribe -np "$P" "$out/ompi" $op $bytes $iters >>"$out/t.ompi" 2>/dev/null
            fi
            r=$((r + 1))
        done
        base=$(median <"$out/t.bw")
        for v in bw world sched ompi; do
            [ -s "$out/t.$v" ] || continue
            m=$(median <"$out/t.$v")
            printf '%-10s %8s %12s %12s %12s %12s\n' $op $bytes $v "$m" \
                "$(awk -v a="$m" -v b="$base" 'BEGIN {printf "%.2f", a / b}')" "$ROUNDS"
        done
    done
done
