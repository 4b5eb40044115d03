#!/usr/bin/env bash
# The peers' own BSPlib programs, built against bulkwire and run: MulticoreBSP for C's
# examples (C and C++), BSPonMPI's API tests and BSPedupack's programs. Nothing of theirs
# is in this repository: the sources come from a local directory (--src DIR, holding
# their source trees or release archives, as a machine without internet has them) or are
# fetched at run time (--fetch) from their public locations into the work directory.
#
#   scripts/peer-suites.sh --src ~/peers            # trees or archives in ~/peers
#   scripts/peer-suites.sh --fetch                  # downloads them first
#
# Options: --work DIR (default: target/peer-suites), --bin DIR (where bspcc, bspcxx and
# bsprun are; default: target/release, else target/debug, else PATH), --np P (processes
# for MulticoreBSP's examples, default 2), --timeout S (per run, default 60; BSPedupack's
# bench runs 2,048,000 supersteps and needs minutes), --only NAME (mcbsp, bsponmpi or
# bspedupack), --bsponmpi-hooks FILE.c (BSPonMPI's test hooks bsp_intern_expect_success
# and bsp_intern_expect_abort, linked into each of its tests; default: empty ones). A peer
# whose sources are not found is skipped, saying so.
#
# Each program is built with bspcc (bspcxx) and run with bsprun -n P under the time
# limit. MulticoreBSP's examples (those its Makefile builds without DMTCP) run at --np.
# BSPonMPI's API tests are those its CMakeLists.txt registers (add_mpi_test, not the large
# ones), each at the P given there; a test must succeed or abort as its TEST(name,
# success()) or TEST(name, abort("...")) says, and for those that abort the count also
# says how many of bulkwire's messages name the call BSPonMPI's message names. Its
# collectives library's tests (add_bsc_test, bsc.h) are counted on their own line.
# BSPedupack's programs are built by its own Makefile with CC=bspcc and run in its
# directory on its own input files (input_NAME, as its runtests script does) at the P
# these ask for. A program passes when it exits 0, or non-zero for a test that must abort.
# The last lines are one count per peer:
#
#   PEER: built B of N, passed K of B (failed F, timed out T)
#
# each run's result is a line of results in the work directory's logs/, next to the
# output of every build and run.
set -u

here=$(cd "$(dirname "$0")/.." && pwd)
src="" fetch=0 work="$here/target/peer-suites" bin="" np=2 limit=60 only="" hooks=""
while [ $# -gt 0 ]; do
    case "$1" in
    --src) src=$2; shift 2 ;;
    --fetch) fetch=1; shift ;;
    --work) work=$2; shift 2 ;;
    --bin) bin=$2; shift 2 ;;
    --np) np=$2; shift 2 ;;
    --timeout) limit=$2; shift 2 ;;
    --only) only=$2; shift 2 ;;
    --bsponmpi-hooks) hooks=$(cd "$(dirname "$2")" && pwd)/$(basename "$2"); shift 2 ;;
    -h | --help) sed -n '2,34p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "peer-suites: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
done
if [ -z "$src" ] && [ "$fetch" = 0 ]; then
    echo "peer-suites: give --src DIR (the peers' sources) or --fetch" >&2
    exit 2
fi

