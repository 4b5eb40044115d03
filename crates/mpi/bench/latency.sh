#!/bin/sh
# The MPI layer's cost over bulkwire.h: crates/mpi/bench/latency.c built both ways against
# the release libbulkwire.a and run by bsprun -n 2 in alternating rounds (MPI first).
# Prints "MPI_us bulkwire.h_us" per round.
#   cargo build --release -p bulkwire-capi -p bulkwire-tools
#   crates/mpi/bench/latency.sh [BYTES [ITERATIONS [ROUNDS]]]
set -e
cd "$(dirname "$0")/../../.."
R=target/release
SIZE=${1:-8}
ITERS=${2:-20000}
ROUNDS=${3:-5}
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
LIBS="$R/libbulkwire.a -lpthread -ldl -lm -lrt -lgcc_s"
cc -O2 -I crates/mpi/include crates/mpi/bench/latency.c $LIBS -o "$OUT/mpi"
cc -O2 -DUSE_BW -I crates/capi/include crates/mpi/bench/latency.c $LIBS -o "$OUT/bw"
for _ in $(seq "$ROUNDS"); do
    m=$("$R/bsprun" -n 2 "$OUT/mpi" "$SIZE" "$ITERS")
    b=$("$R/bsprun" -n 2 "$OUT/bw" "$SIZE" "$ITERS")
    echo "$m $b"
done
