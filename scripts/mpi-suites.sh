#!/usr/bin/env bash
# Real MPI programs, unchanged, built and run with bulkwire's MPI and, for comparison,
# with Open MPI and MPICH: the OSU micro-benchmarks (built by their own configure), the C
# tests of MPICH's test suite (test/mpi, run by its own runtests from its own testlists)
# and the IS kernel of the NAS Parallel Benchmarks 3.4 (MPI, C; classes S and W, checked
# by its own verification). Nothing of theirs is in this repository: the sources come from
# a local directory (--src DIR, holding their source trees or release archives, as a
# machine that reaches no web site has them) or are fetched at run time (--fetch).
#
#   scripts/mpi-suites.sh --src ~/suites             # trees or archives in ~/suites
#   scripts/mpi-suites.sh --fetch                    # downloads the pinned releases first
#   scripts/mpi-suites.sh --src ~/suites --only osu --mpi bulkwire,openmpi
#
# Options: --work DIR (default: target/mpi-suites), --bin DIR (where bwmpicc, bwmpicxx
# and bsprun are; default: target/release, else target/debug, else PATH), --np P
# (processes for OSU and IS, default 2), --timeout S (per run, default 120), --only NAME
# (osu, mpich or npb), --mpi LIST (of bulkwire, openmpi, mpich; default all three), --dirs
# LIST (MPICH's test directories; default pt2pt,coll,datatype,comm,group,init,topo,rma).
# What the sources directory may hold (a tree or its archive, by name):
#   osu-micro-benchmarks*   OSU 7.x (a git tree without configure is autoreconf'ed)
#   mpich*                  an MPICH tree or release (its test/mpi; a git tree needs
#                           autoconf, automake, libtool and python3 for its autogen.sh)
#   NPB3.4*                 the NPB 3.4 release (its NPB3.4-MPI), or NPB3.4-MPI itself
# A suite whose sources are not found, or an MPI that is not installed, is skipped,
# saying so.
#
# Each MPI is given to the suites as an MPI installation is: a directory of its own in the
# work directory whose bin/ holds mpicc, mpicxx and mpiexec (bulkwire: bwmpicc, bwmpicxx
# and bsprun; Open MPI: its mpicc and mpirun, as root with --allow-run-as-root, with
# --oversubscribe; MPICH: mpicc.mpich and mpiexec.mpich). OSU is configured with
# CC=.../mpicc and built out of its tree, once per MPI; its binaries are linked into
# WORK/osu/MPI/bin, where `bwbench mpi` runs them; here each runs once, briefly. MPICH's
# tests are configured with --with-mpi=that directory (--enable-strictmpi: only MPI's
# own calls; no Fortran, C++, I/O, spawn, threads or fault-tolerance tests) and each test
# directory is run by its runtests (MPITEST_RUN_INDIVIDUAL: one program per test, as its
# testlist says, at the process count it says). IS is built by NPB's own Makefile from
# config/make.def.template with MPICC set, and run at --np; its output must say
# "Verification = SUCCESSFUL". The last lines are one count per suite and MPI:
#
#   OSU (bulkwire): built B of N, ran R of B
#   MPICH test/mpi pt2pt (bulkwire): passed K of N (its testlist skips S)
#   NPB IS class S (bulkwire): verified V of 1
#
# and the logs of every build and run are in the work directory's logs/.
set -u

here=$(cd "$(dirname "$0")/.." && pwd)
src="" fetch=0 work="$here/target/mpi-suites" bin="" np=2 limit=120 only=""
mpis="bulkwire,openmpi,mpich"
dirs="pt2pt,coll,datatype,comm,group,init,topo,rma"
while [ $# -gt 0 ]; do
    case "$1" in
    --src) src=$2; shift 2 ;;
    --fetch) fetch=1; shift ;;
    --work) work=$2; shift 2 ;;
    --bin) bin=$2; shift 2 ;;
    --np) np=$2; shift 2 ;;
    --timeout) limit=$2; shift 2 ;;
    --only) only=$2; shift 2 ;;
    --mpi) mpis=$2; shift 2 ;;
    --dirs) dirs=$2; shift 2 ;;
    -h | --help) sed -n '2,46p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "mpi-suites: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
done
if [ -z "$src" ] && [ "$fetch" = 0 ]; then
    echo "mpi-suites: give --src DIR (the suites' sources) or --fetch" >&2
    exit 2
fi
case "$only" in "" | osu | mpich | npb) ;; *)
    echo "mpi-suites: --only takes osu, mpich or npb" >&2; exit 2 ;;
esac