# The public locations (--fetch), pinned to the snapshots the counts in docs/bsp.md come
# from: MulticoreBSP for C 2.0.4's and BSPedupack 2.0's release archives as kept in
# BramvdnHeuvel/Docker-MulticoreBSP, BSPonMPI's git repository at a commit. Each can be
# replaced (MCBSP_URL=http://www.multicorebsp.com/downloads/c/2.0.4/MulticoreBSP-for-C.tar.xz,
# BSPEDUPACK_URL=https://webspace.science.uu.nl/~bisse101/Software/BSPedupack2.0.tar,
# BSPONMPI_REF=master, ...).
ARCHIVES=https://github.com/BramvdnHeuvel/Docker-MulticoreBSP/raw/fbe8a727711deb806171e34b443d341ccca684c7/multicorebsp-docker
MCBSP_URL=${MCBSP_URL:-$ARCHIVES/MulticoreBSP-for-C.tar.xz}
BSPEDUPACK_URL=${BSPEDUPACK_URL:-$ARCHIVES/BSPedupack2.0.tar.gz}
BSPONMPI_URL=${BSPONMPI_URL:-https://github.com/wijnand-suijlen/bsponmpi.git}
BSPONMPI_REF=${BSPONMPI_REF:-2dc757cba6c58560b9745158b7896d1181ebe20b}

if [ -z "$bin" ]; then
    for d in "$here/target/release" "$here/target/debug"; do
        if [ -x "$d/bspcc" ] && [ -x "$d/bsprun" ]; then bin=$d; break; fi
    done
fi
tool() {
    if [ -n "$bin" ]; then echo "$bin/$1"; else command -v "$1"; fi
}
BSPCC=$(tool bspcc) BSPCXX=$(tool bspcxx) BSPRUN=$(tool bsprun)
for t in "$BSPCC" "$BSPCXX" "$BSPRUN"; do
    if [ ! -x "$t" ]; then
        echo "peer-suites: $t not found: build them first (cargo build --release -p bulkwire-capi -p bulkwire-tools)" >&2
        exit 2
    fi
done

mkdir -p "$work/src" "$work/logs" "$work/bin" || exit 2
: >"$work/logs/results"
log="$work/logs"
[ "$fetch" = 1 ] && src="$work/download"
mkdir -p "$src"
# Absolute, as programs run in their own directories.
work=$(cd "$work" && pwd) src=$(cd "$src" && pwd)
log="$work/logs"

# Unpacks every archive of the source directory once, into the work directory.
unpack() {
    local a
    for a in "$src"/*; do
        case "$a" in
        *.tar | *.tar.gz | *.tgz | *.tar.xz | *.tar.bz2)
            local stamp="$work/src/.$(basename "$a").done"
            [ -e "$stamp" ] || { tar -xf "$a" -C "$work/src" && touch "$stamp"; } ;;
        *.zip)
            local stamp="$work/src/.$(basename "$a").done"
            [ -e "$stamp" ] || { unzip -q -o "$a" -d "$work/src" && touch "$stamp"; } ;;
        esac
    done
}

download() {
    local url=$1 name=$2
    [ -e "$src/$name" ] && return 0
    case "$url" in
    *.git) git clone -q "$url" "$src/$name" && git -C "$src/$name" checkout -q "$BSPONMPI_REF" ;;
    *) curl -fsSL -o "$src/$name" "$url" ;;
    esac || echo "peer-suites: cannot fetch $url" >&2
}

if [ "$fetch" = 1 ]; then
    download "$MCBSP_URL" "$(basename "$MCBSP_URL")"
    download "$BSPONMPI_URL" bsponmpi
    download "$BSPEDUPACK_URL" "$(basename "$BSPEDUPACK_URL")"
fi
unpack

# The first directory under the sources or the work directory whose name matches.
find_tree() {
    local d
    for d in "$src"/$1 "$work/src"/$1; do
        [ -d "$d" ] && { echo "$d"; return 0; }
    done
    return 1
}

SUMMARY=()
# count PEER BUILT TOTAL PASSED FAILED TIMEDOUT
count() {
    SUMMARY+=("$1: built $2 of $3, passed $4 of $2 (failed $5, timed out $6)")
}

# run_one NAME EXE INPUT EXPECT(ok|fail) P -> 0 pass, 1 fail, 2 timeout
run_one() {
    local name=$1 exe=$2 input=$3 expect=$4 p=$5 rc
    printf '%b' "$input" | timeout -k 5 "$limit" "$BSPRUN" -n "$p" "$exe" \
        >"$log/$name.out" 2>"$log/$name.err"
    rc=$?
    local r=1
    if [ $rc = 124 ] || [ $rc = 137 ]; then
        r=2
    elif [ "$expect" = ok ]; then
        [ $rc = 0 ] && r=0
    else
        [ $rc != 0 ] && r=0
    fi
    local word
    case $r in 0) word=passed ;; 1) word=FAILED ;; 2) word=TIMEOUT ;; esac
    printf '%s %s (p=%s, must %s, exit %s)\n' "$word" "$name" "$p" \
        "$([ "$expect" = ok ] && echo succeed || echo abort)" $rc >>"$log/results"
    return $r
}

tally() { # tally RESULT: adds to the counters of the caller
    case $1 in 0) passed=$((passed + 1)) ;; 1) failed=$((failed + 1)) ;; 2) timedout=$((timedout + 1)) ;; esac
}

# MulticoreBSP for C: the examples its own Makefile builds (C with bspcc --mcbsp, C++
# with bspcxx --mcbsp), each run with bsprun -n P. Its checkpointed_* examples need DMTCP
# and its Makefile builds them only WITH_DMTCP: they are left out here too.
mcbsp() {
    local tree
    tree=$(find_tree 'MulticoreBSP-for-C*') || tree=$(find_tree 'mcbsp*') || {
        echo "peer-suites: MulticoreBSP for C not found in $src: skipped" >&2
        return
    }
    local total=0 built=0 passed=0 failed=0 timedout=0 f name exe cc
    for f in "$tree"/examples/*.c "$tree"/examples/*.cpp; do
        [ -e "$f" ] || continue
        case "$(basename "$f")" in checkpointed_*) continue ;; esac
        total=$((total + 1))
        name=mcbsp-$(basename "${f%.*}")
        exe="$work/bin/$name"
        cc=$BSPCC
        case "$f" in *.cpp) cc=$BSPCXX ;; esac
        if ! "$cc" --mcbsp -O2 -I "$tree/examples" "$f" -o "$exe" -lm >"$log/$name.build" 2>&1; then
            continue
        fi
        built=$((built + 1))
        run_one "$name" "$exe" "" ok "$np"
        tally $?
    done
    count "MulticoreBSP for C examples" $built $total $passed $failed $timedout
}

# BSPonMPI: the API tests its CMake file registers (add_mpi_test(NAME P), outside the
# ENABLE_LARGE_TESTS block), each run at its P. A test's own TEST(name, success()) or
# TEST(name, abort("...")) says whether it must succeed or abort; BSPonMPI's test hooks
# (bsp_intern_expect_*) are replaced by empty ones, so a test that must abort passes when
# its job ends non-zero, not killed by the time limit. The tests of its collectives
# library (add_bsc_test, bsc.h) are counted on their own line: bulkwire has no bsc.h.
bsponmpi() {
    local tree
    tree=$(find_tree 'bsponmpi*') || tree=$(find_tree 'BSPonMPI*') || {
        echo "peer-suites: BSPonMPI not found in $src: skipped" >&2
        return
    }
    local tests="$tree/test" cmake="$tree/CMakeLists.txt"
    if [ ! -f "$cmake" ] || [ ! -d "$tests" ]; then
        echo "peer-suites: $tree has no CMakeLists.txt and test/: skipped" >&2
        return
    fi
    if [ -z "$hooks" ]; then
        hooks="$work/bsponmpi-hooks.c"
        printf '%s\n' '/* Stand-ins for BSPonMPI'"'"'s test hooks: bulkwire reports misuse itself. */' \
            'void bsp_intern_expect_success(void) {}' \
            'void bsp_intern_expect_abort(const char *message) { (void)message; }' >"$hooks"
    fi
    # "NAME P" per registered test, large ones left out.
    local registered
    registered=$(sed '/if *( *ENABLE_LARGE_TESTS/,/endif/d' "$cmake" |
        sed -n 's/^ *add_\(mpi\|bsc\)_test( *\([A-Za-z0-9_]*\) *\([0-9]*\) *).*/\1 \2 \3/p')
    local kind
    for kind in mpi bsc; do
        local total=0 built=0 passed=0 failed=0 timedout=0 k name p f exe expect calls r
        local aborts=0 named=0
        while read -r k name p; do
            [ "$k" = "$kind" ] || continue
            f="$tests/$name.c"
            total=$((total + 1))
            exe="$work/bin/bsponmpi-$name"
            if ! "$BSPCC" -O2 -I "$tests" -I "$tree/src" "$f" "$hooks" -o "$exe" \
                >"$log/bsponmpi-$name.build" 2>&1; then
                continue
            fi
            built=$((built + 1))
            # If it must abort: the calls BSPonMPI's message names (before its first
            # ':'), or the whole message where it has none (the program's own).
            calls=$(tr -d '\n' <"$f" |
                sed -n 's/.*TEST( *[A-Za-z0-9_]* *, *abort( *"\([^"]*\)".*/\1/p')
            calls=${calls%%:*}
            expect=ok
            if tr -d '\n' <"$f" | grep -q 'TEST( *[A-Za-z0-9_]* *, *abort'; then
                expect=fail aborts=$((aborts + 1))
            fi
            run_one "bsponmpi-$name" "$exe" "" $expect "$p"
            r=$?
            tally $r
            # A pass that must abort: does bulkwire's message name the same call?
            if [ $r = 0 ] && [ $expect = fail ] && [ -n "$calls" ] &&
                printf '%s\n' "$calls" | tr '/' '\n' | grep -q -F -f - "$log/bsponmpi-$name.err"; then
                named=$((named + 1))
            fi
        done <<<"$registered"
        if [ $kind = mpi ]; then
            count "BSPonMPI API tests" $built $total $passed $failed $timedout
            SUMMARY+=("  of which must abort: $aborts; their message names the call BSPonMPI's does: $named")
        else
            count "BSPonMPI bsc tests" $built $total $passed $failed $timedout
        fi
    done
}

# BSPedupack: built by its own Makefile with CC=bspcc, each program run in its directory
# on its own input file (input_NAME, as its runtests script does) at the number of
# processes that input asks for (lu: M*N). A program passes when it exits 0; its output
# (in the logs) holds its own checks.
bspedupack() {
    local tree
    tree=$(find_tree 'BSPedupack*') || tree=$(find_tree 'bspedupack*') || {
        echo "peer-suites: BSPedupack not found in $src: skipped" >&2
        return
    }
    local total=0 built=0 passed=0 failed=0 timedout=0 prog input p
    make -C "$tree" CC="$BSPCC" >"$log/bspedupack.build" 2>&1
    for prog in inprod bench sort lu fft matvec match; do
        total=$((total + 1))
        [ -x "$tree/$prog" ] && [ -f "$tree/$prog" ] || continue
        built=$((built + 1))
        input="$tree/input_$prog"
        if [ -f "$input" ]; then
            p=$(sed -n 1p "$input")
            [ $prog = lu ] && p=$((p * $(sed -n 2p "$input")))
            input=$(cat "$input")
        else
            p=$np input="$np
64"
        fi
        (cd "$tree" && run_one "bspedupack-$prog" "./$prog" "$input\n" ok "$p")
        tally $?
    done
    count "BSPedupack programs" $built $total $passed $failed $timedout
}

case "$only" in
"") mcbsp; bsponmpi; bspedupack ;;
mcbsp) mcbsp ;;
bsponmpi) bsponmpi ;;
bspedupack) bspedupack ;;
*) echo "peer-suites: --only takes mcbsp, bsponmpi or bspedupack" >&2; exit 2 ;;
esac
echo "logs: $log"
for l in "${SUMMARY[@]}"; do echo "$l"; done
