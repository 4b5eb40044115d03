#!/bin/sh
# npb-fortran.sh: builds the NAS Parallel Benchmarks 3.4's Fortran MPI kernels with
# bwmpifort and runs each under bsprun, reporting NPB's own verification.
#
#   scripts/npb-fortran.sh [--class S] [--np 4] [--kernels "ep cg mg ft lu sp bt"]
#                          [--f08 def|f] [--make-args "VAR=VALUE ..."] NPB3.4-MPI-DIRECTORY
#
# The directory is an unpacked NPB3.4-MPI tree (the NAS release, outside this
# repository); its config/make.def is replaced by one naming bwmpifort and bwmpicc.
# --f08 def (NPB's default) builds through `use mpi`, f through `include 'mpif.h'`;
# --make-args go to each make (a modified tree's own variables).
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
while [ $# -gt 1 ]; do
    case "$1" in
    --class) class=$2; shift 2 ;;
    --np) np=$2; shift 2 ;;
    --kernels) kernels=$2; shift 2 ;;
    --f08) f08=$2; shift 2 ;;
    --make-args) make_args=$2; shift 2 ;;
    *) echo "npb-fortran: unknown option $1" >&2; exit 2 ;;
    esac
done
[ $# -eq 1 ] || { sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
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
    fi
done
exit $failed
