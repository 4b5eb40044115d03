#!/bin/sh
# npb-fortran.sh: builds the NAS Parallel Benchmarks 3.4's Fortran MPI kernels with
# bwmpifort and runs each under bsprun, reporting NPB's own verification.
#
#   scripts/npb-fortran.sh [--class S] [--np 4] [--kernels "ep cg mg ft lu sp bt"]
#                          [--f08 def|f] [--make-args "VAR=VALUE ..."]
#                          [--openmpi-tree DIR [--rounds 3]] NPB3.4-MPI-DIRECTORY
#
# The directory is an unpacked NPB3.4-MPI tree (the NAS release, outside this
# repository); its config/make.def is replaced by one naming bwmpifort and bwmpicc.
# --f08 def (NPB's default) builds through `use mpi`, f through `include 'mpif.h'`;
# --make-args go to each make (a modified tree's own variables). --openmpi-tree names a
# second copy of the tree, built with Open MPI's mpif90 and run with its mpirun; each
# kernel then runs --rounds times under each, alternating, and the report gives each
# one's median time (NPB's "Time in seconds") and bulkwire's as a ratio of Open MPI's.
# bwmpifort, bwmpicc and bsprun are taken from target/release, else target/debug
# (cargo build -p bulkwire-capi -p bulkwire-tools). SP and BT need a square process
# count; CG, MG, FT and LU powers of two. Exit status 1 if a kernel fails to build, run
# or verify.
set -eu

class=S
np=4
kernels="ep cg mg ft lu sp bt"
f08=def
make_args=
otree=
rounds=3
while [ $# -gt 1 ]; do
    case "$1" in
    --class) class=$2; shift 2 ;;
    --np) np=$2; shift 2 ;;
    --kernels) kernels=$2; shift 2 ;;
    --f08) f08=$2; shift 2 ;;
    --make-args) make_args=$2; shift 2 ;;
    --openmpi-tree) otree=$(cd "$2" && pwd); shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    *) echo "npb-fortran: unknown option $1" >&2; exit 2 ;;
    esac
done
[ $# -eq 1 ] || { sed -n '2,23p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
tree=$(cd "$1" && pwd)
[ -f "$tree/sys/make.common" ] || { echo "npb-fortran: $tree is not an NPB3.4-MPI tree" >&2; exit 2; }

root=$(cd "$(dirname "$0")/.." && pwd)
bin=
for d in "$root/target/release" "$root/target/debug"; do
    if [ -x "$d/bwmpifort" ] && [ -x "$d/bsprun" ] && [ -f "$d/libbulkwire.a" ]; then
        bin=$d
        break
    fi
done
[ -n "$bin" ] || { echo "npb-fortran: build bwmpifort first (cargo build -p bulkwire-capi -p bulkwire-tools)" >&2; exit 2; }

cat >"$tree/config/make.def" <<EOF
MPIFC = $bin/bwmpifort
FLINK = \$(MPIFC)
FMPI_LIB =
FMPI_INC =
FFLAGS = -O2
FLINKFLAGS = \$(FFLAGS)
MPICC = $bin/bwmpicc
CLINK = \$(MPICC)
CMPI_LIB =
CMPI_INC =
CFLAGS = -O2
CLINKFLAGS = \$(CFLAGS)
CC = cc
BINDIR = ../bin
RAND = randi8
EOF
mkdir -p "$tree/bin"

if [ -n "$otree" ]; then
    sed -e "s|^MPIFC = .*|MPIFC = mpif90|" -e "s|^MPICC = .*|MPICC = mpicc|" \
        "$tree/config/make.def" >"$otree/config/make.def"
    mkdir -p "$otree/bin"
fi

# NPB's time of one run, or nothing if it did not verify.
npb_time() {
    grep -q 'Verification *= *SUCCESSFUL' "$1" && sed -n 's/^ *Time in seconds *= *//p' "$1"
}
median() {
    tr ' ' '\n' | grep . | sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'
}

failed=0
for k in $kernels; do
    K=$(echo "$k" | tr a-z A-Z)
    log="$tree/bin/$k.$class.log"
    # Each kernel's mpinpb module is copied from mpinpb_$(F08).f90 once: start afresh.
    rm -f "$tree/$K/mpinpb.f90" "$tree/common/mpinpb.h"
    # shellcheck disable=SC2086 # the extra arguments are words
    if ! make -C "$tree" "$K" CLASS="$class" F08="$f08" $make_args >"$log.build" 2>&1; then
        echo "FAILED $k.$class: build (see $log.build)"
        failed=1
        continue
    fi
    if "$bin/bsprun" -n "$np" --timeout 600 "$tree/bin/$k.$class.x" >"$log" 2>&1 &&
        grep -q 'Verification *= *SUCCESSFUL' "$log"; then
        t=$(sed -n 's/^ *Time in seconds *= *//p' "$log")
        echo "verified $k.$class p=$np ($t s)"
    else
        echo "FAILED $k.$class p=$np (see $log)"
        failed=1
        continue
    fi
    [ -n "$otree" ] || continue
    rm -f "$otree/$K/mpinpb.f90" "$otree/common/mpinpb.h"
    # shellcheck disable=SC2086
    if ! make -C "$otree" "$K" CLASS="$class" F08="$f08" $make_args >"$log.ompi.build" 2>&1; then
        echo "FAILED $k.$class: Open MPI build (see $log.ompi.build)"
        failed=1
        continue
    fi
    bw= om=
    r=0
    while [ $r -lt "$rounds" ]; do
        "$bin/bsprun" -n "$np" --timeout 600 "$tree/bin/$k.$class.x" >"$log.r$r" 2>&1 || true
        bw="$bw $(npb_time "$log.r$r")"
        mpirun --allow-run-as-root --oversubscribe -np "$np" "$otree/bin/$k.$class.x" \
            >"$log.ompi.r$r" 2>&1 || true
        om="$om $(npb_time "$log.ompi.r$r")"
        r=$((r + 1))
    done
    if [ "$(echo "$bw" | wc -w)" -ne "$rounds" ] || [ "$(echo "$om" | wc -w)" -ne "$rounds" ]; then
        echo "FAILED $k.$class: a timed run did not verify (see $log.r* and $log.ompi.r*)"
        failed=1
        continue
    fi
    mb=$(echo "$bw" | median)
    mo=$(echo "$om" | median)
    echo "$k.$class p=$np: bulkwire $mb s, Open MPI $mo s, ratio $(awk "BEGIN { if ($mo > 0) printf \"%.2f\", $mb / $mo; else print \"n/a\" }") (median of $rounds, alternating)"
done
exit $failed