# The pinned releases (--fetch); each can be replaced (OSU_URL=..., MPICH_URL=...,
# NPB_URL=...), e.g. by a mirror's address.
OSU_URL=${OSU_URL:-https://mvapich.cse.ohio-state.edu/download/mvapich/osu-micro-benchmarks-7.4.tar.gz}
MPICH_URL=${MPICH_URL:-https://www.mpich.org/static/downloads/4.2.3/mpich-4.2.3.tar.gz}
NPB_URL=${NPB_URL:-https://www.nas.nasa.gov/assets/npb/NPB3.4.3.tar.gz}

if [ -z "$bin" ]; then
    for d in "$here/target/release" "$here/target/debug"; do
        if [ -x "$d/bwmpicc" ] && [ -x "$d/bsprun" ]; then bin=$d; break; fi
    done
fi
tool() {
    if [ -n "$bin" ]; then echo "$bin/$1"; else command -v "$1"; fi
}

mkdir -p "$work/src" "$work/logs" "$work/mpis" || exit 2
[ "$fetch" = 1 ] && src="$work/download"
mkdir -p "$src"
work=$(cd "$work" && pwd) src=$(cd "$src" && pwd)
log="$work/logs"
: >"$log/results"
jobs=$(nproc 2>/dev/null || echo 2)

if [ "$fetch" = 1 ]; then
    for url in "$OSU_URL" "$MPICH_URL" "$NPB_URL"; do
        [ -e "$src/$(basename "$url")" ] && continue
        curl -fsSL -o "$src/$(basename "$url").part" "$url" &&
            mv "$src/$(basename "$url").part" "$src/$(basename "$url")" ||
            echo "mpi-suites: cannot fetch $url" >&2
    done
fi

# Unpacks every archive of the source directory once, into the work directory.
for a in "$src"/*; do
    case "$a" in
    *.tar | *.tar.gz | *.tgz | *.tar.xz | *.tar.bz2)
        stamp="$work/src/.$(basename "$a").done"
        [ -e "$stamp" ] || { tar -xf "$a" -C "$work/src" && touch "$stamp"; } ;;
    esac
done

# The first directory under the sources or the work directory whose name matches.
find_tree() {
    local d
    for d in "$src"/$1 "$work/src"/$1; do
        [ -d "$d" ] && { echo "$d"; return 0; }
    done
    return 1
}

# --- The MPIs, each as an installation directory: WORK/mpis/NAME/bin/{mpicc,mpicxx,mpiexec}
IMPLS=()
am_root=0
[ "$(id -u)" = 0 ] && am_root=1
cores=$(nproc 2>/dev/null || echo 2)
setup_mpi() {
    local name=$1 d="$work/mpis/$1/bin"
    rm -rf "$d" && mkdir -p "$d"
    case $name in
    bulkwire)
        local cc cxx run
        cc=$(tool bwmpicc) cxx=$(tool bwmpicxx) run=$(tool bsprun)
        if [ ! -x "$cc" ] || [ ! -x "$run" ]; then
            echo "mpi-suites: bulkwire: bwmpicc or bsprun not found (cargo build --release -p bulkwire-capi -p bulkwire-tools): skipped" >&2
            return 1
        fi
        if ! "$cc" -showme:compile >/dev/null 2>"$log/bulkwire-wrapper.err"; then
            echo "mpi-suites: bulkwire: $(cat "$log/bulkwire-wrapper.err"): skipped" >&2
            return 1
        fi
        ln -s "$cc" "$d/mpicc" && ln -s "$cxx" "$d/mpicxx" && ln -s "$run" "$d/mpiexec"
        ;;
    openmpi)
        local cc
        for cc in mpicc.openmpi mpicc; do
            command -v "$cc" >/dev/null && "$cc" -showme:version 2>&1 | grep -q "Open MPI" && break
            cc=""
        done
        if [ -z "$cc" ] || ! command -v mpirun >/dev/null; then
            echo "mpi-suites: Open MPI not found (mpicc.openmpi, mpirun): skipped" >&2
            return 1
        fi
        ln -s "$(command -v "$cc")" "$d/mpicc"
        ln -s "$(command -v "${cc/mpicc/mpicxx}" || command -v mpicxx)" "$d/mpicxx"
        # Shared memory between the ranks (vader), as the comparison in bwbench uses.
        local extra="--oversubscribe --mca btl self,vader"
        [ $am_root = 1 ] && extra="--allow-run-as-root $extra"
        printf '#!/bin/sh\nexec %s %s "$@"\n' "$(command -v mpirun)" "$extra" >"$d/mpiexec"
        chmod +x "$d/mpiexec"
        ;;
    mpich)
        if ! command -v mpicc.mpich >/dev/null || ! command -v mpiexec.mpich >/dev/null; then
            echo "mpi-suites: MPICH not found (mpicc.mpich, mpiexec.mpich): skipped" >&2
            return 1
        fi
        ln -s "$(command -v mpicc.mpich)" "$d/mpicc"
        ln -s "$(command -v mpicxx.mpich)" "$d/mpicxx"
        # A script, not a link: Hydra looks for its proxy beside the path it was started by.
        printf '#!/bin/sh\nexec %s "$@"\n' "$(readlink -f "$(command -v mpiexec.mpich)")" >"$d/mpiexec"
        chmod +x "$d/mpiexec"
        ;;
    *)
        echo "mpi-suites: --mpi takes bulkwire, openmpi and mpich, not $name" >&2
        exit 2
        ;;
    esac
    return 0
}
for m in ${mpis//,/ }; do
    setup_mpi "$m" && IMPLS+=("$m")
done
[ ${#IMPLS[@]} = 0 ] && { echo "mpi-suites: no MPI to build with" >&2; exit 2; }

SUMMARY=()

# --- OSU micro-benchmarks: their configure and Makefiles, once per MPI, out of the tree.
OSU_BENCHES="osu_latency osu_bw osu_bibw osu_allreduce osu_bcast osu_allgather osu_alltoall osu_barrier osu_reduce osu_gather osu_scatter osu_iallreduce osu_ibcast osu_ibarrier osu_ialltoall"
osu() {
    local tree
    tree=$(find_tree 'osu-micro-benchmarks*') || {
        echo "mpi-suites: the OSU micro-benchmarks not found in $src: skipped" >&2
        return
    }
    # A git tree has no configure: generate it in a copy (the tree stays as it was).
    if [ ! -x "$tree/configure" ]; then
        local copy="$work/src/osu-generated"
        if [ ! -x "$copy/configure" ]; then
            rm -rf "$copy" && cp -a "$tree" "$copy" &&
                (cd "$copy" && autoreconf -fi) >"$log/osu-autoreconf" 2>&1 || {
                echo "mpi-suites: OSU: autoreconf failed (see $log/osu-autoreconf): skipped" >&2
                return
            }
        fi
        tree=$copy
    fi
    local m
    for m in "${IMPLS[@]}"; do
        local b="$work/osu/$m" mpibin="$work/mpis/$m/bin"
        rm -rf "$b" && mkdir -p "$b/bin"
        (cd "$b" && "$tree/configure" CC="$mpibin/mpicc" CXX="$mpibin/mpicxx" &&
            make -j"$jobs" -k) >"$log/osu-$m.build" 2>&1
        local total=0 built=0 ran=0 name exe
        for name in $OSU_BENCHES; do
            total=$((total + 1))
            exe=$(find "$b/c" -type f -perm -u+x -name "$name" 2>/dev/null | head -1)
            [ -n "$exe" ] || continue
            built=$((built + 1))
            ln -sf "$exe" "$b/bin/$name"
            # One brief run: that it works (bwbench mpi measures).
            if timeout -k 5 "$limit" "$mpibin/mpiexec" -n "$np" "$exe" -i 10 -x 2 -m 1:4096 \
                >"$log/osu-$m-$name.out" 2>"$log/osu-$m-$name.err"; then
                ran=$((ran + 1))
                echo "passed osu $m $name" >>"$log/results"
            else
                echo "FAILED osu $m $name (exit $?)" >>"$log/results"
            fi
        done
        SUMMARY+=("OSU ($m): built $built of $total, ran $ran of $built")
    done
}

# --- MPICH's test suite: its configure against each MPI's directory, its runtests per
# test directory.
mpich_tests() {
    local tree
    tree=$(find_tree 'mpich*') || {
        echo "mpi-suites: MPICH's sources not found in $src: skipped" >&2
        return
    }
    local t="$tree/test/mpi"
    [ -d "$t" ] || { echo "mpi-suites: $tree has no test/mpi: skipped" >&2; return; }
    if [ ! -x "$t/configure" ]; then
        local copy="$work/src/mpich-test-generated"
        if [ ! -x "$copy/configure" ]; then
            rm -rf "$copy" && cp -a "$t" "$copy" &&
                [ -d "$tree/confdb" ] && cp -a "$tree/confdb" "$copy/confdb" &&
                { [ -e "$copy/version.m4" ] || cp "$tree/maint/version.m4" "$copy/"; } &&
                (cd "$copy" && MPICH_CONFDB="$copy/confdb" ./autogen.sh) \
                    >"$log/mpich-autogen" 2>&1 || {
                echo "mpi-suites: MPICH tests: autogen.sh failed (see $log/mpich-autogen): skipped" >&2
                return
            }
        fi
        t=$copy
    fi
    local m
    for m in "${IMPLS[@]}"; do
        local b="$work/mpich/$m"
        rm -rf "$b" && mkdir -p "$b"
        if ! (cd "$b" && "$t/configure" --with-mpi="$work/mpis/$m" --enable-strictmpi --disable-dependency-tracking \
            --disable-fortran --disable-cxx --disable-romio --disable-io --disable-spawn \
            --disable-threads --disable-ft-tests --disable-perftest) \
            >"$log/mpich-$m.configure" 2>&1; then
            echo "mpi-suites: MPICH tests with $m: configure failed (see $log/mpich-$m.configure)" >&2
            SUMMARY+=("MPICH test/mpi ($m): configure failed")
            continue
        fi
        # The tests' own libraries (util/, dtpools); runtests builds each test as it goes.
        { make -C "$b/util" -j"$jobs" && { [ ! -d "$b/dtpools" ] || make -C "$b/dtpools" -j"$jobs"; }; } \
            >"$log/mpich-$m.build" 2>&1
        # runtests: generated in the build tree (releases), or a script of the sources (git).
        local runtests="$b/runtests"
        [ -f "$runtests" ] || runtests="$t/runtests"
        local d
        for d in ${dirs//,/ }; do
            # A testlist configure generates is in the build tree; the others in the sources.
            local lists=.
            [ -f "$b/$d/testlist" ] || lists="$t/$d"
            [ -f "$lists/testlist" ] || [ -f "$b/$d/$lists/testlist" ] ||
                { SUMMARY+=("MPICH test/mpi $d ($m): no testlist"); continue; }
            local tap="$log/mpich-$m-$d.tap"
            rm -f "$tap"
            # One program per test (not the git tree's all-in-one run_mpitests, which
            # needs every MPI-4 call to link), each at the process count its testlist says.
            # runtests gives MPICH's mpiexec its time limit in MPIEXEC_TIMEOUT; bsprun and
            # Open MPI's mpirun take it as --timeout.
            local limitarg=()
            [ "$m" != mpich ] && limitarg=("-timelimitarg=--timeout %d")
            (cd "$b/$d" && MPITEST_RUN_INDIVIDUAL=1 MPITEST_TIMEOUT=$limit \
                perl "$runtests" -srcdir="$lists" -tests=testlist -mpiexec="$work/mpis/$m/bin/mpiexec" \
                "${limitarg[@]}" -tapfile="$tap") >"$log/mpich-$m-$d.out" 2>&1
            local passed skipped failed
            passed=$(grep '^ok ' "$tap" 2>/dev/null | grep -vc '# SKIP')
            skipped=$(grep '^ok ' "$tap" 2>/dev/null | grep -c '# SKIP')
            failed=$(grep -c '^not ok ' "$tap" 2>/dev/null)
            SUMMARY+=("MPICH test/mpi $d ($m): passed ${passed:-0} of $((${passed:-0} + ${failed:-0})) (its testlist skips ${skipped:-0})")
            grep '^not ok ' "$tap" 2>/dev/null | sed "s|^|$m $d: |" >>"$log/results"
        done
    done
}

# --- NPB 3.4 IS (MPI, C): its Makefile, classes S and W, its own verification.
npb() {
    local tree
    tree=$(find_tree 'NPB3.4*/NPB3.4-MPI') || tree=$(find_tree 'NPB3.4-MPI') || {
        echo "mpi-suites: NPB 3.4 (NPB3.4-MPI) not found in $src: skipped" >&2
        return
    }
    local m class
    for m in "${IMPLS[@]}"; do
        local b="$work/npb/$m"
        rm -rf "$b" && mkdir -p "$b" && cp -a "$tree/." "$b/"
        # NPB's own template: the same flags for every MPI, only MPICC differs.
        cp "$b/config/make.def.template" "$b/config/make.def"
        mkdir -p "$b/bin" # the release has it empty; a git copy may not
        for class in S W; do
            local exe="$b/bin/is.$class.x" ok=0
            make -C "$b" is CLASS=$class MPICC="$work/mpis/$m/bin/mpicc" \
                >"$log/npb-$m-is.$class.build" 2>&1
            if [ -x "$exe" ] && (cd "$b/bin" && timeout -k 5 "$limit" \
                "$work/mpis/$m/bin/mpiexec" -n "$np" "$exe") >"$log/npb-$m-is.$class.out" \
                2>&1 && grep -q 'Verification *= *SUCCESSFUL' "$log/npb-$m-is.$class.out"; then
                ok=1
            fi
            echo "$([ $ok = 1 ] && echo passed || echo FAILED) npb $m is.$class (p=$np)" \
                >>"$log/results"
            SUMMARY+=("NPB IS class $class ($m, p=$np): verified $ok of 1")
        done
    done
    SUMMARY+=("NPB's Fortran kernels (EP, CG, MG, FT, LU, SP, BT): not built (bulkwire has no Fortran bindings)")
}

case "$only" in
"") osu; mpich_tests; npb ;;
osu) osu ;;
mpich) mpich_tests ;;
npb) npb ;;
esac
echo "logs: $log"
for l in "${SUMMARY[@]}"; do echo "$l"; done
